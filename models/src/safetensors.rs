//! Safetensors models from a Hugging Face folder: the llama family (Llama, Mistral) and
//! the Qwen2 and Qwen3 families, each a [`CandleNet`] over candle-transformers' own
//! implementation; gpt-oss over corral's ([`crate::gpt_oss`]).

use crate::LoadError;
use crate::candle_lm::{CandleLm, CandleNet};
use crate::hf_folder::HfFolder;
use candle_core::{DType, Device, Tensor};
use candle_transformers::models::{llama, qwen2, qwen3};
use corral_engine::CausalLm;

/// Llama: the network and its cache are separate values in candle.
#[derive(Clone)]
struct Llama {
    model: llama::Llama,
    cache: llama::Cache,
    config: llama::Config,
    dtype: DType,
    device: Device,
}

impl CandleNet for Llama {
    fn forward(&mut self, input: &Tensor, pos: usize) -> candle_core::Result<Tensor> {
        self.model.forward(input, pos, &mut self.cache)
    }

    fn clear_kv_cache(&mut self) {
        if let Ok(c) = llama::Cache::new(true, self.dtype, &self.config, &self.device) {
            self.cache = c;
        }
    }
}

impl CandleNet for qwen2::ModelForCausalLM {
    fn forward(&mut self, input: &Tensor, pos: usize) -> candle_core::Result<Tensor> {
        qwen2::ModelForCausalLM::forward(self, input, pos)
    }

    fn clear_kv_cache(&mut self) {
        qwen2::ModelForCausalLM::clear_kv_cache(self)
    }
}

impl CandleNet for qwen3::ModelForCausalLM {
    fn forward(&mut self, input: &Tensor, pos: usize) -> candle_core::Result<Tensor> {
        qwen3::ModelForCausalLM::forward(self, input, pos)
    }

    fn clear_kv_cache(&mut self) {
        qwen3::ModelForCausalLM::clear_kv_cache(self)
    }
}

/// The network of `folder` (by its config's `model_type`).
pub fn load(
    folder: &HfFolder,
    dtype: DType,
    device: &Device,
) -> Result<Box<dyn CausalLm>, LoadError> {
    let bad = |e: candle_core::Error| {
        LoadError::candle(format!("{}: cannot build the network", folder.name), e)
    };
    let dev = device.clone();
    Ok(match folder.model_type() {
        "llama" | "mistral" => {
            let config: llama::LlamaConfig = folder.config_as()?;
            let config = config.into_config(false);
            let model =
                llama::Llama::load(folder.var_builder(dtype, device)?, &config).map_err(bad)?;
            let cache = llama::Cache::new(true, dtype, &config, device).map_err(bad)?;
            let (width, max) = (config.vocab_size, config.max_position_embeddings);
            let net = Llama {
                model,
                cache,
                config,
                dtype,
                device: dev.clone(),
            };
            Box::new(CandleLm::new(net, dev, width, max))
        }
        "qwen2" => {
            let config: qwen2::Config = folder.config_as()?;
            let net = qwen2::ModelForCausalLM::new(&config, folder.var_builder(dtype, device)?)
                .map_err(bad)?;
            Box::new(CandleLm::new(
                net,
                dev,
                config.vocab_size,
                config.max_position_embeddings,
            ))
        }
        "qwen3" => {
            let config: qwen3::Config = folder.config_as()?;
            let net = qwen3::ModelForCausalLM::new(&config, folder.var_builder(dtype, device)?)
                .map_err(bad)?;
            Box::new(CandleLm::new(
                net,
                dev,
                config.vocab_size,
                config.max_position_embeddings,
            ))
        }
        "gpt_oss" => crate::gpt_oss::load_hf(folder, device)?,
        other => {
            return Err(LoadError::Format(format!(
                "{}: model_type {other:?} is not supported (llama, mistral, qwen2, qwen3, gpt_oss; or a GGUF llama-family or gpt-oss file)",
                folder.name
            )));
        }
    })
}
