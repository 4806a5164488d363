//! corral's `HarmonyParser` vs openai-harmony 0.0.8's `StreamableParser`, same process, same
//! gpt-oss token ids (the token-id path: marker tokens arrive as ids, text tokens are
//! decoded to text by each side), timing the whole stream including each side's token
//! decoding and delta retrieval.
//!
//! openai-harmony needs `o200k_base.tiktoken`; it is rebuilt here, exactly, from the gpt-oss
//! `tokenizer.json` (one line per token: base64 of its bytes and its id) and its sha256 is
//! checked against the one the crate expects (`encoding.rs`).
//!
//! The other binary, `render`, checks corral's harmony prompts against openai-harmony's
//! (see `src/bin/render.rs`).
//!
//! Run: `cargo run --release --manifest-path benches/harmony-compare/Cargo.toml [TOKENS] [--plain]`
//! (`--plain`: analysis and final messages only, no tool calls; `--long`: one long
//! analysis message and one long final message).

#[path = "../../../tests/support/streams.rs"]
#[allow(dead_code)]
mod streams;
mod encoding;

use corral_engine::Utf8Stream;
use corral_split::{HarmonyMarkers, HarmonyMode, HarmonyParser, Splitter};
use corral_trie::{TokenId, Vocabulary};
use std::path::Path;
use std::time::Instant;

fn main() {
    let target_tokens: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let plain = std::env::args().any(|a| a == "--plain");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let tok_path = root.join("assets/tokenizers/gptoss/tokenizer.json");
    let tok = tokenizers::Tokenizer::from_file(&tok_path).expect("gpt-oss tokenizer.json (scripts/fetch-assets)");
    let vocab = Vocabulary::from_tokenizer(&tok).unwrap();

    let enc = encoding::load(&vocab);

    // The stream, as gpt-oss token ids (markers become their special tokens).
    let long = std::env::args().any(|a| a == "--long");
    let make = if long {
        |n: usize| {
            let body = "Step by step: café prices in 東京 compare the numbers and check the units. ".repeat(n / 160);
            format!("<|channel|>analysis<|message|>{body}<|end|><|start|>assistant<|channel|>final<|message|>{body}<|return|>")
        }
    } else if plain {
        streams::harmony_plain
    } else {
        streams::harmony
    };
    let mut text = make(target_tokens * 4);
    let mut ids = tok.encode(text.as_str(), false).unwrap().get_ids().to_vec();
    while ids.len() > target_tokens {
        text.truncate(text.len() * 9 / 10);
        ids = tok.encode(text.as_str(), false).unwrap().get_ids().to_vec();
    }
    let bytes: usize = ids.iter().map(|&i| vocab.token_bytes(TokenId(i)).map_or(0, <[u8]>::len)).sum();
    println!("stream: {} tokens, {} bytes of text", ids.len(), bytes);

    let markers = HarmonyMarkers::GPT_OSS;
    let mut best = (f64::MAX, f64::MAX);
    let (mut ours_out, mut theirs_out) = (0usize, 0usize);
    for _ in 0..5 {
        // openai-harmony
        let t = Instant::now();
        let mut p = openai_harmony::StreamableParser::new(enc.clone(), Some(openai_harmony::chat::Role::Assistant)).unwrap();
        let mut n = 0usize;
        for &id in &ids {
            p.process(id).unwrap();
            if let Some(d) = p.last_content_delta().unwrap() {
                n += d.len();
            }
        }
        best.1 = best.1.min(t.elapsed().as_secs_f64());
        theirs_out = n;
        // corral
        let t = Instant::now();
        let mut h = HarmonyParser::new(HarmonyMode::Lenient);
        let mut utf8 = Utf8Stream::default();
        let (mut piece, mut content, mut reasoning) = (String::new(), String::new(), String::new());
        let mut n = 0usize;
        for &id in &ids {
            piece.clear();
            if let Some(b) = vocab.token_bytes(TokenId(id)) {
                utf8.push_into(b, &mut piece);
            }
            h.process_token(&markers, id, &piece);
            content.clear();
            reasoning.clear();
            h.drain_into(&mut content, &mut reasoning);
            n += content.len() + reasoning.len();
            for e in h.take_tool_calls() {
                if let corral_split::ToolCallEvent::Arguments { delta, .. } = e {
                    n += delta.len();
                }
            }
        }
        h.finish();
        best.0 = best.0.min(t.elapsed().as_secs_f64());
        ours_out = n;
    }
    let rate = |s: f64| (ids.len() as f64 / s / 1e6, bytes as f64 / s / 1e6);
    let (ot, ob) = rate(best.0);
    let (tt, tb) = rate(best.1);
    println!("corral HarmonyParser:            {:.2} M tokens/s, {:.1} MB/s ({} bytes of deltas)", ot, ob, ours_out);
    println!("openai-harmony StreamableParser: {:.2} M tokens/s, {:.1} MB/s ({} bytes of deltas)", tt, tb, theirs_out);
    println!("ratio (corral / openai-harmony): {:.1}x (best of 5)", best.1 / best.0);
}
