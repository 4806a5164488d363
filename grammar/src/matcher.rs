//! Whole-input matching (`corral match`): is this input a sentence of the grammar, and if
//! not, where does it go wrong?

use crate::ast::TokenTarget;
use crate::compiled::Grammar;
use crate::earley::{Expected, Recognizer};
use crate::error::RecognizeError;
use std::sync::Arc;

/// The verdict on an input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MatchOutcome {
    /// The whole input is in the language.
    Accepted,
    /// The byte at `offset` cannot be consumed; `expected` is what could have come there.
    Rejected { offset: u64, expected: Vec<String> },
    /// All input was consumed, but the grammar needs more.
    Incomplete { expected: Vec<String> },
}

/// Matches `input` against `g` in one pass, in memory proportional to the Earley sets (the
/// recognizer keeps no rollback history).
pub fn match_bytes(g: &Arc<Grammar>, input: &[u8]) -> Result<MatchOutcome, RecognizeError> {
    let mut r = Recognizer::new(g.clone());
    r.set_keep_history(false);
    for (i, &b) in input.iter().enumerate() {
        if !r.push_byte(b)? {
            return Ok(MatchOutcome::Rejected {
                offset: i as u64,
                expected: describe_expected(&r),
            });
        }
    }
    if r.is_accepting() {
        Ok(MatchOutcome::Accepted)
    } else {
        Ok(MatchOutcome::Incomplete {
            expected: describe_expected(&r),
        })
    }
}

/// What the recognizer expects next, for people: lexemes by their source text, token
/// references as written.
pub fn describe_expected(r: &Recognizer) -> Vec<String> {
    let g = r.grammar();
    let mut out: Vec<String> = r
        .expected()
        .into_iter()
        .map(|e| match e {
            Expected::Lexeme(l) => g.lexeme(l).display.clone(),
            Expected::Token(t) => {
                let t = &g.token_refs()[t.0 as usize];
                let body = match &t.target {
                    TokenTarget::Id(id) => format!("<[{id}]>"),
                    TokenTarget::Text(s) => s.clone(),
                };
                if t.negated { format!("!{body}") } else { body }
            }
        })
        .collect();
    out.sort();
    out.dedup();
    out
}
