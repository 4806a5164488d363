//! # corral
//!
//! A grammar-constrained decoding engine. This crate re-exports the public API of the layer
//! crates and holds the `corral` command-line tool.
//!
//! - [`grammar`]: GBNF front end, lexemes, the Earley recognizer (`corral match`).
//! - [`trie`], [`engine`], [`models`]: token trie, masks and generation (in progress).

pub use corral_engine as engine;
pub use corral_grammar as grammar;
pub use corral_models as models;
pub use corral_trie as trie;

pub use corral_grammar::{
    CompileOptions, Grammar, GrammarError, Limits, MatchOutcome, Recognizer, compile_gbnf,
    match_bytes,
};
