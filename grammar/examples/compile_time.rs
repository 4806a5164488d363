//! Times GBNF compiles: compiles the grammar file named by the first argument 2000 times,
//! with default options (no DFA cache shared between compiles), and prints the mean time per
//! compile to stderr.
//!
//! `cargo run --release -p corral-grammar --example compile_time -- grammars/json.gbnf`
use corral_grammar::*;
fn main() {
    let text = std::fs::read_to_string(std::env::args().nth(1).unwrap()).unwrap();
    let n = 2000;
    let t = std::time::Instant::now();
    for _ in 0..n {
        let g = compile_gbnf(&text, &CompileOptions::default()).unwrap();
        std::hint::black_box(g);
    }
    eprintln!("{:?} per compile", t.elapsed() / n);
}
