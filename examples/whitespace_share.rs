//! The share of whitespace in JSON generated under each whitespace option of the schema
//! compiler, on the real model, over many schemas: how much of the output a model spends
//! on padding when the grammar lets it.
//!
//! `cargo run --release --example whitespace_share -- [N_SCHEMAS] [MAX_TOKENS]`
//!
//! Takes the first N schemas (default 50) of JSONSchemaBench's Github collections (from
//! `../shared/conformance/jsonschemabench`, or `$CORRAL_CONFORMANCE`) that compile,
//! in a seeded shuffle, and generates one value per schema and option with SmolLM2
//! (`assets/models`, seeded sampling at temperature 0.7). Prints, per option, the
//! whitespace-only tokens over all tokens generated, the whitespace bytes over all bytes,
//! the longest run of whitespace, and how many outputs validate.

use corral::engine::SamplingOptions;
use corral::schema::{JsonSchemaOptions, Whitespace};
use corral::{DeviceSpec, FinishReason, GenerateOptions, Model, Prompt, generate_constrained};
use std::path::PathBuf;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).map_or(50, |s| s.parse().expect("N_SCHEMAS"));
    let max_tokens: usize = args.get(2).map_or(160, |s| s.parse().expect("MAX_TOKENS"));
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let bench = std::env::var_os("CORRAL_CONFORMANCE")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("../shared/conformance"))
        .join("jsonschemabench");
    let mut files: Vec<PathBuf> = ["Github_easy", "Github_medium", "Github_hard"]
        .iter()
        .flat_map(|c| std::fs::read_dir(bench.join(c)).expect("JSONSchemaBench"))
        .map(|e| e.expect("entry").path())
        .collect();
    files.sort();
    // A seeded shuffle (xorshift), so the sample is the same on every run.
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for i in (1..files.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        files.swap(i, (x % (i as u64 + 1)) as usize);
    }
    let model_path = root.join("assets/models/SmolLM2-135M-Instruct.Q4_1.gguf");
    let mut model = Model::load(model_path.to_str().unwrap(), DeviceSpec::Cpu).expect("model");
    let options = [
        ("flexible (max 32)", Whitespace::Flexible { max: 32 }),
        ("lines (indent <= 20)", Whitespace::Lines { max_indent: 20 }),
        ("lines (indent <= 4)", Whitespace::Lines { max_indent: 4 }),
        ("spaced", Whitespace::Spaced),
        ("compact", Whitespace::Compact),
    ];
    let mut picked = Vec::new();
    for f in &files {
        if picked.len() == n {
            break;
        }
        let Ok(text) = std::fs::read_to_string(f) else {
            continue;
        };
        // Schemas that fit a prompt and compile under every option.
        if text.len() > 3000 {
            continue;
        }
        let all = options.iter().all(|(_, w)| {
            let o = JsonSchemaOptions::default().with_whitespace(*w);
            corral::compile_json_schema(&text, &o).is_ok()
        });
        if all {
            picked.push((f.clone(), text));
        }
    }
    println!(
        "{} schemas, max_tokens {max_tokens}, seeded sampling at 0.7",
        picked.len()
    );
    println!(
        "| option | whitespace tokens / tokens | whitespace bytes / bytes | longest whitespace run | complete outputs |"
    );
    println!("|---|---|---|---|---|");
    for (label, ws) in options {
        let (mut tokens, mut ws_tokens, mut bytes, mut ws_bytes, mut longest, mut complete) =
            (0usize, 0usize, 0usize, 0usize, 0usize, 0usize);
        for (i, (_, text)) in picked.iter().enumerate() {
            let o = JsonSchemaOptions::default().with_whitespace(ws);
            let compiled = corral::compile_json_schema(text, &o).expect("compiled before");
            let prompt = format!(
                "Write one JSON value valid for this JSON Schema, with realistic values.\n{text}"
            );
            let prompt = Prompt::from(prompt.as_str());
            let opts = GenerateOptions {
                max_tokens,
                sampling: SamplingOptions {
                    temperature: 0.7,
                    seed: 1000 + i as u64,
                    ..SamplingOptions::default()
                },
                ..GenerateOptions::default()
            };
            let out = match generate_constrained(&mut model, &compiled.grammar, prompt, &opts) {
                Ok(o) => o,
                Err(e) => {
                    eprintln!("{label}: schema {i}: {e}");
                    continue;
                }
            };
            let vocab = model.space().vocab();
            for &t in &out.tokens {
                tokens += 1;
                if vocab
                    .token_bytes(t)
                    .is_some_and(|b| !b.is_empty() && b.iter().all(u8::is_ascii_whitespace))
                {
                    ws_tokens += 1;
                }
            }
            bytes += out.text.len();
            ws_bytes += out.text.bytes().filter(u8::is_ascii_whitespace).count();
            let mut run = 0;
            for b in out.text.bytes() {
                run = if b.is_ascii_whitespace() { run + 1 } else { 0 };
                longest = longest.max(run);
            }
            if out.finish_reason != FinishReason::Length {
                complete += 1;
            }
        }
        println!(
            "| {label} | {ws_tokens} / {tokens} = {:.1}% | {ws_bytes} / {bytes} = {:.1}% | {longest} | {complete} / {} |",
            100.0 * ws_tokens as f64 / tokens.max(1) as f64,
            100.0 * ws_bytes as f64 / bytes.max(1) as f64,
            picked.len()
        );
    }
}
