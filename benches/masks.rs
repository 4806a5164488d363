//! Mask time by grammar x parser state, on the Llama-3.1 tokenizer (128k): where a
//! regression shows up names its cause. Each benchmark places an adapter at one state of a
//! JSON document under llama.cpp's json.gbnf and times `compute_mask` there, computed from
//! scratch each time (warm per-state caches, no reuse of the previous mask).
//!
//! Run: `cargo bench --bench masks` (needs scripts/fetch-assets and ../shared/conformance).

#![allow(missing_docs, reason = "criterion_group! makes an undocumented pub fn")]

use corral::engine::{Constraint, RobustConstrainedAdapter};
use corral::grammar::{CompileOptions, compile_gbnf};
use corral::trie::{TokenSpace, Vocabulary, continuation_tokenizer};
use criterion::{Criterion, criterion_group, criterion_main};
use std::path::PathBuf;
use std::sync::Arc;

fn bench(c: &mut Criterion) {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let tok_path = root.join("assets/tokenizers/llama3_1/tokenizer.json");
    let gbnf = root.join("tests/data/llama_cpp/grammars/json.gbnf");
    if !tok_path.exists() || !gbnf.exists() {
        eprintln!("masks bench: needs scripts/fetch-assets; skipping");
        return;
    }
    let hf = tokenizers::Tokenizer::from_file(&tok_path).unwrap();
    let vocab = Vocabulary::from_tokenizer(&hf).unwrap();
    let eos = vocab.default_eos().into_iter().collect();
    let space = Arc::new(TokenSpace::new(vocab, None, eos));
    let grammar = compile_gbnf(
        &std::fs::read_to_string(gbnf).unwrap(),
        &CompileOptions::default(),
    )
    .unwrap();
    let constraint = Constraint::new(grammar, space.clone());
    let cont = continuation_tokenizer(&hf);

    // Prefixes whose canonical tokenization ends in the named state.
    let states = [
        ("json/start", ""),
        ("json/after-open-brace", "{"),
        ("json/inside-key", "{\"na"),
        ("json/after-colon", "{\"name\":"),
        ("json/after-colon-space", "{\"name\": "),
        ("json/inside-string", "{\"name\": \"Ada Love"),
        ("json/inside-number", "{\"name\": \"Ada\", \"born\": 18"),
        ("json/after-value", "{\"name\": \"Ada\", \"born\": 1815"),
        ("json/after-comma-newline", "{\"name\": \"Ada\",\n  "),
        ("json/in-array", "{\"tags\": [\"a\", "),
    ];
    let mut group = c.benchmark_group("mask/llama3_1");
    for (name, prefix) in states {
        let ids = cont
            .encode(prefix, false)
            .unwrap()
            .get_ids()
            .iter()
            .map(|&t| corral::trie::TokenId(t))
            .collect::<Vec<_>>();
        let mut a = RobustConstrainedAdapter::new(constraint.clone());
        a.step_with_tokens(&ids).unwrap();
        let mut mask = a.empty_mask();
        a.compute_mask(&mut mask).unwrap(); // warm the per-state caches
        group.bench_function(name, |b| {
            b.iter(|| {
                a.forget_last_mask();
                a.compute_mask(&mut mask).unwrap();
            })
        });
    }
    group.finish();

    // A batch of 64 sequences at different states: one after another, and with rayon.
    let prefixes = [
        "{\"name\": ",
        "{\"name\": \"Ada Love",
        "{\"tags\": [\"a\", ",
        "{\"name\":",
        "{",
        "{\"born\": 18",
        "{\"x\": 1815",
        "{\"a\": [1, ",
    ];
    let mut batch: Vec<RobustConstrainedAdapter> = prefixes
        .iter()
        .cycle()
        .take(64)
        .map(|p| {
            let mut a = RobustConstrainedAdapter::new(constraint.clone());
            a.step_with_tokens(&corral::trie::TokenId::all(
                cont.encode(*p, false).unwrap().get_ids(),
            ))
            .unwrap();
            a
        })
        .collect();
    let mut masks: Vec<_> = batch.iter().map(|a| a.empty_mask()).collect();
    let mut group = c.benchmark_group("mask-batch64/llama3_1");
    group.bench_function("json/sequential", |b| {
        b.iter(|| {
            for (a, m) in batch.iter_mut().zip(masks.iter_mut()) {
                a.forget_last_mask();
                a.compute_mask(m).unwrap();
            }
        })
    });
    group.bench_function("json/rayon", |b| {
        b.iter(|| {
            batch
                .iter_mut()
                .for_each(RobustConstrainedAdapter::forget_last_mask);
            let mut slots: Vec<_> = batch.iter_mut().zip(masks.iter_mut()).collect();
            corral::engine::compute_masks(&mut slots);
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
