//! Counters for `GET /metrics`, in Prometheus' text format.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// What the server counts. Times are summed in microseconds.
#[derive(Debug, Default)]
pub struct Metrics {
    pub requests: AtomicU64,
    pub request_errors: AtomicU64,
    pub completed: AtomicU64,
    pub cancelled: AtomicU64,
    pub timed_out: AtomicU64,
    pub prompt_tokens: AtomicU64,
    pub generated_tokens: AtomicU64,
    pub queued: AtomicU64,
    /// Requests queued or generating: what admission counts against
    /// `max_concurrent + queue`.
    pub in_system: AtomicU64,
    pub active: AtomicU64,
    pub masks: AtomicU64,
    pub mask_us: AtomicU64,
    pub compiles: AtomicU64,
    pub compile_us: AtomicU64,
    pub forward_passes: AtomicU64,
}

impl Metrics {
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Relaxed);
    }

    pub fn sub(counter: &AtomicU64, n: u64) {
        counter.fetch_sub(n, Relaxed);
    }

    /// Takes a place if fewer than `capacity` requests are queued or generating.
    pub fn admit(&self, capacity: u64) -> bool {
        self.in_system
            .fetch_update(Relaxed, Relaxed, |n| (n < capacity).then_some(n + 1))
            .is_ok()
    }

    /// The exposition text; `cache` is the constraint cache's (hits, misses, entries).
    pub fn render(&self, cache: Option<(u64, u64, usize)>) -> String {
        let mut out = String::new();
        let mut one = |name: &str, kind: &str, help: &str, value: f64| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
            );
        };
        let get = |c: &AtomicU64| c.load(Relaxed) as f64;
        one(
            "corral_requests_total",
            "counter",
            "Generation requests received.",
            get(&self.requests),
        );
        one(
            "corral_request_errors_total",
            "counter",
            "Requests answered with an error.",
            get(&self.request_errors),
        );
        one(
            "corral_requests_completed_total",
            "counter",
            "Generations that ran to their end.",
            get(&self.completed),
        );
        one(
            "corral_requests_cancelled_total",
            "counter",
            "Generations stopped because the client went away.",
            get(&self.cancelled),
        );
        one(
            "corral_requests_timed_out_total",
            "counter",
            "Generations stopped at the request time limit.",
            get(&self.timed_out),
        );
        one(
            "corral_prompt_tokens_total",
            "counter",
            "Prompt tokens of admitted requests.",
            get(&self.prompt_tokens),
        );
        one(
            "corral_generated_tokens_total",
            "counter",
            "Tokens generated.",
            get(&self.generated_tokens),
        );
        one(
            "corral_queue_depth",
            "gauge",
            "Requests waiting for a generation slot.",
            get(&self.queued),
        );
        one(
            "corral_active_requests",
            "gauge",
            "Requests generating now.",
            get(&self.active),
        );
        one(
            "corral_forward_passes_total",
            "counter",
            "Forward passes of the model.",
            get(&self.forward_passes),
        );
        one(
            "corral_masks_total",
            "counter",
            "Token masks computed.",
            get(&self.masks),
        );
        one(
            "corral_mask_seconds_total",
            "counter",
            "Time computing token masks.",
            get(&self.mask_us) / 1e6,
        );
        one(
            "corral_compiles_total",
            "counter",
            "Constraints looked up or compiled (cache hits included).",
            get(&self.compiles),
        );
        one(
            "corral_compile_seconds_total",
            "counter",
            "Time looking up or compiling constraints.",
            get(&self.compile_us) / 1e6,
        );
        if let Some((hits, misses, entries)) = cache {
            one(
                "corral_constraint_cache_hits_total",
                "counter",
                "Constraints found in the cache.",
                hits as f64,
            );
            one(
                "corral_constraint_cache_misses_total",
                "counter",
                "Constraints compiled.",
                misses as f64,
            );
            one(
                "corral_constraint_cache_entries",
                "gauge",
                "Constraints kept.",
                entries as f64,
            );
        }
        out
    }
}
