//! The model as the generation loop sees it: one trait, implemented once per architecture
//! family in corral-models (the only crate that links candle). The loop never matches on
//! the model kind.

use corral_trie::{FixedBitSet, TokenId};
use std::any::Any;
use std::sync::Arc;

/// Why a model call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelError {
    /// The backend (candle, or a caller's own network) failed.
    #[error("model: {0}")]
    Backend(BackendError),
    /// A forward pass over no tokens.
    #[error("model: no tokens to run")]
    NoTokens,
    /// More positions than the model supports.
    #[error("{what}: {needed} positions needed, the model supports {max}")]
    Context {
        /// What needs them, in words (such as "the prompt and max_tokens").
        what: &'static str,
        /// Positions needed.
        needed: usize,
        /// Positions the model supports ([`CausalLm::max_positions`]).
        max: usize,
    },
    /// A sequence made by another model.
    #[error("the sequence does not belong to this model")]
    ForeignSequence,
}

/// A backend's error, kept whole: [`BackendError::get_ref`] gives the error itself (a
/// `candle_core::Error` from corral-models), to downcast or to walk its sources. Clones
/// share it; two are equal when they are the same error or say the same.
#[derive(Clone, Debug)]
pub struct BackendError(Arc<dyn std::error::Error + Send + Sync>);

impl BackendError {
    /// Wraps a backend's error.
    pub fn new(e: impl std::error::Error + Send + Sync + 'static) -> BackendError {
        BackendError(Arc::new(e))
    }

    /// The backend's error.
    pub fn get_ref(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        &*self.0
    }
}

/// A backend error that is only a message.
impl From<&str> for BackendError {
    fn from(message: &str) -> BackendError {
        BackendError(Arc::from(Box::<dyn std::error::Error + Send + Sync>::from(
            message,
        )))
    }
}

impl std::fmt::Display for BackendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl PartialEq for BackendError {
    fn eq(&self, other: &BackendError) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0.to_string() == other.0.to_string()
    }
}

impl Eq for BackendError {}

/// A causal language model with a KV cache.
pub trait CausalLm: Send {
    /// Runs `tokens` at positions `pos..pos + tokens.len()` and returns the logits of the
    /// last one. `pos == 0` starts over (clears the cache); otherwise `pos` must be the
    /// number of positions already in the cache.
    fn forward(&mut self, tokens: &[TokenId], pos: usize) -> Result<Box<dyn Logits>, ModelError>;
    /// Number of logits per position (may exceed the tokenizer's vocabulary).
    fn logit_width(&self) -> usize;
    /// Most positions (prompt plus output) the model supports.
    fn max_positions(&self) -> usize;
    /// Clears the KV cache.
    fn reset(&mut self);
    /// A new sequence over the same weights, with a KV cache of its own (empty), for
    /// [`CausalLm::forward_batch`]. The cache [`CausalLm::forward`] uses is apart.
    fn new_sequence(&self) -> Sequence;
    /// Runs each item on its own sequence and returns each one's logits (of its last
    /// token), in order. Where the model can, the items of one token each (decoding steps
    /// of several sequences) run as one pass: their rows go through each weight matrix
    /// together. An item at position 0 starts its sequence over.
    fn forward_batch(
        &mut self,
        items: &mut [BatchItem<'_>],
    ) -> Result<Vec<Box<dyn Logits>>, ModelError>;
    /// [`CausalLm::forward_batch`], with the logits of each item's last `tails[i]`
    /// positions (at least 1, at most its tokens), in order: item 0's positions first to
    /// last, then item 1's. A sampler that weighs tokens the engine appended (a forced
    /// span after a drawn token) reads their probabilities so, in the pass that runs them.
    /// The default runs each item up to its first wanted position in one pass, then the
    /// rest one position a pass; a model that can returns them all from one pass.
    fn forward_batch_tails(
        &mut self,
        items: &mut [BatchItem<'_>],
        tails: &[usize],
    ) -> Result<Vec<Box<dyn Logits>>, ModelError> {
        check_tails(items, tails)?;
        let heads: Vec<usize> = items
            .iter()
            .zip(tails)
            .map(|(it, &t)| it.tokens.len() + 1 - t)
            .collect();
        let mut per_item: Vec<Vec<Box<dyn Logits>>> = Vec::with_capacity(items.len());
        let mut first: Vec<BatchItem<'_>> = items
            .iter_mut()
            .zip(&heads)
            .map(|(it, &h)| BatchItem {
                tokens: &it.tokens[..h],
                pos: it.pos,
                sequence: &mut *it.sequence,
            })
            .collect();
        for l in self.forward_batch(&mut first)? {
            per_item.push(vec![l]);
        }
        drop(first);
        let longest = tails.iter().copied().max().unwrap_or(1);
        for k in 1..longest {
            let mut at = Vec::new();
            let mut step: Vec<BatchItem<'_>> = Vec::new();
            for (i, it) in items.iter_mut().enumerate() {
                if k < tails[i] {
                    let j = heads[i] + k - 1;
                    at.push(i);
                    step.push(BatchItem {
                        tokens: &it.tokens[j..j + 1],
                        pos: it.pos + j,
                        sequence: &mut *it.sequence,
                    });
                }
            }
            for (i, l) in at.into_iter().zip(self.forward_batch(&mut step)?) {
                per_item[i].push(l);
            }
        }
        Ok(per_item.into_iter().flatten().collect())
    }
    /// Runs `tokens` on `sequence` from `pos` ([`CausalLm::forward_batch`] with one item)
    /// and returns the logits of the last.
    fn forward_sequence(
        &mut self,
        sequence: &mut Sequence,
        tokens: &[TokenId],
        pos: usize,
    ) -> Result<Box<dyn Logits>, ModelError> {
        self.forward_batch(&mut [BatchItem {
            tokens,
            pos,
            sequence,
        }])?
        .pop()
        .ok_or(ModelError::NoTokens)
    }
    /// A new sequence holding a copy of the first `positions` positions of `sequence`'s
    /// cache (at most the positions it holds), sized to them, so that a prompt sharing
    /// those tokens runs only the rest; `None` where the model cannot copy its caches (the
    /// default).
    fn copy_prefix(&self, sequence: &Sequence, positions: usize) -> Option<Sequence> {
        let _ = (sequence, positions);
        None
    }
    /// The bytes `sequence`'s cache holds, where the model counts them (the default:
    /// `None`, and [`CausalLm::copy_prefix`] should then be `None` too).
    fn sequence_bytes(&self, sequence: &Sequence) -> Option<usize> {
        let _ = sequence;
        None
    }
}

/// One sequence's KV cache, apart from the model's own ([`CausalLm::new_sequence`]); what
/// it holds is the model's business.
#[derive(Debug)]
pub struct Sequence(Box<dyn Any + Send>);

impl Sequence {
    /// Wraps a model's own per-sequence state (its KV cache).
    pub fn new<T: Any + Send>(state: T) -> Sequence {
        Sequence(Box::new(state))
    }

    /// Whether the state is a `T`.
    pub fn is<T: Any>(&self) -> bool {
        self.0.is::<T>()
    }

    /// The state, if it is a `T`.
    pub fn downcast_ref<T: Any>(&self) -> Option<&T> {
        self.0.downcast_ref()
    }

    /// The state, if it is a `T`.
    pub fn downcast_mut<T: Any>(&mut self) -> Option<&mut T> {
        self.0.downcast_mut()
    }
}

/// Checks [`CausalLm::forward_batch_tails`]'s `tails`: one per item, each from 1 to the
/// item's tokens.
pub fn check_tails(items: &[BatchItem<'_>], tails: &[usize]) -> Result<(), ModelError> {
    if tails.len() != items.len() {
        return Err(ModelError::Backend(
            "forward_batch_tails: one tail per item is needed".into(),
        ));
    }
    for (it, &t) in items.iter().zip(tails) {
        if it.tokens.is_empty() {
            return Err(ModelError::NoTokens);
        }
        if t == 0 || t > it.tokens.len() {
            return Err(ModelError::Backend(
                "forward_batch_tails: a tail is from 1 to the item's tokens".into(),
            ));
        }
    }
    Ok(())
}

/// One sequence's part of [`CausalLm::forward_batch`].
#[derive(Debug)]
pub struct BatchItem<'a> {
    /// The tokens to run: one for a decoding step, more for a prompt (run in chunks).
    pub tokens: &'a [TokenId],
    /// The position of the first: how many positions the sequence holds.
    pub pos: usize,
    /// The sequence whose cache the tokens run on and are added to.
    pub sequence: &'a mut Sequence,
}

/// The logits of one position, where the model computed them (CPU or GPU).
pub trait Logits: Send {
    /// Sets every token outside `mask` to minus infinity, where the logits live (on a GPU,
    /// the bit-packed mask is what crosses the bus), and returns the logits on the CPU.
    fn to_masked_vec(&self, mask: Option<&FixedBitSet>) -> Result<Vec<f32>, ModelError>;
}

/// Logits already on the CPU, as a vector: a caller's own model's, or a test's.
#[derive(Clone, Debug, PartialEq)]
pub struct CpuLogits(pub Vec<f32>);

impl Logits for CpuLogits {
    fn to_masked_vec(&self, mask: Option<&FixedBitSet>) -> Result<Vec<f32>, ModelError> {
        let mut v = self.0.clone();
        if let Some(m) = mask {
            apply_mask_in_place(&mut v, m);
        }
        Ok(v)
    }
}

/// Sets the logits of tokens outside `mask` to minus infinity, in place (the CPU path).
pub fn apply_mask_in_place(logits: &mut [f32], mask: &FixedBitSet) {
    let blocks = mask.as_slice();
    for (b, chunk) in logits.chunks_mut(usize::BITS as usize).enumerate() {
        let bits = blocks.get(b).copied().unwrap_or(0);
        if bits == usize::MAX {
            continue;
        }
        for (i, l) in chunk.iter_mut().enumerate() {
            if bits >> i & 1 == 0 {
                *l = f32::NEG_INFINITY;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_place_mask() {
        let mut logits: Vec<f32> = (0..70).map(|i| i as f32).collect();
        let mut mask = FixedBitSet::with_capacity(70);
        mask.insert(3);
        mask.insert(40);
        mask.insert(69);
        apply_mask_in_place(&mut logits, &mask);
        let kept: Vec<usize> = logits
            .iter()
            .enumerate()
            .filter(|(_, l)| l.is_finite())
            .map(|(i, _)| i)
            .collect();
        assert_eq!(kept, vec![3, 40, 69]);
    }
}
