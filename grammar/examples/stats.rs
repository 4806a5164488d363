//! Matches a file against a grammar and prints throughput and chart sizes:
//! `cargo run --release -p corral-grammar --example stats -- GRAMMAR.gbnf INPUT`.
use corral_grammar::*;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let g = compile_gbnf(
        &std::fs::read_to_string(&args[1]).unwrap(),
        &CompileOptions::default(),
    )
    .unwrap();
    eprintln!("{}", g.summary());
    let input = std::fs::read(&args[2]).unwrap();
    let mut r = Recognizer::new(g.clone());
    r.set_keep_history(false);
    let t = std::time::Instant::now();
    for &b in &input {
        assert!(r.push_byte(b).unwrap());
    }
    let dt = t.elapsed();
    eprintln!(
        "{:?} {:.1} MB/s, {}",
        dt,
        input.len() as f64 / dt.as_secs_f64() / 1e6,
        r.debug_stats()
    );
}
