//! A grammar and an input (split at the first NUL byte): if the grammar compiles, matching
//! must give a verdict or a limit error, never panic; the verdict must agree with a
//! byte-by-byte run of the recognizer with history (push, pop, push again).
#![no_main]
use corral_grammar::{CompileOptions, Limits, MatchOutcome, Recognizer, compile_gbnf_bytes, match_bytes};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let split = data.iter().position(|&b| b == 0).unwrap_or(data.len());
    let (grammar, input) = (&data[..split], data.get(split + 1..).unwrap_or(&[]));
    let limits = Limits {
        max_grammar_size: 5_000,
        max_lexeme_bytes: 1 << 20,
        max_items_per_set: 5_000,
        max_lexer_runs: 1_000,
        max_work_per_push: 20_000,
        ..Limits::default()
    };
    let Ok(g) = compile_gbnf_bytes(grammar, &CompileOptions::default().limits(limits)) else { return };
    let Ok(verdict) = match_bytes(&g, input) else { return };
    let mut r = Recognizer::new(g);
    let mut ok = true;
    for (i, &b) in input.iter().enumerate() {
        match r.push_byte(b) {
            Ok(true) => {
                // Undo and redo every other byte: rollback must restore the same state.
                if i % 2 == 1 {
                    assert_eq!(r.pop(1), 1);
                    assert_eq!(r.push_byte(b), Ok(true));
                }
            }
            Ok(false) => {
                ok = false;
                break;
            }
            Err(_) => return,
        }
    }
    let accepted = ok && r.is_accepting();
    assert_eq!(accepted, verdict == MatchOutcome::Accepted);
});
