//! The scheduler: one thread owns the network and serves up to `max_concurrent` requests
//! at once, one decoding step of each in turn.
//!
//! Each request keeps its own KV cache as a snapshot (tensors shared, not copied), restored
//! before its forward pass when another request ran last. The loop:
//! 1. admit queued requests while there is room (block on the queue when nothing runs);
//! 2. for each running request: stop it if its client went away or its time is up;
//!    restore its cache, run the forward pass on the tokens it fed (the prompt first),
//!    snapshot the cache, and let its [`Decoder`] sample the next token(s) from the
//!    logits; meanwhile, on another thread, the next request's mask is computed;
//! 3. send the text delta to the request's handler, or the end.
//!
//! A long prompt runs [`PREFILL_STEP`] positions per step, so that the requests beside it
//! keep decoding between its pieces, and its time limit and its client's departure are
//! checked between them.
//!
//! The forward passes of concurrent requests run one after another, not batched into one
//! pass: the candle models take one sequence per pass.

use crate::error::ApiError;
use crate::metrics::Metrics;
use corral_engine::{CausalLm, Decoder, FinishReason, GenerationStats, Logits, Next};
use corral_trie::TokenId;
use std::any::Any;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::{Duration, Instant};
use tokio::sync::mpsc::UnboundedSender;

/// Most positions of a request's feed (its prompt, mostly) run in one step.
pub const PREFILL_STEP: usize = 256;

/// A request admitted to the queue.
pub struct Job {
    pub decoder: Decoder,
    pub prompt: Vec<TokenId>,
    pub events: UnboundedSender<Event>,
    pub deadline: Instant,
    pub timeout: Duration,
    /// Set by the handler when a stop sequence ended the output: a closed channel then
    /// means done, not cancelled.
    pub stopped: Arc<AtomicBool>,
}

/// What the scheduler tells a request's handler.
#[derive(Debug)]
pub enum Event {
    /// Text decoded; `tokens` generated so far.
    Delta {
        text: String,
        tokens: usize,
    },
    Done {
        finish: FinishReason,
        stats: GenerationStats,
    },
    Failed(ApiError),
}

struct Running {
    id: u64,
    decoder: Option<Decoder>,
    events: UnboundedSender<Event>,
    deadline: Instant,
    timeout: Duration,
    stopped: Arc<AtomicBool>,
    /// Tokens to run the model on next, at position `pos`.
    feed: Vec<TokenId>,
    pos: usize,
    kv: Option<Box<dyn Any + Send>>,
}

/// Runs until the queue's senders are gone and nothing runs.
pub fn run(
    mut lm: Box<dyn CausalLm>,
    queue: Receiver<Job>,
    max_concurrent: usize,
    metrics: Arc<Metrics>,
) {
    let mut running: Vec<Running> = Vec::new();
    // Whose KV cache the network holds.
    let mut owner: Option<u64> = None;
    let mut next_id = 0u64;
    loop {
        while running.len() < max_concurrent.max(1) {
            let job = if running.is_empty() {
                match queue.recv() {
                    Ok(j) => j,
                    Err(_) => return,
                }
            } else {
                match queue.try_recv() {
                    Ok(j) => j,
                    Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
                }
            };
            Metrics::sub(&metrics.queued, 1);
            if job.events.is_closed() {
                Metrics::add(&metrics.cancelled, 1);
                Metrics::sub(&metrics.in_system, 1);
                continue;
            }
            let stopped = job.stopped;
            Metrics::add(&metrics.active, 1);
            Metrics::add(&metrics.prompt_tokens, job.prompt.len() as u64);
            next_id += 1;
            running.push(Running {
                id: next_id,
                decoder: Some(job.decoder),
                events: job.events,
                deadline: job.deadline,
                timeout: job.timeout,
                stopped,
                feed: job.prompt,
                pos: 0,
                kv: None,
            });
        }
        let mut i = 0;
        while i < running.len() {
            let live = step(lm.as_mut(), &mut running, i, &mut owner, &metrics);
            if live {
                i += 1;
            } else {
                let r = running.remove(i);
                // Masks of a generation that did not finish (one that did counted them).
                if let Some(d) = &r.decoder {
                    let (n, us) = d.mask_work();
                    Metrics::add(&metrics.masks, n as u64);
                    Metrics::add(&metrics.mask_us, us as u64);
                }
                Metrics::sub(&metrics.active, 1);
                Metrics::sub(&metrics.in_system, 1);
            }
        }
    }
}

/// One step of `running[i]`; false when it ended.
fn step(
    lm: &mut dyn CausalLm,
    running: &mut [Running],
    i: usize,
    owner: &mut Option<u64>,
    metrics: &Metrics,
) -> bool {
    {
        let r = &running[i];
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
    }
    let (r, next) = this_and_next(running, i);
    let logits = match next {
        // The next request's mask depends only on its tokens so far: compute it while
        // this request's forward pass runs.
        Some(n) if n.decoder.is_some() => std::thread::scope(|s| {
            s.spawn(|| {
                // An error stays in the decoder (sticky) and is reported by its own step.
                if let Some(d) = n.decoder.as_mut() {
                    let _ = d.prepare();
                }
            });
            forward(lm, r, owner)
        }),
        _ => forward(lm, r, owner),
    };
    Metrics::add(&metrics.forward_passes, 1);
    let logits = match logits {
        // More of the prompt to run first.
        Ok(None) => return true,
        Ok(Some(l)) => l,
        Err(e) => {
            *owner = None;
            let _ = r.events.send(Event::Failed(ApiError::internal(e)));
            return false;
        }
    };
    advance(r, &*logits, metrics)
}

/// `running[i]` and, if another request runs, the one after it (wrapping).
fn this_and_next(running: &mut [Running], i: usize) -> (&mut Running, Option<&mut Running>) {
    let n = running.len();
    if n < 2 {
        return (&mut running[i], None);
    }
    if i + 1 < n {
        let (left, right) = running.split_at_mut(i + 1);
        (&mut left[i], right.first_mut())
    } else {
        let (left, right) = running.split_at_mut(i);
        (&mut right[0], left.first_mut())
    }
}

/// Runs the next (at most [`PREFILL_STEP`]) positions of `r`'s feed; the logits once the
/// feed is done, `None` while some of it remains.
fn forward(
    lm: &mut dyn CausalLm,
    r: &mut Running,
    owner: &mut Option<u64>,
) -> Result<Option<Box<dyn Logits>>, String> {
    if *owner != Some(r.id)
        && r.pos > 0
        && let Some(kv) = &r.kv
    {
        lm.restore(kv.as_ref()).map_err(|e| e.to_string())?;
    }
    let rest = r.feed.split_off(r.feed.len().min(PREFILL_STEP));
    let feed = std::mem::replace(&mut r.feed, rest);
    let logits = lm.forward(&feed, r.pos).map_err(|e| e.to_string())?;
    r.pos += feed.len();
    r.kv = Some(lm.snapshot());
    *owner = Some(r.id);
    Ok(r.feed.is_empty().then_some(logits))
}

/// The decoder's step from `logits`, its text sent on; false when the request ended.
fn advance(r: &mut Running, logits: &dyn Logits, metrics: &Metrics) -> bool {
    let Some(decoder) = r.decoder.as_mut() else {
        return false;
    };
    let mut text = String::new();
    let before = decoder.tokens().len();
    let next = decoder.advance(logits, &mut |s| text.push_str(s));
    Metrics::add(
        &metrics.generated_tokens,
        (decoder.tokens().len() - before) as u64,
    );
    let tokens = decoder.tokens().len();
    let finish = match next {
        Ok(Next::Feed(feed)) => {
            r.feed = feed;
            if !text.is_empty() {
                let _ = r.events.send(Event::Delta { text, tokens });
            }
            return true;
        }
        Ok(Next::Done(finish)) => finish,
        Err(e) => {
            let _ = r
                .events
                .send(Event::Failed(ApiError::internal(e.to_string())));
            return false;
        }
    };
    let Some(decoder) = r.decoder.take() else {
        return false;
    };
    let generation = decoder.finish(finish, &mut |s| text.push_str(s));
    if !text.is_empty() {
        let _ = r.events.send(Event::Delta { text, tokens });
    }
    let st = generation.stats;
    Metrics::add(&metrics.masks, st.masks as u64);
    Metrics::add(&metrics.mask_us, (st.mask_us_mean * st.masks as f64) as u64);
    Metrics::add(&metrics.completed, 1);
    let _ = r.events.send(Event::Done { finish, stats: st });
    false
}
