//! Quantized llama-family models from GGUF files (candle-transformers `quantized_llama`):
//! Llama, SmolLM2, Mistral and the other architectures llama.cpp stores as `llama`.

use crate::LoadError;
use crate::gguf_tokenizer::{GgufTokenizerInfo, tokenizer_from_gguf};
use crate::logits::{CandleLogits, backend};
use candle_core::quantized::gguf_file::{Content, Value};
use candle_core::{Device, Tensor};
use candle_transformers::models::quantized_llama::{MAX_SEQ_LEN, ModelWeights};
use corral_engine::{CausalLm, Logits, ModelError};
use std::any::Any;
use std::path::Path;

/// A GGUF llama-family model. Cloning `ModelWeights` shares the weights, so snapshots of
/// the KV cache are cheap.
pub struct GgufLlama {
    weights: ModelWeights,
    device: Device,
    vocab: usize,
    max_positions: usize,
}

fn usize_meta(c: &Content, key: &str) -> Option<usize> {
    match c.metadata.get(key)? {
        Value::U32(x) => Some(*x as usize),
        Value::U64(x) => Some(*x as usize),
        Value::I32(x) => usize::try_from(*x).ok(),
        Value::I64(x) => usize::try_from(*x).ok(),
        _ => None,
    }
}

impl GgufLlama {
    /// Loads the model and the tokenizer stored in its metadata.
    pub fn load(
        path: &Path,
        device: &Device,
    ) -> Result<(GgufLlama, tokenizers::Tokenizer, GgufTokenizerInfo), LoadError> {
        let mut file = std::fs::File::open(path)
            .map_err(|e| LoadError::Io(format!("{}: {e}", path.display())))?;
        let content = Content::read(&mut file).map_err(|e| {
            LoadError::Format(format!("{}: not a readable GGUF file: {e}", path.display()))
        })?;
        let arch = content
            .metadata
            .get("general.architecture")
            .and_then(|v| v.to_string().ok())
            .cloned()
            .unwrap_or_default();
        if arch != "llama" {
            return Err(LoadError::Format(format!(
                "{}: GGUF architecture {arch:?} is not supported (llama family only)",
                path.display()
            )));
        }
        // Everything needed from the metadata first: `from_gguf` takes the content by value.
        let (tokenizer, info) = tokenizer_from_gguf(&content)?;
        let vocab = usize_meta(&content, "llama.vocab_size")
            .unwrap_or_else(|| tokenizer.get_vocab_size(true));
        let context = usize_meta(&content, "llama.context_length").unwrap_or(MAX_SEQ_LEN);
        let weights = ModelWeights::from_gguf(content, &mut file, device).map_err(|e| {
            LoadError::Format(format!("{}: cannot load weights: {e}", path.display()))
        })?;
        Ok((
            GgufLlama {
                weights,
                device: device.clone(),
                vocab,
                // quantized_llama's RoPE table stops at MAX_SEQ_LEN, whatever the file says.
                max_positions: context.min(MAX_SEQ_LEN),
            },
            tokenizer,
            info,
        ))
    }
}

impl CausalLm for GgufLlama {
    fn forward(&mut self, tokens: &[u32], pos: usize) -> Result<Box<dyn Logits>, ModelError> {
        if pos + tokens.len() > self.max_positions {
            return Err(ModelError::Context {
                what: "prompt and output",
                needed: pos + tokens.len(),
                max: self.max_positions,
            });
        }
        let input = Tensor::new(tokens, &self.device)
            .and_then(|t| t.unsqueeze(0))
            .map_err(backend)?;
        let logits = self.weights.forward(&input, pos).map_err(backend)?;
        Ok(Box::new(CandleLogits(logits)))
    }

    fn logit_width(&self) -> usize {
        self.vocab
    }

    fn max_positions(&self) -> usize {
        self.max_positions
    }

    fn reset(&mut self) {
        self.weights.clear_kv_cache();
    }

    fn snapshot(&self) -> Box<dyn Any + Send> {
        Box::new(self.weights.clone())
    }

    fn restore(&mut self, snapshot: &(dyn Any + Send)) -> Result<(), ModelError> {
        let w = snapshot
            .downcast_ref::<ModelWeights>()
            .ok_or(ModelError::BadSnapshot)?;
        self.weights = w.clone();
        Ok(())
    }
}
