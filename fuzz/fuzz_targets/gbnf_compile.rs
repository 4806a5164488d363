//! Any bytes as a GBNF grammar: compiling must return Ok or a positioned error, never panic
//! or hang, and the error must render.
#![no_main]
use corral_grammar::{CompileOptions, Limits, compile_gbnf_bytes};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let limits = Limits {
        max_grammar_size: 20_000,
        max_lexeme_bytes: 1 << 20,
        ..Limits::default()
    };
    if let Err(e) = compile_gbnf_bytes(data, &CompileOptions::default().limits(limits)) {
        let _ = e.to_string();
    }
});
