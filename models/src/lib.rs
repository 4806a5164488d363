//! # corral-models
//!
//! The only crate that links candle. It loads models and implements
//! [`corral_engine::CausalLm`] once per architecture family, so the generation loop never
//! knows which model it drives:
//!
//! | file | family | from |
//! |---|---|---|
//! | `gguf_llama.rs` | quantized llama family (Llama, SmolLM2, ...) | a GGUF file |
//! | `llama.rs` | Llama | safetensors folder or Hub repo |
//! | `qwen2.rs` | Qwen2 / Qwen2.5 | safetensors folder or Hub repo |
//! | `qwen3.rs` | Qwen3 | safetensors folder or Hub repo |
//!
//! A [`Model`] bundles the network with its tokenizer (from `tokenizer.json`, or rebuilt
//! from GGUF metadata: [`gguf_tokenizer`]), its chat template ([`chat`], minijinja), its
//! end-of-generation tokens and the [`TokenSpace`] masks are computed over. Logits stay on
//! the device until the mask is applied there ([`logits`]). CPU by default; CUDA with the
//! `cuda` feature and `--device cuda[:N]`.

pub mod chat;
pub mod device;
pub mod gguf_llama;
pub mod gguf_tokenizer;
pub mod hf_folder;
pub mod hub;
pub mod llama;
pub mod logits;
pub mod qwen2;
pub mod qwen3;

use candle_core::DType;
use chat::{ChatTemplate, Message};
use corral_engine::CausalLm;
use corral_trie::{TokenSpace, Vocabulary};
pub use device::DeviceSpec;
use std::path::Path;
use std::sync::Arc;

/// Why a model could not be loaded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoadError {
    #[error("model not found: {0}")]
    NotFound(String),
    #[error("cannot read model: {0}")]
    Io(String),
    #[error("bad model file: {0}")]
    Format(String),
    #[error("download failed: {0}")]
    Network(String),
    #[error("device: {0}")]
    Device(String),
    #[error("tokenizer: {0}")]
    Tokenizer(String),
}

/// A loaded model: network, tokenizer, chat template, end-of-generation tokens.
pub struct Model {
    lm: Box<dyn CausalLm>,
    tokenizer: tokenizers::Tokenizer,
    space: Arc<TokenSpace>,
    chat: Option<ChatTemplate>,
    bos: Option<u32>,
    add_bos: bool,
    name: String,
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model")
            .field("name", &self.name)
            .field("eos", &self.space.eos())
            .finish()
    }
}

impl Model {
    /// Loads a model: a `.gguf` file, a safetensors folder, a Hub repository id
    /// (`owner/name`), or a GGUF file in a Hub repository (`owner/name:file.gguf`).
    pub fn load(source: &str, device: DeviceSpec) -> Result<Model, LoadError> {
        let dev = device.device()?;
        let dtype = if dev.is_cpu() {
            DType::F32
        } else {
            DType::BF16
        };
        let gguf_path = if source.ends_with(".gguf") && !hub::is_repo_id(source) {
            Some(Path::new(source).to_path_buf())
        } else if let Some((repo, file)) =
            source.split_once(':').filter(|(_, f)| f.ends_with(".gguf"))
        {
            Some(hub::fetch(repo, file)?)
        } else {
            None
        };
        if let Some(path) = gguf_path {
            if !path.exists() {
                return Err(LoadError::NotFound(path.display().to_string()));
            }
            let (lm, tokenizer, info) = gguf_llama::GgufLlama::load(&path, &dev)?;
            let token = |id: Option<u32>| {
                id.and_then(|i| tokenizer.id_to_token(i))
                    .unwrap_or_default()
            };
            let chat = info
                .chat_template
                .as_deref()
                .map(|t| ChatTemplate::new(t, &token(info.bos), &token(info.eos)))
                .transpose()?;
            let eos: Vec<u32> = info.eos.into_iter().collect();
            return Model::assemble(
                Box::new(lm),
                tokenizer,
                chat,
                info.bos,
                info.add_bos,
                eos,
                source,
            );
        }
        let folder = hf_folder::HfFolder::open(source)?;
        let lm: Box<dyn CausalLm> = match folder.model_type() {
            "llama" | "mistral" => Box::new(llama::SafetensorsLlama::load(&folder, dtype, &dev)?),
            "qwen2" => Box::new(qwen2::SafetensorsQwen2::load(&folder, dtype, &dev)?),
            "qwen3" => Box::new(qwen3::SafetensorsQwen3::load(&folder, dtype, &dev)?),
            other => {
                return Err(LoadError::Format(format!(
                    "{source}: model_type {other:?} is not supported (llama, mistral, qwen2, qwen3; or a GGUF llama-family file)"
                )));
            }
        };
        let chat = folder
            .chat_template()
            .map(|(t, bos, eos)| ChatTemplate::new(&t, &bos, &eos))
            .transpose()?;
        let bos = folder.config["bos_token_id"].as_u64().map(|b| b as u32);
        let add_bos = folder
            .tokenizer_config
            .as_ref()
            .and_then(|c| c["add_bos_token"].as_bool())
            .unwrap_or(false);
        let eos = folder.eos_ids();
        Model::assemble(
            lm,
            folder.tokenizer.clone(),
            chat,
            bos,
            add_bos,
            eos,
            source,
        )
    }

    fn assemble(
        lm: Box<dyn CausalLm>,
        tokenizer: tokenizers::Tokenizer,
        chat: Option<ChatTemplate>,
        bos: Option<u32>,
        add_bos: bool,
        eos: Vec<u32>,
        name: &str,
    ) -> Result<Model, LoadError> {
        let vocab = Vocabulary::from_tokenizer(&tokenizer)
            .map_err(|e| LoadError::Tokenizer(e.to_string()))?;
        let eos = if eos.is_empty() {
            vocab.default_eos().into_iter().collect()
        } else {
            eos
        };
        let space = Arc::new(TokenSpace::new(vocab, Some(lm.logit_width()), eos));
        Ok(Model {
            lm,
            tokenizer,
            space,
            chat,
            bos,
            add_bos,
            name: name.to_string(),
        })
    }

    /// The network.
    pub fn lm(&mut self) -> &mut dyn CausalLm {
        self.lm.as_mut()
    }

    /// The tokens masks are computed over (width = the model's logits).
    pub fn space(&self) -> &Arc<TokenSpace> {
        &self.space
    }

    pub fn tokenizer(&self) -> &tokenizers::Tokenizer {
        &self.tokenizer
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn has_chat_template(&self) -> bool {
        self.chat.is_some()
    }

    /// The prompt text: the chat template applied to an optional system message and the
    /// user's message (or the user's text as is, with `raw` or without a template).
    pub fn prompt_text(
        &self,
        system: Option<&str>,
        user: &str,
        raw: bool,
    ) -> Result<String, LoadError> {
        match (&self.chat, raw) {
            (Some(t), false) => {
                let mut msgs = Vec::new();
                if let Some(s) = system {
                    msgs.push(Message::new("system", s));
                }
                msgs.push(Message::new("user", user));
                t.render(&msgs)
            }
            _ => Ok(match system {
                Some(s) if raw => format!("{s}\n{user}"),
                _ => user.to_string(),
            }),
        }
    }

    /// Token ids of a prompt text (special tokens in the text are recognized; BOS added if
    /// the model wants it).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, LoadError> {
        let enc = self
            .tokenizer
            .encode(text, false)
            .map_err(|e| LoadError::Tokenizer(e.to_string()))?;
        let mut ids = Vec::with_capacity(enc.len() + 1);
        if self.add_bos
            && let Some(b) = self.bos
        {
            ids.push(b);
        }
        ids.extend_from_slice(enc.get_ids());
        Ok(ids)
    }
}
