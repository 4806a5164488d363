//! Qwen3-family safetensors models (candle-transformers `qwen3`).

use crate::LoadError;
use crate::hf_folder::HfFolder;
use crate::logits::{CandleLogits, backend};
use candle_core::{DType, Device, Tensor};
use candle_transformers::models::qwen3::{Config, ModelForCausalLM};
use corral_engine::{CausalLm, Logits, ModelError};
use std::any::Any;

pub struct SafetensorsQwen3 {
    model: ModelForCausalLM,
    vocab: usize,
    max_positions: usize,
    device: Device,
}

impl SafetensorsQwen3 {
    pub fn load(
        folder: &HfFolder,
        dtype: DType,
        device: &Device,
    ) -> Result<SafetensorsQwen3, LoadError> {
        let config: Config = folder.config_as()?;
        let model = ModelForCausalLM::new(&config, folder.var_builder(dtype, device)?)
            .map_err(|e| LoadError::Format(format!("{}: {e}", folder.name)))?;
        Ok(SafetensorsQwen3 {
            model,
            vocab: config.vocab_size,
            max_positions: config.max_position_embeddings,
            device: device.clone(),
        })
    }
}

impl CausalLm for SafetensorsQwen3 {
    fn forward(&mut self, tokens: &[u32], pos: usize) -> Result<Box<dyn Logits>, ModelError> {
        if pos + tokens.len() > self.max_positions {
            return Err(ModelError::Context {
                what: "prompt and output",
                needed: pos + tokens.len(),
                max: self.max_positions,
            });
        }
        if pos == 0 {
            self.model.clear_kv_cache();
        }
        let input = Tensor::new(tokens, &self.device)
            .and_then(|t| t.unsqueeze(0))
            .map_err(backend)?;
        let logits = self.model.forward(&input, pos).map_err(backend)?;
        Ok(Box::new(CandleLogits(logits)))
    }

    fn logit_width(&self) -> usize {
        self.vocab
    }

    fn max_positions(&self) -> usize {
        self.max_positions
    }

    fn reset(&mut self) {
        self.model.clear_kv_cache();
    }

    fn snapshot(&self) -> Box<dyn Any + Send> {
        Box::new(self.model.clone())
    }

    fn restore(&mut self, snapshot: &(dyn Any + Send)) -> Result<(), ModelError> {
        self.model = snapshot
            .downcast_ref::<ModelForCausalLM>()
            .ok_or(ModelError::BadSnapshot)?
            .clone();
        Ok(())
    }
}
