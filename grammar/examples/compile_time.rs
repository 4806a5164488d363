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
