//! Replaying recorded tokenizations through a constraint: the test harness behind
//! `corral replay`. For every token: compute the mask (timed), check that the token is in
//! it, step. At the end: is EOS allowed?

use crate::adapter::RobustConstrainedAdapter;
use crate::constraint::Constraint;
use corral_trie::TokenId;
use std::sync::Arc;
use std::time::Instant;

/// Where a run was first refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejection {
    /// Index of the run in the `runs` replayed.
    pub run: usize,
    /// Index of the refused token in its run: the mask failed, did not hold it, or the
    /// adapter refused it.
    pub token_index: usize,
    /// Bytes of output before the refused token.
    pub output_bytes: usize,
}

/// The outcome of replaying runs.
#[derive(Clone, Debug, Default)]
pub struct ReplayReport {
    /// Tokens replayed, over all runs.
    pub tokens: usize,
    /// Runs given, refused ones included.
    pub runs: usize,
    /// The first refusal over all runs, in run order; `None` when every token of every run
    /// was allowed.
    pub first_reject: Option<Rejection>,
    /// Some run was not refused, and every such run ended where EOS was allowed.
    pub eos_allowed_at_end: bool,
    /// Microseconds per `compute_mask`, in call order.
    pub mask_us: Vec<f64>,
}

impl ReplayReport {
    /// The mask times' summary, in microseconds.
    pub fn mask_stats(&self) -> Summary {
        stats(&self.mask_us)
    }
}

/// The mean and percentiles of a sample (all 0 for an empty one).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Summary {
    /// The arithmetic mean.
    pub mean: f64,
    /// The median (nearest rank).
    pub p50: f64,
    /// The 99th percentile (nearest rank).
    pub p99: f64,
}

/// The mean, p50 and p99 of a sample (nearest rank).
pub fn stats(xs: &[f64]) -> Summary {
    if xs.is_empty() {
        return Summary::default();
    }
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let pct = |p: f64| v[((v.len() - 1) as f64 * p).round() as usize];
    Summary {
        mean: v.iter().sum::<f64>() / v.len() as f64,
        p50: pct(0.5),
        p99: pct(0.99),
    }
}

/// One computed mask of a replay, as [`replay_observed`] shows it.
#[derive(Debug)]
pub struct ReplayStep<'a> {
    /// Index of the run in the `runs` replayed.
    pub run: usize,
    /// Tokens of the run consumed before this mask.
    pub step: usize,
    /// The mask: the tokens the constraint allows at this step.
    pub mask: &'a corral_trie::FixedBitSet,
    /// The run's token taken after this mask; `None` for the mask after the last token
    /// (where EOS is checked).
    pub token: Option<TokenId>,
}

/// Replays each token sequence from the start of the output.
pub fn replay(c: &Arc<Constraint>, runs: &[Vec<TokenId>]) -> ReplayReport {
    match replay_observed(c, runs, |_| Ok::<(), std::convert::Infallible>(())) {
        Ok(report) => report,
    }
}

/// [`replay`], showing every computed mask to `observe` (untimed) before its token is
/// checked; the observer's first error ends the replay. `corral replay --masks` writes
/// them out this way.
pub fn replay_observed<E>(
    c: &Arc<Constraint>,
    runs: &[Vec<TokenId>],
    mut observe: impl FnMut(ReplayStep) -> Result<(), E>,
) -> Result<ReplayReport, E> {
    let mut report = ReplayReport {
        runs: runs.len(),
        eos_allowed_at_end: true,
        ..ReplayReport::default()
    };
    let eos = c.space().eos().to_vec();
    let mut completed = 0;
    for (r, tokens) in runs.iter().enumerate() {
        let mut a = RobustConstrainedAdapter::new(c.clone());
        let mut mask = a.empty_mask();
        let mut refused = false;
        for (i, &t) in tokens.iter().enumerate() {
            let t0 = Instant::now();
            let ok = a.compute_mask(&mut mask).is_ok();
            report.mask_us.push(t0.elapsed().as_secs_f64() * 1e6);
            report.tokens += 1;
            if ok {
                observe(ReplayStep {
                    run: r,
                    step: i,
                    mask: &mask,
                    token: Some(t),
                })?;
            }
            if !ok || !mask.contains(t.index()) || a.step_with_token(t).is_err() {
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
            let computed = a.compute_mask(&mut mask).is_ok();
            if computed {
                observe(ReplayStep {
                    run: r,
                    step: tokens.len(),
                    mask: &mask,
                    token: None,
                })?;
            }
            report.eos_allowed_at_end &= computed && eos.iter().any(|&e| mask.contains(e.index()));
        }
    }
    report.eos_allowed_at_end &= completed > 0;
    Ok(report)
}

/// The mask by brute force: every token's bytes are pushed on a fork of `a` and rolled
/// back; EOS and stop tokens are allowed when the output is complete or the grammar names
/// them by reference. Independent of the mask computation (no caches, no trie walk): what
/// [`RobustConstrainedAdapter::compute_mask`] must equal. Runs in parallel over the
/// vocabulary.
///
/// Text tokens are taken in byte order and pushed a byte at a time, so a prefix that
/// neighbours share is pushed once, and a refused prefix refuses every token that starts
/// with it (a byte the recognizer refuses stays refused whatever follows). Where the grammar
/// expects a token reference, which may name any id, every id is stepped whole with
/// [`RobustConstrainedAdapter::step_with_token`]; so are ids without bytes (end and special
/// tokens) and empty ones.
pub fn brute_force_mask(a: &RobustConstrainedAdapter) -> corral_trie::FixedBitSet {
    use rayon::prelude::*;
    let space = a.constraint().space().clone();
    let vocab = space.vocab();
    let width = space.width();
    let by_reference = a.expects_any_reference();
    let whole: Vec<TokenId> = (0..width as u32)
        .map(TokenId)
        .filter(|&t| by_reference || vocab.token_bytes(t).is_none_or(|b| b.is_empty()))
        .collect();
    const CHUNK: usize = 2048;
    let mut parts: Vec<Vec<TokenId>> = whole
        .par_chunks(CHUNK)
        .map(|chunk| {
            let mut fork = a.fork();
            let mut allowed = Vec::new();
            for &t in chunk {
                if fork.step_with_token(t).is_ok() {
                    allowed.push(t);
                    fork.rollback(1).expect("rollback after a step");
                }
            }
            allowed
        })
        .collect();
    if !by_reference {
        let sorted = space.text_tokens_by_bytes();
        let ranges: Vec<usize> = (0..sorted.len()).step_by(CHUNK).collect();
        parts.par_extend(
            ranges
                .into_par_iter()
                .map(|lo| by_prefix(a, sorted, lo, (lo + CHUNK).min(sorted.len()))),
        );
    }
    let mut mask = corral_trie::FixedBitSet::with_capacity(width);
    parts.iter().flatten().for_each(|&t| mask.insert(t.index()));
    mask
}

/// The tokens `lo..hi` of `sorted` (text tokens in byte order) whose bytes a fork of `a`
/// takes, pushed one byte per step so that neighbours share their common prefix; a refused
/// prefix skips the run of tokens that start with it.
fn by_prefix(
    a: &RobustConstrainedAdapter,
    sorted: &corral_trie::SortedTokens,
    lo: usize,
    hi: usize,
) -> Vec<TokenId> {
    let mut fork = a.fork();
    let mut allowed = Vec::new();
    // The bytes pushed on the fork, one step each.
    let mut path: Vec<u8> = Vec::new();
    let mut i = lo;
    while i < hi {
        let bytes = sorted.bytes(i);
        let common = path.iter().zip(bytes).take_while(|(x, y)| x == y).count();
        fork.rollback(path.len() - common)
            .expect("rollback of pushed bytes");
        path.truncate(common);
        let mut taken = !bytes.is_empty();
        for &b in &bytes[common..] {
            if fork.push_bytes(&[b]).unwrap_or(false) {
                path.push(b);
            } else {
                taken = false;
                break;
            }
        }
        if taken {
            allowed.push(sorted.id(i));
            i += 1;
        } else if bytes.is_empty() {
            i += 1;
        } else {
            i = sorted.run_end(i, hi, &bytes[..path.len() + 1]);
        }
    }
    allowed
}

/// Where a computed mask and the brute-force mask first differed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MaskMismatch {
    /// Tokens consumed before the step.
    pub step: usize,
    /// The output before the step (lossy UTF-8).
    pub output: String,
    /// Allowed by the mask, refused by brute force (at most 10 shown).
    pub extra: Vec<TokenId>,
    /// Refused by the mask, allowed by brute force (at most 10 shown).
    pub missing: Vec<TokenId>,
    /// Or the mask computation failed (or a token of `tokens` was refused).
    pub error: Option<String>,
}

/// Replays `tokens` through a fresh adapter of `c`, comparing the computed mask with
/// [`brute_force_mask`] before every token and at the end. Returns the number of masks
/// checked.
pub fn check_masks_exact(c: &Arc<Constraint>, tokens: &[TokenId]) -> Result<usize, MaskMismatch> {
    let mut a = RobustConstrainedAdapter::new(c.clone());
    let mut mask = a.empty_mask();
    let fail = |a: &RobustConstrainedAdapter, error: String| MaskMismatch {
        step: a.tokens_consumed(),
        output: String::from_utf8_lossy(a.output()).into_owned(),
        extra: Vec::new(),
        missing: Vec::new(),
        error: Some(error),
    };
    for i in 0..=tokens.len() {
        a.compute_mask(&mut mask)
            .map_err(|e| fail(&a, e.to_string()))?;
        let brute = brute_force_mask(&a);
        if mask != brute {
            return Err(MaskMismatch {
                step: i,
                output: String::from_utf8_lossy(a.output()).into_owned(),
                extra: mask
                    .difference(&brute)
                    .take(10)
                    .map(|t| TokenId(t as u32))
                    .collect(),
                missing: brute
                    .difference(&mask)
                    .take(10)
                    .map(|t| TokenId(t as u32))
                    .collect(),
                error: None,
            });
        }
        if let Some(&t) = tokens.get(i) {
            a.step_with_token(t).map_err(|e| fail(&a, e.to_string()))?;
        }
    }
    Ok(tokens.len() + 1)
}
