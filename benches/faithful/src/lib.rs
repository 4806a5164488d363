//! The exact distribution of a small grammar's outputs under a model, and the distance of
//! a sampler's outputs from it.
//!
//! [`exact`] walks every token sequence the grammar's masks allow, depth first, running
//! the model on each prefix (a child's KV cache is a copy of its parent's plus its token,
//! batched across siblings). A sequence is complete where the model's end token is allowed;
//! its probability is the product of the model's probabilities of its tokens and of the
//! end. A prefix whose probability falls below a bound is pruned, and its probability is
//! added to the pruned mass: an upper bound on the mass of the outputs the walk missed.
//! Sequences are then grouped by their text (tokenizations marginalized) and normalized.

use corral::engine::{
    BatchItem, CausalLm, Constraint, CpuLogits, Logits, ModelError, RobustConstrainedAdapter,
    Sequence, log_sum_exp,
};
use corral::trie::{FixedBitSet, TokenId};
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;

/// Nodes run in one batched forward pass.
const BATCH: usize = 32;

/// The result of [`exact`].
#[derive(Clone, Debug)]
pub struct Exact {
    /// The conditional distribution over output texts (sums to 1).
    pub dist: BTreeMap<String, f64>,
    /// The model's probability of the complete outputs found: the normalizer.
    pub found: f64,
    /// The probability of the pruned prefixes: at most this much of the model's
    /// probability of outputs in the grammar is missing from `found`.
    pub pruned: f64,
    /// Prefixes the model ran on.
    pub nodes: usize,
    /// Complete token sequences found.
    pub sequences: usize,
}

impl Exact {
    /// The share of the grammar's mass the walk may have missed: `pruned / (found +
    /// pruned)`.
    pub fn pruned_share(&self) -> f64 {
        self.pruned / (self.found + self.pruned)
    }
}

/// A prefix waiting for its forward pass.
struct Node {
    adapter: RobustConstrainedAdapter,
    /// The parent's KV cache and the positions it holds.
    parent: Rc<Sequence>,
    pos: usize,
    token: TokenId,
    logp: f64,
    bytes: Vec<u8>,
}

/// The probability under the model of the greedy output under the masks (the most likely
/// allowed token at each step, the end as soon as it is the most likely): a lower bound
/// on the grammar's mass, which [`exact`]'s bound is relative to.
pub fn greedy_mass(
    lm: &mut dyn CausalLm,
    constraint: &Arc<Constraint>,
    prompt: &[TokenId],
) -> anyhow::Result<f64> {
    let space = constraint.space().clone();
    let mut seq = lm.new_sequence();
    let mut adapter = RobustConstrainedAdapter::new(constraint.clone());
    let mut mask = FixedBitSet::with_capacity(lm.logit_width().max(space.width()));
    let (mut feed, mut pos, mut logp) = (prompt.to_vec(), 0, 0.0);
    for _ in 0..256 {
        let l = lm.forward_sequence(&mut seq, &feed, pos)?;
        pos += feed.len();
        let v = l.to_masked_vec(None)?;
        let lse = log_sum_exp(&v, 1.0);
        mask.clear();
        adapter.compute_mask(&mut mask)?;
        let best = mask
            .ones()
            .max_by(|&a, &b| v[a].total_cmp(&v[b]))
            .ok_or_else(|| anyhow::anyhow!("no token allowed"))?;
        let t = TokenId(best as u32);
        logp += v[best] as f64 - lse;
        if space.eos().contains(&t) {
            return Ok(logp.exp());
        }
        adapter.step_with_token(t)?;
        feed = vec![t];
    }
    anyhow::bail!("the greedy output did not end in 256 tokens")
}

/// Walks every output of `constraint` after `prompt` (see the module docs): prefixes less
/// likely than `bound` are pruned; more than `max_nodes` prefixes is an error.
pub fn exact(
    lm: &mut dyn CausalLm,
    constraint: &Arc<Constraint>,
    prompt: &[TokenId],
    bound: f64,
    max_nodes: usize,
) -> anyhow::Result<Exact> {
    let space = constraint.space().clone();
    let mut out = Exact {
        dist: BTreeMap::new(),
        found: 0.0,
        pruned: 0.0,
        nodes: 0,
        sequences: 0,
    };
    let mut by_text: BTreeMap<String, f64> = BTreeMap::new();
    let mut root = lm.new_sequence();
    let logits = lm.forward_sequence(&mut root, prompt, 0)?;
    let mut stack = Vec::new();
    let mut mask = FixedBitSet::with_capacity(lm.logit_width().max(space.width()));
    let mut expand = |adapter: &mut RobustConstrainedAdapter,
                      logits: &dyn Logits,
                      seq: Rc<Sequence>,
                      pos: usize,
                      logp: f64,
                      bytes: &[u8],
                      stack: &mut Vec<Node>,
                      out: &mut Exact|
     -> anyhow::Result<()> {
        let v = logits.to_masked_vec(None)?;
        let lse = log_sum_exp(&v, 1.0);
        mask.clear();
        adapter.compute_mask(&mut mask)?;
        for t in mask.ones() {
            let t = TokenId(t as u32);
            let lp = logp + v.get(t.index()).map_or(f64::NEG_INFINITY, |&l| l as f64) - lse;
            if space.eos().contains(&t) {
                let text = String::from_utf8_lossy(bytes).into_owned();
                *by_text.entry(text).or_default() += lp.exp();
                out.found += lp.exp();
                out.sequences += 1;
                continue;
            }
            if lp.exp() < bound {
                out.pruned += lp.exp();
                continue;
            }
            let mut child = adapter.fork();
            child.step_with_token(t)?;
            let mut b = bytes.to_vec();
            b.extend_from_slice(space.vocab().token_bytes(t).unwrap_or_default());
            stack.push(Node {
                adapter: child,
                parent: seq.clone(),
                pos,
                token: t,
                logp: lp,
                bytes: b,
            });
        }
        Ok(())
    };
    let mut adapter = RobustConstrainedAdapter::new(constraint.clone());
    expand(
        &mut adapter,
        &*logits,
        Rc::new(root),
        prompt.len(),
        0.0,
        &[],
        &mut stack,
        &mut out,
    )?;
    while !stack.is_empty() {
        let batch: Vec<Node> = stack.split_off(stack.len().saturating_sub(BATCH));
        out.nodes += batch.len();
        anyhow::ensure!(
            out.nodes <= max_nodes,
            "more than {max_nodes} prefixes above the bound {bound:e}: raise the bound"
        );
        let mut seqs: Vec<Sequence> = batch
            .iter()
            .map(|n| {
                lm.copy_prefix(&n.parent, n.pos)
                    .ok_or_else(|| anyhow::anyhow!("the model cannot copy its KV cache"))
            })
            .collect::<anyhow::Result<_>>()?;
        let logits = {
            let mut items: Vec<BatchItem<'_>> = batch
                .iter()
                .zip(seqs.iter_mut())
                .map(|(n, s)| BatchItem {
                    tokens: std::slice::from_ref(&n.token),
                    pos: n.pos,
                    sequence: s,
                })
                .collect();
            lm.forward_batch(&mut items)?
        };
        for ((n, s), l) in batch.into_iter().zip(seqs).zip(logits) {
            let Node {
                mut adapter,
                parent,
                pos,
                logp,
                bytes,
                ..
            } = n;
            // A parent's cache goes once its last child has run.
            drop(parent);
            expand(
                &mut adapter,
                &*l,
                Rc::new(s),
                pos + 1,
                logp,
                &bytes,
                &mut stack,
                &mut out,
            )?;
        }
    }
    anyhow::ensure!(out.found > 0.0, "no complete output above the bound");
    out.dist = by_text
        .into_iter()
        .map(|(k, p)| (k, p / out.found))
        .collect();
    Ok(out)
}

/// A model whose prompt is run once: a sequence that starts with exactly that prompt gets a
/// copy of its KV cache and its logits, so that the samplers' figures are of the output
/// alone (the same prompt costs both samplers the same).
pub struct PromptCached<'a> {
    lm: &'a mut dyn CausalLm,
    prompt: Vec<TokenId>,
    cached: Sequence,
    logits: Vec<f32>,
    /// The cache [`CausalLm::forward`] runs on.
    own: Sequence,
}

impl<'a> PromptCached<'a> {
    /// Runs `prompt` on `lm` once.
    pub fn new(lm: &'a mut dyn CausalLm, prompt: &[TokenId]) -> Result<Self, ModelError> {
        let mut cached = lm.new_sequence();
        let l = lm.forward_sequence(&mut cached, prompt, 0)?;
        let own = lm.new_sequence();
        Ok(PromptCached {
            logits: l.to_masked_vec(None)?,
            lm,
            prompt: prompt.to_vec(),
            cached,
            own,
        })
    }

    fn start(&self, tokens: &[TokenId], pos: usize) -> Option<Sequence> {
        if pos != 0 || tokens != self.prompt {
            return None;
        }
        self.lm.copy_prefix(&self.cached, self.prompt.len())
    }
}

impl CausalLm for PromptCached<'_> {
    fn forward(&mut self, tokens: &[TokenId], pos: usize) -> Result<Box<dyn Logits>, ModelError> {
        if let Some(s) = self.start(tokens, pos) {
            self.own = s;
            return Ok(Box::new(CpuLogits(self.logits.clone())));
        }
        let mut own = std::mem::replace(&mut self.own, self.lm.new_sequence());
        let r = self.lm.forward_sequence(&mut own, tokens, pos);
        self.own = own;
        r
    }
    fn logit_width(&self) -> usize {
        self.lm.logit_width()
    }
    fn max_positions(&self) -> usize {
        self.lm.max_positions()
    }
    fn reset(&mut self) {
        self.own = self.lm.new_sequence();
    }
    fn new_sequence(&self) -> Sequence {
        self.lm.new_sequence()
    }
    fn forward_batch(
        &mut self,
        items: &mut [BatchItem<'_>],
    ) -> Result<Vec<Box<dyn Logits>>, ModelError> {
        let mut out: Vec<Option<Box<dyn Logits>>> = Vec::with_capacity(items.len());
        let mut run = Vec::new();
        for (i, it) in items.iter_mut().enumerate() {
            match self.start(it.tokens, it.pos) {
                Some(s) => {
                    *it.sequence = s;
                    out.push(Some(Box::new(CpuLogits(self.logits.clone()))));
                }
                None => {
                    out.push(None);
                    run.push((
                        i,
                        BatchItem {
                            tokens: it.tokens,
                            pos: it.pos,
                            sequence: &mut *it.sequence,
                        },
                    ));
                }
            }
        }
        let (at, mut batch): (Vec<usize>, Vec<BatchItem<'_>>) = run.into_iter().unzip();
        if !batch.is_empty() {
            for (i, l) in at.into_iter().zip(self.lm.forward_batch(&mut batch)?) {
                out[i] = Some(l);
            }
        }
        Ok(out
            .into_iter()
            .map(|l| l.expect("every item run"))
            .collect())
    }
    fn forward_batch_tails(
        &mut self,
        items: &mut [BatchItem<'_>],
        tails: &[usize],
    ) -> Result<Vec<Box<dyn Logits>>, ModelError> {
        // Only a whole prompt comes from the copy, and it wants one position's logits.
        if tails.iter().all(|&t| t == 1) {
            return self.forward_batch(items);
        }
        self.lm.forward_batch_tails(items, tails)
    }
    fn copy_prefix(&self, sequence: &Sequence, positions: usize) -> Option<Sequence> {
        self.lm.copy_prefix(sequence, positions)
    }
    fn sequence_bytes(&self, sequence: &Sequence) -> Option<usize> {
        self.lm.sequence_bytes(sequence)
    }
}

/// Total variation distance between `p` and the empirical distribution of `samples`.
pub fn total_variation(p: &BTreeMap<String, f64>, samples: &[String]) -> f64 {
    let mut counts: BTreeMap<&str, f64> = BTreeMap::new();
    for s in samples {
        *counts.entry(s).or_default() += 1.0 / samples.len() as f64;
    }
    let mut tv = 0.0;
    for (k, &q) in &counts {
        tv += (p.get(*k).copied().unwrap_or(0.0) - q).abs();
    }
    for (k, &pk) in p {
        if !counts.contains_key(k.as_str()) {
            tv += pk;
        }
    }
    tv / 2.0
}

/// The noise floor: the mean total variation distance between `p` and `k` samples drawn
/// from `p` itself, over `reps` draws (a seeded generator).
pub fn noise_floor(p: &BTreeMap<String, f64>, k: usize, reps: usize, seed: u64) -> f64 {
    let mut rng = corral::engine::Rng::new(seed);
    let entries: Vec<(&String, f64)> = p.iter().map(|(s, &x)| (s, x)).collect();
    let mut sum = 0.0;
    for _ in 0..reps {
        let samples: Vec<String> = (0..k)
            .map(|_| {
                let mut u = rng.next_f64();
                for (s, x) in &entries {
                    u -= x;
                    if u < 0.0 {
                        return (*s).clone();
                    }
                }
                entries.last().expect("not empty").0.clone()
            })
            .collect();
        sum += total_variation(p, &samples);
    }
    sum / reps as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dist(pairs: &[(&str, f64)]) -> BTreeMap<String, f64> {
        pairs.iter().map(|(s, p)| (s.to_string(), *p)).collect()
    }

    #[test]
    fn total_variation_counts_both_sides() {
        let p = dist(&[("a", 0.5), ("b", 0.5)]);
        let s: Vec<String> = ["a", "a", "c", "c"].iter().map(|x| x.to_string()).collect();
        // |0.5 - 0.5| + |0.5 - 0| + |0 - 0.5| = 1, halved.
        assert!((total_variation(&p, &s) - 0.5).abs() < 1e-12);
        let s: Vec<String> = ["a", "b"].iter().map(|x| x.to_string()).collect();
        assert_eq!(total_variation(&p, &s), 0.0);
    }

    #[test]
    fn noise_floor_shrinks_with_more_samples() {
        let p = dist(&[("a", 0.6), ("b", 0.3), ("c", 0.1)]);
        let small = noise_floor(&p, 10, 200, 1);
        let large = noise_floor(&p, 1000, 200, 1);
        assert!(small > 3.0 * large, "{small} {large}");
        assert!(large > 0.0 && large < 0.05, "{large}");
    }
}
