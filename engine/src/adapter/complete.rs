//! What the grammar forces next, and the shortest completions of an adapter's output.

use super::{AdapterError, Completion, RobustConstrainedAdapter};
use corral_grammar::Piece;
use corral_trie::TokenId;

impl RobustConstrainedAdapter {
    /// The byte string the grammar forces next (every byte is the only one possible, and
    /// the grammar does not accept before it ends). Empty if the next byte is free. At
    /// most the grammar's `Limits::max_forced_bytes` per call.
    pub fn forced_bytes(&mut self) -> Result<Vec<u8>, AdapterError> {
        self.check()?;
        let mut out = Vec::new();
        let g = self.c.grammar.clone();
        while out.len() < g.limits().max_forced_bytes
            && !self.finished
            && !self.rec.is_accepting()
            && self.rec.expected_tokens().is_empty()
        {
            // A byte can be pushed iff some run's DFA stays alive on it.
            self.rec.runs_into(&mut self.runs);
            let mut only: Option<u8> = None;
            let mut several = false;
            'bytes: for b in 0..=255u8 {
                for r in &self.runs {
                    if g.lexeme(r.lexeme).dfa().next(r.state, b) != corral_grammar::DEAD {
                        if only.is_some() {
                            several = true;
                            break 'bytes;
                        }
                        only = Some(b);
                        break;
                    }
                }
            }
            let Some(b) = only.filter(|_| !several) else {
                break;
            };
            match self.rec.push_byte(b) {
                Ok(true) => out.push(b),
                Ok(false) => break,
                Err(e) => {
                    self.rec.pop(out.len());
                    return self.fail(e.into());
                }
            }
        }
        self.rec.pop(out.len());
        Ok(out)
    }

    /// Tokens for [`Self::forced_bytes`]: greedily the longest token that is a prefix of what
    /// is left (each is therefore allowed). Canonical tokenization is the caller's choice.
    pub fn forced_tokens(&mut self) -> Result<Vec<TokenId>, AdapterError> {
        let bytes = self.forced_bytes()?;
        Ok(self.c.space().trie().greedy_tokens(&bytes).0)
    }

    /// The shortest output that completes the grammar from here, as tokens: its text
    /// greedily the longest token each (every tokenization of a valid output is allowed),
    /// and a token for each token reference it goes through. Empty when complete already;
    /// `None` when nothing completes it (a reference names no token of this vocabulary, or
    /// the recognizer's completion search gives up). Generation under a token budget steers
    /// to it before the budget runs out.
    pub fn completion_tokens(&mut self) -> Result<Option<Vec<TokenId>>, AdapterError> {
        match self.completion_tokens_within(usize::MAX)? {
            Completion::Tokens(t) => Ok(Some(t)),
            Completion::TooLong { .. } | Completion::Impossible => Ok(None),
        }
    }

    /// [`Self::completion_tokens`] for a budget of `budget` tokens: when the shortest
    /// completion cannot fit (its bytes alone need more tokens than that, each token at
    /// most the longest token's bytes), it is not written out but measured: a grammar whose
    /// shortest output is megabytes long is refused at the cost of a search, not of
    /// spelling it.
    pub fn completion_tokens_within(&mut self, budget: usize) -> Result<Completion, AdapterError> {
        self.check()?;
        if self.finished {
            return Ok(Completion::Tokens(Vec::new()));
        }
        let longest = self.c.space().longest_token().max(1) as u64;
        let max_units = (budget as u64).saturating_mul(longest);
        let completion = match self.rec.shortest_completion_within(max_units) {
            Ok(c) => c,
            Err(len) => {
                // A DFA that needed a state past its size limit reads it as dead: that is
                // the error, not the missing completion.
                if let Some(e) = self.c.grammar.overflow() {
                    return self.fail(e.into());
                }
                return Ok(match len {
                    Some(units) => Completion::TooLong {
                        at_least: usize::try_from(units.div_ceil(longest)).unwrap_or(usize::MAX),
                    },
                    None => Completion::Impossible,
                });
            }
        };
        let mut tokens = Vec::new();
        for piece in &completion.pieces {
            match piece {
                Piece::Bytes(bytes) => {
                    let (t, covered) = self.c.space().trie().greedy_tokens(bytes);
                    if covered != bytes.len() {
                        return Ok(Completion::Impossible);
                    }
                    tokens.extend(t);
                }
                Piece::Token(r) => match self.c.ref_token(*r) {
                    Some(t) => tokens.push(t),
                    None => return Ok(Completion::Impossible),
                },
            }
        }
        Ok(Completion::Tokens(tokens))
    }
}
