//! A model with fewer positions than its file allows (`--ctx-size`): its KV caches, which
//! grow with the positions a sequence holds, are bounded by the cap.

use corral_engine::{BatchItem, CausalLm, Logits, ModelError, Sequence};
use corral_trie::TokenId;

/// `inner` taking at most `max` positions.
pub(crate) struct Capped {
    pub inner: Box<dyn CausalLm>,
    pub max: usize,
}

impl Capped {
    fn check(&self, tokens: usize, pos: usize) -> Result<(), ModelError> {
        let needed = pos.saturating_add(tokens);
        if needed > self.max {
            return Err(ModelError::Context {
                what: "prompt and output",
                needed,
                max: self.max,
            });
        }
        Ok(())
    }
}

impl CausalLm for Capped {
    fn forward(&mut self, tokens: &[TokenId], pos: usize) -> Result<Box<dyn Logits>, ModelError> {
        self.check(tokens.len(), pos)?;
        self.inner.forward(tokens, pos)
    }

    fn logit_width(&self) -> usize {
        self.inner.logit_width()
    }

    fn max_positions(&self) -> usize {
        self.max
    }

    fn reset(&mut self) {
        self.inner.reset();
    }

    fn new_sequence(&self) -> Sequence {
        self.inner.new_sequence()
    }

    fn forward_batch(
        &mut self,
        items: &mut [BatchItem<'_>],
    ) -> Result<Vec<Box<dyn Logits>>, ModelError> {
        for item in items.iter() {
            self.check(item.tokens.len(), item.pos)?;
        }
        self.inner.forward_batch(items)
    }

    fn forward_batch_tails(
        &mut self,
        items: &mut [BatchItem<'_>],
        tails: &[usize],
    ) -> Result<Vec<Box<dyn Logits>>, ModelError> {
        for item in items.iter() {
            self.check(item.tokens.len(), item.pos)?;
        }
        self.inner.forward_batch_tails(items, tails)
    }

    fn copy_prefix(&self, sequence: &Sequence, positions: usize) -> Option<Sequence> {
        self.inner.copy_prefix(sequence, positions)
    }

    fn sequence_bytes(&self, sequence: &Sequence) -> Option<usize> {
        self.inner.sequence_bytes(sequence)
    }
}
