//! Log-probabilities of the tokens a generation produces, for clients that ask for them
//! (OpenAI's `logprobs` and `top_logprobs`).
//!
//! They are read off the distribution the token was drawn from: the model's logits after
//! the grammar's mask (masked tokens have probability 0, the others share all of it), the
//! logit bias and the penalties, before temperature and the top-k, top-p and min-p cuts.
//! Under a constraint that is the masked distribution, not the model's own.

use corral_trie::TokenId;

/// A token's log-probability, and the most likely tokens' at the same step.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenLogprob {
    /// The token drawn.
    pub token: TokenId,
    /// Its natural-log probability (minus infinity if it was masked or out of range).
    pub logprob: f32,
    /// The `n` most likely tokens, most likely first (ties: lower ids first).
    pub top: Vec<(TokenId, f32)>,
}

/// The natural log of the sum of `exp(l * scale)` over the finite logits `l` (minus
/// infinity where there are none): the log of a softmax's normalizer at temperature
/// `1 / scale`. The SMC sampler takes it over the whole vocabulary several times a step,
/// so it runs in lanes the compiler vectorizes, with a branch-free exp: within 1e-6 of
/// the sum in f64 (`a_fast_normalizer_is_within_a_millionth`).
pub fn log_sum_exp(logits: &[f32], scale: f32) -> f64 {
    const LANES: usize = 16;
    let finite = |l: f32| l.abs() < f32::INFINITY;
    let mut lanes = [f32::NEG_INFINITY; LANES];
    let mut it = logits.chunks_exact(LANES);
    for c in &mut it {
        for (m, &l) in lanes.iter_mut().zip(c) {
            let v = if finite(l) { l } else { f32::NEG_INFINITY };
            *m = if v > *m { v } else { *m };
        }
    }
    let max = it
        .remainder()
        .iter()
        .chain(&lanes)
        .copied()
        .filter(|&l| finite(l))
        .fold(f32::NEG_INFINITY, f32::max);
    if max == f32::NEG_INFINITY {
        return f64::NEG_INFINITY;
    }
    let term = |l: f32| {
        let e = exp_nonpositive((l - max) * scale);
        if finite(l) { e } else { 0.0 }
    };
    // Each block's lanes sum in f32, the blocks in f64.
    let mut sum = 0f64;
    for block in logits.chunks(512) {
        let mut acc = [0f32; LANES];
        let mut it = block.chunks_exact(LANES);
        for c in &mut it {
            let c: &[f32; LANES] = c.try_into().expect("LANES values");
            for (a, &l) in acc.iter_mut().zip(c) {
                *a += term(l);
            }
        }
        sum += it.remainder().iter().map(|&l| term(l) as f64).sum::<f64>();
        sum += acc.iter().map(|&a| a as f64).sum::<f64>();
    }
    max as f64 * scale as f64 + sum.ln()
}

/// `exp(x)` for `x <= 0` (minus infinity and anything under -87, where f32 leaves its
/// normal range, give 0), within 3e-7 of it relatively: `x = k ln 2 + r` with `|r| <=
/// ln 2 / 2`, `exp(r)` by its Taylor series to the 6th power, times `2^k` built from its
/// bits. Branch-free and with no float-to-integer conversion, so that a loop over it
/// vectorizes.
#[inline(always)]
fn exp_nonpositive(x: f32) -> f32 {
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    // Adding and taking away 1.5 * 2^23 rounds to an integer.
    const ROUND: f32 = 12_582_912.0;
    let c = x.clamp(-87.0, 0.0);
    let k = (c * std::f32::consts::LOG2_E + ROUND) - ROUND;
    let r = c - k * LN2_HI - k * LN2_LO;
    let p = 1.0
        + r * (1.0
            + r * (0.5 + r * (1.0 / 6.0 + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r / 720.0)))));
    // `k + 127` (in 1..=127) sits in the low bits of `ROUND + k + 127`'s mantissa; shifted
    // into the exponent's place, every higher bit falls off the top: `2^k`.
    let two_k = f32::from_bits((k + (127.0 + ROUND)).to_bits() << 23);
    if x >= -87.0 { p * two_k } else { 0.0 }
}

/// The log-probability of `token` under the softmax of `logits` (minus infinity is a
/// masked token), with the `top` most likely tokens'.
pub fn token_logprob(logits: &[f32], token: TokenId, top: usize) -> TokenLogprob {
    let max = logits
        .iter()
        .copied()
        .filter(|l| l.is_finite())
        .fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits
        .iter()
        .filter(|l| l.is_finite())
        .map(|&l| ((l - max) as f64).exp())
        .sum();
    let lse = max as f64 + sum.ln();
    let lp = |l: f32| (l as f64 - lse) as f32;
    let logprob = logits
        .get(token.index())
        .map_or(f32::NEG_INFINITY, |&l| lp(l));
    let mut best: Vec<(TokenId, f32)> = Vec::new();
    if top > 0 {
        let mut finite: Vec<(u32, f32)> = logits
            .iter()
            .enumerate()
            .filter(|(_, l)| l.is_finite())
            .map(|(i, &l)| (i as u32, l))
            .collect();
        let order = |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        let n = top.min(finite.len());
        if n > 0 && n < finite.len() {
            finite.select_nth_unstable_by(n - 1, order);
        }
        finite.truncate(n);
        finite.sort_unstable_by(order);
        best = finite
            .into_iter()
            .map(|(i, l)| (TokenId(i), lp(l)))
            .collect();
    }
    TokenLogprob {
        token,
        logprob,
        top: best,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logprobs_are_of_the_masked_softmax() {
        let inf = f32::NEG_INFINITY;
        let l = [1.0f32, inf, 1.0, 1.0 + 2f32.ln(), inf];
        let t = token_logprob(&l, TokenId(3), 2);
        // exp: e, 0, e, 2e, 0: token 3 has half the mass.
        assert!((t.logprob - 0.5f32.ln()).abs() < 1e-6, "{t:?}");
        assert_eq!(t.top.len(), 2);
        assert_eq!(t.top[0].0, TokenId(3));
        assert_eq!(t.top[1].0, TokenId(0), "ties go to the lower id");
        assert!((t.top[1].1 - 0.25f32.ln()).abs() < 1e-6);
        // The masked token has no mass; asking for more than there are gives them all.
        assert_eq!(token_logprob(&l, TokenId(1), 10).logprob, inf);
        assert_eq!(token_logprob(&l, TokenId(1), 10).top.len(), 3);
        let total: f32 = token_logprob(&l, TokenId(0), 3)
            .top
            .iter()
            .map(|(_, p)| p.exp())
            .sum();
        assert!((total - 1.0).abs() < 1e-6);
    }

    /// The normalizer in f64, one term at a time.
    fn log_sum_exp_f64(logits: &[f32], scale: f32) -> f64 {
        let max = logits
            .iter()
            .copied()
            .filter(|l| l.is_finite())
            .fold(f32::NEG_INFINITY, f32::max) as f64;
        let sum: f64 = logits
            .iter()
            .filter(|l| l.is_finite())
            .map(|&l| ((l as f64 - max) * scale as f64).exp())
            .sum();
        max * scale as f64 + sum.ln()
    }

    #[test]
    fn a_fast_normalizer_is_within_a_millionth() {
        let mut rng = crate::sampling::Rng::new(7);
        for n in [1, 7, 8, 9, 513, 49_152, 151_936] {
            let mut l: Vec<f32> = (0..n)
                .map(|_| (rng.next_u64() % 40_000) as f32 / 1000.0 - 25.0)
                .collect();
            // Masked tokens, and a stray NaN, count for nothing.
            for i in (0..n).step_by(3) {
                l[i] = f32::NEG_INFINITY;
            }
            if n > 9 {
                l[4] = f32::NAN;
            }
            for scale in [0.25f32, 1.0, 1.7, 20.0] {
                let (got, want) = (log_sum_exp(&l, scale), log_sum_exp_f64(&l, scale));
                if want == f64::NEG_INFINITY {
                    assert_eq!(got, want, "n {n}: nothing finite");
                    continue;
                }
                assert!(
                    (got - want).abs() < 1e-6 * want.abs().max(1.0),
                    "n {n}, scale {scale}: {got} {want}"
                );
            }
        }
        assert_eq!(
            log_sum_exp(&[f32::NEG_INFINITY; 20], 1.0),
            f64::NEG_INFINITY
        );
        assert_eq!(log_sum_exp(&[], 1.0), f64::NEG_INFINITY);
        // Terms far under the largest vanish rather than wrap.
        let l = [0.0f32, -200.0, -1e30];
        assert!((log_sum_exp(&l, 1.0) - 0.0).abs() < 1e-12);
        let mut worst = 0f64;
        for i in 0..200_000 {
            let x = -(i as f32) * 0.000_435;
            let e = (x as f64).exp();
            worst = worst.max((exp_nonpositive(x) as f64 - e).abs() / e);
        }
        assert!(worst < 3e-7, "{worst}");
        assert_eq!(exp_nonpositive(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp_nonpositive(0.0), 1.0);
    }
}
