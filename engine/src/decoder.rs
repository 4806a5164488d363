//! [`Decoder`]: one generation's state apart from the model, driven one step at a time (see
//! [`crate::generate`] for the loop and its steps). The budget (completions, jump-forward)
//! is in [`budget`], free text and its trigger in [`trigger`].

mod budget;
mod trigger;

use trigger::token_text;

use crate::adapter::{Completion, RobustConstrainedAdapter};
use crate::constraint::Constraint;
use crate::generate::{FinishReason, GenerateError, GenerateOptions, Generation, GenerationStats};
use crate::logprobs::{TokenLogprob, log_sum_exp, token_logprob};
use crate::model::{Logits, ModelError, apply_mask_in_place};
use crate::replay::stats;
use crate::sampling::{Sampler, SamplerMethod, SamplingError};
use crate::scope::{Scope, TriggerWatch};
use crate::utf8::Utf8Stream;
use corral_trie::{FixedBitSet, TokenId, TokenSpace};
use std::sync::Arc;
use std::time::Instant;

/// Where the decoder is: free text (the grammar not applying yet, or between tool calls),
/// or constrained by an adapter.
#[derive(Clone, Debug)]
enum Phase {
    Free,
    Constrained(Box<RobustConstrainedAdapter>),
}

/// A piece of the output as it streams ([`Decoder::advance_emitting`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Emit<'a> {
    /// Text, whole characters.
    Text(&'a str),
    /// A control token (one with no bytes of its own): sampled, forced, or the end token
    /// that stopped the output (which is not one of the output's tokens). `named`: the
    /// grammar names it by reference, so it is part of the grammar's output and its name
    /// is in the text.
    Control {
        /// The token's id.
        token: TokenId,
        /// The special token's name in the vocabulary (such as `<|call|>`; empty if none).
        name: &'a str,
        /// Whether the grammar named it by reference (its name is then in the output text).
        named: bool,
    },
}

impl<'a> Emit<'a> {
    /// The piece as text: text, or a named control token's name.
    pub fn as_text(self) -> Option<&'a str> {
        match self {
            Emit::Text(t) => Some(t),
            Emit::Control { name, named, .. } => named.then_some(name),
        }
    }
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
#[derive(Clone, Debug)]
pub struct Decoder {
    space: Arc<TokenSpace>,
    constraint: Option<Arc<Constraint>>,
    opts: GenerateOptions,
    phase: Phase,
    sampler: Sampler,
    /// The mask for the next sample, and whether it is computed already (`prepare_mask`).
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
    /// Under the SMC sampler: the log of the importance weight gathered since it was last
    /// taken ([`Decoder::take_log_weight`]), the model's probability of each token over
    /// the probability it was drawn with.
    weighted: bool,
    log_weight: f64,
    /// This step's logits, prepared while it was weighed ([`Decoder::step_log_weight`]) or
    /// by a particle in the same state ([`Decoder::share_step`]); taken by the step.
    prepared: Option<Prepared>,
    stats: GenerationStats,
}

/// The step's whole distribution (before the mask), where the SMC sampler weighs tokens.
#[derive(Debug)]
struct Full {
    /// The logits after the bias and penalties.
    logits: Vec<f32>,
    /// Their log-sum-exp at the sampling temperature.
    lse: f64,
    /// That of the logits the draw takes (masked where the grammar applies): with `lse`,
    /// the mass the draw's distribution kept.
    kept: f64,
}

/// A step's logits for the draw ([`Decoder::step_logits`]). Cheap to clone: decoders in the
/// same state (SMC particles with the same tokens) share one.
#[derive(Clone, Debug)]
struct StepLogits {
    /// Masked where the grammar applies, with the bias and penalties.
    v: Arc<Vec<f32>>,
    /// Under the SMC sampler, the whole distribution.
    full: Option<Arc<Full>>,
}

/// A step's logits computed ahead, for the step after `at` output tokens, masked or not.
#[derive(Clone, Debug)]
pub(crate) struct Prepared {
    at: usize,
    masked: bool,
    logits: StepLogits,
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

/// Whether some output of the grammar, from `adapter`'s state, fits in `max_tokens`
/// tokens: [`GenerateError::BudgetTooSmall`] with the shortest one's length if not,
/// [`GenerateError::NoCompletion`] if no output ends.
pub(crate) fn check_budget(
    adapter: &mut RobustConstrainedAdapter,
    max_tokens: usize,
) -> Result<(), GenerateError> {
    let (needed, at_least) = match adapter.completion_tokens_within(max_tokens)? {
        Completion::Tokens(t) => (t.len(), false),
        Completion::TooLong { at_least } => (at_least, true),
        Completion::Impossible => return Err(GenerateError::NoCompletion),
    };
    if needed > max_tokens {
        return Err(GenerateError::BudgetTooSmall {
            needed,
            max_tokens,
            at_least,
        });
    }
    Ok(())
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
        let weighted = matches!(opts.sampling.method, SamplerMethod::Smc(_));
        if weighted && opts.scope != Scope::Whole {
            // The free text before a trigger and the trigger the engine appends would go
            // unweighed: the target would not be the one SMC promises.
            return Err(SamplingError {
                name: "sampler",
                value: "smc".into(),
                expected: "plain where the grammar applies after reasoning or to tool calls (smc weighs a grammar over the whole output)",
            }
            .into());
        }
        let mut d = Decoder {
            weighted,
            log_weight: 0.0,
            prepared: None,
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
                // Under weights, a forced span is weighed by its tokens' probabilities,
                // read from the pass that runs them ([`crate::smc`]).
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
            check_budget(a, d.max_tokens)?;
        }
        Ok(d)
    }

    /// [`Decoder::new`] for `lm`: its context, and masks as wide as its logits.
    pub(crate) fn for_model(
        lm: &dyn crate::model::CausalLm,
        space: &Arc<TokenSpace>,
        constraint: Option<&Arc<Constraint>>,
        prompt: &[TokenId],
        opts: &GenerateOptions,
    ) -> Result<Decoder, GenerateError> {
        Ok(Decoder::new(
            space.clone(),
            constraint.cloned(),
            prompt,
            lm.max_positions(),
            opts,
        )?
        .with_logit_width(lm.logit_width()))
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

    /// The sampling settings it draws with.
    pub fn sampling(&self) -> &crate::SamplingOptions {
        self.sampler.options()
    }

    /// Whether a grammar constrains (some of) the output.
    pub fn is_constrained(&self) -> bool {
        self.constraint.is_some()
    }

    /// Masks computed so far: how many, and their microseconds in all.
    pub fn mask_work(&self) -> (usize, f64) {
        (self.mask_times.len(), self.mask_times.iter().sum())
    }

    /// A copy of this decoder whose draws come from a random state seeded from `seed`
    /// (a particle forked by resampling).
    pub(crate) fn fork(&self, seed: u64) -> Decoder {
        let mut d = self.clone();
        d.sampler.reseed(seed);
        d
    }

    /// The log importance weight gathered since the last call (under the SMC sampler; 0
    /// otherwise).
    pub(crate) fn take_log_weight(&mut self) -> f64 {
        std::mem::take(&mut self.log_weight)
    }

    /// The prompt and the output's tokens: every position the model has been fed.
    pub(crate) fn history(&self) -> &[TokenId] {
        &self.history
    }

    /// Whether every token must come from a distribution, one per step: with
    /// log-probabilities or weights, a budget's completion is appended one token a step.
    fn one_by_one(&self) -> bool {
        self.opts.logprobs.is_some() || self.weighted
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
    pub fn prepare_mask(&mut self) -> Result<(), GenerateError> {
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
    /// appends after it), or the end. `on_delta` gets the text as it completes (a control
    /// token only where the grammar names it, as its name).
    pub fn advance(
        &mut self,
        logits: &dyn Logits,
        on_delta: &mut dyn FnMut(&str),
    ) -> Result<Next, GenerateError> {
        self.advance_emitting(logits, &mut |e| e.as_text().map_or((), &mut *on_delta))
    }

    /// [`Decoder::advance`], with the output as [`Emit`] pieces: text, and control tokens
    /// by id (a format whose structure is in control tokens, harmony, reads them so).
    pub fn advance_emitting(
        &mut self,
        logits: &dyn Logits,
        out: &mut dyn FnMut(Emit<'_>),
    ) -> Result<Next, GenerateError> {
        // Logits prepared for this step serve this step only.
        let prepared = self.prepared.take();
        if self.tokens.len() >= self.max_tokens {
            return Ok(Next::Done(FinishReason::Length));
        }
        if let Some(forced) = self.reasoning_budget_spent() {
            return Ok(self.force_trigger(forced, out));
        }
        let masked = match self.mask_for_sampling()? {
            Sampling::Masked => true,
            Sampling::Free => false,
            Sampling::Done(done) => {
                if done == FinishReason::GrammarComplete && self.weighted && !self.opts.ignore_eos {
                    // The output ends with the model's end token: its probability (of
                    // those the grammar allows) is part of the output's.
                    let s = self.step_logits(logits, true, prepared)?;
                    self.weigh_drawn(s.full.as_deref());
                }
                return Ok(Next::Done(done));
            }
        };
        let StepLogits { mut v, full } = self.step_logits(logits, masked, prepared)?;
        if let Some(t) = self.completing.pop() {
            self.weigh_forced(full.as_deref(), t);
            return self.append_completion(&v, t, out);
        }
        let tok = self.sample_watching_trigger(&mut v)?;
        // An end token ends the output, unless the grammar names it here by reference.
        let named = masked && self.names_token(tok);
        if self.space.eos().contains(&tok) && !named {
            // An end before the trigger, under a grammar that applies after it (the model
            // stopped inside its reasoning): the answer is still owed, so the trigger is
            // appended instead and the grammar applies from there.
            if let Some(trigger) = self.trigger_still_owed() {
                return Ok(self.force_trigger(trigger, out));
            }
            self.weigh_drawn(full.as_deref());
            self.record_logprob(&v, tok);
            self.emit_end(tok, out);
            return Ok(Next::Done(FinishReason::Stop));
        }
        let stepped = match masked {
            true => self.step_constraint(tok, out)?,
            false => Stepped::Kept,
        };
        // A draw weighs the mass the mask kept, whatever the budget does with the token; a
        // token the budget puts in its place weighs its own probability.
        self.weigh_drawn(full.as_deref());
        let (tok, named) = match stepped {
            Stepped::Kept => (tok, named),
            Stepped::Completed => return Ok(Next::Done(FinishReason::BudgetCompleted)),
            Stepped::Replaced { token, named } => {
                self.weigh_forced(full.as_deref(), token);
                (token, named)
            }
        };
        self.record_logprob(&v, tok);
        if named && self.space.eos().contains(&tok) && self.completed_by_it(&stepped) {
            // An end token the grammar named last ends the output (a harmony call's
            // `<|call|>`); one the grammar goes on after does not.
            self.emit_as(tok, named, out);
            self.push(tok);
            return Ok(Next::Done(FinishReason::Stop));
        }
        if matches!(stepped, Stepped::Replaced { .. }) {
            self.emit_forced(tok, named, out);
            if self.completing.is_empty() {
                return Ok(Next::Done(FinishReason::BudgetCompleted));
            }
        } else {
            self.emit_as(tok, named, out);
            self.push(tok);
        }
        let mut feed = vec![tok];
        // A budget's completion under way appends what follows itself.
        if self.opts.jump_forward && self.completing.is_empty() {
            self.jump_forward(&mut feed, out)?;
        }
        Ok(self.feed(feed))
    }

    /// This step's logits for the draw: masked (where `masked`), with the logit bias and
    /// penalties, and end tokens removed under `ignore_eos`. Under the SMC sampler, also the
    /// whole distribution before the mask, to weigh the token drawn. `prepared`: the same,
    /// computed ahead for this step.
    fn step_logits(
        &self,
        logits: &dyn Logits,
        masked: bool,
        prepared: Option<Prepared>,
    ) -> Result<StepLogits, GenerateError> {
        if let Some(p) = prepared.filter(|p| p.at == self.tokens.len() && p.masked == masked) {
            return Ok(p.logits);
        }
        let mask = masked.then_some(&self.mask);
        if !self.weighted {
            let mut v = logits.to_masked_vec(mask)?;
            self.adjust(&mut v, masked);
            return Ok(StepLogits {
                v: Arc::new(v),
                full: None,
            });
        }
        let mut full = logits.to_masked_vec(None)?;
        self.adjust(&mut full, masked);
        let lse = log_sum_exp(&full, self.inverse_temperature());
        let (v, kept) = match mask {
            Some(m) => {
                let mut v = full.clone();
                apply_mask_in_place(&mut v, m);
                let kept = log_sum_exp(&v, self.inverse_temperature());
                (v, kept)
            }
            None => (full.clone(), lse),
        };
        Ok(StepLogits {
            v: Arc::new(v),
            full: Some(Arc::new(Full {
                logits: full,
                lse,
                kept,
            })),
        })
    }

    /// The logits [`Decoder::step_log_weight`] prepared for this step, for a decoder in
    /// the same state ([`Decoder::share_step`]).
    pub(crate) fn prepared_step(&self) -> Option<Prepared> {
        self.prepared.clone()
    }

    /// Takes logits prepared for this step by a decoder in the same state (the same
    /// tokens, mask and options: a particle's copy), so that the step does not compute
    /// them again.
    pub(crate) fn share_step(&mut self, prepared: Option<Prepared>) {
        self.prepared = prepared;
    }

    /// The bias and penalties, and under `ignore_eos` no end token but one the grammar
    /// names (`masked`: the grammar applies to this step).
    fn adjust(&self, v: &mut [f32], masked: bool) {
        self.adjust_at(v, masked, self.tokens.len());
    }

    /// [`Decoder::adjust`] as it was for the output's token `at` (the penalties see the
    /// tokens before it).
    fn adjust_at(&self, v: &mut [f32], masked: bool, at: usize) {
        if self.opts.ignore_eos {
            for &e in self.space.eos() {
                // An end token the grammar names is the grammar's, not an end to ignore.
                if masked && self.names_token(e) {
                    continue;
                }
                if let Some(l) = v.get_mut(e.index()) {
                    *l = f32::NEG_INFINITY;
                }
            }
        }
        let cut = self.tokens.len() - at;
        self.sampler.adjust(
            v,
            &self.history[..self.history.len() - cut],
            &self.tokens[..at],
        );
    }

    fn inverse_temperature(&self) -> f32 {
        1.0 / self.sampler.options().temperature
    }

    /// Weighs a token drawn from the step's masked distribution: its probability under the
    /// whole distribution over its probability under the masked one is the mass the mask
    /// kept. (The SMC sampler weighs a grammar over the whole output, so no trigger watch
    /// refuses a drawn token and changes the distribution after `kept` was taken.)
    fn weigh_drawn(&mut self, full: Option<&Full>) {
        if let Some(f) = full {
            self.log_weight += drawn_log_weight(f);
        }
    }

    /// Weighs a token the engine chose (a budget's completion): drawn with probability 1,
    /// so its weight is its probability under the whole distribution.
    fn weigh_forced(&mut self, full: Option<&Full>, t: TokenId) {
        if let Some(f) = full {
            self.log_weight += self.forced_log_weight(f, t);
        }
    }

    fn forced_log_weight(&self, full: &Full, t: TokenId) -> f64 {
        let l = full
            .logits
            .get(t.index())
            .copied()
            .unwrap_or(f32::NEG_INFINITY);
        l as f64 * self.inverse_temperature() as f64 - full.lse
    }

    /// Under the SMC sampler, the log-probability of the tokens the engine appended after
    /// the last one drawn (jump-forward's forced span): the last `logits.len()` tokens of
    /// the output, each weighed by the logits of the position before it (`logits[0]`: the
    /// drawn token's). 0 where nothing is weighed.
    pub(crate) fn appended_log_weight(
        &self,
        logits: &[Box<dyn Logits>],
    ) -> Result<f64, GenerateError> {
        if !self.weighted || logits.is_empty() {
            return Ok(0.0);
        }
        let first = self.tokens.len().checked_sub(logits.len()).ok_or_else(|| {
            GenerateError::Model(crate::model::ModelError::Backend(
                "more logits than tokens appended".into(),
            ))
        })?;
        let mut w = 0.0;
        for (k, l) in logits.iter().enumerate() {
            let at = first + k;
            let mut v = l.to_masked_vec(None)?;
            self.adjust_at(&mut v, true, at);
            let lse = log_sum_exp(&v, self.inverse_temperature());
            let full = Full {
                logits: v,
                lse,
                kept: lse,
            };
            w += self.forced_log_weight(&full, self.tokens[at]);
        }
        Ok(w)
    }

    /// Under the SMC sampler, the part of the next step's log weight that does not depend
    /// on the token drawn, from the logits [`Decoder::advance_emitting`] will take: the
    /// mass the mask keeps, the next token's probability where a budget's completion is
    /// being appended, the end's where the grammar is complete. The particles are resampled
    /// on it before they draw ([`crate::smc`]); a drawn token a budget replaces adds its
    /// replacement's probability in the step itself. 0 where nothing is weighed.
    pub(crate) fn step_log_weight(&mut self, logits: &dyn Logits) -> Result<f64, GenerateError> {
        self.prepared = None;
        if !self.weighted || self.tokens.len() >= self.max_tokens {
            return Ok(0.0);
        }
        self.prepare_mask()?;
        let masked = match &self.phase {
            Phase::Constrained(a) => {
                if only_end_left(a, &self.mask, self.space.eos()) && self.opts.ignore_eos {
                    return Ok(0.0);
                }
                true
            }
            _ => false,
        };
        let s = self.step_logits(logits, masked, None)?;
        let Some(full) = s.full.clone() else {
            return Ok(0.0);
        };
        self.prepared = Some(Prepared {
            at: self.tokens.len(),
            masked,
            logits: s,
        });
        Ok(match self.completing.last() {
            Some(&t) => self.forced_log_weight(&full, t),
            None => drawn_log_weight(&full),
        })
    }

    /// Records `tok`'s log-probability under `v`, if asked for.
    fn record_logprob(&mut self, v: &[f32], tok: TokenId) {
        if let Some(top) = self.opts.logprobs {
            self.logprobs.push(token_logprob(v, tok, top));
        }
    }

    /// The end: the text held back, the statistics.
    pub fn finish(self, finish_reason: FinishReason, on_delta: &mut dyn FnMut(&str)) -> Generation {
        self.finish_emitting(finish_reason, &mut |e| {
            e.as_text().map_or((), &mut *on_delta)
        })
    }

    /// [`Decoder::finish`], with the rest as [`Emit`] pieces.
    pub fn finish_emitting(
        mut self,
        finish_reason: FinishReason,
        out: &mut dyn FnMut(Emit<'_>),
    ) -> Generation {
        self.flush(out);
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
            particles: Vec::new(),
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
    fn emit_as(&mut self, t: TokenId, named: bool, out: &mut dyn FnMut(Emit<'_>)) {
        let Some(bytes) = self.space.vocab().token_bytes(t) else {
            self.flush(out);
            let name = String::from_utf8_lossy(&token_text(&self.space, t)).into_owned();
            if named {
                self.text.push_str(&name);
            }
            out(Emit::Control {
                token: t,
                name: &name,
                named,
            });
            return;
        };
        let delta = self.stream.push(bytes);
        if !delta.is_empty() {
            out(Emit::Text(&delta));
            self.text.push_str(&delta);
        }
    }

    /// Reports the end token that stopped the output (it is not one of the output's
    /// tokens): a format that closes its messages with end tokens (harmony's `<|call|>`)
    /// reads which one it was.
    fn emit_end(&mut self, t: TokenId, out: &mut dyn FnMut(Emit<'_>)) {
        self.flush(out);
        let name = String::from_utf8_lossy(&token_text(&self.space, t)).into_owned();
        out(Emit::Control {
            token: t,
            name: &name,
            named: false,
        });
    }

    /// Streams the bytes held back (an incomplete character becomes U+FFFD): before a
    /// control token, and at the end.
    fn flush(&mut self, out: &mut dyn FnMut(Emit<'_>)) {
        let rest = self.stream.finish();
        if !rest.is_empty() {
            out(Emit::Text(&rest));
            self.text.push_str(&rest);
        }
    }

    /// Whether the grammar, having kept the token just stepped, is complete: it admits
    /// nothing more.
    fn completed_by_it(&self, stepped: &Stepped) -> bool {
        matches!(stepped, Stepped::Kept)
            && matches!(&self.phase, Phase::Constrained(a) if a.is_complete())
    }

    /// Whether the grammar takes `tok` next as a token it names by reference.
    fn names_token(&self, tok: TokenId) -> bool {
        match &self.phase {
            Phase::Constrained(a) => a.expects_reference(tok),
            Phase::Free => false,
        }
    }

    /// What the next sample is drawn under: the mask (ready in `self.mask`), nothing (free
    /// text), or nothing at all because the grammar is complete and admits nothing more
    /// (for tool calls, free text comes again instead).
    fn mask_for_sampling(&mut self) -> Result<Sampling, GenerateError> {
        self.prepare_mask()?;
        self.mask_ready = false;
        let Phase::Constrained(a) = &mut self.phase else {
            return Ok(Sampling::Free);
        };
        if only_end_left(a, &self.mask, self.space.eos()) {
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
}

/// The log weight of a token drawn from the masked distribution: the log of the mass the
/// mask kept.
fn drawn_log_weight(full: &Full) -> f64 {
    full.kept - full.lse
}

/// Whether the grammar is complete and `mask` (its next mask) allows nothing but an end
/// token: the output ends here.
fn only_end_left(a: &RobustConstrainedAdapter, mask: &FixedBitSet, eos: &[TokenId]) -> bool {
    a.is_accepting() && mask.ones().all(|t| eos.contains(&TokenId(t as u32)))
}

/// A decoder in a batch of masks ([`crate::compute_masks`]): its mask for the next token,
/// computed ahead as [`Decoder::prepare_mask`] does.
impl crate::MaskSlot for Decoder {
    type Error = GenerateError;

    fn compute_mask(&mut self) -> Result<(), GenerateError> {
        self.prepare_mask()
    }
}
