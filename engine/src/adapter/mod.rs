//! The `RobustConstrainedAdapter`: a grammar's recognizer joined with a model's tokens.
//!
//! Per decoding step:
//! 1. [`RobustConstrainedAdapter::compute_mask`] fills a bitset with every token that can
//!    come next: for each lexer run (a partial lexeme, matched so far) the
//!    token sets of its DFA state ([`crate::tokens`], cached per tokenizer in a
//!    [`crate::MaskCache`]), plus walks with the recognizer of what follows where the lexeme can
//!    end inside a token; token references by id; EOS and stop tokens exactly when the
//!    grammar accepts.
//! 2. The caller samples a token from the masked logits.
//! 3. [`RobustConstrainedAdapter::step_with_token`] feeds it; a token the grammar cannot
//!    take is a typed error that changes nothing.
//!
//! Every tokenization of a valid output is allowed, not only the canonical one: the mask is
//! a property of bytes, computed against the trie of all tokens. A token may end inside a
//! lexeme (the DFA state carries over) or span several lexemes (the recognizer completes one
//! and starts the next inside the token).
//!
//! Errors are sticky: after a recognizer limit or an internal failure, every call returns
//! the same error. A rejected token is not an error of the adapter's state: it returns
//! [`AdapterError::TokenNotAllowed`] and the adapter stays usable.
//!
//! The mask algorithm is in `mask`; what the grammar forces and the shortest completions
//! are in `complete`; the grammar bound to the tokenizer is a [`Constraint`].

mod complete;
mod mask;

use crate::constraint::Constraint;
use corral_grammar::ast::TokenTarget;
use corral_grammar::{Grammar, LexemeId, RecognizeError, Recognizer, Run, StateId};
use corral_trie::{Alphabet, FixedBitSet, NodeId, TokenId, TokenSpace};
use std::sync::Arc;

/// Why the adapter refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AdapterError {
    /// The grammar cannot take the token here (or it is an end token and the grammar does
    /// not accept yet); nothing changes and the adapter stays usable.
    #[error("token {token} is not allowed at byte {position}")]
    TokenNotAllowed {
        /// The token refused.
        token: TokenId,
        /// Bytes of output before the token.
        position: u64,
    },
    /// The token's id is not below the mask width; nothing changes.
    #[error("token {token} is outside the vocabulary (mask width {width})")]
    UnknownToken {
        /// The token fed.
        token: TokenId,
        /// The mask width: the number of token ids the model's logits cover.
        width: usize,
    },
    /// The mask came out empty: no token continues the output and the grammar does not
    /// accept. Sticky.
    #[error(
        "the grammar cannot continue and does not accept at byte {position} (no token can produce what it needs)"
    )]
    NoContinuation {
        /// Bytes of output so far, where the dead end is.
        position: u64,
    },
    /// An EOS or stop token already ended the output; roll back to continue.
    #[error("generation already ended with an end-of-sequence token")]
    Finished,
    /// A recognizer limit was hit, or a lexeme DFA outgrew its size limit so matching is no
    /// longer exact. Sticky.
    #[error(transparent)]
    Limit(#[from] RecognizeError),
}

/// The shortest completion from an adapter's state, for a budget
/// ([`RobustConstrainedAdapter::completion_tokens_within`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Completion {
    /// Its tokens (empty: complete already).
    Tokens(Vec<TokenId>),
    /// Longer than the budget: at least this many tokens (not written out).
    TooLong {
        /// A lower bound on the completion's length in tokens.
        at_least: usize,
    },
    /// Nothing completes it in this vocabulary's tokens.
    Impossible,
}

/// One partial lexeme, for [`StateInfo`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartialLexeme {
    /// The lexeme's source text or rule name.
    pub lexeme: String,
    /// The bytes it has matched so far.
    pub matched: Vec<u8>,
    /// Whether it could end right here.
    pub can_end: bool,
}

/// What the adapter is doing, for debugging.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateInfo {
    /// Bytes of output so far.
    pub position: u64,
    /// Tokens consumed so far.
    pub tokens: usize,
    /// Whether the output so far is complete, as [`RobustConstrainedAdapter::is_accepting`].
    pub accepting: bool,
    /// Lexemes under way (already matched at least one byte).
    pub partial_lexemes: Vec<PartialLexeme>,
    /// Terminals that can start here: lexemes (by source text) and token references.
    pub allowed_terminals: Vec<String>,
}

/// Walks after a lexeme's end kept per adapter (a few per open string; cleared when full).
const MAX_REMEMBERED_WALKS: usize = 64;

/// The adapter. See the module docs.
#[derive(Clone, Debug)]
pub struct RobustConstrainedAdapter {
    c: Arc<Constraint>,
    rec: Recognizer,
    /// Recognizer frames pushed by each consumed token (0 for EOS).
    steps: Vec<u32>,
    /// The output so far (for `state_info`).
    output: Vec<u8>,
    finished: bool,
    error: Option<AdapterError>,
    runs: Vec<Run>,
    /// The last mask computed, with the recognizer's state key at that time.
    last_mask: Option<(Vec<u64>, FixedBitSet)>,
    key: Vec<u64>,
    /// Tokens found by walks of the token trie after a lexeme's end (at most
    /// [`MAX_REMEMBERED_WALKS`]).
    walks: rustc_hash::FxHashMap<WalkKey, Vec<TokenId>>,
    /// The same for walks of a slice's suffix trie: the suffixes the parser takes.
    suffix_walks: rustc_hash::FxHashMap<WalkKey, FixedBitSet>,
}

/// A walk below a trie node after a lexeme's end. What it finds depends only on these: the
/// set the lexeme started in (by uid, which outlives pops), the lexeme, its end state, and
/// the node (of the token trie, or of an alphabet's suffix trie), or the whole trie of a
/// string body's rests run from one state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct WalkKey {
    from_set: u64,
    lexeme: LexemeId,
    end_state: StateId,
    walked: Walked,
}

/// The trie a [`WalkKey`] walks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Walked {
    /// Below a node of the token trie.
    Tokens(NodeId),
    /// Below a node of an alphabet's suffix trie.
    Suffixes(Alphabet, NodeId),
    /// The rests of a string body's tokens run from a state ([`crate::tokens::BodyRuns`]),
    /// and which runs' trie they are (two runs from one state may cover different first
    /// bytes: made for different states, or one taken from another DFA by residual).
    BodyRests(StateId, usize),
}

impl RobustConstrainedAdapter {
    /// An adapter at the start of the output.
    pub fn new(c: Arc<Constraint>) -> RobustConstrainedAdapter {
        let rec = Recognizer::new(c.grammar.clone());
        RobustConstrainedAdapter {
            c,
            rec,
            steps: Vec::new(),
            output: Vec::new(),
            finished: false,
            error: None,
            runs: Vec::new(),
            last_mask: None,
            key: Vec::new(),
            walks: Default::default(),
            suffix_walks: Default::default(),
        }
    }

    /// Shortcut: bind `grammar` to `space` and start an adapter (the constraint's caches are
    /// then private to this adapter and its forks).
    pub fn from_parts(grammar: Arc<Grammar>, space: Arc<TokenSpace>) -> RobustConstrainedAdapter {
        RobustConstrainedAdapter::new(Constraint::new(grammar, space))
    }

    /// The grammar bound to the tokenizer that this adapter decodes against (shared with its
    /// forks and with any adapter built from the same [`Constraint`]).
    pub fn constraint(&self) -> &Arc<Constraint> {
        &self.c
    }

    /// A cheap copy to explore another continuation (caches are shared).
    pub fn fork(&self) -> RobustConstrainedAdapter {
        self.clone()
    }

    fn check(&self) -> Result<(), AdapterError> {
        match &self.error {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    fn fail<T>(&mut self, e: AdapterError) -> Result<T, AdapterError> {
        self.error = Some(e.clone());
        Err(e)
    }

    /// An empty mask as wide as the model's logits, for [`Self::compute_mask`] to fill
    /// (`corral_trie::new_mask` makes one of a given width).
    pub fn empty_mask(&self) -> FixedBitSet {
        FixedBitSet::with_capacity(self.c.space().width())
    }

    /// Feeds a sampled token. Not allowed: [`AdapterError::TokenNotAllowed`], nothing
    /// changes. An EOS/stop token is taken only when the grammar accepts; it ends the output.
    pub fn step_with_token(&mut self, token: TokenId) -> Result<(), AdapterError> {
        self.check()?;
        if self.finished {
            return Err(AdapterError::Finished);
        }
        let width = self.c.space().width();
        if token.index() >= width {
            return Err(AdapterError::UnknownToken { token, width });
        }
        let position = self.rec.position();
        // An end token ends the output, unless the grammar names it here by reference.
        if self.c.space().eos().contains(&token) && !self.expects_reference(token) {
            if self.rec.is_accepting() {
                self.finished = true;
                self.steps.push(0);
                return Ok(());
            }
            return Err(AdapterError::TokenNotAllowed { token, position });
        }
        let c = self.c.clone();
        let bytes = c.space().vocab().token_bytes(token).unwrap_or(&[]);
        let before = self.rec.depth();
        match self.rec.push_token(bytes, &|r| c.ref_matches(r, token)) {
            Ok(true) => {
                self.steps.push((self.rec.depth() - before) as u32);
                self.output.extend_from_slice(bytes);
                Ok(())
            }
            Ok(false) => match c.grammar.overflow() {
                Some(e) => self.fail(e.into()),
                None => Err(AdapterError::TokenNotAllowed { token, position }),
            },
            Err(e) => self.fail(e.into()),
        }
    }

    /// Whether a token reference the grammar expects next is satisfied by `token` (which
    /// [`Self::step_with_token`] then takes as that reference, even an end token).
    pub fn expects_reference(&self, token: TokenId) -> bool {
        self.error.is_none()
            && !self.finished
            && self
                .rec
                .expected_tokens()
                .into_iter()
                .any(|r| self.c.ref_matches(r, token))
    }

    /// Whether the grammar expects some token reference next (which may name any id).
    pub fn expects_any_reference(&self) -> bool {
        self.error.is_none() && !self.finished && !self.rec.expected_tokens().is_empty()
    }

    /// Feeds raw bytes (text that reached the output other than as a sampled token, such as
    /// what a token carried after a trigger): all of them or none; `Ok(false)` if refused.
    /// Rolls back like one token.
    pub fn push_bytes(&mut self, bytes: &[u8]) -> Result<bool, AdapterError> {
        self.check()?;
        let before = self.rec.depth();
        match self.rec.push_bytes_all_or_nothing(bytes) {
            Ok(true) => {
                self.steps.push((self.rec.depth() - before) as u32);
                self.output.extend_from_slice(bytes);
                Ok(true)
            }
            Ok(false) => Ok(false),
            Err(e) => self.fail(e.into()),
        }
    }

    /// Feeds several tokens; stops at the first refusal.
    pub fn step_with_tokens(&mut self, tokens: &[TokenId]) -> Result<(), AdapterError> {
        tokens.iter().try_for_each(|&t| self.step_with_token(t))
    }

    /// Whether the output so far is complete (EOS would be allowed).
    pub fn is_accepting(&self) -> bool {
        self.error.is_none() && (self.finished || self.rec.is_accepting())
    }

    /// Whether the output is complete and the grammar admits nothing more after it (only
    /// an end token could come next).
    pub fn is_complete(&self) -> bool {
        self.is_accepting() && (self.finished || self.rec.expected().is_empty())
    }

    /// Whether an EOS/stop token ended the output.
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// Tokens consumed.
    pub fn tokens_consumed(&self) -> usize {
        self.steps.len()
    }

    /// The output bytes so far.
    pub fn output(&self) -> &[u8] {
        &self.output
    }

    /// Undoes the last `n` tokens (fewer if fewer were consumed). Clears a sticky error
    /// only if it is rolled back past, which it is not: errors stay.
    pub fn rollback(&mut self, n: usize) -> Result<(), AdapterError> {
        self.check()?;
        for _ in 0..n.min(self.steps.len()) {
            let frames = self.steps.pop().expect("checked") as usize;
            if frames == 0 && self.finished {
                self.finished = false;
                continue;
            }
            let pos_before = self.rec.position();
            self.rec.pop(frames);
            let drop = (pos_before - self.rec.position()) as usize;
            self.output.truncate(self.output.len() - drop);
        }
        Ok(())
    }

    /// What the adapter is doing: position, partial lexemes, allowed terminals.
    pub fn state_info(&self) -> StateInfo {
        let g = &self.c.grammar;
        let position = self.rec.position();
        let mut partial_lexemes = Vec::new();
        let mut allowed_terminals = Vec::new();
        for run in self.rec.runs() {
            let lex = g.lexeme(run.lexeme);
            let start = self.rec.set_position(run.set) as usize;
            if start < position as usize {
                partial_lexemes.push(PartialLexeme {
                    lexeme: lex.display.clone(),
                    matched: self.output[start..].to_vec(),
                    can_end: run.state.is_accepting(),
                });
            } else {
                allowed_terminals.push(lex.display.clone());
            }
        }
        for r in self.rec.expected_tokens() {
            let t = &g.token_refs()[r.0 as usize];
            let name = match &t.target {
                TokenTarget::Id(id) => format!("<[{id}]>"),
                TokenTarget::Text(s) => s.clone(),
            };
            allowed_terminals.push(if t.negated { format!("!{name}") } else { name });
        }
        allowed_terminals.sort();
        allowed_terminals.dedup();
        StateInfo {
            position,
            tokens: self.steps.len(),
            accepting: self.is_accepting(),
            partial_lexemes,
            allowed_terminals,
        }
    }
}
