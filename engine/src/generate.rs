//! The generation loop: a model, an optional constraint, a prompt.
//!
//! A [`Decoder`] holds everything of one generation but the model: the phase (free text,
//! or constrained by an adapter), the sampler, the budget, the text streamed so far. It is
//! driven one step at a time, so a server can drive many of them around one batched
//! forward pass; [`generate`] drives one with one model. Per step:
//! 1. [`Decoder::prepare`]: the constraint's mask for the next token (on another thread
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

use crate::adapter::{AdapterError, Completion, Constraint, RobustConstrainedAdapter};
use crate::logprobs::{TokenLogprob, token_logprob};
use crate::model::{CausalLm, Logits, ModelError};
use crate::replay::stats;
use crate::sampling::{Sampler, SamplingError, SamplingOptions};
use crate::scope::{Scope, TriggerWatch};
pub use crate::utf8::Utf8Stream;
use corral_trie::{FixedBitSet, TokenId, TokenSpace};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How to generate.
#[derive(Clone, Debug)]
pub struct GenerateOptions {
    pub max_tokens: usize,
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
    /// or each tool call (see [`crate::scope`]).
    pub scope: Scope,
    /// Record each token's log-probability, with this many of the most likely tokens'
    /// ([`crate::logprobs`]); `None` (the default) records nothing. Every token then comes
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
    pub prompt_tokens: usize,
    pub generated_tokens: usize,
    /// Forward passes, the prompt's included.
    pub forward_passes: usize,
    /// Tokens appended by jump-forward (each saved a forward pass).
    pub forced_tokens: usize,
    pub prompt_tok_s: f64,
    pub decode_tok_s: f64,
    /// Time in forward passes after the prompt, and in sampling.
    pub decode_forward_ms: f64,
    pub mask_us_mean: f64,
    pub mask_us_p99: f64,
    pub masks: usize,
}

/// The result of a generation.
#[derive(Clone, Debug)]
pub struct Generation {
    pub text: String,
    pub tokens: Vec<TokenId>,
    pub finish_reason: FinishReason,
    pub stats: GenerationStats,
    /// With [`GenerateOptions::logprobs`]: the tokens' log-probabilities not taken with
    /// [`Decoder::take_logprobs`] (all of them, when none were).
    pub logprobs: Vec<TokenLogprob>,
}

/// Why generation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GenerateError {
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error("constraint: {0}")]
    Constraint(#[from] AdapterError),
    #[error("the prompt is empty")]
    EmptyPrompt,
    #[error("sampling: {0}")]
    Sampling(#[from] SamplingError),
    #[error("every token is masked: nothing to sample")]
    NothingToSample,
    /// `needed`: the shortest output's tokens, or with `at_least`, for one far longer than
    /// the budget, a lower bound (its bytes over the longest token's).
    #[error(
        "no output of the grammar fits in {max_tokens} tokens: the shortest one takes {}{needed}",
        if *at_least { "at least " } else { "" }
    )]
    BudgetTooSmall {
        needed: usize,
        max_tokens: usize,
        at_least: bool,
    },
    /// Under a budget, the grammar has no complete output made of this vocabulary's tokens
    /// (a token reference names no token of it, or no finite output exists), so an output
    /// could not be made complete.
    #[error(
        "the grammar has no complete output in this model's tokens (a token reference names no token of the vocabulary, or no output ends)"
    )]
    NoCompletion,
}

/// Where the decoder is: free text (the grammar not applying yet, or between tool calls),
/// or constrained by an adapter.
#[derive(Clone, Debug)]
enum Phase {
    Free,
    Constrained(Box<RobustConstrainedAdapter>),
}

/// What to do after [`Decoder::advance`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Next {
    /// Run the model on these tokens (at the positions after what it has seen) and call
    /// `advance` again with its logits.
    Feed(Vec<TokenId>),
    /// Generation ended.
    Done(FinishReason),
}

/// One generation's state apart from the model. See the module docs.
pub struct Decoder {
    space: Arc<TokenSpace>,
    constraint: Option<Arc<Constraint>>,
    opts: GenerateOptions,
    phase: Phase,
    sampler: Sampler,
    /// The mask for the next sample, and whether it is computed already (`prepare`).
    mask: FixedBitSet,
    mask_ready: bool,
    mask_times: Vec<f64>,
    stream: Utf8Stream,
    text: String,
    tokens: Vec<TokenId>,
    /// Prompt and output: what the repetition penalty looks at.
    history: Vec<TokenId>,
    /// Under a grammar, the output completes within `max_tokens` (see the module docs).
    budgeted: bool,
    max_tokens: usize,
    /// Positions the model has seen, and the most it supports.
    pos: usize,
    max_pos: usize,
    /// Free text before the grammar applies: the trigger being watched for, and the free
    /// tokens so far (for a reasoning budget).
    watch: TriggerWatch,
    free_tokens: usize,
    /// Without a constraint: the trigger (the end of reasoning) was seen or forced, so the
    /// reasoning budget no longer applies.
    triggered: bool,
    /// Log-probabilities recorded and not taken yet ([`GenerateOptions::logprobs`]).
    logprobs: Vec<TokenLogprob>,
    /// The rest of a budget's completion, appended one token per step (last first), when
    /// log-probabilities are recorded.
    completing: Vec<TokenId>,
    stats: GenerationStats,
}

/// What the next token is drawn under ([`Decoder::mask_for_sampling`]).
enum Sampling {
    /// The grammar's mask.
    Masked,
    /// No mask: free text.
    Free,
    /// Nothing: the output ends.
    Done(FinishReason),
}

/// What stepping the constraint with a sampled token did.
enum Stepped {
    /// The token is kept.
    Kept,
    /// It did not leave room to complete: the completion was appended instead, whole.
    Completed,
    /// It did not leave room to complete: `token`, the completion's first (stepped
    /// already; `named`: taken as a token reference), takes its place, and the rest follows
    /// one per step.
    Replaced { token: TokenId, named: bool },
}

impl Decoder {
    /// A decoder for the output after `prompt` (which the caller feeds to the model first),
    /// constrained by `constraint` where `opts.scope` says. `max_positions` is the model's
    /// context. Refuses an empty prompt, one that fills the context, a `max_tokens` the
    /// context has no room for after the prompt (said up front, rather than output cut
    /// short), bad sampling settings, and a budget no output of the grammar fits in.
    pub fn new(
        space: Arc<TokenSpace>,
        constraint: Option<Arc<Constraint>>,
        prompt: &[TokenId],
        max_positions: usize,
        opts: &GenerateOptions,
    ) -> Result<Decoder, GenerateError> {
        if prompt.is_empty() {
            return Err(GenerateError::EmptyPrompt);
        }
        opts.sampling.validate()?;
        if prompt.len() + 1 >= max_positions {
            return Err(ModelError::Context {
                what: "the prompt",
                needed: prompt.len() + 1,
                max: max_positions,
            }
            .into());
        }
        if opts.max_tokens >= max_positions - prompt.len() {
            return Err(ModelError::Context {
                what: "the prompt and max_tokens",
                needed: prompt
                    .len()
                    .saturating_add(opts.max_tokens)
                    .saturating_add(1),
                max: max_positions,
            }
            .into());
        }
        let width = space.width();
        let mut d = Decoder {
            budgeted: opts.complete_within_budget && constraint.is_some(),
            max_tokens: opts.max_tokens,
            phase: Phase::Free,
            sampler: Sampler::new(opts.sampling.clone()),
            mask: FixedBitSet::with_capacity(width),
            mask_ready: false,
            mask_times: Vec::new(),
            stream: Utf8Stream::default(),
            text: String::new(),
            tokens: Vec::new(),
            history: prompt.to_vec(),
            pos: prompt.len(),
            max_pos: max_positions,
            watch: TriggerWatch::default(),
            free_tokens: 0,
            triggered: false,
            logprobs: Vec::new(),
            completing: Vec::new(),
            stats: GenerationStats {
                prompt_tokens: prompt.len(),
                forward_passes: 1,
                ..GenerationStats::default()
            },
            space,
            constraint,
            opts: GenerateOptions {
                // Every token from a distribution when log-probabilities are asked for.
                jump_forward: opts.jump_forward && opts.logprobs.is_none(),
                ..opts.clone()
            },
        };
        if d.opts.scope == Scope::Whole {
            d.phase = d.fresh_phase();
        }
        if d.budgeted
            && let Phase::Constrained(a) = &mut d.phase
        {
            let (needed, at_least) = match a.completion_tokens_within(d.max_tokens)? {
                Completion::Tokens(t) => (t.len(), false),
                Completion::TooLong { at_least } => (at_least, true),
                Completion::Impossible => return Err(GenerateError::NoCompletion),
            };
            if needed > d.max_tokens {
                return Err(GenerateError::BudgetTooSmall {
                    needed,
                    max_tokens: d.max_tokens,
                    at_least,
                });
            }
        }
        Ok(d)
    }

    /// Grows the masks to the model's logit width (when it exceeds the vocabulary's).
    pub fn with_logit_width(mut self, width: usize) -> Decoder {
        if self.mask.len() < width {
            self.mask.grow(width);
        }
        self
    }

    fn fresh_phase(&self) -> Phase {
        match &self.constraint {
            Some(c) => Phase::Constrained(Box::new(RobustConstrainedAdapter::new(c.clone()))),
            None => Phase::Free,
        }
    }

    /// Whether a grammar constrains (some of) the output.
    pub fn is_constrained(&self) -> bool {
        self.constraint.is_some()
    }

    /// Masks computed so far: how many, and their microseconds in all.
    pub fn mask_work(&self) -> (usize, f64) {
        (self.mask_times.len(), self.mask_times.iter().sum())
    }

    /// Tokens generated so far.
    pub fn tokens(&self) -> &[TokenId] {
        &self.tokens
    }

    /// The text so far.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The log-probabilities recorded since the last call (with
    /// [`GenerateOptions::logprobs`]), one per token, in order.
    pub fn take_logprobs(&mut self) -> Vec<TokenLogprob> {
        std::mem::take(&mut self.logprobs)
    }

    /// Computes the mask for the next token now (if the grammar applies), so that
    /// [`Decoder::advance`] need not: call it while the model runs.
    pub fn prepare(&mut self) -> Result<(), GenerateError> {
        if let Phase::Constrained(a) = &mut self.phase
            && !self.mask_ready
        {
            let t = Instant::now();
            a.compute_mask(&mut self.mask)?;
            self.mask_times.push(t.elapsed().as_secs_f64() * 1e6);
            self.mask_ready = true;
        }
        Ok(())
    }

    /// One step from the logits of the last position fed: a token (and what jump-forward
    /// appends after it), or the end. `on_delta` gets the text as it completes.
    pub fn advance(
        &mut self,
        logits: &dyn Logits,
        on_delta: &mut dyn FnMut(&str),
    ) -> Result<Next, GenerateError> {
        if self.tokens.len() >= self.max_tokens {
            return Ok(Next::Done(FinishReason::Length));
        }
        if let Some(forced) = self.reasoning_budget_spent() {
            return Ok(self.force_trigger(forced, on_delta));
        }
        let masked = match self.mask_for_sampling()? {
            Sampling::Masked => true,
            Sampling::Free => false,
            Sampling::Done(done) => return Ok(Next::Done(done)),
        };
        let mut v = logits.to_masked_vec(masked.then_some(&self.mask))?;
        if self.opts.ignore_eos {
            for &e in self.space.eos() {
                if let Some(l) = v.get_mut(e.index()) {
                    *l = f32::NEG_INFINITY;
                }
            }
        }
        self.sampler.adjust(&mut v, &self.history, &self.tokens);
        if let Some(t) = self.completing.pop() {
            return self.append_completion(&v, t, on_delta);
        }
        let tok = self.sample(&mut v)?;
        // An end token ends the output, unless the grammar names it here by reference.
        let named = masked && self.names_token(tok);
        if self.space.eos().contains(&tok) && !named {
            // An end before the trigger, under a grammar that applies after it (the model
            // stopped inside its reasoning): the answer is still owed, so the trigger is
            // appended instead and the grammar applies from there.
            if let Some(trigger) = self.trigger_still_owed() {
                return Ok(self.force_trigger(trigger, on_delta));
            }
            self.record_logprob(&v, tok);
            return Ok(Next::Done(FinishReason::Stop));
        }
        let stepped = match masked {
            true => self.step_constraint(tok, on_delta)?,
            false => Stepped::Kept,
        };
        let (tok, named) = match stepped {
            Stepped::Kept => (tok, named),
            Stepped::Completed => return Ok(Next::Done(FinishReason::BudgetCompleted)),
            Stepped::Replaced { token, named } => (token, named),
        };
        self.record_logprob(&v, tok);
        if matches!(stepped, Stepped::Replaced { .. }) {
            self.emit_forced(tok, named, on_delta);
            if self.completing.is_empty() {
                return Ok(Next::Done(FinishReason::BudgetCompleted));
            }
        } else {
            self.emit_as(tok, named, on_delta);
            self.push(tok);
        }
        let mut feed = vec![tok];
        if self.opts.jump_forward {
            self.jump_forward(&mut feed, on_delta)?;
        }
        Ok(self.feed(feed))
    }

    /// The next token of a budget's completion, its log-probability read off this step's
    /// distribution `v`.
    fn append_completion(
        &mut self,
        v: &[f32],
        tok: TokenId,
        on_delta: &mut dyn FnMut(&str),
    ) -> Result<Next, GenerateError> {
        self.record_logprob(v, tok);
        self.append(tok, on_delta)?;
        if self.completing.is_empty() {
            return Ok(Next::Done(FinishReason::BudgetCompleted));
        }
        Ok(self.feed(vec![tok]))
    }

    /// Records `tok`'s log-probability under `v`, if asked for.
    fn record_logprob(&mut self, v: &[f32], tok: TokenId) {
        if let Some(top) = self.opts.logprobs {
            self.logprobs.push(token_logprob(v, tok, top));
        }
    }

    /// The end: the text held back, the statistics.
    pub fn finish(
        mut self,
        finish_reason: FinishReason,
        on_delta: &mut dyn FnMut(&str),
    ) -> Generation {
        let rest = self.stream.finish();
        if !rest.is_empty() {
            on_delta(&rest);
            self.text.push_str(&rest);
        }
        let mut st = self.stats;
        st.generated_tokens = self.tokens.len();
        let logprobs = std::mem::take(&mut self.logprobs);
        let times = stats(&self.mask_times);
        st.mask_us_mean = times.mean;
        st.mask_us_p99 = times.p99;
        st.masks = self.mask_times.len();
        Generation {
            text: self.text,
            tokens: self.tokens,
            finish_reason,
            stats: st,
            logprobs,
        }
    }

    /// Tokens to feed next, unless the budget or the context ends here (an output the
    /// grammar completed right at the end ends complete, not cut).
    fn feed(&mut self, feed: Vec<TokenId>) -> Next {
        if self.tokens.len() >= self.max_tokens || self.pos + feed.len() >= self.max_pos {
            if let Phase::Constrained(a) = &self.phase
                && a.is_complete()
                && self.opts.scope == Scope::Whole
            {
                return Next::Done(FinishReason::GrammarComplete);
            }
            return Next::Done(FinishReason::Length);
        }
        self.pos += feed.len();
        self.stats.forward_passes += 1;
        Next::Feed(feed)
    }

    fn push(&mut self, t: TokenId) {
        self.tokens.push(t);
        self.history.push(t);
    }

    /// Streams a token's text; a token the grammar named by reference is part of the
    /// grammar's output, so a special one streams as its name.
    fn emit_as(&mut self, t: TokenId, named: bool, on_delta: &mut dyn FnMut(&str)) {
        let text = match self.space.vocab().token_bytes(t) {
            Some(b) => b.to_vec(),
            None if named => token_text(&self.space, t),
            None => return,
        };
        let delta = self.stream.push(&text);
        if !delta.is_empty() {
            on_delta(&delta);
            self.text.push_str(&delta);
        }
    }

    /// Whether the grammar takes `tok` next as a token it names by reference.
    fn names_token(&self, tok: TokenId) -> bool {
        match &self.phase {
            Phase::Constrained(a) => a.expects_reference(tok),
            Phase::Free => false,
        }
    }

    /// The trigger's tokens, if a reasoning budget is used up in free text.
    fn reasoning_budget_spent(&self) -> Option<Vec<TokenId>> {
        let Scope::After {
            trigger,
            budget: Some(b),
        } = &self.opts.scope
        else {
            return None;
        };
        if !matches!(self.phase, Phase::Free) || self.triggered || self.free_tokens < *b {
            return None;
        }
        Some(self.trigger_tokens(trigger))
    }

    /// The trigger's tokens, if a grammar is to apply after a trigger not seen yet.
    fn trigger_still_owed(&self) -> Option<Vec<TokenId>> {
        let Scope::After { trigger, .. } = &self.opts.scope else {
            return None;
        };
        if !matches!(self.phase, Phase::Free) || self.constraint.is_none() {
            return None;
        }
        Some(self.trigger_tokens(trigger))
    }

    fn trigger_tokens(&self, trigger: &str) -> Vec<TokenId> {
        match self.space.vocab().token_by_text(trigger) {
            Some(id) => vec![id],
            None => self.space.trie().greedy_tokens(trigger.as_bytes()).0,
        }
    }

    /// Appends the trigger without sampling; the grammar applies from there.
    fn force_trigger(&mut self, forced: Vec<TokenId>, on_delta: &mut dyn FnMut(&str)) -> Next {
        if self.tokens.len() + forced.len() > self.max_tokens {
            return Next::Done(FinishReason::Length);
        }
        for &f in &forced {
            self.emit_forced(f, false, on_delta);
        }
        self.phase = self.fresh_phase();
        self.triggered = self.constraint.is_none();
        self.mask_ready = false;
        self.watch.clear();
        self.free_tokens = 0;
        if self.pos + forced.len() >= self.max_pos {
            return Next::Done(FinishReason::Length);
        }
        self.pos += forced.len();
        self.stats.forward_passes += 1;
        Next::Feed(forced)
    }

    /// What the next sample is drawn under: the mask (ready in `self.mask`), nothing (free
    /// text), or nothing at all because the grammar is complete and admits nothing more
    /// (for tool calls, free text comes again instead).
    fn mask_for_sampling(&mut self) -> Result<Sampling, GenerateError> {
        self.prepare()?;
        self.mask_ready = false;
        let Phase::Constrained(a) = &mut self.phase else {
            return Ok(Sampling::Free);
        };
        let eos = self.space.eos();
        if a.is_accepting() && self.mask.ones().all(|t| eos.contains(&TokenId(t as u32))) {
            if !matches!(self.opts.scope, Scope::Each { .. }) {
                return Ok(Sampling::Done(FinishReason::GrammarComplete));
            }
            self.phase = Phase::Free;
            self.watch.clear();
            return Ok(Sampling::Free);
        }
        // Between a trigger and the grammar's first byte, whitespace tokens are free.
        if a.output().is_empty() && self.opts.scope != Scope::Whole {
            for &t in self.space.whitespace_tokens() {
                self.mask.insert(t.index());
            }
        }
        Ok(Sampling::Masked)
    }

    /// Draws from `v` (masked and adjusted logits). In free text, a token that completes
    /// the trigger starts the grammar on what it brings after the trigger (whitespace
    /// first is free); a token whose rest the grammar refuses is not taken (its logit
    /// becomes minus infinity in `v`, and the draw is made again).
    fn sample(&mut self, v: &mut [f32]) -> Result<TokenId, GenerateError> {
        loop {
            let tok = self.sampler.draw(v).ok_or(GenerateError::NothingToSample)?;
            let watching = matches!(self.phase, Phase::Free) && !self.triggered;
            let Some(trigger) = self.opts.scope.trigger().filter(|_| watching) else {
                return Ok(tok);
            };
            let before = self.watch.clone();
            let Some(rest) = self.watch.push(trigger, &token_text(&self.space, tok)) else {
                self.free_tokens += 1;
                return Ok(tok);
            };
            if self.constraint.is_none() {
                // Nothing to constrain after the trigger: free text goes on.
                self.triggered = true;
                return Ok(tok);
            }
            let Phase::Constrained(mut a) = self.fresh_phase() else {
                unreachable!("a constraint gives a constrained phase");
            };
            let taken = match rest.iter().position(|b| !b.is_ascii_whitespace()) {
                Some(i) => a.push_bytes(&rest[i..])?,
                None => true,
            };
            if taken {
                self.phase = Phase::Constrained(a);
                self.free_tokens = 0;
                return Ok(tok);
            }
            self.watch = before;
            v[tok.index()] = f32::NEG_INFINITY;
        }
    }

    /// Steps the adapter with `tok`; under a budget, if no completion fits after it, rolls
    /// it back and appends the shortest completion instead: whole ([`Stepped::Completed`]:
    /// the output ends), or with log-probabilities recorded, its first token in `tok`'s
    /// place and the rest one per step ([`Stepped::Replaced`]).
    fn step_constraint(
        &mut self,
        tok: TokenId,
        on_delta: &mut dyn FnMut(&str),
    ) -> Result<Stepped, GenerateError> {
        let Phase::Constrained(a) = &mut self.phase else {
            return Ok(Stepped::Kept);
        };
        if a.output().is_empty()
            && self.opts.scope != Scope::Whole
            && self.space.whitespace_tokens().binary_search(&tok).is_ok()
        {
            return Ok(Stepped::Kept);
        }
        a.step_with_token(tok)?;
        if !self.budgeted {
            return Ok(Stepped::Kept);
        }
        let left = self.max_tokens - self.tokens.len() - 1;
        if fits(a.completion_tokens_within(left)?, left) {
            return Ok(Stepped::Kept);
        }
        a.rollback(1)?;
        // The completion from before `tok` fit (checked at the step before, or when the
        // decoder was made); `None` here means the recognizer's search gave up.
        let mut completion = a.completion_tokens()?.ok_or(GenerateError::NoCompletion)?;
        if self.opts.logprobs.is_some() && !completion.is_empty() {
            completion.reverse();
            let first = completion.pop().expect("not empty");
            let named = self.names_token(first);
            if let Phase::Constrained(a) = &mut self.phase {
                a.step_with_token(first)?;
            }
            self.completing = completion;
            return Ok(Stepped::Replaced {
                token: first,
                named,
            });
        }
        for &t in &completion {
            self.append(t, on_delta)?;
        }
        Ok(Stepped::Completed)
    }

    /// Steps the constraint with `t`, a token the engine chose (a completion's), and
    /// streams it.
    fn append(&mut self, t: TokenId, on_delta: &mut dyn FnMut(&str)) -> Result<(), GenerateError> {
        let named = self.names_token(t);
        if let Phase::Constrained(a) = &mut self.phase {
            a.step_with_token(t)?;
        }
        self.emit_forced(t, named, on_delta);
        Ok(())
    }

    /// A token the engine appended without sampling it (jump-forward, a trigger, a
    /// completion): streamed, kept in the output and the history, counted as forced.
    fn emit_forced(&mut self, t: TokenId, named: bool, on_delta: &mut dyn FnMut(&str)) {
        self.emit_as(t, named, on_delta);
        self.push(t);
        self.stats.forced_tokens += 1;
    }

    /// Jump-forward: the tokens of the continuation the grammar forces, appended to `feed`
    /// (as many as leave room to complete within the budget).
    fn jump_forward(
        &mut self,
        feed: &mut Vec<TokenId>,
        on_delta: &mut dyn FnMut(&str),
    ) -> Result<(), GenerateError> {
        let room = self.max_tokens.saturating_sub(self.tokens.len());
        let Phase::Constrained(a) = &mut self.phase else {
            return Ok(());
        };
        let mut forced = a.forced_tokens()?;
        forced.truncate(room);
        // The forced bytes start every completion, but their tokens may split them
        // differently: keep only as many as leave room to complete.
        if self.budgeted {
            while !forced.is_empty() {
                a.step_with_tokens(&forced)?;
                let left = room - forced.len();
                let fit = fits(a.completion_tokens_within(left)?, left);
                a.rollback(forced.len())?;
                if fit {
                    break;
                }
                forced.pop();
            }
        }
        a.step_with_tokens(&forced)?;
        for f in forced {
            self.emit_forced(f, false, on_delta);
            feed.push(f);
        }
        Ok(())
    }
}

/// Whether a completion fits in `left` tokens.
fn fits(c: Completion, left: usize) -> bool {
    matches!(c, Completion::Tokens(t) if t.len() <= left)
}

/// A token's text for trigger detection: its bytes, or a special token's name.
fn token_text(space: &TokenSpace, t: TokenId) -> Vec<u8> {
    match space.vocab().token_bytes(t) {
        Some(b) => b.to_vec(),
        None => space
            .vocab()
            .special_tokens()
            .iter()
            .find(|(id, _)| *id == t)
            .map(|(_, name)| name.as_bytes().to_vec())
            .unwrap_or_default(),
    }
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
    let mut d = Decoder::new(
        space.clone(),
        constraint.cloned(),
        prompt,
        lm.max_positions(),
        opts,
    )?
    .with_logit_width(lm.logit_width());
    let t0 = Instant::now();
    let mut logits = lm.forward(prompt, 0)?;
    let prefill = t0.elapsed();
    let decode_start = Instant::now();
    let mut forward_time = Duration::ZERO;
    let mut pos = prompt.len();
    let finish = loop {
        let feed = match d.advance(&*logits, on_delta)? {
            Next::Done(r) => break r,
            Next::Feed(f) => f,
        };
        let t = Instant::now();
        logits = if opts.overlap_mask {
            // The next mask depends only on the tokens so far: compute it while the model
            // runs.
            let (fwd, prepared) = std::thread::scope(|s| {
                let h = s.spawn(|| d.prepare());
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
    let mut g = d.finish(finish, on_delta);
    g.stats.prompt_tok_s = prompt.len() as f64 / prefill.as_secs_f64().max(1e-9);
    g.stats.decode_tok_s = g.tokens.len() as f64 / decode.as_secs_f64().max(1e-9);
    g.stats.decode_forward_ms = forward_time.as_secs_f64() * 1e3;
    Ok(g)
}
