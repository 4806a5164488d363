//! A Hugging Face tokenizer rebuilt from GGUF metadata (`tokenizer.ggml.*`).
//!
//! Byte-level BPE (`tokenizer.ggml.model == "gpt2"`): the vocabulary and merges as stored,
//! a pre-tokenizer chosen by `tokenizer.ggml.pre`, a byte-level decoder, and the control
//! and user-defined tokens (`token_type` 3 and 4) added as special tokens.
//!
//! Why not candle's `Tokenizer::from_gguf`: for a `pre` value it does not know (SmolLM2's
//! `"smollm"`) it falls back to a byte-level pre-tokenizer *with* `add_prefix_space`, which
//! puts a space before every segment (also after special tokens) and so produces ids the
//! model never saw in training. Here each known `pre` gets its own pipeline, and an unknown
//! one gets the plain GPT-2 split without a prefix space.

use crate::LoadError;
use candle_core::quantized::gguf_file::{Content, Value};
use tokenizers::models::bpe::BPE;
use tokenizers::normalizers::unicode::NFC;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{AddedToken, PreTokenizerWrapper, SplitDelimiterBehavior, Tokenizer};

const LLAMA3_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN2_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// What the GGUF says about its tokenizer, besides the tokenizer itself.
#[derive(Clone, Debug)]
pub struct GgufTokenizerInfo {
    /// The beginning-of-sequence token id (`tokenizer.ggml.bos_token_id`), if the file gives
    /// one.
    pub bos: Option<u32>,
    /// The end-of-sequence token id (`tokenizer.ggml.eos_token_id`), if the file gives one.
    pub eos: Option<u32>,
    /// Whether a prompt starts with the BOS token (`tokenizer.ggml.add_bos_token`; false
    /// where absent).
    pub add_bos: bool,
    /// The Jinja chat template (`tokenizer.chat_template`), if the file has one.
    pub chat_template: Option<String>,
}

fn meta<'a>(c: &'a Content, key: &str) -> Option<&'a Value> {
    c.metadata.get(key)
}

fn strings(c: &Content, key: &str) -> Result<Vec<String>, LoadError> {
    let v = meta(c, key).ok_or_else(|| LoadError::Format(format!("the GGUF file has no {key}")))?;
    let arr = v.to_vec().map_err(|e| LoadError::candle(key, e))?;
    arr.iter()
        .map(|x| {
            x.to_string()
                .cloned()
                .map_err(|e| LoadError::candle(key, e))
        })
        .collect()
}

fn u32_of(v: &Value) -> Option<u32> {
    match v {
        Value::U8(x) => Some(u32::from(*x)),
        Value::I8(x) => u32::try_from(*x).ok(),
        Value::U16(x) => Some(u32::from(*x)),
        Value::I16(x) => u32::try_from(*x).ok(),
        Value::U32(x) => Some(*x),
        Value::I32(x) => u32::try_from(*x).ok(),
        Value::U64(x) => u32::try_from(*x).ok(),
        Value::I64(x) => u32::try_from(*x).ok(),
        _ => None,
    }
}

fn split(regex: &str) -> Result<PreTokenizerWrapper, LoadError> {
    Split::new(
        SplitPattern::Regex(regex.into()),
        SplitDelimiterBehavior::Isolated,
        false,
    )
    .map(Into::into)
    .map_err(|e| LoadError::tokenizer("the GGUF pre-tokenizer", e))
}

/// Builds the tokenizer of a GGUF file from its metadata.
pub fn tokenizer_from_gguf(c: &Content) -> Result<(Tokenizer, GgufTokenizerInfo), LoadError> {
    let model = meta(c, "tokenizer.ggml.model")
        .and_then(|v| v.to_string().ok())
        .cloned()
        .unwrap_or_default();
    if model != "gpt2" {
        return Err(LoadError::Format(format!(
            "GGUF tokenizer model {model:?} is not supported (only byte-level BPE, \"gpt2\")"
        )));
    }
    let tokens = strings(c, "tokenizer.ggml.tokens")?;
    let merges: Vec<(String, String)> = strings(c, "tokenizer.ggml.merges")?
        .into_iter()
        .map(|m| {
            m.split_once(' ')
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .ok_or_else(|| LoadError::Format(format!("bad merge {m:?}")))
        })
        .collect::<Result<_, _>>()?;
    let vocab: tokenizers::models::bpe::Vocab = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| (t.clone(), i as u32))
        .collect();
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .build()
        .map_err(|e| LoadError::tokenizer("the GGUF BPE model", e))?;
    let mut tok = Tokenizer::new(bpe);
    let pre = meta(c, "tokenizer.ggml.pre")
        .and_then(|v| v.to_string().ok())
        .cloned()
        .unwrap_or_else(|| "gpt2".into());
    let pre_tokenizer: PreTokenizerWrapper = match pre.as_str() {
        // SmolLM2: every digit alone, then the GPT-2 split, no prefix space.
        "smollm" => Sequence::new(vec![
            Digits::new(true).into(),
            ByteLevel::new(false, true, true).into(),
        ])
        .into(),
        "llama3" | "llama-bpe" | "smaug-bpe" => Sequence::new(vec![
            split(LLAMA3_SPLIT)?,
            ByteLevel::new(false, true, false).into(),
        ])
        .into(),
        "qwen2" => {
            tok.with_normalizer(Some(NFC))
                .map_err(|e| LoadError::tokenizer("the GGUF normalizer", e))?;
            Sequence::new(vec![
                split(QWEN2_SPLIT)?,
                ByteLevel::new(false, false, false).into(),
            ])
            .into()
        }
        other => {
            if other != "gpt2" && other != "default" {
                tracing::warn!(
                    pre = other,
                    "unknown GGUF pre-tokenizer; using the GPT-2 split without a prefix space"
                );
            }
            ByteLevel::new(false, true, true).into()
        }
    };
    tok.with_pre_tokenizer(Some(pre_tokenizer));
    tok.with_decoder(Some(tokenizers::decoders::byte_level::ByteLevel::default()));
    // Control (3) and user-defined (4) tokens are special: matched whole, never split.
    if let Some(types) = meta(c, "tokenizer.ggml.token_type").and_then(|v| v.to_vec().ok()) {
        let specials: Vec<AddedToken> = types
            .iter()
            .enumerate()
            .filter(|(_, t)| matches!(u32_of(t), Some(3 | 4)))
            .filter_map(|(i, _)| tokens.get(i))
            .map(|t| AddedToken::from(t.clone(), true))
            .collect();
        tok.add_special_tokens(specials)
            .map_err(|e| LoadError::tokenizer("the GGUF special tokens", e))?;
    }
    let info = GgufTokenizerInfo {
        bos: meta(c, "tokenizer.ggml.bos_token_id").and_then(u32_of),
        eos: meta(c, "tokenizer.ggml.eos_token_id").and_then(u32_of),
        add_bos: meta(c, "tokenizer.ggml.add_bos_token")
            .and_then(|v| v.to_bool().ok())
            .unwrap_or(false),
        chat_template: meta(c, "tokenizer.chat_template")
            .and_then(|v| v.to_string().ok())
            .cloned(),
    };
    Ok((tok, info))
}
