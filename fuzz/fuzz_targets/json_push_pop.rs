//! Arbitrary input against the shipped JSON grammar with random rollbacks: the recognizer
//! after a pop must behave exactly like one that never saw the popped bytes.
#![no_main]
use corral_grammar::{CompileOptions, Recognizer, compile_gbnf};
use libfuzzer_sys::fuzz_target;
use std::sync::{Arc, OnceLock};

fn grammar() -> Arc<corral_grammar::Grammar> {
    static G: OnceLock<Arc<corral_grammar::Grammar>> = OnceLock::new();
    G.get_or_init(|| compile_gbnf(include_str!("../../grammars/json.gbnf"), &CompileOptions::default()).unwrap())
        .clone()
}

fuzz_target!(|data: &[u8]| {
    let g = grammar();
    let mut r = Recognizer::new(g.clone());
    let mut kept: Vec<u8> = Vec::new();
    for &b in data {
        if b == 0xff && !kept.is_empty() {
            let n = 1 + kept.len() / 3;
            assert_eq!(r.pop(n), n);
            kept.truncate(kept.len() - n);
            continue;
        }
        if r.push_byte(b).unwrap() {
            kept.push(b);
        }
    }
    let mut fresh = Recognizer::new(g);
    for &b in &kept {
        assert!(fresh.push_byte(b).unwrap());
    }
    assert_eq!(fresh.is_accepting(), r.is_accepting());
    assert_eq!(fresh.position(), r.position());
});
