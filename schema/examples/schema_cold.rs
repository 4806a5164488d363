//! Times cold JSON Schema compiles: compiles the schema file named by the first argument
//! N times (the second argument, default 20) with default options, so no DFA cache is
//! shared between compiles, and prints the mean time per compile in milliseconds.
//!
//! `cargo run --release -p corral-schema --example schema_cold -- benches/data/order.schema.json`
use corral_schema::{JsonSchemaOptions, compile_json_schema};
use std::time::Instant;
fn main() {
    let path = std::env::args().nth(1).unwrap();
    let n: usize = std::env::args().nth(2).map_or(20, |s| s.parse().unwrap());
    let text = std::fs::read_to_string(&path).unwrap();
    let mut t_all = 0.0;
    for _ in 0..n {
        let t = Instant::now();
        let c = compile_json_schema(&text, &JsonSchemaOptions::default()).unwrap();
        t_all += t.elapsed().as_secs_f64() * 1e3;
        std::hint::black_box(c);
    }
    println!("mean cold compile {:.2} ms", t_all / n as f64);
}
