//! Replaying recorded tokenizations through a constraint: the test harness behind
//! `corral replay`. For every token: compute the mask (timed), check that the token is in
//! it, step. At the end: is EOS allowed?

use crate::adapter::{Constraint, RobustConstrainedAdapter};
use std::sync::Arc;
use std::time::Instant;

/// Where a run was first refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejection {
    pub run: usize,
    pub token_index: usize,
    /// Bytes of output before the refused token.
    pub output_bytes: usize,
}

/// The outcome of replaying runs.
#[derive(Clone, Debug, Default)]
pub struct ReplayReport {
    /// Tokens replayed, over all runs.
    pub tokens: usize,
    pub runs: usize,
    pub first_reject: Option<Rejection>,
    /// Some run was not refused, and every such run ended where EOS was allowed.
    pub eos_allowed_at_end: bool,
    /// Microseconds per `compute_mask`, in call order.
    pub mask_us: Vec<f64>,
}

impl ReplayReport {
    /// `(mean, p50, p99)` of the mask times, in microseconds.
    pub fn mask_stats(&self) -> (f64, f64, f64) {
        stats(&self.mask_us)
    }
}

/// `(mean, p50, p99)` of a sample.
pub fn stats(xs: &[f64]) -> (f64, f64, f64) {
    if xs.is_empty() {
        return (0.0, 0.0, 0.0);
    }
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let pct = |p: f64| v[((v.len() - 1) as f64 * p).round() as usize];
    (v.iter().sum::<f64>() / v.len() as f64, pct(0.5), pct(0.99))
}

/// Replays each token sequence from the start of the output.
pub fn replay(c: &Arc<Constraint>, runs: &[Vec<u32>]) -> ReplayReport {
    let mut report = ReplayReport {
        runs: runs.len(),
        eos_allowed_at_end: true,
        ..ReplayReport::default()
    };
    let eos = c.space().eos().to_vec();
    let mut completed = 0;
    for (r, tokens) in runs.iter().enumerate() {
        let mut a = RobustConstrainedAdapter::new(c.clone());
        let mut mask = a.new_mask();
        let mut refused = false;
        for (i, &t) in tokens.iter().enumerate() {
            let t0 = Instant::now();
            let ok = a.compute_mask(&mut mask).is_ok();
            report.mask_us.push(t0.elapsed().as_secs_f64() * 1e6);
            report.tokens += 1;
            if !ok || !mask.contains(t as usize) || a.step_with_token(t).is_err() {
                if report.first_reject.is_none() {
                    report.first_reject = Some(Rejection {
                        run: r,
                        token_index: i,
                        output_bytes: a.output().len(),
                    });
                }
                refused = true;
                break;
            }
        }
        if !refused {
            completed += 1;
            let ok =
                a.compute_mask(&mut mask).is_ok() && eos.iter().any(|&e| mask.contains(e as usize));
            report.eos_allowed_at_end &= ok;
        }
    }
    report.eos_allowed_at_end &= completed > 0;
    report
}
