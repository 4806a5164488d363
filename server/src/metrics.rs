//! Counters for `GET /metrics`, in Prometheus' text format.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// What the server counts. Times are summed in microseconds.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Generation requests received (`POST`s, refused ones included).
    pub requests: AtomicU64,
    /// Requests answered with an error, before or after generation began.
    pub request_errors: AtomicU64,
    /// Generations that ran to their end (or to a stop sequence).
    pub completed: AtomicU64,
    /// Generations stopped because the client went away.
    pub cancelled: AtomicU64,
    /// Requests stopped at the request time limit, in preparation or generation.
    pub timed_out: AtomicU64,
    /// Generations ended by an error of the model or the decoder.
    pub failed: AtomicU64,
    /// Prompt tokens of requests that reached the scheduler.
    pub prompt_tokens: AtomicU64,
    /// Prompt tokens whose positions were copied from the prompt cache, not run.
    pub prompt_cached_tokens: AtomicU64,
    /// Gauge: bytes the prompt cache holds, as of the last request to leave.
    pub prompt_cache_bytes: AtomicU64,
    /// Tokens generated.
    pub generated_tokens: AtomicU64,
    /// Gauge: requests being prepared or waiting for a generation slot.
    pub queued: AtomicU64,
    /// Requests queued or generating: what admission counts against
    /// `max_concurrent + queue`.
    pub in_system: AtomicU64,
    /// Gauge: requests generating now.
    pub active: AtomicU64,
    /// Token masks computed.
    pub masks: AtomicU64,
    /// Time computing token masks, in microseconds.
    pub mask_us: AtomicU64,
    /// Constraints looked up or compiled (cache hits included).
    pub compiles: AtomicU64,
    /// Time looking up or compiling constraints, in microseconds.
    pub compile_us: AtomicU64,
    /// Forward passes of the model (one a scheduler step, over all running requests).
    pub forward_passes: AtomicU64,
}

impl Metrics {
    /// Adds `n` to `counter`.
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Relaxed);
    }

    /// Takes `n` from `counter` (a gauge going down).
    pub fn sub(counter: &AtomicU64, n: u64) {
        counter.fetch_sub(n, Relaxed);
    }

    /// Takes a place if fewer than `capacity` requests are queued or generating.
    pub fn admit(&self, capacity: u64) -> bool {
        self.in_system
            .fetch_update(Relaxed, Relaxed, |n| (n < capacity).then_some(n + 1))
            .is_ok()
    }

    /// The exposition text, with the constraint cache's counts if the model is loaded.
    pub fn render(&self, cache: Option<corral_engine::CacheStats>) -> String {
        const COUNTER: &str = "counter";
        const GAUGE: &str = "gauge";
        let get = |c: &AtomicU64| c.load(Relaxed) as f64;
        // One row a metric: name, type, help, value.
        #[rustfmt::skip]
        let mut rows: Vec<(&str, &str, &str, f64)> = vec![
            ("corral_requests_total", COUNTER, "Generation requests received.", get(&self.requests)),
            ("corral_request_errors_total", COUNTER, "Requests answered with an error.", get(&self.request_errors)),
            ("corral_requests_completed_total", COUNTER, "Generations that ran to their end (a stop sequence or the grammar's end included).", get(&self.completed)),
            ("corral_requests_cancelled_total", COUNTER, "Generations stopped because the client went away.", get(&self.cancelled)),
            ("corral_requests_timed_out_total", COUNTER, "Requests stopped at the request time limit, while being prepared or generating.", get(&self.timed_out)),
            ("corral_requests_failed_total", COUNTER, "Generations ended by an error of the model or the decoder.", get(&self.failed)),
            ("corral_prompt_tokens_total", COUNTER, "Prompt tokens of requests that started generating.", get(&self.prompt_tokens)),
            ("corral_prompt_tokens_cached_total", COUNTER, "Prompt tokens copied from the prompt cache instead of run.", get(&self.prompt_cached_tokens)),
            ("corral_prompt_cache_bytes", GAUGE, "Bytes the prompt cache holds: KV caches of earlier prompts.", get(&self.prompt_cache_bytes)),
            ("corral_generated_tokens_total", COUNTER, "Tokens generated.", get(&self.generated_tokens)),
            ("corral_queue_depth", GAUGE, "Requests being prepared or waiting for a generation slot.", get(&self.queued)),
            ("corral_active_requests", GAUGE, "Requests generating now.", get(&self.active)),
            ("corral_forward_passes_total", COUNTER, "Forward passes of the model.", get(&self.forward_passes)),
            ("corral_masks_total", COUNTER, "Token masks computed.", get(&self.masks)),
            ("corral_mask_seconds_total", COUNTER, "Time computing token masks.", get(&self.mask_us) / 1e6),
            ("corral_compiles_total", COUNTER, "Constraints looked up or compiled (cache hits included).", get(&self.compiles)),
            ("corral_compile_seconds_total", COUNTER, "Time looking up or compiling constraints.", get(&self.compile_us) / 1e6),
        ];
        if let Some(c) = cache {
            #[rustfmt::skip]
            let more = [
                ("corral_constraint_cache_hits_total", COUNTER, "Constraints found in the cache.", c.hits as f64),
                ("corral_constraint_cache_misses_total", COUNTER, "Constraints compiled.", c.misses as f64),
                ("corral_constraint_cache_entries", GAUGE, "Constraints kept.", c.entries as f64),
                ("corral_constraint_cache_bytes", GAUGE, "Heap bytes the constraint cache holds: lexeme DFAs and token sets.", c.bytes as f64),
                ("corral_constraint_cache_evictions_total", COUNTER, "Constraints dropped for the cache's byte bound.", c.evicted_for_bytes as f64),
            ];
            rows.extend(more);
        }
        let mut out = String::new();
        for (name, kind, help, value) in rows {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
            );
        }
        out
    }
}
