//! Sampling a token from (masked) logits: greedy, temperature, top-k, top-p, min-p,
//! repetition penalty, seeded. The grammar's mask is applied before, so masked tokens are
//! minus infinity and never drawn.
//!
//! The random generator is a small xoshiro256++ seeded through SplitMix64, kept here on
//! purpose: "same seed, same output" must hold across dependency upgrades, which a
//! general-purpose RNG crate does not promise for its default generators.

use corral_trie::TokenId;

/// Sampling settings. [`SamplingOptions::validate`] says which values make sense.
#[derive(Clone, Debug, PartialEq)]
pub struct SamplingOptions {
    /// 0 means greedy (argmax).
    pub temperature: f32,
    /// Keep only the `k` most likely tokens.
    pub top_k: Option<usize>,
    /// Keep the most likely tokens whose probabilities sum to at least `p`.
    pub top_p: Option<f32>,
    /// Drop tokens less likely than `min_p` times the most likely one.
    pub min_p: Option<f32>,
    /// Divide positive (multiply negative) logits of recently generated tokens; 1 is off.
    pub repetition_penalty: f32,
    /// How many recent tokens the penalty looks at.
    pub repetition_window: usize,
    /// Subtracted from the logit of every token the output already holds (OpenAI's
    /// `presence_penalty`); 0 is off.
    pub presence_penalty: f32,
    /// Subtracted from a token's logit once per time the output holds it (OpenAI's
    /// `frequency_penalty`); 0 is off.
    pub frequency_penalty: f32,
    /// Added to the logits of these tokens before anything else (OpenAI's `logit_bias`); a
    /// bias never lets a token the grammar masked through.
    pub logit_bias: Vec<(TokenId, f32)>,
    /// Seed of the random draw: the same seed, settings and logits draw the same tokens.
    /// Default 42.
    pub seed: u64,
    /// How a whole output is drawn: token by token under the mask (the default), or by
    /// sequential Monte Carlo over several particles ([`SamplerMethod::Smc`]).
    pub method: SamplerMethod,
}

/// How a whole output is drawn.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum SamplerMethod {
    /// Each token from the model's distribution with the grammar's mask applied and
    /// renormalized: what every constrained decoder does. It over-weights prefixes from
    /// which little of the model's mass finishes inside the grammar.
    #[default]
    Plain,
    /// Sequential Monte Carlo (see `crate::smc` and docs/sampling.md): the output is drawn
    /// from the tempered model restricted to the grammar, approximately, the more closely the
    /// more particles.
    Smc(SmcOptions),
}

/// Settings of [`SamplerMethod::Smc`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SmcOptions {
    /// Particles (sequences decoded side by side, one forward pass a step for them all): 1
    /// to [`SmcOptions::MAX_PARTICLES`].
    pub particles: usize,
    /// Particles are resampled when the effective sample size falls below this fraction of
    /// their number: in [0, 1] (0 never resamples, 1 at every step). Default 0.5.
    pub ess_threshold: f64,
}

impl SmcOptions {
    /// Most particles a generation may ask for (each holds a KV cache of its own).
    pub const MAX_PARTICLES: usize = 64;

    /// `particles` particles, resampled below half of them.
    pub fn new(particles: usize) -> SmcOptions {
        SmcOptions {
            particles,
            ess_threshold: 0.5,
        }
    }
}

impl Default for SamplingOptions {
    fn default() -> SamplingOptions {
        SamplingOptions {
            temperature: 0.7,
            top_k: None,
            top_p: Some(0.95),
            min_p: None,
            repetition_penalty: 1.0,
            repetition_window: 64,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            logit_bias: Vec::new(),
            seed: 42,
            method: SamplerMethod::Plain,
        }
    }
}

/// A sampling setting out of its range.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{name} is {value}: {expected}")]
pub struct SamplingError {
    /// The setting's field name in [`SamplingOptions`] (such as `top_p`).
    pub name: &'static str,
    /// The value given, as text.
    pub value: String,
    /// The range it must be in, in words.
    pub expected: &'static str,
}

impl SamplingOptions {
    /// Checks every setting: temperature finite and at least 0, top-p in (0, 1], min-p in
    /// [0, 1], top-k at least 1, repetition penalty finite and above 0.
    pub fn validate(&self) -> Result<(), SamplingError> {
        let bad = |name, value: String, expected| {
            Err(SamplingError {
                name,
                value,
                expected,
            })
        };
        if !self.temperature.is_finite() || self.temperature < 0.0 {
            return bad(
                "temperature",
                self.temperature.to_string(),
                "a finite number >= 0 (0 is greedy)",
            );
        }
        if let Some(p) = self.top_p
            && !(p > 0.0 && p <= 1.0)
        {
            return bad("top_p", p.to_string(), "a number in (0, 1]");
        }
        if let Some(p) = self.min_p
            && !(0.0..=1.0).contains(&p)
        {
            return bad("min_p", p.to_string(), "a number in [0, 1]");
        }
        if self.top_k == Some(0) {
            return bad("top_k", "0".into(), "at least 1");
        }
        if !self.repetition_penalty.is_finite() || self.repetition_penalty <= 0.0 {
            return bad(
                "repetition_penalty",
                self.repetition_penalty.to_string(),
                "a finite number > 0 (1 is off)",
            );
        }
        for (name, v) in [
            ("presence_penalty", self.presence_penalty),
            ("frequency_penalty", self.frequency_penalty),
        ] {
            if !(-2.0..=2.0).contains(&v) {
                return bad(name, v.to_string(), "a number in [-2, 2] (0 is off)");
            }
        }
        if let Some((_, b)) = self
            .logit_bias
            .iter()
            .find(|(_, b)| !(-100.0..=100.0).contains(b))
        {
            return bad("logit_bias", b.to_string(), "biases in [-100, 100]");
        }
        if let SamplerMethod::Smc(smc) = self.method {
            self.validate_smc(smc)?;
        }
        Ok(())
    }

    /// SMC's target is the tempered model itself: no greedy decoding, and no cut of the
    /// distribution (top-k, top-p, min-p) that the weights would not see.
    fn validate_smc(&self, smc: SmcOptions) -> Result<(), SamplingError> {
        let bad = |name, value: String, expected| {
            Err(SamplingError {
                name,
                value,
                expected,
            })
        };
        if !(1..=SmcOptions::MAX_PARTICLES).contains(&smc.particles) {
            return bad(
                "particles",
                smc.particles.to_string(),
                "1 to 64 with the smc sampler",
            );
        }
        if !(0.0..=1.0).contains(&smc.ess_threshold) {
            return bad(
                "ess_threshold",
                smc.ess_threshold.to_string(),
                "a fraction in [0, 1]",
            );
        }
        if self.temperature <= 0.0 {
            return bad(
                "temperature",
                self.temperature.to_string(),
                "above 0 with the smc sampler (it samples the tempered model)",
            );
        }
        let cuts = [
            ("top_k", self.top_k.map(|k| k.to_string())),
            ("top_p", self.top_p.map(|p| p.to_string())),
            (
                "min_p",
                self.min_p.filter(|&m| m > 0.0).map(|m| m.to_string()),
            ),
        ];
        if let Some((name, Some(v))) = cuts.into_iter().find(|(_, v)| v.is_some()) {
            return bad(
                name,
                v,
                "unset with the smc sampler (its weights are of the whole tempered distribution)",
            );
        }
        Ok(())
    }

    /// Greedy decoding.
    pub fn greedy() -> SamplingOptions {
        SamplingOptions {
            temperature: 0.0,
            top_p: None,
            ..SamplingOptions::default()
        }
    }
}

/// xoshiro256++, seeded with SplitMix64.
#[derive(Clone, Debug)]
pub struct Rng([u64; 4]);

impl Rng {
    /// A generator whose state is four SplitMix64 outputs from `seed`; the same seed gives
    /// the same sequence.
    pub fn new(seed: u64) -> Rng {
        let mut x = seed;
        let mut next = || {
            x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
        Rng([next(), next(), next(), next()])
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.0;
        let result = s[0].wrapping_add(s[3]).rotate_left(23).wrapping_add(s[0]);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }

    /// Uniform in `[0, 1)`.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// A sampler: options and its random state.
#[derive(Clone, Debug)]
pub struct Sampler {
    opts: SamplingOptions,
    rng: Rng,
    candidates: Vec<Candidate>,
}

impl Sampler {
    /// A sampler seeded from `opts.seed`. Does not validate `opts` (see
    /// [`SamplingOptions::validate`]).
    pub fn new(opts: SamplingOptions) -> Sampler {
        let rng = Rng::new(opts.seed);
        Sampler {
            opts,
            rng,
            candidates: Vec::new(),
        }
    }

    /// The same settings with a new random state, seeded from `seed`.
    pub fn reseed(&mut self, seed: u64) {
        self.opts.seed = seed;
        self.rng = Rng::new(seed);
    }

    /// The settings it samples with.
    pub fn options(&self) -> &SamplingOptions {
        &self.opts
    }

    /// Picks a token: [`Sampler::adjust`] with `history` as both the recent tokens and the
    /// output, then [`Sampler::draw`]. `logits` are changed (penalties); minus infinity is
    /// never picked. `None` if every logit is minus infinity.
    pub fn sample(&mut self, logits: &mut [f32], history: &[TokenId]) -> Option<TokenId> {
        self.adjust(logits, history, history);
        self.draw(logits)
    }

    /// The logits the draw starts from: the logit bias, the repetition penalty over the
    /// last `repetition_window` tokens of `history` (prompt and output), the presence and
    /// frequency penalties over `output`. Masked tokens (minus infinity) stay masked.
    pub fn adjust(&self, logits: &mut [f32], history: &[TokenId], output: &[TokenId]) {
        let o = &self.opts;
        for &(t, b) in &o.logit_bias {
            if let Some(l) = logits.get_mut(t.index()) {
                *l += b;
            }
        }
        if o.presence_penalty != 0.0 || o.frequency_penalty != 0.0 {
            let mut counts: Vec<TokenId> = output.to_vec();
            counts.sort_unstable();
            for run in counts.chunk_by(|a, b| a == b) {
                if let Some(l) = logits.get_mut(run[0].index()) {
                    *l -= o.presence_penalty + o.frequency_penalty * run.len() as f32;
                }
            }
        }
        if o.repetition_penalty != 1.0 && o.repetition_penalty > 0.0 {
            let start = history.len().saturating_sub(o.repetition_window);
            let mut seen: Vec<TokenId> = history[start..].to_vec();
            seen.sort_unstable();
            seen.dedup();
            for t in seen {
                if let Some(l) = logits.get_mut(t.index())
                    && l.is_finite()
                {
                    *l = if *l > 0.0 {
                        *l / o.repetition_penalty
                    } else {
                        *l * o.repetition_penalty
                    };
                }
            }
        }
    }

    /// Draws a token from adjusted logits: greedy at temperature 0, else temperature,
    /// top-k, softmax, min-p, top-p and a seeded draw. `None` if every logit is minus
    /// infinity.
    pub fn draw(&mut self, logits: &[f32]) -> Option<TokenId> {
        if self.opts.temperature <= 0.0 {
            return argmax(logits);
        }
        let (total, mut sorted) = self.cut(logits)?;
        let c = &mut self.candidates;
        let mut r = self.rng.next_f64() * total;
        let mut seen = 0;
        loop {
            sorted = sort_prefix(c, sorted);
            for x in &c[seen..sorted] {
                r -= x.weight as f64;
                if r < 0.0 {
                    return Some(TokenId(x.id));
                }
            }
            if sorted == c.len() {
                return Some(TokenId(c[c.len() - 1].id));
            }
            seen = sorted;
        }
    }

    /// The distribution [`Sampler::draw`] draws from (at a temperature above 0): each
    /// token left after the cuts, with its probability, most likely first.
    pub fn distribution(&mut self, logits: &[f32]) -> Vec<(TokenId, f64)> {
        let Some((total, _)) = self.cut(logits) else {
            return Vec::new();
        };
        let c = &mut self.candidates;
        c.sort_unstable_by(desc);
        c.iter()
            .map(|x| (TokenId(x.id), x.weight as f64 / total))
            .collect()
    }

    /// Temperature, top-k, softmax, min-p and top-p: leaves the candidates that may be
    /// drawn in `self.candidates`, the first `sorted` of them in order, and returns their
    /// weights' sum and `sorted`. `None` if every logit is minus infinity.
    fn cut(&mut self, logits: &[f32]) -> Option<(f64, usize)> {
        let o = &self.opts;
        let c = &mut self.candidates;
        c.clear();
        c.extend(
            logits
                .iter()
                .enumerate()
                .filter(|(_, l)| l.is_finite())
                .map(|(i, &l)| Candidate {
                    id: i as u32,
                    logit: l / o.temperature,
                    weight: 0.0,
                }),
        );
        if c.is_empty() {
            return None;
        }
        if let Some(k) = o.top_k.filter(|&k| k > 0 && k < c.len()) {
            c.select_nth_unstable_by(k - 1, desc);
            c.truncate(k);
        }
        // Softmax weights, unsorted: only the prefix of the most likely candidates that the
        // cuts and the draw reach gets sorted (`sorted` of them), not the whole vocabulary.
        let max = c.iter().fold(f32::NEG_INFINITY, |m, x| m.max(x.logit));
        let mut total = 0.0f64;
        for x in c.iter_mut() {
            x.weight = ((x.logit - max) as f64).exp() as f32;
            total += x.weight as f64;
        }
        let mut sorted = 0;
        if let Some(m) = o.min_p.filter(|&m| m > 0.0) {
            // The most likely candidate's weight is exactly 1 (its logit minus the max).
            let keep = loop {
                sorted = sort_prefix(c, sorted);
                let keep = c[..sorted].iter().take_while(|x| x.weight >= m).count();
                if keep < sorted || sorted == c.len() {
                    break keep.max(1);
                }
            };
            c.truncate(keep);
            sorted = sorted.min(keep);
            total = c.iter().map(|x| x.weight as f64).sum();
        }
        if let Some(p) = o.top_p.filter(|&p| p > 0.0 && p < 1.0) {
            let mut acc = 0.0f64;
            let mut seen = 0;
            let keep = loop {
                sorted = sort_prefix(c, sorted);
                let reached = c[seen..sorted].iter().position(|x| {
                    acc += x.weight as f64 / total;
                    acc >= p as f64
                });
                match reached {
                    Some(i) => break seen + i + 1,
                    None if sorted == c.len() => break c.len(),
                    None => seen = sorted,
                }
            };
            c.truncate(keep);
            sorted = sorted.min(keep);
            total = c.iter().map(|x| x.weight as f64).sum();
        }
        Some((total, sorted))
    }
}

/// A token that may be drawn.
#[derive(Clone, Copy, Debug)]
struct Candidate {
    id: u32,
    /// The logit divided by the temperature: what candidates are ordered by.
    logit: f32,
    /// Its softmax weight, unnormalized.
    weight: f32,
}

/// Most likely first, then lower ids.
fn desc(a: &Candidate, b: &Candidate) -> std::cmp::Ordering {
    b.logit.total_cmp(&a.logit).then(a.id.cmp(&b.id))
}

/// Candidates sorted first; a prefix that is not enough grows fourfold.
const SORTED_FIRST: usize = 64;

/// Extends the sorted prefix `c[..sorted]` (the `sorted` most likely candidates, in
/// order) to [`SORTED_FIRST`] candidates, or four times its length: the next ones are
/// selected in linear time, then only they are sorted. Returns the new length.
fn sort_prefix(c: &mut [Candidate], sorted: usize) -> usize {
    let want = (sorted * 4).max(SORTED_FIRST).min(c.len());
    if want <= sorted {
        return sorted;
    }
    let rest = &mut c[sorted..];
    let n = want - sorted;
    if n < rest.len() {
        rest.select_nth_unstable_by(n - 1, desc);
    }
    rest[..n].sort_unstable_by(desc);
    want
}

/// Index of the largest finite logit (lowest index on ties).
pub fn argmax(logits: &[f32]) -> Option<TokenId> {
    let mut best: Option<(usize, f32)> = None;
    for (i, &l) in logits.iter().enumerate() {
        if l.is_finite() && best.is_none_or(|(_, b)| l > b) {
            best = Some((i, l));
        }
    }
    best.map(|(i, _)| TokenId(i as u32))
}

#[cfg(test)]
mod tests;
