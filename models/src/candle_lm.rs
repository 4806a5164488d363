//! One [`CausalLm`] for every candle model: the checks, the input tensor, the KV-cache
//! reset at position 0 and the snapshots are written once here; an architecture only says
//! how to run its network ([`CandleNet`]).

use crate::logits::{CandleLogits, backend};
use candle_core::{Device, Tensor};
use corral_engine::{CausalLm, Logits, ModelError};
use corral_trie::TokenId;
use std::any::Any;

/// A candle network with its KV cache. Cloning must be cheap (weights shared), since a
/// clone is a snapshot of the cache.
pub trait CandleNet: Clone + Send + 'static {
    /// Runs `input` (shape `(1, seq)`) at positions `pos..`; the logits of the last
    /// position.
    fn forward(&mut self, input: &Tensor, pos: usize) -> candle_core::Result<Tensor>;
    /// Empties the KV cache.
    fn clear_kv_cache(&mut self);
}

/// The default of [`CandleLm::with_prefill_chunk`].
pub const DEFAULT_PREFILL_CHUNK: usize = 256;

/// A candle network as a [`CausalLm`].
pub struct CandleLm<N: CandleNet> {
    net: N,
    device: Device,
    /// Logits per position (the model's vocabulary, padded).
    width: usize,
    max_positions: usize,
    prefill_chunk: usize,
}

impl<N: CandleNet> CandleLm<N> {
    pub fn new(net: N, device: Device, width: usize, max_positions: usize) -> CandleLm<N> {
        CandleLm {
            net,
            device,
            width,
            max_positions,
            prefill_chunk: DEFAULT_PREFILL_CHUNK,
        }
    }

    /// Most positions one forward pass takes: a longer input (a prompt) runs in chunks of
    /// this many, each attending to the cache of those before, so attention's memory is
    /// `chunk x context` per head rather than `prompt x prompt`. Default
    /// [`DEFAULT_PREFILL_CHUNK`] (256); at least 1.
    pub fn with_prefill_chunk(mut self, positions: usize) -> CandleLm<N> {
        self.prefill_chunk = positions.max(1);
        self
    }
}

impl<N: CandleNet> CausalLm for CandleLm<N> {
    fn forward(&mut self, tokens: &[TokenId], pos: usize) -> Result<Box<dyn Logits>, ModelError> {
        if pos + tokens.len() > self.max_positions {
            return Err(ModelError::Context {
                what: "prompt and output",
                needed: pos + tokens.len(),
                max: self.max_positions,
            });
        }
        if pos == 0 {
            self.net.clear_kv_cache();
        }
        if tokens.is_empty() {
            return Err(ModelError::Backend("no tokens to run".into()));
        }
        let mut logits = None;
        for (k, chunk) in tokens.chunks(self.prefill_chunk).enumerate() {
            let input = Tensor::new(TokenId::raw(chunk), &self.device)
                .and_then(|t| t.unsqueeze(0))
                .map_err(backend)?;
            let at = pos + k * self.prefill_chunk;
            logits = Some(self.net.forward(&input, at).map_err(backend)?);
        }
        Ok(Box::new(CandleLogits(logits.expect("at least one chunk"))))
    }

    fn logit_width(&self) -> usize {
        self.width
    }

    fn max_positions(&self) -> usize {
        self.max_positions
    }

    fn reset(&mut self) {
        self.net.clear_kv_cache();
    }

    fn snapshot(&self) -> Box<dyn Any + Send> {
        Box::new(self.net.clone())
    }

    fn restore(&mut self, snapshot: &(dyn Any + Send)) -> Result<(), ModelError> {
        self.net = snapshot
            .downcast_ref::<N>()
            .ok_or(ModelError::BadSnapshot)?
            .clone();
        Ok(())
    }
}
