//! Whole-input matching (`corral match`): is this input a sentence of the grammar, and if
//! not, where does it go wrong?

use crate::ast::TokenTarget;
use crate::compiled::Grammar;
use crate::earley::Recognizer;
use crate::error::RecognizeError;
use std::sync::Arc;

/// The verdict on an input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MatchOutcome {
    /// The whole input is in the language.
    Accepted,
    /// The byte at `offset` cannot be consumed; `expected` is what could have come there.
    Rejected {
        /// Offset of the rejected byte from the start of the input.
        offset: u64,
        /// What could have come there, from [`describe_expected`] (sorted, no duplicates).
        expected: Vec<String>,
    },
    /// All input was consumed, but the grammar needs more.
    Incomplete {
        /// What could come next, from [`describe_expected`] (sorted, no duplicates).
        expected: Vec<String>,
    },
}

/// Matches `input` against `g` in one pass, in memory proportional to the Earley sets still
/// reachable (the open structure of the input; the recognizer keeps no rollback history).
pub fn match_bytes(g: &Arc<Grammar>, input: &[u8]) -> Result<MatchOutcome, RecognizeError> {
    let mut m = StreamMatcher::new(g.clone());
    if let Some(rejected) = m.feed(input)? {
        return Ok(rejected);
    }
    m.finish()
}

/// [`match_bytes`] over input that arrives in pieces (a file read in chunks, a pipe): the
/// input itself is never held.
#[derive(Debug)]
pub struct StreamMatcher {
    r: Recognizer,
    pos: u64,
}

impl StreamMatcher {
    /// A matcher for `g` at the start of its input, keeping no rollback history.
    pub fn new(g: Arc<Grammar>) -> StreamMatcher {
        let mut r = Recognizer::new(g);
        r.set_keep_history(false);
        StreamMatcher { r, pos: 0 }
    }

    /// Bytes accepted so far.
    pub fn position(&self) -> u64 {
        self.pos
    }

    /// Feeds the next piece of input: `Some(Rejected)` at the first byte that cannot come
    /// next (offsets count from the start of the whole input; nothing after it is
    /// consumed), `None` if every byte was accepted.
    pub fn feed(&mut self, bytes: &[u8]) -> Result<Option<MatchOutcome>, RecognizeError> {
        let g = self.r.grammar().clone();
        for &b in bytes {
            if !self.r.push_byte(b)? {
                if let Some(e) = g.overflow() {
                    return Err(e);
                }
                return Ok(Some(MatchOutcome::Rejected {
                    offset: self.pos,
                    expected: describe_expected(&self.r),
                }));
            }
            self.pos += 1;
        }
        Ok(None)
    }

    /// The verdict at the end of the input (after every piece was accepted).
    pub fn finish(&self) -> Result<MatchOutcome, RecognizeError> {
        if let Some(e) = self.r.grammar().overflow() {
            return Err(e);
        }
        if self.r.is_accepting() {
            Ok(MatchOutcome::Accepted)
        } else {
            Ok(MatchOutcome::Incomplete {
                expected: describe_expected(&self.r),
            })
        }
    }
}

/// What the recognizer expects next, for people: a lexeme not begun by its source text
/// (or rule name), a lexeme under way by the bytes that can continue it, token references
/// as written.
pub fn describe_expected(r: &Recognizer) -> Vec<String> {
    let g = r.grammar();
    let mut out: Vec<String> = Vec::new();
    for run in r.runs() {
        let lex = g.lexeme(run.lexeme);
        if run.state == lex.dfa().start() {
            out.push(lex.display.clone());
        } else {
            let next: Vec<u8> = (0..=255u8)
                .filter(|&b| lex.dfa().next(run.state, b) != crate::lexeme::DEAD)
                .collect();
            out.push(format!("{} (in {})", byte_class(&next), lex.display));
        }
    }
    for t in r.expected_tokens() {
        let t = &g.token_refs()[t.0 as usize];
        let body = match &t.target {
            TokenTarget::Id(id) => format!("<[{id}]>"),
            TokenTarget::Text(s) => s.clone(),
        };
        out.push(if t.negated { format!("!{body}") } else { body });
    }
    out.sort();
    out.dedup();
    out
}

/// Bytes as a class, e.g. `[,0-9]`; bytes of multi-byte characters are summarised.
fn byte_class(bytes: &[u8]) -> String {
    let mut s = String::from("[");
    let mut i = 0;
    while i < bytes.len() && bytes[i] < 0x80 {
        let start = bytes[i];
        let mut end = start;
        while i + 1 < bytes.len() && bytes[i + 1] == end + 1 && bytes[i + 1] < 0x80 {
            i += 1;
            end = bytes[i];
        }
        let show = |b: u8| match b {
            b'\\' | b']' | b'-' | b'^' => format!("\\{}", b as char),
            0x21..=0x7e => (b as char).to_string(),
            b' ' => " ".to_string(),
            b'\n' => "\\n".to_string(),
            b'\t' => "\\t".to_string(),
            b'\r' => "\\r".to_string(),
            _ => format!("\\x{b:02X}"),
        };
        s.push_str(&show(start));
        if end > start {
            if end > start + 1 {
                s.push('-');
            }
            s.push_str(&show(end));
        }
        i += 1;
    }
    if i < bytes.len() {
        s.push_str("<non-ASCII>");
    }
    s.push(']');
    s
}
