//! MaskBench's CI sample: 200 JSONSchemaBench schemas chosen by a fixed seed, on the
//! Llama-3.1 tokenizer, every mask of one valid instance per schema (compact, and pretty
//! where the whitespace bound allows) compared with brute force. Fails on any wrong mask,
//! on any valid instance refused (a false rejection) unless a validator with formats
//! asserted refuses it too or its properties are out of the schema's order (which the
//! default grammar keeps), and on an instance the tokenizer cannot encode. Each schema's
//! constraint is cold, over the base of shared lexemes, as the bench's. Times nothing:
//! `cargo run --release -p corral-maskbench-replay` does that.

use corral_llguidance_compare::{Engines, root};
use corral_maskbench_replay::{BruteCheck, Form, bench_dir, brute_all, corpus, sample};

#[path = "../../../tests/support/require.rs"]
mod require;

/// The sample's size and seed (`--sample 200 --seed 1` on the bench).
const SCHEMAS: usize = 200;
const SEED: u64 = 1;

#[test]
#[ignore = "needs scripts/fetch-assets and ../shared/conformance"]
fn sampled_schemas_have_exact_masks_and_take_their_valid_instances() {
    let tokenizer = require::require_input(
        root().join("assets/tokenizers/llama3_1/tokenizer.json"),
        "scripts/fetch-assets",
    );
    let dir = require::require_input(bench_dir(), "../shared/conformance beside the repository");
    let (all, _) = corpus(&dir).unwrap();
    // The snapshot holds 5,537 schemas with valid instances.
    assert!(
        all.len() > 5000,
        "only {} schemas with valid instances",
        all.len()
    );
    let entries = sample(&all, SCHEMAS, SEED);
    // Cold constraints over the tokenizer's shared lexemes, as the bench times them.
    let mut e = Engines::load("llama3_1", &tokenizer).unwrap();
    e.with_shared_lexemes().unwrap();
    let t0 = std::time::Instant::now();
    let checks = brute_all(&e, &entries, 1, &[Form::Compact, Form::Pretty]);
    let compiled = checks.iter().filter(|c| c.corral_error.is_none()).count();
    let steps: usize = checks.iter().map(|c| c.steps).sum();
    let explained: usize = checks
        .iter()
        .map(|c| c.refused.len() - c.false_rejections())
        .sum();
    println!(
        "{} schemas, {compiled} compiled, {steps} masks equal to brute force in {:.0} s; {explained} instances rightly refused (a format the benchmark does not assert, or properties out of the schema's order)",
        entries.len(),
        t0.elapsed().as_secs_f64()
    );
    let failures: Vec<String> = entries
        .iter()
        .zip(&checks)
        .filter(|(_, c)| c.failures() > 0)
        .map(|(e, c)| format!("{}: {}", e.name, describe(c)))
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // Most of the sample compiles, and every compiled schema was checked step by step.
    assert!(
        compiled >= SCHEMAS * 9 / 10,
        "corral compiled {compiled} of {SCHEMAS}"
    );
    assert!(
        steps >= compiled * 5,
        "{steps} masks checked for {compiled} schemas"
    );
}

fn describe(c: &BruteCheck) -> String {
    serde_json::json!({
        "wrong": c.wrong,
        "false_rejections": c.refused.iter().filter(|r| r.explained.is_none()).collect::<Vec<_>>(),
        "untokenized": c.untokenized,
    })
    .to_string()
}
