//! The generation loop: a model, an optional constraint, a prompt.
//!
//! A [`Decoder`] holds everything of one generation but the model: the phase (free text,
//! or constrained by an adapter), the sampler, the budget, the text streamed so far. It is
//! driven one step at a time, so a server can drive many of them around one batched
//! forward pass; [`generate`] drives one with one model. Per step:
//! 1. [`Decoder::prepare_mask`]: the constraint's mask for the next token (on another thread
//!    while the forward pass runs, if `overlap_mask`);
//! 2. [`Decoder::advance`] with the forward pass's logits: the mask is applied where the
//!    logits live, the sampler picks a token, the adapter steps, the text delta is streamed
//!    (UTF-8 split across tokens is held back in a window of at most 3 bytes, never
//!    re-decoding the output); jump-forward: while the grammar admits exactly one
//!    continuation, its tokens are appended without sampling;
//! 3. the model runs on the tokens `advance` returned, all in one forward pass.
//!
//! It stops when the grammar is complete and admits nothing more (`grammar_complete`), when
//! the model emits an end-of-sequence or stop token (`stop`, allowed by the mask only where
//! the grammar accepts), or at `max_tokens` (`length`).
//!
//! Under a grammar, the output is complete whenever `max_tokens` allows: before each token
//! is kept, the loop checks that the shortest completion of the grammar from after it still
//! fits in what is left of the budget; if not, the token is rolled back and the shortest
//! completion is appended instead (`budget_completed`). If no completion fits in
//! `max_tokens` at all, generation refuses to start ([`GenerateError::BudgetTooSmall`]).

use crate::adapter::AdapterError;
use crate::constraint::Constraint;
pub use crate::decoder::{Decoder, Emit, Next};
use crate::logprobs::TokenLogprob;
use crate::model::{CausalLm, ModelError};
use crate::sampling::{SamplerMethod, SamplingError, SamplingOptions};
use crate::scope::Scope;
use crate::smc::{SmcStats, WeightedOutput};
pub use crate::utf8::Utf8Stream;
use corral_trie::{TokenId, TokenSpace};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How to generate.
#[derive(Clone, Debug)]
pub struct GenerateOptions {
    /// Most tokens of output. The prompt plus this many must fit in the model's context,
    /// or generation refuses to start. Default 256.
    pub max_tokens: usize,
    /// How each token is drawn. Default [`SamplingOptions::default`].
    pub sampling: SamplingOptions,
    /// Append the tokens of forced continuations without sampling them. Default on.
    pub jump_forward: bool,
    /// Compute the next mask on another thread while the forward pass runs. Default off on
    /// CPU, where the forward pass already uses every core (measured in
    /// docs/performance.md).
    pub overlap_mask: bool,
    /// Never sample end-of-sequence or stop tokens (for benchmarks of a fixed length).
    pub ignore_eos: bool,
    /// Under a grammar, end with a complete output when `max_tokens` runs out (see the
    /// module docs). Default on.
    pub complete_within_budget: bool,
    /// Where the grammar applies: the whole output (default), the answer after reasoning,
    /// or each tool call (see [`Scope`]).
    pub scope: Scope,
    /// Record each token's log-probability, with this many of the most likely tokens'
    /// ([`crate::TokenLogprob`]); `None` (the default) records nothing. Every token then comes
    /// from a distribution: jump-forward is off, and a completion at the end of the budget
    /// is appended one token per step, each read off that step's masked distribution.
    pub logprobs: Option<usize>,
}

impl Default for GenerateOptions {
    fn default() -> GenerateOptions {
        GenerateOptions {
            max_tokens: 256,
            sampling: SamplingOptions::default(),
            jump_forward: true,
            overlap_mask: false,
            ignore_eos: false,
            complete_within_budget: true,
            scope: Scope::Whole,
            logprobs: None,
        }
    }
}

/// Why generation stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// The grammar accepts and admits nothing more.
    GrammarComplete,
    /// The model emitted an end-of-sequence or stop token.
    Stop,
    /// `max_tokens` (or the model's context) ran out.
    Length,
    /// The budget was about to run out, so the shortest completion of the grammar was
    /// appended: the output is complete, but shorter than the model might have made it.
    BudgetCompleted,
}

impl FinishReason {
    /// The reason in snake case, as the CLI reports it: `grammar_complete`, `stop`,
    /// `length` or `budget_completed`.
    pub fn as_str(&self) -> &'static str {
        match self {
            FinishReason::GrammarComplete => "grammar_complete",
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::BudgetCompleted => "budget_completed",
        }
    }
}

/// Counts and timings of one generation.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GenerationStats {
    /// Tokens of the prompt.
    pub prompt_tokens: usize,
    /// Tokens of the output ([`Generation::tokens`]).
    pub generated_tokens: usize,
    /// Forward passes, the prompt's included.
    pub forward_passes: usize,
    /// Tokens appended by jump-forward (each saved a forward pass).
    pub forced_tokens: usize,
    /// Prompt tokens per second of the prompt's forward pass (set by [`generate`] only).
    pub prompt_tok_s: f64,
    /// Output tokens per second after the prompt's forward pass (set by [`generate`] only).
    pub decode_tok_s: f64,
    /// Time in the forward passes after the prompt's. Sampling is not in it; under
    /// `overlap_mask`, each pass counts until the mask computed beside it is done too.
    pub decode_forward_ms: f64,
    /// Mean microseconds to compute one mask (0 without masks).
    pub mask_us_mean: f64,
    /// 99th percentile of the microseconds to compute one mask.
    pub mask_us_p99: f64,
    /// Masks computed.
    pub masks: usize,
    /// Under the SMC sampler: its particles, resamplings and effective sample size.
    pub smc: Option<SmcStats>,
}

/// The result of a generation.
#[derive(Clone, Debug)]
pub struct Generation {
    /// The output text: control tokens the grammar names appear as their names; bytes of
    /// an incomplete character at the end as U+FFFD.
    pub text: String,
    /// The output's tokens, without the prompt and without an end token that stopped it.
    pub tokens: Vec<TokenId>,
    /// Why generation stopped.
    pub finish_reason: FinishReason,
    /// Counts and timings.
    pub stats: GenerationStats,
    /// With [`GenerateOptions::logprobs`]: the tokens' log-probabilities not taken with
    /// [`Decoder::take_logprobs`] (all of them, when none were).
    pub logprobs: Vec<TokenLogprob>,
    /// Under the SMC sampler: every particle with its weight (the output is one of them,
    /// drawn by weight); empty otherwise.
    pub particles: Vec<WeightedOutput>,
}

/// Why generation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GenerateError {
    /// The model failed, or the prompt and `max_tokens` do not fit in its context.
    #[error(transparent)]
    Model(#[from] ModelError),
    /// The constraint refused a token or failed (a recognizer limit, no token can continue).
    #[error("constraint: {0}")]
    Constraint(#[from] AdapterError),
    /// The prompt has no tokens.
    #[error("the prompt is empty")]
    EmptyPrompt,
    /// A sampling setting is out of its range ([`SamplingOptions::validate`]).
    #[error("sampling: {0}")]
    Sampling(#[from] SamplingError),
    /// Every logit was minus infinity after masking: the sampler had no token to draw.
    #[error("every token is masked: nothing to sample")]
    NothingToSample,
    /// `needed`: the shortest output's tokens, or with `at_least`, for one far longer than
    /// the budget, a lower bound (its bytes over the longest token's).
    #[error(
        "no output of the grammar fits in {max_tokens} tokens: the shortest one takes {}{needed}",
        if *at_least { "at least " } else { "" }
    )]
    BudgetTooSmall {
        /// Tokens of the shortest output, or a lower bound on them with `at_least`.
        needed: usize,
        /// The budget asked for ([`GenerateOptions::max_tokens`]).
        max_tokens: usize,
        /// Whether `needed` is only a lower bound.
        at_least: bool,
    },
    /// The CARS sampler's trie reached a limit of [`crate::CarsOptions`] (`max_prefixes`,
    /// `max_bytes`) before the draw found an output.
    #[error("the cars sampler's trie reached its limit of {limit} {what} before the draw ended")]
    CarsLimit {
        /// What ran out: `prefixes` or `bytes`.
        what: &'static str,
        /// The limit set.
        limit: usize,
    },
    /// Under a budget, the grammar has no complete output made of this vocabulary's tokens
    /// (a token reference names no token of it, or no finite output exists), so an output
    /// could not be made complete.
    #[error(
        "the grammar has no complete output in this model's tokens (a token reference names no token of the vocabulary, or no output ends)"
    )]
    NoCompletion,
}

/// Generates after `prompt` (token ids) with one model, constrained by `constraint` if
/// given (where `opts.scope` says), calling `on_delta` with each piece of text as it
/// decodes.
pub fn generate(
    lm: &mut dyn CausalLm,
    space: &Arc<TokenSpace>,
    constraint: Option<&Arc<Constraint>>,
    prompt: &[TokenId],
    opts: &GenerateOptions,
    on_delta: &mut dyn FnMut(&str),
) -> Result<Generation, GenerateError> {
    let mut out = |e: Emit<'_>| e.as_text().map_or((), &mut *on_delta);
    generate_emitting(lm, space, constraint, prompt, opts, &mut out)
}

/// [`generate`], with the output as [`Emit`] pieces: text, and control tokens by id.
pub fn generate_emitting(
    lm: &mut dyn CausalLm,
    space: &Arc<TokenSpace>,
    constraint: Option<&Arc<Constraint>>,
    prompt: &[TokenId],
    opts: &GenerateOptions,
    on_delta: &mut dyn FnMut(Emit<'_>),
) -> Result<Generation, GenerateError> {
    if let SamplerMethod::Smc(smc) = opts.sampling.method {
        return crate::smc::generate_smc(lm, space, constraint, prompt, opts, smc, on_delta);
    }
    let mut d = Decoder::for_model(lm, space, constraint, prompt, opts)?;
    let t0 = Instant::now();
    let mut logits = lm.forward(prompt, 0)?;
    let prefill = t0.elapsed();
    let decode_start = Instant::now();
    let mut forward_time = Duration::ZERO;
    let mut pos = prompt.len();
    let finish = loop {
        let feed = match d.advance_emitting(&*logits, on_delta)? {
            Next::Done(r) => break r,
            Next::Feed(f) => f,
        };
        let t = Instant::now();
        logits = if opts.overlap_mask {
            // The next mask depends only on the tokens so far: compute it while the model
            // runs.
            let (fwd, prepared) = std::thread::scope(|s| {
                let h = s.spawn(|| d.prepare_mask());
                let fwd = lm.forward(&feed, pos);
                (fwd, h.join().expect("mask thread"))
            });
            prepared?;
            fwd?
        } else {
            lm.forward(&feed, pos)?
        };
        forward_time += t.elapsed();
        pos += feed.len();
    };
    let decode = decode_start.elapsed();
    let mut g = d.finish_emitting(finish, on_delta);
    g.stats.prompt_tok_s = prompt.len() as f64 / prefill.as_secs_f64().max(1e-9);
    g.stats.decode_tok_s = g.tokens.len() as f64 / decode.as_secs_f64().max(1e-9);
    g.stats.decode_forward_ms = forward_time.as_secs_f64() * 1e3;
    Ok(g)
}
