//! # corral-engine
//!
//! Joins a compiled grammar (corral-grammar) with a model's tokens (corral-trie).
//!
//! - [`Constraint`]: a grammar bound to a [`corral_trie::TokenSpace`], with the token sets of
//!   its lexeme states (`tokens.rs`) from a [`MaskCache`] that every constraint on the same
//!   tokenizer can share.
//! - [`RobustConstrainedAdapter`]: per decoding step, `compute_mask` then `step_with_token`;
//!   also `rollback`, `fork`, `forced_bytes` for jump-forward, and `state_info`.
//! - [`generate()`]: the generation loop over any [`CausalLm`] (implemented in
//!   corral-models), with [`Sampler`] and streaming text deltas; [`Decoder`] is the same
//!   loop, stepped by a caller that runs the model (the server's scheduler).
//!
//! The modules are private: everything public is re-exported here, except [`replay`]
//! (replaying a document's tokens and checking masks against brute force, for the CLI's
//! `replay` command, the tests and the benches).
//!
//! ```
//! use corral_engine::{Constraint, RobustConstrainedAdapter};
//! use corral_grammar::{CompileOptions, compile_gbnf};
//! use corral_trie::{TokenId, TokenSpace, Vocabulary};
//! use std::sync::Arc;
//!
//! // A tiny vocabulary: 0 "{", 1 "}", 2 "\"a\"", 3 ":", 4 "1", 5 "\"", 6 "a", 7 EOS.
//! let words: [&[u8]; 7] = [b"{", b"}", b"\"a\"", b":", b"1", b"\"", b"a"];
//! let vocab = Vocabulary::from_parts(
//!     words.iter().enumerate().map(|(i, w)| (TokenId(i as u32), w.to_vec())),
//!     [(TokenId(7), "</s>".to_string())],
//! );
//! let space = Arc::new(TokenSpace::new(vocab, Some(16), vec![TokenId(7)]));
//! let g = compile_gbnf(r#"root ::= "{" "\"a\"" ":" [0-9]+ "}""#, &CompileOptions::default())?;
//! let mut a = RobustConstrainedAdapter::new(Constraint::new(g, space));
//! assert_eq!(a.allowed_token_ids()?, vec![TokenId(0)]);
//! a.step_with_token(TokenId(0))?;
//! // `"a"` as one token, or `"` then `a`: every tokenization is allowed.
//! assert_eq!(a.allowed_token_ids()?, vec![TokenId(2), TokenId(5)]);
//! a.step_with_tokens(&[5, 6, 5, 3, 4, 1].map(TokenId))?;
//! assert_eq!(a.allowed_token_ids()?, vec![TokenId(7)]); // only EOS
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod adapter;
mod batch;
mod cache;
mod cars;
mod classes;
mod constraint;
mod constraints;
mod decoder;
mod generate;
mod logprobs;
mod model;
pub mod replay;
mod sampling;
mod scope;
mod smc;
mod tokens;
mod utf8;

pub use adapter::{AdapterError, Completion, PartialLexeme, RobustConstrainedAdapter, StateInfo};
pub use batch::{MaskSlot, PARALLEL_BATCH, compute_masks};
pub use cache::{MaskBase, MaskCache, MaskCacheLimits, MaskCacheStats};
pub use cars::{Cars, CarsDraw, CarsOptions, CarsStats};
pub use constraint::Constraint;
pub use constraints::{
    CacheLimits, CacheStats, ConstraintCache, DEFAULT_CACHE_BYTES, DEFAULT_CONSTRAINTS,
};
pub use generate::{
    Decoder, Emit, FinishReason, GenerateError, GenerateOptions, Generation, GenerationStats, Next,
    Utf8Stream, generate, generate_emitting,
};
pub use logprobs::{TokenLogprob, log_sum_exp};
pub use model::{
    BackendError, BatchItem, CausalLm, CpuLogits, Logits, ModelError, Sequence,
    apply_mask_in_place, check_tails,
};
pub use sampling::{
    Rng, Sampler, SamplerMethod, SamplingError, SamplingOptions, SmcOptions, argmax,
};
pub use scope::{Forced, Scope};
pub use smc::{Particles, SmcStats, WeightedOutput};

/// Helpers of the unit tests.
#[cfg(test)]
pub(crate) mod testing {
    use corral_grammar::LexemeDfa;

    /// The lexeme DFA of regex `re`.
    pub(crate) fn dfa(re: &str) -> LexemeDfa {
        let hir = regex_syntax::ParserBuilder::new()
            .build()
            .parse(re)
            .unwrap();
        LexemeDfa::build(&hir, 1 << 24).unwrap()
    }
}
