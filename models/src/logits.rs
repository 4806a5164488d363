//! Logits as candle tensors, masked where they live.
//!
//! On the CPU the mask is applied in place on the host vector. On a GPU the bit-packed mask
//! (one bit per token: 16 KB for 128k tokens) is uploaded as bytes, unpacked into a 0/1
//! vector with a few tensor operations, and applied with `where_cond` on the device; only
//! then are the logits copied back for sampling.

use candle_core::{D, DType, Device, Tensor};
use corral_engine::{BackendError, Logits, ModelError, apply_mask_in_place};
use corral_trie::FixedBitSet;

pub(crate) fn backend(e: candle_core::Error) -> ModelError {
    ModelError::Backend(BackendError::new(crate::without_backtrace(e)))
}

/// Logits of the last position, shape `(vocab,)` or `(1, vocab)`, any device.
#[derive(Debug)]
pub struct CandleLogits(pub Tensor);

impl Logits for CandleLogits {
    fn to_masked_vec(&self, mask: Option<&FixedBitSet>) -> Result<Vec<f32>, ModelError> {
        let t = self
            .0
            .flatten_all()
            .map_err(backend)?
            .to_dtype(DType::F32)
            .map_err(backend)?;
        match (mask, t.device()) {
            (None, _) => t.to_vec1::<f32>().map_err(backend),
            (Some(m), Device::Cpu) => {
                let mut v = t.to_vec1::<f32>().map_err(backend)?;
                apply_mask_in_place(&mut v, m);
                Ok(v)
            }
            (Some(m), _) => mask_on_device(&t, m)?.to_vec1::<f32>().map_err(backend),
        }
    }
}

/// The mask as bytes, little-endian bit order (bit `i` of the mask is bit `i % 8` of byte
/// `i / 8`).
pub fn mask_bytes(mask: &FixedBitSet, width: usize) -> Vec<u8> {
    let mut bytes = vec![0u8; width.div_ceil(8)];
    for i in mask.ones().take_while(|&i| i < width) {
        bytes[i / 8] |= 1 << (i % 8);
    }
    bytes
}

/// Applies `mask` to `logits` (shape `(width,)`) with tensor operations on their device.
pub fn mask_on_device(logits: &Tensor, mask: &FixedBitSet) -> Result<Tensor, ModelError> {
    let width = logits.dim(0).map_err(backend)?;
    let dev = logits.device();
    let bytes = mask_bytes(mask, width);
    let n = bytes.len();
    // (n, 1) bytes as f32, divided by (1, 8) powers of two: bit k = floor(b / 2^k) mod 2.
    let b = Tensor::from_vec(bytes, (n, 1), dev)
        .map_err(backend)?
        .to_dtype(DType::F32)
        .map_err(backend)?;
    let pow = Tensor::from_vec(vec![1f32, 2., 4., 8., 16., 32., 64., 128.], (1, 8), dev)
        .map_err(backend)?;
    let shifted = b
        .broadcast_div(&pow)
        .map_err(backend)?
        .floor()
        .map_err(backend)?;
    let half = (&shifted / 2.0)
        .map_err(backend)?
        .floor()
        .map_err(backend)?;
    let bits = (&shifted - (half * 2.0).map_err(backend)?).map_err(backend)?;
    let bits = bits
        .flatten_all()
        .map_err(backend)?
        .narrow(D::Minus1, 0, width)
        .map_err(backend)?;
    let keep = bits.ge(0.5).map_err(backend)?;
    let neg = Tensor::full(f32::NEG_INFINITY, width, dev).map_err(backend)?;
    keep.where_cond(logits, &neg).map_err(backend)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The device path, run on the CPU device, agrees with the in-place path.
    #[test]
    fn device_mask_matches_in_place_mask() {
        let width = 1003;
        let values: Vec<f32> = (0..width).map(|i| (i as f32 * 0.37).sin()).collect();
        let mut mask = FixedBitSet::with_capacity(width + 21);
        for i in (0..width).filter(|i| i % 3 == 0 || i % 7 == 1) {
            mask.insert(i);
        }
        let t = Tensor::from_vec(values.clone(), width, &Device::Cpu).unwrap();
        let on_device = mask_on_device(&t, &mask).unwrap().to_vec1::<f32>().unwrap();
        let mut in_place = values;
        apply_mask_in_place(&mut in_place, &mask);
        assert_eq!(on_device, in_place);
        let via_trait = CandleLogits(t).to_masked_vec(Some(&mask)).unwrap();
        assert_eq!(via_trait, in_place);
    }
}
