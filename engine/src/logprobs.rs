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
/// `1 / scale`.
pub fn log_sum_exp(logits: &[f32], scale: f32) -> f64 {
    let max = logits
        .iter()
        .copied()
        .filter(|l| l.is_finite())
        .fold(f32::NEG_INFINITY, f32::max);
    if max == f32::NEG_INFINITY {
        return f64::NEG_INFINITY;
    }
    let s = scale as f64;
    let sum: f64 = logits
        .iter()
        .filter(|l| l.is_finite())
        .map(|&l| ((l as f64 - max as f64) * s).exp())
        .sum();
    max as f64 * s + sum.ln()
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
}
