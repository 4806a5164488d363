//! Models from GGUF files: the llama family (Llama, SmolLM2, Mistral and the other
//! architectures llama.cpp stores as `llama`) and gpt-oss ([`crate::gpt_oss`]).

use crate::LoadError;
use crate::candle_lm::CandleLm;
use crate::gguf_tokenizer::{GgufTokenizerInfo, tokenizer_from_gguf};
use crate::gpt_oss::GptOss;
use crate::gpt_oss::gguf::GgufFile;
use crate::llama::{GgufNet, Llama};
use candle_core::Device;
use candle_core::quantized::gguf_file::{Content, Value};
use candle_transformers::models::quantized_llama::{MAX_SEQ_LEN, ModelWeights};
use std::path::Path;

pub(crate) fn usize_meta(c: &Content, key: &str) -> Option<usize> {
    match c.metadata.get(key)? {
        Value::U32(x) => Some(*x as usize),
        Value::U64(x) => Some(*x as usize),
        Value::I32(x) => usize::try_from(*x).ok(),
        Value::I64(x) => usize::try_from(*x).ok(),
        _ => None,
    }
}

/// Loads a GGUF llama-family model and the tokenizer stored in its metadata. Cloning the
/// network shares the weights, so snapshots of the KV cache are cheap.
pub fn load(
    path: &Path,
    device: &Device,
) -> Result<(CandleLm<GgufNet>, tokenizers::Tokenizer, GgufTokenizerInfo), LoadError> {
    let mut file = std::fs::File::open(path).map_err(|e| LoadError::io(path, e))?;
    // corral's header reader: candle's stops at MXFP4 tensors (gpt-oss).
    let header = GgufFile::read(&mut file).map_err(|e| {
        LoadError::Format(format!("{}: not a readable GGUF file: {e}", path.display()))
    })?;
    let arch = header
        .content
        .metadata
        .get("general.architecture")
        .and_then(|v| v.to_string().ok())
        .cloned()
        .unwrap_or_default();
    if arch == "gpt-oss" {
        return load_gpt_oss(path, &header, &mut file, device);
    }
    if arch != "llama" {
        return Err(LoadError::Format(format!(
            "{}: GGUF architecture {arch:?} is not supported (llama family and gpt-oss)",
            path.display()
        )));
    }
    if let Some(name) = header.mxfp4.keys().next() {
        return Err(LoadError::Format(format!(
            "{}: tensor {name} is MXFP4, which llama-family files are not read with",
            path.display()
        )));
    }
    let content = header.content;
    // Everything needed from the metadata first: `from_gguf` takes the content by value.
    let (tokenizer, info) = tokenizer_from_gguf(&content)?;
    let vocab =
        usize_meta(&content, "llama.vocab_size").unwrap_or_else(|| tokenizer.get_vocab_size(true));
    let experts = usize_meta(&content, "llama.expert_count").unwrap_or(0);
    let cannot = |e| LoadError::candle(format!("{}: cannot load the weights", path.display()), e);
    let (weights, context) = if experts > 1 {
        let context = usize_meta(&content, "llama.context_length").unwrap_or(MAX_SEQ_LEN);
        let m = ModelWeights::from_gguf(content, &mut file, device).map_err(cannot)?;
        // quantized_llama's RoPE table stops at MAX_SEQ_LEN, whatever the file says.
        (GgufNet::Experts(Box::new(m)), context.min(MAX_SEQ_LEN))
    } else {
        let m = Llama::from_gguf(&content, &mut file, device).map_err(cannot)?;
        let context = m.max_positions();
        (GgufNet::Dense(m), context)
    };
    let lm = CandleLm::new(weights, device.clone(), vocab, context);
    Ok((lm, tokenizer, info))
}

/// A gpt-oss GGUF file ([`crate::gpt_oss`]): on the CPU as loaded, elsewhere unpacked
/// to f32 on the device ([`crate::gpt_oss::device`]).
fn load_gpt_oss(
    path: &Path,
    header: &GgufFile,
    file: &mut std::fs::File,
    device: &Device,
) -> Result<(CandleLm<GgufNet>, tokenizers::Tokenizer, GgufTokenizerInfo), LoadError> {
    let (tokenizer, info) = tokenizer_from_gguf(&header.content)?;
    let net = GptOss::from_gguf(header, file).map_err(|e| {
        LoadError::candle(format!("{}: cannot load the weights", path.display()), e)
    })?;
    let c = net.config();
    let (vocab, positions) = (c.vocab, c.max_positions);
    let net = match device.is_cpu() {
        true => GgufNet::GptOss(net),
        false => GgufNet::GptOssDevice(net.to_device(device).map_err(|e| {
            LoadError::candle(
                format!("{}: cannot put the weights on the device", path.display()),
                e,
            )
        })?),
    };
    let lm = CandleLm::new(net, device.clone(), vocab, positions);
    Ok((lm, tokenizer, info))
}
