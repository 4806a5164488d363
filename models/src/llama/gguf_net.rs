//! [`GgufNet`]: the networks a GGUF file may hold, as one [`CandleNet`].

use super::Llama;
use crate::candle_lm::CandleNet;
use crate::gpt_oss::GptOss;
use crate::gpt_oss::device::DeviceGptOss;
use candle_core::{Device, Result, Tensor};
use candle_transformers::models::quantized_llama::ModelWeights;

/// A GGUF network.
#[derive(Clone, Debug)]
pub enum GgufNet {
    /// Dense llama-family models (Llama, SmolLM2, Mistral, ...): [`Llama`].
    Dense(Llama),
    /// Llama-family mixture-of-experts models: candle-transformers' `quantized_llama`.
    Experts(Box<ModelWeights>),
    /// gpt-oss ([`crate::gpt_oss`]).
    GptOss(GptOss),
    /// gpt-oss on a device other than the CPU ([`crate::gpt_oss::device`]).
    GptOssDevice(DeviceGptOss),
}

impl CandleNet for GgufNet {
    fn forward(&mut self, input: &Tensor, pos: usize) -> Result<Tensor> {
        match self {
            GgufNet::Dense(m) => m.forward(input, pos),
            GgufNet::Experts(m) => m.forward(input, pos),
            GgufNet::GptOss(m) => CandleNet::forward(m, input, pos),
            GgufNet::GptOssDevice(m) => m.forward(input, pos),
        }
    }

    fn fresh(&self) -> GgufNet {
        match self {
            GgufNet::Dense(m) => GgufNet::Dense(m.fresh()),
            GgufNet::Experts(m) => {
                let mut m = m.clone();
                m.clear_kv_cache();
                GgufNet::Experts(m)
            }
            GgufNet::GptOss(m) => GgufNet::GptOss(m.fresh()),
            GgufNet::GptOssDevice(m) => GgufNet::GptOssDevice(m.fresh()),
        }
    }

    fn forward_batch(
        nets: &mut [&mut GgufNet],
        tokens: &[&[u32]],
        pos: &[usize],
        device: &Device,
    ) -> Result<Tensor> {
        let n = nets.len();
        let mut dense = Vec::with_capacity(n);
        let mut gpt_oss = Vec::with_capacity(n);
        for net in nets.iter_mut() {
            match &mut **net {
                GgufNet::Dense(m) => dense.push(m),
                GgufNet::GptOss(m) => gpt_oss.push(m),
                GgufNet::Experts(_) | GgufNet::GptOssDevice(_) => break,
            }
        }
        if dense.len() == n {
            return Llama::forward_batch(&mut dense, tokens, pos);
        }
        if gpt_oss.len() == n {
            return GptOss::forward_batch(&mut gpt_oss, tokens, pos);
        }
        drop((dense, gpt_oss));
        crate::candle_lm::forward_one_by_one(nets, tokens, pos, device)
    }

    fn forward_batch_tails(
        nets: &mut [&mut GgufNet],
        tokens: &[&[u32]],
        pos: &[usize],
        tails: &[usize],
        device: &Device,
    ) -> Result<Tensor> {
        let n = nets.len();
        let mut dense = Vec::with_capacity(n);
        for net in nets.iter_mut() {
            match &mut **net {
                GgufNet::Dense(m) => dense.push(m),
                _ => break,
            }
        }
        if dense.len() == n {
            return Llama::forward_batch_tails(&mut dense, tokens, pos, tails);
        }
        drop(dense);
        crate::candle_lm::forward_tails_by_steps(nets, tokens, pos, tails, device)
    }

    fn copy_prefix(&self, positions: usize) -> Option<GgufNet> {
        match self {
            GgufNet::Dense(m) => m.copy_prefix(positions).ok().map(GgufNet::Dense),
            GgufNet::Experts(_) | GgufNet::GptOss(_) | GgufNet::GptOssDevice(_) => None,
        }
    }

    fn kv_cache_bytes(&self) -> Option<usize> {
        match self {
            GgufNet::Dense(m) => Some(m.kv_cache_bytes()),
            GgufNet::Experts(_) | GgufNet::GptOss(_) | GgufNet::GptOssDevice(_) => None,
        }
    }

    fn clear_kv_cache(&mut self) {
        match self {
            GgufNet::Dense(m) => m.clear_kv_cache(),
            GgufNet::Experts(m) => m.clear_kv_cache(),
            GgufNet::GptOss(m) => m.clear_kv_cache(),
            GgufNet::GptOssDevice(m) => m.clear_kv_cache(),
        }
    }
}
