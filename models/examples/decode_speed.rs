//! Raw decode speed of a model (no grammar, no sampling): `cargo run --release -p corral-models --example decode_speed -- MODEL.gguf [N]`.
use corral_models::{DeviceSpec, Model};
use std::time::Instant;

fn main() {
    // SAFETY: first thing in main, before any thread starts.
    unsafe { corral_models::pin_thread_count() };
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(64);
    let mut m = Model::load(&args[1], DeviceSpec::Cpu).expect("model");
    let ids = m
        .encode("The quick brown fox jumps over the lazy dog. Once upon a time")
        .unwrap();
    let lm = m.lm();
    let t = Instant::now();
    let mut logits = lm.forward(&ids, 0).unwrap();
    let prefill = t.elapsed();
    let t = Instant::now();
    for pos in ids.len()..ids.len() + n {
        let v = logits.to_masked_vec(None).unwrap();
        let next = corral_engine::argmax(&v).unwrap();
        logits = lm.forward(&[next], pos).unwrap();
    }
    let dt = t.elapsed();
    println!(
        "prefill {} tokens: {:.1} tok/s; decode {n} tokens: {:.1} tok/s ({:.1} ms/token)",
        ids.len(),
        ids.len() as f64 / prefill.as_secs_f64(),
        n as f64 / dt.as_secs_f64(),
        dt.as_secs_f64() * 1e3 / n as f64
    );
}
