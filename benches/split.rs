//! Splitter throughput on multi-megabyte streams: a harmony stream and a `<think>` /
//! `<tool_call>` stream, at 4 MB and 8 MB (the time for 2x the text should be ~2x), fed in
//! chunks of 16 bytes like decoded tokens. `cargo bench --bench split`.

#![allow(missing_docs, reason = "criterion_group! makes an undocumented pub fn")]

#[path = "../tests/support/streams.rs"]
#[allow(dead_code)]
mod streams;

use corral::split::{Format, GenericParser, HarmonyMode, HarmonyParser, Splitter};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use std::time::Duration;

fn feed(s: &mut dyn Splitter, text: &str) -> usize {
    let mut n = 0;
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let mut j = (i + 16).min(bytes.len());
        while !text.is_char_boundary(j) {
            j += 1;
        }
        s.process(&text[i..j]);
        n += s.take_content().len() + s.take_reasoning().len() + s.take_tool_calls().len();
        i = j;
    }
    s.finish();
    n + s.take_content().len()
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("split");
    g.sample_size(10).measurement_time(Duration::from_secs(8));
    for mb in [4usize, 8] {
        let h = streams::harmony(mb << 20);
        g.throughput(Throughput::Bytes(h.len() as u64));
        g.bench_function(format!("harmony/{mb}MB"), |b| {
            b.iter(|| {
                let mut p = HarmonyParser::new(HarmonyMode::Lenient);
                feed(&mut p, &h)
            })
        });
        let t = streams::think_tools(mb << 20);
        g.throughput(Throughput::Bytes(t.len() as u64));
        g.bench_function(format!("think-tools/{mb}MB"), |b| {
            b.iter(|| {
                let mut p = GenericParser::new(Format::hermes()).unwrap();
                feed(&mut p, &t)
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
