//! Masks for many sequences at once: the one batching path of the server's scheduler, the
//! Python package's batch call and the benches. Each sequence is a [`MaskSlot`]: an
//! adapter with the bitset its mask goes to, a [`crate::Decoder`], or a caller's own type.

use crate::adapter::{AdapterError, RobustConstrainedAdapter};
use corral_trie::FixedBitSet;

/// Batches at least this large are computed in parallel by [`compute_masks`].
pub const PARALLEL_BATCH: usize = 16;

/// One sequence's place in a batch of masks: what computes its next mask, and where the
/// mask is kept.
pub trait MaskSlot: Send {
    /// What a mask that cannot be computed reports.
    type Error: Send;

    /// Computes the mask for this sequence's next token.
    fn compute_mask(&mut self) -> Result<(), Self::Error>;
}

impl<S: MaskSlot + ?Sized> MaskSlot for &mut S {
    type Error = S::Error;

    fn compute_mask(&mut self) -> Result<(), S::Error> {
        (**self).compute_mask()
    }
}

/// An adapter and the bitset its mask is written to.
impl MaskSlot for (&mut RobustConstrainedAdapter, &mut FixedBitSet) {
    type Error = AdapterError;

    fn compute_mask(&mut self) -> Result<(), AdapterError> {
        self.0.compute_mask(self.1)
    }
}

/// The masks of a batch of sequences, one result per slot, in order. Large batches run in
/// parallel with rayon (the per-sequence work is independent; the per-state caches are
/// shared); below [`PARALLEL_BATCH`] sequences the thread wake-ups cost more than they
/// save (measured: 8 sequences 1.6x slower with rayon, 64 sequences 1.5x faster, 2 cores).
pub fn compute_masks<S: MaskSlot>(slots: &mut [S]) -> Vec<Result<(), S::Error>> {
    use rayon::prelude::*;
    if slots.len() < PARALLEL_BATCH {
        return slots.iter_mut().map(MaskSlot::compute_mask).collect();
    }
    slots.par_iter_mut().map(MaskSlot::compute_mask).collect()
}
