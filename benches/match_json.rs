//! `corral match` throughput: 1 MB and 8 MB pretty JSON documents under llama.cpp's
//! json.gbnf, one pass, no rollback history (what the CLI does). Linear time means the
//! 8 MB run takes about 8x the 1 MB run. Also the compile time of json.gbnf.
//!
//! Run: `cargo bench --bench match_json`.

#![allow(missing_docs, reason = "criterion_group! makes an undocumented pub fn")]

#[path = "../tests/support/jsongen.rs"]
mod jsongen;

use corral::grammar::{CompileOptions, MatchOutcome, compile_gbnf, match_bytes};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use std::time::Duration;

fn json_gbnf() -> String {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/llama_cpp/grammars/json.gbnf"
    );
    std::fs::read_to_string(path).expect("json.gbnf from tests/data/llama_cpp")
}

fn bench(c: &mut Criterion) {
    let text = json_gbnf();
    let g = compile_gbnf(&text, &CompileOptions::default()).unwrap();
    let mut group = c.benchmark_group("match/json");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(10));
    for (name, size) in [("1MB", 1usize << 20), ("8MB", 8 << 20)] {
        let doc = jsongen::document(size, 42);
        assert_eq!(
            match_bytes(&g, doc.as_bytes()).unwrap(),
            MatchOutcome::Accepted
        );
        group.throughput(Throughput::Bytes(doc.len() as u64));
        group.bench_function(name, |b| {
            b.iter(|| match_bytes(&g, doc.as_bytes()).unwrap())
        });
    }
    group.finish();
    c.bench_function("compile/json.gbnf", |b| {
        b.iter(|| compile_gbnf(&text, &CompileOptions::default()).unwrap())
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
