//! Writes a random-weight gpt-oss folder (2 layers, the real gpt-oss tokenizer) for the
//! end-to-end tests that serve one (`scripts/test-openai`): the network's values mean
//! nothing; the harmony prompts, channels and constraints around it are what is tested.
//!
//! `cargo run --release --example random_gpt_oss -- OUT_DIR TOKENIZER_JSON`

#[path = "../tests/support/random_gpt_oss.rs"]
mod random_gpt_oss;

use random_gpt_oss::{GptOssShape, write_random_gpt_oss};
use std::path::PathBuf;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [out, tokenizer] = args.as_slice() else {
        eprintln!("usage: random_gpt_oss OUT_DIR TOKENIZER_JSON");
        std::process::exit(2);
    };
    let shape = GptOssShape::with_gpt_oss_vocabulary();
    let tokenizer = PathBuf::from(tokenizer);
    if !tokenizer.is_file() {
        eprintln!("random_gpt_oss: no tokenizer at {}", tokenizer.display());
        std::process::exit(1);
    }
    write_random_gpt_oss(&PathBuf::from(out), &shape, Some(&tokenizer), 21);
    println!("{out}");
}
