//! Sequential Monte Carlo over grammar-masked particles ([`SamplerMethod::Smc`]).
//!
//! The target: with `p_T(t | x)` the model's next-token distribution at temperature `T`
//! (after the logit bias and penalties), and `L` the grammar's outputs (each ending with
//! the model's end token, or cut by the budget's completion), an output `x` has probability
//! `prod_t p_T(x_t | x_<t) / Z` if `x` is in `L`, 0 otherwise. Masking and renormalizing
//! each step (the plain sampler) draws each token from `q(t) = p_T(t) / m` instead, where
//! `m` is the mass the mask kept, and so over-weights prefixes from which little mass
//! finishes inside the grammar.
//!
//! Each of N particles is a [`Decoder`] with a KV cache. A step proposes each particle's
//! next token from `q` and multiplies its weight by `p_T / q = m`. `m` depends only on the
//! prefix, so it is weighed before the draw, and when the effective sample size
//! `(sum w)^2 / sum w^2` falls below `ess_threshold * N`, the particles are resampled then
//! (systematic resampling): each is replaced by copies of particles drawn in proportion to
//! their weights, its decoder forked (a clone with a new random state), and the copies draw
//! their tokens apart.
//! Particles whose tokens are the same share one KV cache and one row of each pass, so a
//! copy costs nothing until it draws a token its ancestor's other copies did not; the
//! cache is copied then ([`CausalLm::copy_prefix`], or the tokens run again on a new
//! sequence where the model cannot copy). Particles that end wait for the others. The
//! output is one particle drawn by final weight; every particle comes back with its weight
//! in [`Generation::particles`].
//!
//! A span the grammar forces after a drawn token (jump-forward) is appended in the
//! engine's tokenization and weighed by its tokens' probabilities, read from the pass that
//! runs them ([`CausalLm::forward_batch_tails`]): the target's outputs take those tokens
//! for a forced span. A budget's completion is appended one token a step and weighed by
//! its probability, so near the budget's end the target is the grammar's outputs that fit
//! in it.

use crate::constraint::Constraint;
use crate::decoder::{Decoder, Emit, Next};
use crate::generate::{FinishReason, GenerateError, GenerateOptions, Generation};
use crate::model::{BatchItem, CausalLm, Logits, Sequence};
use crate::sampling::{Rng, SmcOptions};
use corral_trie::{TokenId, TokenSpace};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One particle of an SMC generation ([`Generation::particles`]).
#[derive(Clone, Debug, PartialEq)]
pub struct WeightedOutput {
    /// Its text.
    pub text: String,
    /// Its tokens.
    pub tokens: Vec<TokenId>,
    /// Why it stopped.
    pub finish_reason: FinishReason,
    /// Its normalized weight: the particles' weights sum to 1.
    pub weight: f64,
}

/// What an SMC generation did ([`crate::GenerationStats::smc`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SmcStats {
    /// Particles.
    pub particles: usize,
    /// Times the particles were resampled.
    pub resamples: usize,
    /// The smallest effective sample size seen after a step (before resampling).
    pub ess_min: f64,
    /// The effective sample size of the final weights.
    pub ess_final: f64,
    /// Rows run, over all passes: one per distinct sequence a pass runs (particles with the
    /// same tokens share a row and a KV cache).
    pub sequence_steps: usize,
    /// Milliseconds spent forking particles: decoders at resampling, KV caches where
    /// particles that shared one go apart.
    pub fork_ms: f64,
    /// The log of the estimated normalizer: the mean weight's log, an estimate of the
    /// log-probability that the model's own output (at this temperature) is in the
    /// grammar's language.
    pub log_evidence: f64,
}

/// A piece of a particle's output, kept until the particle is chosen.
#[derive(Clone, Debug)]
enum Piece {
    Text(String),
    Control {
        token: TokenId,
        name: String,
        named: bool,
    },
}

impl Piece {
    fn of(e: Emit<'_>) -> Piece {
        match e {
            Emit::Text(t) => Piece::Text(t.to_string()),
            Emit::Control { token, name, named } => Piece::Control {
                token,
                name: name.to_string(),
                named,
            },
        }
    }

    fn emit(&self, out: &mut dyn FnMut(Emit<'_>)) {
        match self {
            Piece::Text(t) => out(Emit::Text(t)),
            Piece::Control { token, name, named } => out(Emit::Control {
                token: *token,
                name,
                named: *named,
            }),
        }
    }
}

#[derive(Debug)]
struct Particle {
    decoder: Decoder,
    /// The slot of its KV cache, shared with the particles whose tokens are the same
    /// (copies not yet apart); `None` once it ended.
    slot: Option<usize>,
    /// Tokens to run next on its cache.
    feed: Vec<TokenId>,
    log_w: f64,
    /// Within a step: the row whose logits it draws from, and the part of the step's log
    /// weight already in `log_w` ([`Decoder::step_log_weight`]).
    row: Option<usize>,
    pre: f64,
    done: Option<FinishReason>,
    pieces: Vec<Piece>,
}

/// A KV cache and the positions it holds; `prefix`: tokens to run before the next feed (a
/// cache the model could not copy starts over and runs everything again).
#[derive(Debug)]
struct Slot {
    sequence: Sequence,
    pos: usize,
    prefix: Vec<TokenId>,
}

/// One row of the next pass: a slot, the tokens it runs, the particles that take its
/// logits.
#[derive(Debug)]
struct Row {
    /// The slot its particles held before this pass (copied for this row if another row
    /// runs on it).
    origin: usize,
    slot: usize,
    tokens: Vec<TokenId>,
    /// Positions whose logits the row needs: its particles' feed (the drawn token, then
    /// any the engine appended after it).
    tail: usize,
    members: Vec<usize>,
}

impl Particle {
    /// One step from `logits`: the token drawn, its weight (what `pre` did not already
    /// add), what to run next.
    fn advance(&mut self, logits: &dyn Logits) -> Result<(), GenerateError> {
        let pieces = &mut self.pieces;
        let next = self
            .decoder
            .advance_emitting(logits, &mut |e| pieces.push(Piece::of(e)))?;
        let step = self.decoder.take_log_weight();
        let pre = std::mem::take(&mut self.pre);
        // A particle whose weight is already 0 stays so.
        if step != pre && pre != f64::NEG_INFINITY {
            self.log_w += step - pre;
        }
        match next {
            Next::Feed(f) => self.feed = f,
            Next::Done(r) => {
                self.done = Some(r);
                self.slot = None;
            }
        }
        Ok(())
    }
}

/// An SMC generation's particles, stepped by a caller that runs the model (the server's
/// scheduler), as [`Decoder`] is for one sequence; [`crate::generate()`] drives one with one
/// model. After the prompt ran on a sequence: [`Particles::start`] with its logits, then
/// per step [`Particles::compute_masks`], one forward pass over [`Particles::batch`], and
/// [`Particles::advance`] with its logits, until [`Particles::is_done`]; then
/// [`Particles::finish`].
///
/// Particles whose tokens are the same (the copies resampling makes, and particles that
/// drew the same tokens) share one KV cache and one row of the pass: their next-token
/// distributions are the same. A cache is copied only where particles sharing it feed
/// different tokens (copy on write).
#[derive(Debug)]
pub struct Particles {
    ps: Vec<Particle>,
    slots: Vec<Option<Slot>>,
    /// The rows of the pass [`Particles::batch`] gave, until [`Particles::advance`].
    rows: Vec<Row>,
    smc: SmcOptions,
    rng: Rng,
    stats: SmcStats,
    /// The log mean weights set aside by resampling, for the evidence.
    log_norm: f64,
    /// Forward passes over the particles (the prompt's included).
    passes: usize,
}

impl Particles {
    /// `smc.particles` particles, each a fork of `base` (a decoder for the output after a
    /// prompt of `prompt_len` tokens, made with the SMC method in its options), each taking
    /// its first token from the prompt's `logits`, sharing a copy of `prompt`'s cache (the
    /// sequence the prompt ran on). Seeded from `seed`.
    pub fn start(
        lm: &dyn CausalLm,
        base: &Decoder,
        smc: SmcOptions,
        seed: u64,
        prompt: &Sequence,
        prompt_len: usize,
        logits: &dyn Logits,
    ) -> Result<Particles, GenerateError> {
        let mut rng = Rng::new(seed);
        let n = smc.particles;
        let slot = match lm.copy_prefix(prompt, prompt_len) {
            Some(sequence) => Slot {
                sequence,
                pos: prompt_len,
                prefix: Vec::new(),
            },
            None => Slot {
                sequence: lm.new_sequence(),
                pos: 0,
                prefix: base.history().to_vec(),
            },
        };
        // The first step's logits are the same for every particle: prepared once.
        let mut first = base.fork(0);
        first.step_log_weight(logits)?;
        let shared = first.prepared_step();
        let mut ps = Vec::with_capacity(n);
        for _ in 0..n {
            let mut decoder = base.fork(rng.next_u64());
            decoder.share_step(shared.clone());
            let mut p = Particle {
                decoder,
                slot: Some(0),
                feed: Vec::new(),
                log_w: 0.0,
                row: None,
                pre: 0.0,
                done: None,
                pieces: Vec::new(),
            };
            p.advance(logits)?;
            ps.push(p);
        }
        let mut particles = Particles {
            ps,
            slots: vec![Some(slot)],
            rows: Vec::new(),
            smc,
            rng,
            stats: SmcStats {
                particles: n,
                ess_min: n as f64,
                ..SmcStats::default()
            },
            log_norm: 0.0,
            passes: 1,
        };
        particles.release_slots();
        particles.resample_if_low()?;
        Ok(particles)
    }

    /// Whether every particle has ended.
    pub fn is_done(&self) -> bool {
        self.ps.iter().all(|p| p.done.is_some())
    }

    /// Logits [`Particles::advance`] takes: those of the pass [`Particles::batch`] gave
    /// last, the tails it asked for.
    pub fn logits_wanted(&self) -> usize {
        self.rows.iter().map(|r| r.tail).sum()
    }

    /// Computes the live particles' masks for their next tokens (in parallel where there
    /// are many).
    pub fn compute_masks(&mut self) -> Result<(), GenerateError> {
        let mut decoders: Vec<&mut Decoder> = self
            .ps
            .iter_mut()
            .filter(|p| p.done.is_none())
            .map(|p| &mut p.decoder)
            .collect();
        crate::compute_masks(&mut decoders).into_iter().collect()
    }

    /// The next pass's items, one per distinct (cache, tokens) of the live particles, and
    /// how many of each one's last positions' logits [`Particles::advance`] needs (for
    /// [`CausalLm::forward_batch_tails`]). Particles that share a cache but feed different
    /// tokens get copies of it first.
    pub fn batch(&mut self, lm: &dyn CausalLm) -> (Vec<BatchItem<'_>>, Vec<usize>) {
        let t = Instant::now();
        let mut rows: Vec<Row> = Vec::new();
        for i in 0..self.ps.len() {
            let p = &self.ps[i];
            let Some(slot) = p.slot else { continue };
            if let Some(r) = rows
                .iter_mut()
                .find(|r| r.origin == slot && r.tokens == p.feed)
            {
                r.members.push(i);
                continue;
            }
            // The slot's first row runs on it; another feed on the same slot gets a copy.
            let origin = slot;
            let slot = if rows.iter().any(|r| r.origin == origin) {
                let copy = self.copy_slot(lm, origin, i);
                self.slots.push(Some(copy));
                self.slots.len() - 1
            } else {
                origin
            };
            rows.push(Row {
                origin,
                slot,
                tokens: self.ps[i].feed.clone(),
                tail: self.ps[i].feed.len(),
                members: vec![i],
            });
        }
        self.stats.fork_ms += t.elapsed().as_secs_f64() * 1e3;
        for r in &mut rows {
            for &m in &r.members {
                self.ps[m].slot = Some(r.slot);
            }
            let s = self.slots[r.slot].as_mut().expect("a row's slot is held");
            if !s.prefix.is_empty() {
                let mut all = std::mem::take(&mut s.prefix);
                all.append(&mut r.tokens);
                r.tokens = all;
            }
        }
        self.rows = rows;
        let tails = self.rows.iter().map(|r| r.tail).collect();
        let mut seqs: Vec<Option<&mut Slot>> = self.slots.iter_mut().map(Option::as_mut).collect();
        let items = self
            .rows
            .iter()
            .map(|r| {
                let s = seqs[r.slot].take().expect("one row per slot");
                BatchItem {
                    tokens: &r.tokens,
                    pos: s.pos,
                    sequence: &mut s.sequence,
                }
            })
            .collect();
        (items, tails)
    }

    /// A copy of `slot`'s cache for particle `i` to go apart on: copied by the model, or
    /// started over with everything before `i`'s feed to run again.
    fn copy_slot(&self, lm: &dyn CausalLm, slot: usize, i: usize) -> Slot {
        let s = self.slots[slot]
            .as_ref()
            .expect("a particle's slot is held");
        if s.prefix.is_empty()
            && let Some(sequence) = lm.copy_prefix(&s.sequence, s.pos)
        {
            return Slot {
                sequence,
                pos: s.pos,
                prefix: Vec::new(),
            };
        }
        let history = self.ps[i].decoder.history();
        Slot {
            sequence: lm.new_sequence(),
            pos: 0,
            prefix: history[..history.len() - self.ps[i].feed.len()].to_vec(),
        }
    }

    /// Each row's particles step from its logits (in [`Particles::batch`]'s order, each
    /// row's tail of positions). The part of the step's weight that does not depend on the
    /// token drawn (the probability of the tokens the engine appended after the last draw,
    /// and the mass the next mask keeps: the same for a row's particles) is added first,
    /// and the particles are resampled on it where the effective sample size fell below
    /// the threshold; then each draws, so copies of one particle draw apart rather than
    /// repeat its token.
    pub fn advance(&mut self, logits: Vec<Box<dyn Logits>>) -> Result<(), GenerateError> {
        if logits.len() != self.logits_wanted() {
            return Err(GenerateError::Model(crate::model::ModelError::Backend(
                "the pass returned logits for another number of positions".into(),
            )));
        }
        self.passes += 1;
        self.stats.sequence_steps += self.rows.len();
        let mut logits = logits.into_iter();
        let mut last = Vec::with_capacity(self.rows.len());
        for r in std::mem::take(&mut self.rows) {
            if let Some(s) = self.slots[r.slot].as_mut() {
                s.pos += r.tokens.len();
            }
            let mut tail: Vec<Box<dyn Logits>> = logits.by_ref().take(r.tail).collect();
            let step = tail.pop().expect("a row's tail is at least one position");
            let d = &mut self.ps[r.members[0]].decoder;
            let appended = d.appended_log_weight(&tail[..])?;
            let pre = d.step_log_weight(&*step)?;
            // The row's particles are in one state: the logits the step prepared serve all.
            let shared = d.prepared_step();
            let ri = last.len();
            last.push(step);
            for i in r.members {
                let p = &mut self.ps[i];
                p.decoder.share_step(shared.clone());
                p.log_w += appended + pre;
                p.pre = pre;
                p.row = Some(ri);
            }
        }
        self.resample_if_low()?;
        for p in &mut self.ps {
            if let Some(ri) = p.row.take() {
                p.advance(&*last[ri])?;
            }
        }
        self.release_slots();
        Ok(())
    }

    /// Drops the caches no live particle holds.
    fn release_slots(&mut self) {
        let mut held = vec![false; self.slots.len()];
        for p in &self.ps {
            if let Some(s) = p.slot {
                held[s] = true;
            }
        }
        for (s, h) in self.slots.iter_mut().zip(held) {
            if !h {
                *s = None;
            }
        }
    }

    /// The KV cache bytes the particles hold, where the model counts them.
    pub fn sequence_bytes(&self, lm: &dyn CausalLm) -> Option<usize> {
        self.slots
            .iter()
            .flatten()
            .map(|s| lm.sequence_bytes(&s.sequence))
            .sum()
    }

    /// The output: one particle drawn by final weight, its pieces sent to `out`; every
    /// particle with its weight in [`Generation::particles`], the counts in
    /// [`crate::GenerationStats::smc`]. `forward_passes` counts the passes over the
    /// particles.
    pub fn finish(mut self, out: &mut dyn FnMut(Emit<'_>)) -> Generation {
        let log_w: Vec<f64> = self.ps.iter().map(|p| p.log_w).collect();
        let weights = normalized(&log_w);
        self.stats.ess_final = ess(&weights);
        self.stats.log_evidence = self.log_norm + log_mean_exp(&log_w);
        let chosen = draw(&weights, self.rng.next_f64());
        let mut particles = Vec::with_capacity(self.ps.len());
        let mut result = None;
        for (i, (p, w)) in self.ps.into_iter().zip(&weights).enumerate() {
            let finish = p.done.unwrap_or(FinishReason::Length);
            let mut pieces = p.pieces;
            let g = p
                .decoder
                .finish_emitting(finish, &mut |e| pieces.push(Piece::of(e)));
            particles.push(WeightedOutput {
                text: g.text.clone(),
                tokens: g.tokens.clone(),
                finish_reason: finish,
                weight: *w,
            });
            if i == chosen {
                for piece in &pieces {
                    piece.emit(out);
                }
                result = Some(g);
            }
        }
        let mut g = result.expect("one particle is chosen");
        g.stats.forward_passes = self.passes;
        g.stats.smc = Some(self.stats);
        g.particles = particles;
        g
    }

    /// Resamples the particles where their effective sample size fell below the
    /// threshold (and some are still going). A copy shares its ancestor's cache.
    fn resample_if_low(&mut self) -> Result<(), GenerateError> {
        let n = self.ps.len();
        let log_w: Vec<f64> = self.ps.iter().map(|p| p.log_w).collect();
        if log_w.iter().all(|w| *w == f64::NEG_INFINITY) {
            return Err(GenerateError::NothingToSample);
        }
        let weights = normalized(&log_w);
        let e = ess(&weights);
        self.stats.ess_min = self.stats.ess_min.min(e);
        if e >= self.smc.ess_threshold * n as f64 || self.is_done() {
            return Ok(());
        }
        let t = Instant::now();
        self.stats.resamples += 1;
        self.log_norm += log_mean_exp(&log_w);
        let ancestors = systematic(&weights, self.rng.next_f64());
        let mut old: Vec<Option<Particle>> =
            std::mem::take(&mut self.ps).into_iter().map(Some).collect();
        let mut first_child: Vec<Option<usize>> = vec![None; n];
        for &a in &ancestors {
            let child = match (old[a].take(), first_child[a]) {
                // The first copy takes the particle itself.
                (Some(p), _) => p,
                (None, Some(f)) => self.ps[f].fork(self.rng.next_u64()),
                (None, None) => unreachable!("an ancestor is taken only by its first copy"),
            };
            first_child[a].get_or_insert(self.ps.len());
            self.ps.push(Particle {
                log_w: 0.0,
                ..child
            });
        }
        self.release_slots();
        self.stats.fork_ms += t.elapsed().as_secs_f64() * 1e3;
        Ok(())
    }
}

impl Particle {
    /// A copy with its own random state, sharing this particle's cache.
    fn fork(&self, seed: u64) -> Particle {
        Particle {
            decoder: self.decoder.fork(seed),
            slot: self.slot,
            feed: self.feed.clone(),
            log_w: self.log_w,
            row: self.row,
            pre: self.pre,
            done: self.done,
            pieces: self.pieces.clone(),
        }
    }
}

/// Generates by SMC with `smc.particles` particles (see the module docs); called by
/// [`crate::generate_emitting`] when the sampling method asks for it. `out` gets the chosen
/// particle's output at the end.
pub(crate) fn generate_smc(
    lm: &mut dyn CausalLm,
    space: &Arc<TokenSpace>,
    constraint: Option<&Arc<Constraint>>,
    prompt: &[TokenId],
    opts: &GenerateOptions,
    smc: SmcOptions,
    out: &mut dyn FnMut(Emit<'_>),
) -> Result<Generation, GenerateError> {
    let mut base = Decoder::for_model(lm, space, constraint, prompt, opts)?;
    // The first mask once, for every particle's copy.
    base.prepare_mask()?;
    let t0 = Instant::now();
    let mut root = lm.new_sequence();
    let first = lm.forward_sequence(&mut root, prompt, 0)?;
    let prefill = t0.elapsed();
    let decode_start = Instant::now();
    let mut forward_time = Duration::ZERO;
    let mut ps = Particles::start(
        lm,
        &base,
        smc,
        opts.sampling.seed,
        &root,
        prompt.len(),
        &*first,
    )?;
    drop(root);
    while !ps.is_done() {
        ps.compute_masks()?;
        let t = Instant::now();
        let (mut items, tails) = ps.batch(lm);
        let logits = lm.forward_batch_tails(&mut items, &tails)?;
        drop(items);
        forward_time += t.elapsed();
        ps.advance(logits)?;
    }
    let decode = decode_start.elapsed();
    let mut g = ps.finish(out);
    g.stats.prompt_tok_s = prompt.len() as f64 / prefill.as_secs_f64().max(1e-9);
    g.stats.decode_tok_s = g.tokens.len() as f64 / decode.as_secs_f64().max(1e-9);
    g.stats.decode_forward_ms = forward_time.as_secs_f64() * 1e3;
    Ok(g)
}

/// Weights that sum to 1 from log weights (all equal where every one is minus infinity).
fn normalized(log_w: &[f64]) -> Vec<f64> {
    let max = log_w.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if max == f64::NEG_INFINITY {
        return vec![1.0 / log_w.len() as f64; log_w.len()];
    }
    let w: Vec<f64> = log_w.iter().map(|l| (l - max).exp()).collect();
    let sum: f64 = w.iter().sum();
    w.into_iter().map(|x| x / sum).collect()
}

/// The log of the mean of `exp(log_w)`.
fn log_mean_exp(log_w: &[f64]) -> f64 {
    let max = log_w.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if max == f64::NEG_INFINITY {
        return max;
    }
    let sum: f64 = log_w.iter().map(|l| (l - max).exp()).sum();
    max + (sum / log_w.len() as f64).ln()
}

/// The effective sample size of normalized weights.
fn ess(w: &[f64]) -> f64 {
    1.0 / w.iter().map(|x| x * x).sum::<f64>()
}

/// The index whose cumulative weight first exceeds `u` in [0, 1).
fn draw(w: &[f64], u: f64) -> usize {
    let mut acc = 0.0;
    for (i, x) in w.iter().enumerate() {
        acc += x;
        if u < acc {
            return i;
        }
    }
    w.iter().rposition(|&x| x > 0.0).unwrap_or(0)
}

/// Systematic resampling: `w.len()` ancestors at the points `(u + k) / n`, in order.
fn systematic(w: &[f64], u: f64) -> Vec<usize> {
    let n = w.len();
    let mut out = Vec::with_capacity(n);
    let mut acc = w[0];
    let mut i = 0;
    for k in 0..n {
        let point = (u + k as f64) / n as f64;
        while point >= acc && i + 1 < n {
            i += 1;
            acc += w[i];
        }
        // Rounding may leave the last points past the sum: never a particle of weight 0.
        if w[i] == 0.0 {
            i = w.iter().rposition(|&x| x > 0.0).unwrap_or(i);
        }
        out.push(i);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generate::GenerateOptions;
    use crate::model::CpuLogits;
    use crate::sampling::{SamplerMethod, SamplingOptions};
    use corral_grammar::{CompileOptions, compile_gbnf};
    use corral_trie::Vocabulary;

    /// A decoder under SMC for the grammar `"a" | "bc"` over tokens a, b, c, d and an end.
    fn smc_decoder() -> Decoder {
        let words = ["a", "b", "c", "d"]
            .iter()
            .enumerate()
            .map(|(i, w)| (TokenId(i as u32), w.as_bytes().to_vec()));
        let vocab = Vocabulary::from_parts(words, [(TokenId(4), "</s>".to_string())]);
        let space = Arc::new(TokenSpace::new(vocab, Some(5), vec![TokenId(4)]));
        let g = compile_gbnf(r#"root ::= "a" | "bc""#, &CompileOptions::default()).unwrap();
        let opts = GenerateOptions {
            max_tokens: 4,
            sampling: SamplingOptions {
                temperature: 0.8,
                top_p: None,
                method: SamplerMethod::Smc(SmcOptions::new(4)),
                ..SamplingOptions::default()
            },
            ..GenerateOptions::default()
        };
        let c = Constraint::new(g, space.clone());
        Decoder::new(space, Some(c), &[TokenId(3)], 64, &opts).unwrap()
    }

    #[test]
    fn a_step_shared_by_a_particle_in_the_same_state_draws_and_weighs_as_its_own() {
        let base = smc_decoder();
        let first = CpuLogits(vec![0.4, 1.1, -0.3, 2.0, 0.2]);
        let second = CpuLogits(vec![-1.0, 0.3, 0.5, 1.5, 0.7]);
        let mut seconds = 0;
        for seed in 0..16 {
            let mut own = base.fork(seed);
            let mut shared = base.fork(seed);
            let mut donor = base.fork(seed + 100);
            let pre = donor.step_log_weight(&first).unwrap();
            shared.share_step(donor.prepared_step());
            let next = own.advance_emitting(&first, &mut |_| {}).unwrap();
            assert_eq!(shared.advance_emitting(&first, &mut |_| {}).unwrap(), next);
            assert_eq!(own.tokens(), shared.tokens());
            let w = own.take_log_weight();
            assert_eq!(shared.take_log_weight(), w);
            // The mask kept a and b: the weight is their mass, whatever was drawn.
            assert_eq!(w, pre);
            let e = |l: f64| (l / 0.8).exp();
            let kept = ((e(0.4) + e(1.1)) / (e(0.4) + e(1.1) + e(-0.3) + e(2.0) + e(0.2))).ln();
            assert!((w - kept).abs() < 1e-6, "{w} against {kept}");
            // A step prepared for the first position is not taken for the second.
            // After b the grammar forces c (appended with it where jump-forward is on).
            if !matches!(&next, Next::Feed(f) if f[0] == TokenId(1)) {
                continue;
            }
            shared.share_step(donor.prepared_step());
            own.advance_emitting(&second, &mut |_| {}).unwrap();
            shared.advance_emitting(&second, &mut |_| {}).unwrap();
            assert_eq!(own.tokens(), [TokenId(1), TokenId(2)]);
            assert_eq!(shared.take_log_weight(), own.take_log_weight());
            seconds += 1;
        }
        assert!(seconds > 0, "no seed drew b");
    }

    #[test]
    fn systematic_resampling_copies_in_proportion_to_weight() {
        let w = [0.5, 0.0, 0.25, 0.25];
        assert_eq!(systematic(&w, 0.0), vec![0, 0, 2, 3]);
        assert_eq!(systematic(&w, 0.99), vec![0, 0, 2, 3]);
        // A particle of weight 0 is never drawn, even at the edges.
        let w = [0.0, 1.0, 0.0];
        assert_eq!(systematic(&w, 0.0), vec![1, 1, 1]);
        assert_eq!(systematic(&w, 0.999), vec![1, 1, 1]);
        // Counts are within one of n * w.
        let w = [0.1, 0.6, 0.3];
        let a = systematic(&w, 0.5);
        let count = |i| a.iter().filter(|&&x| x == i).count();
        assert_eq!((count(0), count(1), count(2)), (0, 2, 1));
    }

    #[test]
    fn weights_and_effective_sample_size() {
        let w = normalized(&[0.0, 0.0, f64::NEG_INFINITY, 2f64.ln()]);
        assert!((w[0] - 0.25).abs() < 1e-12 && (w[3] - 0.5).abs() < 1e-12 && w[2] == 0.0);
        assert!((ess(&[0.25; 4]) - 4.0).abs() < 1e-12);
        assert!((ess(&[1.0, 0.0]) - 1.0).abs() < 1e-12);
        assert!((log_mean_exp(&[0.0, 2f64.ln()]) - 1.5f64.ln()).abs() < 1e-12);
        assert_eq!(draw(&[0.2, 0.3, 0.5], 0.1), 0);
        assert_eq!(draw(&[0.2, 0.3, 0.5], 0.45), 1);
        assert_eq!(draw(&[0.2, 0.3, 0.5], 0.9999), 2);
    }
}
