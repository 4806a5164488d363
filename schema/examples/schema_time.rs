//! Compile time and shape of one JSON Schema's grammar: compiles the schema file named by
//! the first argument three times with default options, printing each time in
//! milliseconds with the grammar's summary; prints the GBNF when a second argument is given;
//! then lists each lexeme with its DFA's state count (for a DFA built on demand, the states
//! made so far) and its source text.
//!
//! `cargo run --release -p corral-schema --example schema_time -- benches/data/order.schema.json`
use corral_schema::{JsonSchemaOptions, compile_json_schema};
use std::time::Instant;
fn main() {
    let path = std::env::args().nth(1).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    for _ in 0..3 {
        let t = Instant::now();
        let c = compile_json_schema(&text, &JsonSchemaOptions::default()).unwrap();
        println!(
            "{:.2} ms  {}",
            t.elapsed().as_secs_f64() * 1e3,
            c.grammar.summary()
        );
    }
    let c = compile_json_schema(&text, &JsonSchemaOptions::default()).unwrap();
    if std::env::args().nth(2).is_some() {
        println!("{}", c.gbnf());
    }
    for (i, l) in c.grammar.lexemes().iter().enumerate() {
        println!("lexeme {i}: {} states: {}", l.dfa().len(), l.display);
    }
}
