//! The scheduler: one thread owns the network and serves up to `max_concurrent` requests
//! at once, their decoding steps batched into one forward pass.
//!
//! Each request keeps its own KV cache (a [`Sequence`] of the model). The loop:
//! 1. admit queued requests while there is room (block on the queue when nothing runs);
//! 2. stop the requests whose client went away or whose time is up;
//! 3. one forward pass over every running request's next input: a decoding step's token
//!    (the model runs these as one batch: their rows go through each weight matrix
//!    together), or the next [`PREFILL_STEP`] positions of a prompt; meanwhile, on another
//!    thread, the masks of the requests that will sample after this pass are computed;
//! 4. each of those samples from its logits; the text delta goes to its handler, or the
//!    end.
//!
//! A request under the SMC sampler runs its prompt as one sequence, then becomes a group of
//! particles ([`Particles`]) that put one row each into every pass; it takes as many of
//! the `max_concurrent` places as it has particles (each holds a KV cache), and its output
//! is sent whole when its particles end.
//!
//! A long prompt runs [`PREFILL_STEP`] positions per pass, so that the requests beside it
//! keep decoding between its pieces, and its time limit and its client's departure are
//! checked between them. A prompt that starts with tokens an earlier prompt ran copies
//! their positions from the `PromptCache` and runs only the rest.

use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::prompt_cache::PromptCache;
use corral_engine::{
    AdapterError, BatchItem, CausalLm, Decoder, Emit, FinishReason, GenerateError, GenerationStats,
    Logits, Next, Particles, SamplerMethod, Sequence, TokenLogprob, compute_masks,
};
use corral_trie::TokenId;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::{Duration, Instant};
use tokio::sync::mpsc::UnboundedSender;

/// Most positions of a request's feed (its prompt, mostly) run in one pass.
pub const PREFILL_STEP: usize = 256;

/// How a pass shares its work between prompts and decoding steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PassBudget {
    /// While some request decodes, the prompt positions one pass runs, over all requests
    /// whose prompt is still running (the oldest first): this many, or one per decoding
    /// request if there are more of those. A prompt position costs a pass about what a
    /// decoding row does (they go through the same kernels), so each pass costs a decoding
    /// step plus at most about as much again, and a long prompt delays the streams beside
    /// it by a bounded amount per token instead of a whole [`PREFILL_STEP`] chunk. With no
    /// request decoding, each prompt runs [`PREFILL_STEP`] positions a pass.
    pub prefill_while_decoding: usize,
}

/// A request admitted to the queue.
pub struct Job {
    /// The generation's state, made by [`crate::admit`].
    pub decoder: Decoder,
    /// The prompt's tokens, run before the first sample.
    pub prompt: Vec<TokenId>,
    /// Where the request's events go; the handler drops the receiver when the client goes
    /// away, which stops the generation.
    pub events: UnboundedSender<Event>,
    /// When the request's time is up (counted from when it took its place, preparation
    /// included).
    pub deadline: Instant,
    /// The request time limit, named in the error sent at `deadline`.
    pub timeout: Duration,
    /// Set by the handler when a stop sequence ended the output: a closed channel then
    /// means done, not cancelled.
    pub stopped: Arc<AtomicBool>,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Job")
            .field("prompt_tokens", &self.prompt.len())
            .field("deadline", &self.deadline)
            .field("timeout", &self.timeout)
            .field("stopped", &self.stopped)
            .finish_non_exhaustive()
    }
}

/// A piece of the output ([`corral_engine::Emit`], owned).
#[derive(Debug, PartialEq, Eq)]
pub enum Emitted {
    /// Decoded text (whole UTF-8 characters).
    Text(String),
    /// A control token; `named`: the grammar named it, so its name is part of the text.
    Control {
        /// The token's id.
        token: u32,
        /// The token's name in the vocabulary (`<|im_end|>`, ...).
        name: String,
        /// Whether the grammar named the token.
        named: bool,
    },
}

impl Emitted {
    /// Appends `e`, joining text to text.
    fn push(out: &mut Vec<Emitted>, e: Emit<'_>) {
        match (e, out.last_mut()) {
            (Emit::Text(t), Some(Emitted::Text(last))) => last.push_str(t),
            (Emit::Text(t), _) => out.push(Emitted::Text(t.to_string())),
            (Emit::Control { token, name, named }, _) => out.push(Emitted::Control {
                token: token.0,
                name: name.to_string(),
                named,
            }),
        }
    }
}

/// What the scheduler tells a request's handler.
#[derive(Debug)]
pub enum Event {
    /// Output decoded; `tokens` generated so far; the log-probabilities of the tokens
    /// since the last event, if the request asked for them.
    Delta {
        /// The pieces decoded since the last event, text joined.
        out: Vec<Emitted>,
        /// Tokens generated so far, this step's included.
        tokens: usize,
        /// Empty unless the request asked for log-probabilities.
        logprobs: Vec<TokenLogprob>,
    },
    /// The generation ended; nothing follows.
    Done {
        /// Why it ended (`stop`, `length`, ...).
        finish: FinishReason,
        /// Its counts and timings (tokens generated, masks computed).
        stats: GenerationStats,
    },
    /// The generation stopped on an error (the model's, the decoder's, the time limit);
    /// nothing follows.
    Failed(ApiError),
}

struct Running {
    decoder: Option<Decoder>,
    events: UnboundedSender<Event>,
    deadline: Instant,
    timeout: Duration,
    stopped: Arc<AtomicBool>,
    /// Tokens to run the model on next, at position `pos`.
    feed: Vec<TokenId>,
    pos: usize,
    /// Positions of the prompt still to run after `feed`'s current piece (0: decoding).
    prompt_left: usize,
    /// The whole prompt, kept for the [`PromptCache`] when the request leaves.
    prompt: Vec<TokenId>,
    /// False once a forward pass over the sequence failed: its cache is then not kept.
    sound: bool,
    sequence: Sequence,
    /// What this pass runs (taken from `feed`).
    piece: Vec<TokenId>,
    /// Under the SMC sampler, once the prompt has run: the particles (the decoder is their
    /// template, and `sequence` keeps the prompt's cache).
    group: Option<Particles>,
}

impl Running {
    /// Places of `max_concurrent` it takes: one per particle under the SMC sampler.
    fn places(&self) -> usize {
        self.decoder.as_ref().map_or(1, job_places)
    }
}

/// Places of `max_concurrent` a request takes (see [`Running::places`]).
fn job_places(d: &Decoder) -> usize {
    match d.sampling().method {
        SamplerMethod::Smc(smc) => smc.particles.max(1),
        SamplerMethod::Plain => 1,
    }
}

/// Runs until the queue's senders are gone and nothing runs. The prompt cache keeps at
/// most `prompt_cache_bytes` bytes.
pub fn run(
    mut lm: Box<dyn CausalLm>,
    queue: Receiver<Job>,
    max_concurrent: usize,
    budget: PassBudget,
    prompt_cache_bytes: usize,
    metrics: Arc<Metrics>,
) {
    let mut running: Vec<Running> = Vec::new();
    let mut cache = PromptCache::new(prompt_cache_bytes);
    // A job taken from the queue that waits for places (an SMC request's particles).
    let mut waiting: Option<Job> = None;
    let max = max_concurrent.max(1);
    loop {
        loop {
            let used: usize = running.iter().map(Running::places).sum();
            let job = match waiting.take() {
                Some(j) => j,
                None if running.is_empty() => match queue.recv() {
                    Ok(j) => j,
                    Err(_) => return,
                },
                None => match queue.try_recv() {
                    Ok(j) => j,
                    Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
                },
            };
            // Admission refuses more particles than places, so a job waits only for
            // others to end.
            if used + job_places(&job.decoder) > max && !running.is_empty() {
                waiting = Some(job);
                break;
            }
            Metrics::sub(&metrics.queued, 1);
            if job.events.is_closed() {
                Metrics::add(&metrics.cancelled, 1);
                Metrics::sub(&metrics.in_system, 1);
                continue;
            }
            Metrics::add(&metrics.active, 1);
            Metrics::add(&metrics.prompt_tokens, job.prompt.len() as u64);
            let (sequence, pos) = match cache.take(lm.as_ref(), &job.prompt) {
                Some(hit) => {
                    Metrics::add(&metrics.prompt_cached_tokens, hit.positions as u64);
                    (hit.sequence, hit.positions)
                }
                None => (lm.new_sequence(), 0),
            };
            let feed = job.prompt[pos..].to_vec();
            running.push(Running {
                decoder: Some(job.decoder),
                events: job.events,
                deadline: job.deadline,
                timeout: job.timeout,
                stopped: job.stopped,
                prompt_left: feed.len(),
                feed,
                pos,
                prompt: job.prompt,
                sound: true,
                sequence,
                piece: Vec::new(),
                group: None,
            });
        }
        running.retain_mut(|r| {
            let live = still_wanted(r, lm.max_positions(), &metrics);
            if !live {
                retire(r, lm.as_ref(), &mut cache, &metrics);
            }
            live
        });
        if running.is_empty() {
            continue;
        }
        let ended = pass(lm.as_mut(), &mut running, budget, &metrics);
        let mut i = 0;
        running.retain_mut(|r| {
            let keep = !ended[i];
            i += 1;
            if !keep {
                retire(r, lm.as_ref(), &mut cache, &metrics);
            }
            keep
        });
    }
}

/// False (the request's end already told) when its client went away, its time is up, or
/// its next piece would not fit the model's positions.
fn still_wanted(r: &Running, max_positions: usize, metrics: &Metrics) -> bool {
    if r.events.is_closed() {
        match r.stopped.load(Relaxed) {
            true => Metrics::add(&metrics.completed, 1),
            false => Metrics::add(&metrics.cancelled, 1),
        }
        return false;
    }
    if Instant::now() > r.deadline {
        Metrics::add(&metrics.timed_out, 1);
        let _ = r
            .events
            .send(Event::Failed(ApiError::timeout(r.timeout.as_secs())));
        return false;
    }
    let next = r.feed.len().min(PREFILL_STEP);
    if r.pos + next > max_positions {
        Metrics::add(&metrics.failed, 1);
        let _ = r.events.send(Event::Failed(ApiError::internal(format!(
            "{} positions needed, the model supports {max_positions}",
            r.pos + next
        ))));
        return false;
    }
    true
}

/// A request leaves: the positions of its prompt that ran go to the prompt cache, and the
/// masks of a generation that did not finish are counted (one that did counted them).
fn retire(r: &Running, lm: &dyn CausalLm, cache: &mut PromptCache, metrics: &Metrics) {
    if r.sound {
        let ran = r.pos.min(r.prompt.len());
        cache.insert(lm, &r.prompt[..ran], &r.sequence, r.pos);
        metrics
            .prompt_cache_bytes
            .store(cache.bytes() as u64, Relaxed);
    }
    if let Some(d) = &r.decoder {
        let (n, us) = d.mask_work();
        Metrics::add(&metrics.masks, n as u64);
        Metrics::add(&metrics.mask_us, us as u64);
    }
    Metrics::sub(&metrics.active, 1);
    Metrics::sub(&metrics.in_system, 1);
}

/// One forward pass over every running request, then the steps of those whose feed it
/// finished. Which requests ended, by index.
fn pass(
    lm: &mut dyn CausalLm,
    running: &mut [Running],
    budget: PassBudget,
    metrics: &Metrics,
) -> Vec<bool> {
    // Prompt positions this pass may run while others decode (see [`PassBudget`]).
    let decoding = running.iter().filter(|r| r.prompt_left == 0).count();
    let mut prefill = match decoding {
        0 => usize::MAX,
        n => budget.prefill_while_decoding.max(n).max(1),
    };
    for r in running.iter_mut() {
        let take = match r.prompt_left {
            0 => r.feed.len().min(PREFILL_STEP),
            _ => r.feed.len().min(PREFILL_STEP).min(prefill),
        };
        if r.prompt_left > 0 {
            prefill -= take;
            r.prompt_left -= take;
        }
        let rest = r.feed.split_off(take);
        r.piece = std::mem::replace(&mut r.feed, rest);
    }
    // A group's masks, before the pass; one that cannot be computed ends its request.
    let mut ended_early = vec![false; running.len()];
    for (r, ended) in running.iter_mut().zip(ended_early.iter_mut()) {
        if let Some(Err(e)) = r.group.as_mut().map(Particles::compute_masks) {
            *ended = !settle_group(r, Err(e), metrics);
        }
    }
    // Requests whose prompt waits for a later pass (the budget is spent) sit this one out.
    let mut items = Vec::with_capacity(running.len());
    // Per item, the positions whose logits come back: a group's particles weigh the tokens
    // the engine appended after a draw, in the pass that runs them.
    let mut tails = Vec::with_capacity(running.len());
    let mut sampling = Vec::new();
    for r in running.iter_mut() {
        if let Some(g) = r.group.as_mut() {
            let (group_items, group_tails) = g.batch(&*lm);
            items.extend(group_items);
            tails.extend(group_tails);
            continue;
        }
        if r.piece.is_empty() {
            continue;
        }
        let Running {
            decoder,
            sequence,
            piece,
            pos,
            feed,
            ..
        } = r;
        if feed.is_empty()
            && let Some(d) = decoder.as_mut()
        {
            sampling.push(d);
        }
        items.push(BatchItem {
            tokens: piece,
            pos: *pos,
            sequence,
        });
        tails.push(1);
    }
    let n: usize = tails.iter().sum();
    if n == 0 {
        // Every request that would have run ended before the pass.
        return ended_early;
    }
    // The masks depend only on the tokens so far: computed while the pass runs. An error
    // stays in its decoder (sticky) and is reported by its own step, so the results are
    // not read here.
    let logits = std::thread::scope(|s| {
        if !sampling.is_empty() {
            s.spawn(|| {
                let _ = compute_masks(&mut sampling);
            });
        }
        lm.forward_batch_tails(&mut items, &tails)
    });
    drop(items);
    Metrics::add(&metrics.forward_passes, 1);
    let logits = match logits {
        Ok(l) if l.len() == n => Ok(l),
        Ok(l) => Err(format!(
            "the model returned {} logits for {n} positions",
            l.len()
        )),
        Err(e) => Err(e.to_string()),
    };
    let logits = match logits {
        Ok(l) => l,
        Err(e) => {
            for (r, _) in running.iter_mut().zip(&ended_early).filter(|(_, e)| !**e) {
                Metrics::add(&metrics.failed, 1);
                r.sound = false;
                let _ = r.events.send(Event::Failed(ApiError::internal(e.clone())));
            }
            return vec![true; running.len()];
        }
    };
    let mut logits = logits.into_iter();
    let lm: &dyn CausalLm = lm;
    running
        .iter_mut()
        .zip(ended_early)
        .map(|(r, ended)| {
            if ended {
                return true;
            }
            if let Some(g) = r.group.as_mut() {
                let rows: Vec<Box<dyn Logits>> = logits.by_ref().take(g.logits_wanted()).collect();
                let stepped = g.advance(rows);
                return !settle_group(r, stepped, metrics);
            }
            if r.piece.is_empty() {
                return false;
            }
            let logits = logits.next().expect("one per request that ran");
            r.pos += r.piece.len();
            // More of the prompt to run first.
            r.feed.is_empty() && !advance(r, &*logits, lm, metrics)
        })
        .collect()
}

/// After a group's step: false when the request ended (its error, or its output, sent on).
fn settle_group(r: &mut Running, stepped: Result<(), GenerateError>, metrics: &Metrics) -> bool {
    if let Err(e) = stepped {
        Metrics::add(&metrics.failed, 1);
        let _ = r.events.send(Event::Failed(generation_error(e)));
        r.group = None;
        r.decoder = None;
        return false;
    }
    let Some(group) = r.group.take_if(|g| g.is_done()) else {
        return true;
    };
    r.decoder = None;
    let mut out = Vec::new();
    let generation = group.finish(&mut |e| Emitted::push(&mut out, e));
    let tokens = generation.tokens.len();
    Metrics::add(&metrics.generated_tokens, tokens as u64);
    if !out.is_empty() {
        let _ = r.events.send(Event::Delta {
            out,
            tokens,
            logprobs: Vec::new(),
        });
    }
    let st = generation.stats;
    Metrics::add(&metrics.masks, st.masks as u64);
    Metrics::add(&metrics.mask_us, (st.mask_us_mean * st.masks as f64) as u64);
    Metrics::add(&metrics.completed, 1);
    let _ = r.events.send(Event::Done {
        finish: generation.finish_reason,
        stats: st,
    });
    false
}

/// The decoder's step from `logits`, its text sent on; false when the request ended. Under
/// the SMC sampler, the prompt's logits start the particles instead.
fn advance(r: &mut Running, logits: &dyn Logits, lm: &dyn CausalLm, metrics: &Metrics) -> bool {
    let Some(decoder) = r.decoder.as_mut() else {
        return false;
    };
    if let SamplerMethod::Smc(smc) = decoder.sampling().method {
        let seed = decoder.sampling().seed;
        let started = Particles::start(lm, decoder, smc, seed, &r.sequence, r.pos, logits);
        return match started {
            Ok(g) => {
                r.group = Some(g);
                settle_group(r, Ok(()), metrics)
            }
            Err(e) => settle_group(r, Err(e), metrics),
        };
    }
    let mut out = Vec::new();
    let before = decoder.tokens().len();
    let next = decoder.advance_emitting(logits, &mut |e| Emitted::push(&mut out, e));
    Metrics::add(
        &metrics.generated_tokens,
        (decoder.tokens().len() - before) as u64,
    );
    let tokens = decoder.tokens().len();
    let logprobs = decoder.take_logprobs();
    let finish = match next {
        Ok(Next::Feed(feed)) => {
            r.feed = feed;
            if !out.is_empty() || !logprobs.is_empty() {
                let _ = r.events.send(Event::Delta {
                    out,
                    tokens,
                    logprobs,
                });
            }
            return true;
        }
        Ok(Next::Done(finish)) => finish,
        Err(e) => {
            Metrics::add(&metrics.failed, 1);
            let _ = r.events.send(Event::Failed(generation_error(e)));
            return false;
        }
    };
    let Some(decoder) = r.decoder.take() else {
        return false;
    };
    let generation = decoder.finish_emitting(finish, &mut |e| Emitted::push(&mut out, e));
    if !out.is_empty() || !logprobs.is_empty() {
        let _ = r.events.send(Event::Delta {
            out,
            tokens,
            logprobs,
        });
    }
    let st = generation.stats;
    Metrics::add(&metrics.masks, st.masks as u64);
    Metrics::add(&metrics.mask_us, (st.mask_us_mean * st.masks as f64) as u64);
    Metrics::add(&metrics.completed, 1);
    let _ = r.events.send(Event::Done { finish, stats: st });
    false
}

/// The API error for a generation that failed: a constraint past one of its limits as it
/// ran (a lexeme's automaton outgrowing `max_lexeme_bytes`, too many lexer runs) is the
/// request's grammar's doing, a 400; anything else is the server's, a 500.
fn generation_error(e: GenerateError) -> ApiError {
    match e {
        GenerateError::Constraint(AdapterError::Limit(l)) => ApiError {
            code: Some("constraint_limit"),
            ..ApiError::invalid(format!(
                "the constraint reached a limit while generating: {l}"
            ))
        },
        e => ApiError::internal(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use corral_grammar::RecognizeError;

    #[test]
    fn a_constraint_limit_while_generating_is_the_requests_400() {
        let limit = RecognizeError::limit(
            "bytes of one lexeme",
            40 << 20,
            "max_lexeme_bytes",
            32 << 20,
        );
        let e = generation_error(GenerateError::Constraint(AdapterError::Limit(limit)));
        assert_eq!(e.status.as_u16(), 400);
        assert_eq!(e.code, Some("constraint_limit"));
        assert!(e.message.contains("max_lexeme_bytes"), "{}", e.message);
        let e = generation_error(GenerateError::NothingToSample);
        assert_eq!(e.status.as_u16(), 500);
    }
}
