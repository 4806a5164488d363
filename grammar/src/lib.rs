//! # corral-grammar
//!
//! The grammar layer of corral: front ends that turn a grammar text into a compiled
//! [`Grammar`], and the byte-level [`Recognizer`] that decides, one byte at a time, whether
//! input can still be completed into a sentence of the grammar. It knows nothing of tokens
//! or models (the engine crate joins it with a tokenizer trie).
//!
//! Key types:
//! - [`compile_gbnf`] / [`CompileOptions`]: GBNF text (llama.cpp dialect) -> `Arc<Grammar>`,
//!   with positioned [`GrammarError`]s.
//! - [`Grammar`]: dense, index-based, immutable. Regular pieces are [`Lexeme`]s with DFAs
//!   ([`LexemeDfa`]); the rest is a context-free grammar over lexemes and token references.
//! - [`Recognizer`]: Earley over lexemes, with push / pop / accepting, Leo items and
//!   memoized closures. See [`Recognizer`] (`earley/`) for how a push works.
//! - [`Limits`]: every resource bound, with documented defaults.
//!
//! The main loop of a user, in steps:
//! 1. compile the grammar once and share it (`Arc`);
//! 2. make a recognizer per input (cheap) and push bytes;
//! 3. a rejected byte returns `false` and leaves the state unchanged; `pop` rolls back;
//! 4. at the end, `is_accepting` says whether the input is complete.
//!
//! ```
//! use corral_grammar::{compile_gbnf, CompileOptions, Recognizer};
//!
//! let g = compile_gbnf(r#"root ::= "a" [0-9]+ ("," [0-9]+)*"#, &CompileOptions::default())?;
//! let mut r = Recognizer::new(g);
//! for &b in b"a12,3" {
//!     assert!(r.push_byte(b)?);
//! }
//! assert!(r.is_accepting());
//! assert!(!r.push_byte(b'x')?); // rejected, state unchanged
//! r.pop(2); // back to "a12"
//! assert!(r.is_accepting());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Differences from llama.cpp's GBNF, by design: left recursion is accepted (an Earley
//! parser needs no restriction; llama.cpp refuses it); `{m,n}` is exact for any `n` (llama.cpp
//! turns large upper bounds into `*`), and `{,n}` is accepted as `{0,n}`; a rule defined twice
//! is an error (llama.cpp keeps the last definition silently). See `docs/gbnf.md`.

// Grammar errors carry the source line for their caret display; they are returned once per
// compile, never on a hot path, so their size does not matter.
#![allow(clippy::result_large_err)]

pub mod ast;
mod compiled;
mod complete;
mod dfa_cache;
mod earley;
mod error;
mod gbnf;
mod lexeme;
mod limits;
mod lower;
mod matcher;
mod regex;

use std::sync::Arc;

pub use ast::RuleAst;
pub use compiled::{DotId, Grammar, GrammarBuilder, Lexeme, LexemeId, RuleId, Sym, TokenRefId};
pub use complete::{Completion, Piece};
pub use dfa_cache::{DEFAULT_DFA_CACHE_BYTES, DfaCache, DfaCacheStats};
pub use earley::{Expected, Recognizer, Run, SetIdx};
pub use error::{ErrorKind, GrammarError, Location, RecognizeError, Span, write_positioned};
pub use gbnf::parse as parse_gbnf;
pub use lexeme::{ByteRun, Combine, DEAD, LexemeDfa, Residual, StateId, regex_key};
pub use limits::Limits;
pub use matcher::{MatchOutcome, StreamMatcher, describe_expected, match_bytes};
pub use regex::compile_regex;

/// Options for compiling a grammar.
#[derive(Clone, Debug)]
pub struct CompileOptions {
    /// The start rule. Default `root`.
    pub start: String,
    /// Names the source in error messages (a file name). Default `<grammar>`.
    pub origin: String,
    /// Bounds on the compile and on the recognizer's work. Default `Limits::default()`.
    pub limits: Limits,
    /// Inline only regular rules of at most this many units into their callers' lexemes
    /// (`None`, the default: inline every regular rule). See `lower` (`lower/mod.rs`).
    pub inline_units: Option<usize>,
    /// Lexeme DFAs come from, and go to, this cache (`None`, the default: every DFA the
    /// grammar needs is built). See [`DfaCache`].
    pub dfa_cache: Option<DfaCache>,
}

impl Default for CompileOptions {
    fn default() -> CompileOptions {
        CompileOptions {
            start: "root".into(),
            origin: "<grammar>".into(),
            limits: Limits::default(),
            inline_units: None,
            dfa_cache: None,
        }
    }
}

impl CompileOptions {
    /// Sets the start rule.
    pub fn start(mut self, start: impl Into<String>) -> Self {
        self.start = start.into();
        self
    }

    /// Sets the name of the source in error messages.
    pub fn origin(mut self, origin: impl Into<String>) -> Self {
        self.origin = origin.into();
        self
    }

    /// Sets the limits.
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Sets the DFA cache (`None`: the compile builds every DFA it needs).
    pub fn dfa_cache(mut self, cache: Option<DfaCache>) -> Self {
        self.dfa_cache = cache;
        self
    }
}

/// Compiles GBNF text.
pub fn compile_gbnf(text: &str, opts: &CompileOptions) -> Result<Arc<Grammar>, GrammarError> {
    let rules = gbnf::parse(text, &opts.origin, opts.limits.max_nesting_depth)?;
    let g = lower::lower(&rules, Some(text), opts)?;
    Ok(Arc::new(g))
}

/// Compiles rules built by a program (a front end such as JSON Schema's) without writing
/// and parsing them as text. The result is the grammar of [`ast::print_rules`]'s text, and
/// what that text's parser would refuse is refused ([`ast::check_rules`]). An error is
/// positioned in that text where it can be: the rules are printed and compiled from the
/// text again to place it (errors are rare; the fast path keeps no text).
pub fn compile_rules(
    rules: &[RuleAst],
    opts: &CompileOptions,
) -> Result<Arc<Grammar>, GrammarError> {
    let max_depth = opts.limits.max_nesting_depth;
    let check = ast::check_rules(rules);
    // Printed, each node may gain a group of parentheses: at most twice the depth. Far past
    // the limit the rules are not printed at all (printing recurses).
    if check.depth > max_depth.saturating_mul(4) {
        return Err(GrammarError::unplaced(
            ErrorKind::Limit {
                what: "expression nesting depth".into(),
                value: check.depth as usize,
                limit_name: "max_nesting_depth",
                limit: max_depth as usize,
            },
            &opts.origin,
        ));
    }
    let deep = check.depth.saturating_mul(2) > max_depth;
    let first_error = match check.problem {
        // Names or shapes the text cannot say: printed, they would read as something else.
        Some(kind @ ErrorKind::Unexpected { .. }) => {
            return Err(GrammarError::unplaced(kind, &opts.origin));
        }
        // Bounds the text's parser refuses in place.
        Some(kind) => Some(GrammarError::unplaced(kind, &opts.origin)),
        // Deep enough that the text's groups might pass the limit: the text decides.
        None if deep => None,
        None => match lower::lower(rules, None, opts) {
            Ok(g) => return Ok(Arc::new(g)),
            Err(e) => Some(e),
        },
    };
    let text = ast::print_rules(rules);
    match (compile_gbnf(&text, opts), first_error) {
        (Err(placed), _) => Err(placed),
        // What the text cannot say (it parsed as something else), or a lowering error the
        // text did not reproduce: the error as found.
        (Ok(_), Some(e)) => Err(e),
        (Ok(g), None) => Ok(g),
    }
}

/// Compiles GBNF given as bytes; invalid UTF-8 is a positioned error.
pub fn compile_gbnf_bytes(
    bytes: &[u8],
    opts: &CompileOptions,
) -> Result<Arc<Grammar>, GrammarError> {
    match std::str::from_utf8(bytes) {
        Ok(text) => compile_gbnf(text, opts),
        Err(e) => {
            let good = &bytes[..e.valid_up_to()];
            let text = String::from_utf8_lossy(good);
            let at = e.valid_up_to();
            Err(GrammarError::at(
                ErrorKind::InvalidUtf8,
                Span::new(at, at + 1),
                &opts.origin,
                &text,
            ))
        }
    }
}
