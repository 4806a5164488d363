//! Llama-family safetensors models (candle-transformers `llama`).

use crate::LoadError;
use crate::hf_folder::HfFolder;
use crate::logits::{CandleLogits, backend};
use candle_core::{DType, Device, Tensor};
use candle_transformers::models::llama::{Cache, Config, Llama, LlamaConfig};
use corral_engine::{CausalLm, Logits, ModelError};
use std::any::Any;

pub struct SafetensorsLlama {
    model: Llama,
    cache: Cache,
    config: Config,
    dtype: DType,
    device: Device,
}

impl SafetensorsLlama {
    pub fn load(
        folder: &HfFolder,
        dtype: DType,
        device: &Device,
    ) -> Result<SafetensorsLlama, LoadError> {
        let config: LlamaConfig = folder.config_as()?;
        let config = config.into_config(false);
        let model = Llama::load(folder.var_builder(dtype, device)?, &config)
            .map_err(|e| LoadError::Format(format!("{}: {e}", folder.name)))?;
        let cache = Cache::new(true, dtype, &config, device)
            .map_err(|e| LoadError::Format(e.to_string()))?;
        Ok(SafetensorsLlama {
            model,
            cache,
            config,
            dtype,
            device: device.clone(),
        })
    }
}

impl CausalLm for SafetensorsLlama {
    fn forward(&mut self, tokens: &[u32], pos: usize) -> Result<Box<dyn Logits>, ModelError> {
        if pos + tokens.len() > self.max_positions() {
            return Err(ModelError::Context {
                what: "prompt and output",
                needed: pos + tokens.len(),
                max: self.max_positions(),
            });
        }
        if pos == 0 {
            self.reset();
        }
        let input = Tensor::new(tokens, &self.device)
            .and_then(|t| t.unsqueeze(0))
            .map_err(backend)?;
        let logits = self
            .model
            .forward(&input, pos, &mut self.cache)
            .map_err(backend)?;
        Ok(Box::new(CandleLogits(logits)))
    }

    fn logit_width(&self) -> usize {
        self.config.vocab_size
    }

    fn max_positions(&self) -> usize {
        self.config.max_position_embeddings
    }

    fn reset(&mut self) {
        if let Ok(c) = Cache::new(true, self.dtype, &self.config, &self.device) {
            self.cache = c;
        }
    }

    fn snapshot(&self) -> Box<dyn Any + Send> {
        Box::new(self.cache.clone())
    }

    fn restore(&mut self, snapshot: &(dyn Any + Send)) -> Result<(), ModelError> {
        self.cache = snapshot
            .downcast_ref::<Cache>()
            .ok_or(ModelError::BadSnapshot)?
            .clone();
        Ok(())
    }
}
