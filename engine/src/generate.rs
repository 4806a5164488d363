//! The generation loop: a model, an optional constraint, a prompt.
//!
//! Per step:
//! 1. the constraint's mask (computed while the previous forward pass ran, if
//!    `overlap_mask`) is applied to the logits where they live, and the sampler picks a
//!    token;
//! 2. the adapter steps; the text delta is streamed (UTF-8 split across tokens is held back
//!    in a window of at most 3 bytes, never re-decoding the output);
//! 3. jump-forward: while the grammar admits exactly one continuation, its tokens are
//!    appended without sampling, and fed to the model together in the next forward pass;
//! 4. the model runs on the new tokens.
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

use crate::adapter::{AdapterError, Constraint, RobustConstrainedAdapter};
use crate::model::{CausalLm, ModelError};
use crate::replay::stats;
use crate::sampling::{Sampler, SamplingOptions};
use crate::scope::{Scope, TriggerWatch};
use corral_trie::{FixedBitSet, TokenSpace};
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
    pub tokens: Vec<u32>,
    pub finish_reason: FinishReason,
    pub stats: GenerationStats,
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
    #[error("every token is masked: nothing to sample")]
    NothingToSample,
    #[error(
        "no output of the grammar fits in {max_tokens} tokens: the shortest one takes {needed}"
    )]
    BudgetTooSmall { needed: usize, max_tokens: usize },
}

/// Streams UTF-8 text from token bytes: holds back an incomplete character (at most 3
/// bytes), never re-decodes what was already emitted.
#[derive(Clone, Debug, Default)]
pub struct Utf8Stream {
    pending: Vec<u8>,
}

impl Utf8Stream {
    /// The text completed by `bytes`.
    pub fn push(&mut self, bytes: &[u8]) -> String {
        let mut out = String::new();
        self.push_into(bytes, &mut out);
        out
    }

    /// [`Utf8Stream::push`] into a reused buffer (appended to).
    pub fn push_into(&mut self, bytes: &[u8], out: &mut String) {
        if self.pending.is_empty()
            && let Ok(s) = std::str::from_utf8(bytes)
        {
            out.push_str(s);
            return;
        }
        self.pending.extend_from_slice(bytes);
        loop {
            match std::str::from_utf8(&self.pending) {
                Ok(s) => {
                    out.push_str(s);
                    self.pending.clear();
                    return;
                }
                Err(e) => {
                    let good = e.valid_up_to();
                    out.push_str(std::str::from_utf8(&self.pending[..good]).expect("valid prefix"));
                    match e.error_len() {
                        // Incomplete character at the end: wait for more bytes.
                        None => {
                            self.pending.drain(..good);
                            return;
                        }
                        // Invalid bytes (an unconstrained model can emit them).
                        Some(n) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            self.pending.drain(..good + n);
                        }
                    }
                }
            }
        }
    }

    /// What is left at the end (an incomplete character becomes U+FFFD).
    pub fn finish(&mut self) -> String {
        let s = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        s
    }
}

/// A token's text for trigger detection: its bytes, or a special token's name.
fn token_text(space: &TokenSpace, t: u32) -> Vec<u8> {
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

/// Generates after `prompt` (token ids), constrained by `constraint` if given (where
/// `opts.scope` says), calling `on_delta` with each piece of text as it decodes.
pub fn generate(
    lm: &mut dyn CausalLm,
    space: &TokenSpace,
    constraint: Option<&Arc<Constraint>>,
    prompt: &[u32],
    opts: &GenerateOptions,
    on_delta: &mut dyn FnMut(&str),
) -> Result<Generation, GenerateError> {
    if prompt.is_empty() {
        return Err(GenerateError::EmptyPrompt);
    }
    let max_pos = lm.max_positions();
    if prompt.len() >= max_pos {
        return Err(ModelError::Context {
            what: "the prompt",
            needed: prompt.len() + 1,
            max: max_pos,
        }
        .into());
    }
    let scope = &opts.scope;
    let fresh = || constraint.map(|c| RobustConstrainedAdapter::new(c.clone()));
    // The adapter while the grammar applies (from the start unless the scope waits for a
    // trigger).
    let mut adapter = if *scope == Scope::Whole {
        fresh()
    } else {
        None
    };
    let budgeted = opts.complete_within_budget && constraint.is_some();
    // The budget: max_tokens, or what the context leaves after the prompt.
    let max_tokens = opts.max_tokens.min(max_pos - prompt.len() - 1);
    if budgeted
        && let Some(a) = adapter.as_mut()
        && let Some(need) = a.completion_tokens()?
        && need.len() > max_tokens
    {
        return Err(GenerateError::BudgetTooSmall {
            needed: need.len(),
            max_tokens,
        });
    }
    let mut sampler = Sampler::new(opts.sampling.clone());
    let mut mask = FixedBitSet::with_capacity(lm.logit_width().max(space.width()));
    let mut mask_times: Vec<f64> = Vec::new();
    let mut stream = Utf8Stream::default();
    let mut text = String::new();
    let mut tokens: Vec<u32> = Vec::new();
    let mut history: Vec<u32> = prompt.to_vec();
    let mut st = GenerationStats {
        prompt_tokens: prompt.len(),
        ..GenerationStats::default()
    };
    let mut emit = |t: u32, text: &mut String, on_delta: &mut dyn FnMut(&str)| {
        if let Some(b) = space.vocab().token_bytes(t) {
            let delta = stream.push(b);
            if !delta.is_empty() {
                on_delta(&delta);
                text.push_str(&delta);
            }
        }
    };
    // Free text before the grammar applies: the trigger being watched for, and the free
    // tokens so far (for a reasoning budget).
    let mut watch = TriggerWatch::default();
    let mut free_tokens = 0usize;
    // Between a trigger and the grammar's first byte, whitespace tokens are free.
    let ws_tokens: Vec<u32> = if *scope == Scope::Whole {
        Vec::new()
    } else {
        space
            .vocab()
            .text_tokens()
            .filter(|(_, b)| !b.is_empty() && b.iter().all(u8::is_ascii_whitespace))
            .map(|(id, _)| id)
            .collect()
    };

    let t0 = Instant::now();
    let mut logits = lm.forward(prompt, 0)?;
    let prefill = t0.elapsed();
    st.forward_passes = 1;
    st.prompt_tok_s = prompt.len() as f64 / prefill.as_secs_f64().max(1e-9);
    let mut pos = prompt.len();
    let decode_start = Instant::now();
    let mut forward_time = Duration::ZERO;
    // A mask computed during the last forward pass, ready for this step.
    let mut mask_ready = false;

    let finish = loop {
        if tokens.len() >= max_tokens {
            break FinishReason::Length;
        }
        // A reasoning budget used up: the trigger is forced, and the grammar applies.
        if adapter.is_none()
            && constraint.is_some()
            && let Scope::After {
                trigger,
                budget: Some(b),
            } = scope
            && free_tokens >= *b
        {
            let forced = match space.vocab().token_by_text(trigger) {
                Some(id) => vec![id],
                None => space.trie().greedy_tokens(trigger.as_bytes()).0,
            };
            if tokens.len() + forced.len() > max_tokens {
                break FinishReason::Length;
            }
            for &f in &forced {
                emit(f, &mut text, on_delta);
                tokens.push(f);
                history.push(f);
                st.forced_tokens += 1;
            }
            adapter = fresh();
            watch.clear();
            free_tokens = 0;
            if pos + forced.len() >= max_pos {
                break FinishReason::Length;
            }
            let t = Instant::now();
            logits = lm.forward(&forced, pos)?;
            forward_time += t.elapsed();
            st.forward_passes += 1;
            pos += forced.len();
            continue;
        }
        let masked = match adapter.as_mut() {
            Some(a) => {
                if !mask_ready {
                    let t = Instant::now();
                    a.compute_mask(&mut mask)?;
                    mask_times.push(t.elapsed().as_secs_f64() * 1e6);
                }
                mask_ready = false;
                // Complete, and nothing but end-of-sequence allowed: done (or, for tool
                // calls, back to free text).
                if a.is_accepting() && mask.ones().all(|t| space.eos().contains(&(t as u32))) {
                    if !matches!(scope, Scope::Each { .. }) {
                        break FinishReason::GrammarComplete;
                    }
                    adapter = None;
                    watch.clear();
                    None
                } else {
                    if a.output().is_empty() {
                        ws_tokens.iter().for_each(|&t| mask.insert(t as usize));
                    }
                    Some(&mask)
                }
            }
            None => None,
        };
        let mut v = logits.to_masked_vec(masked)?;
        if opts.ignore_eos {
            for &e in space.eos() {
                if let Some(l) = v.get_mut(e as usize) {
                    *l = f32::NEG_INFINITY;
                }
            }
        }
        let tok = loop {
            let tok = sampler
                .sample(&mut v, &history)
                .ok_or(GenerateError::NothingToSample)?;
            // Free text: does this token complete the trigger? Then the grammar applies to
            // what it brings after the trigger (whitespace first is free); a token whose
            // rest the grammar refuses is not taken.
            if adapter.is_none()
                && constraint.is_some()
                && let Some(trigger) = scope.trigger()
            {
                let before = watch.clone();
                if let Some(rest) = watch.push(trigger, &token_text(space, tok)) {
                    let mut a = fresh().expect("a constraint");
                    let start = rest.iter().position(|b| !b.is_ascii_whitespace());
                    let taken = match start {
                        Some(i) => a.push_bytes(&rest[i..])?,
                        None => true,
                    };
                    if !taken {
                        watch = before;
                        v[tok as usize] = f32::NEG_INFINITY;
                        continue;
                    }
                    adapter = Some(a);
                    free_tokens = 0;
                } else {
                    free_tokens += 1;
                }
            }
            break tok;
        };
        if space.eos().contains(&tok) {
            break FinishReason::Stop;
        }
        if let Some(a) = adapter.as_mut()
            && masked.is_some()
            && !(a.output().is_empty() && ws_tokens.contains(&tok))
        {
            a.step_with_token(tok)?;
            // Room left to complete after this token? If not, complete instead of it.
            if budgeted {
                let left = max_tokens - tokens.len() - 1;
                let fits = a.completion_tokens()?.is_some_and(|c| c.len() <= left);
                if !fits {
                    a.rollback(1)?;
                    if let Some(c) = a.completion_tokens()? {
                        for &t in &c {
                            a.step_with_token(t)?;
                            emit(t, &mut text, on_delta);
                            tokens.push(t);
                            st.forced_tokens += 1;
                        }
                    }
                    break FinishReason::BudgetCompleted;
                }
            }
        }
        emit(tok, &mut text, on_delta);
        tokens.push(tok);
        history.push(tok);
        let mut feed = vec![tok];
        if opts.jump_forward
            && let Some(a) = adapter.as_mut()
        {
            let mut forced = a.forced_tokens()?;
            forced.truncate(max_tokens.saturating_sub(tokens.len()));
            // The forced bytes start every completion, but their tokens may split them
            // differently: keep only as many as leave room to complete.
            if budgeted {
                while !forced.is_empty() {
                    a.step_with_tokens(&forced)?;
                    let left = max_tokens - tokens.len() - forced.len();
                    let fits = a.completion_tokens()?.is_some_and(|c| c.len() <= left);
                    a.rollback(forced.len())?;
                    if fits {
                        break;
                    }
                    forced.pop();
                }
            }
            for f in forced {
                a.step_with_token(f)?;
                emit(f, &mut text, on_delta);
                tokens.push(f);
                history.push(f);
                feed.push(f);
                st.forced_tokens += 1;
            }
        }
        if tokens.len() >= max_tokens {
            break FinishReason::Length;
        }
        if pos + feed.len() >= max_pos {
            break FinishReason::Length;
        }
        let t = Instant::now();
        if opts.overlap_mask
            && let Some(a) = adapter.as_mut()
        {
            // The next mask depends only on the tokens so far: compute it while the model runs.
            let (fwd, (res, dt)) = std::thread::scope(|s| {
                let h = s.spawn(|| {
                    let t = Instant::now();
                    let r = a.compute_mask(&mut mask);
                    (r, t.elapsed())
                });
                let fwd = lm.forward(&feed, pos);
                (fwd, h.join().expect("mask thread"))
            });
            res?;
            mask_times.push(dt.as_secs_f64() * 1e6);
            mask_ready = true;
            logits = fwd?;
        } else {
            logits = lm.forward(&feed, pos)?;
        }
        forward_time += t.elapsed();
        st.forward_passes += 1;
        pos += feed.len();
    };
    let rest = stream.finish();
    if !rest.is_empty() {
        on_delta(&rest);
        text.push_str(&rest);
    }
    let decode = decode_start.elapsed();
    st.generated_tokens = tokens.len();
    st.decode_tok_s = tokens.len() as f64 / decode.as_secs_f64().max(1e-9);
    st.decode_forward_ms = forward_time.as_secs_f64() * 1e3;
    let (mean, _, p99) = stats(&mask_times);
    st.mask_us_mean = mean;
    st.mask_us_p99 = p99;
    st.masks = mask_times.len();
    Ok(Generation {
        text,
        tokens,
        finish_reason: finish,
        stats: st,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf8_stream_holds_back_split_characters() {
        let mut s = Utf8Stream::default();
        let bytes = "aé日😀".as_bytes();
        let mut out = String::new();
        for b in bytes {
            out.push_str(&s.push(&[*b]));
            assert!(s.pending.len() <= 3);
        }
        assert_eq!(out, "aé日😀");
        assert_eq!(s.push(b"\xff"), "\u{FFFD}");
        assert_eq!(s.push(b"\xe6\x97"), "");
        assert_eq!(s.finish(), "\u{FFFD}");
    }
}
