//! # corral-models
//!
//! The only crate that links candle. It loads models and implements
//! [`corral_engine::CausalLm`] once per architecture family, so the generation loop never
//! knows which model it drives:
//!
//! | file | family | from |
//! |---|---|---|
//! | `gguf_llama.rs`, `llama.rs` | quantized llama family (Llama, SmolLM2, ...) | a GGUF file |
//! | `safetensors.rs` | Llama, Mistral, Qwen2 / Qwen2.5, Qwen3 | safetensors folder or Hub repo |
//! | `gpt_oss/` | gpt-oss (mixture of experts in MXFP4, CPU) | safetensors folder, Hub repo or GGUF file |
//!
//! Each is a [`CandleNet`] (how to run the network and clear its cache); the
//! one generic [`CandleLm`] makes it a `CausalLm`.
//!
//! A [`Model`] bundles the network with its tokenizer (from `tokenizer.json`, or rebuilt
//! from GGUF metadata: `gguf_tokenizer.rs`), its chat template (`chat.rs`, minijinja), its
//! end-of-generation tokens and the [`TokenSpace`] masks are computed over. Logits stay on
//! the device until the mask is applied there (`logits.rs`). CPU by default; CUDA with the
//! `cuda` feature and `--device cuda[:N]`.
//!
//! The main loop lives in corral-engine (`generate`); this crate's per-step work is
//! [`CandleLm`]'s `forward` (one position, or a prompt chunk) and its
//! `forward_batch` (the decoding steps of several sequences, each with a KV cache of its
//! own, as one pass: what a server runs). Loading a model and generating JSON under a
//! grammar (not run as a test: it needs the model, which `scripts/fetch-assets` fetches):
//!
//! ```no_run
//! use corral_engine::{generate, Constraint, GenerateOptions};
//! use corral_models::{DeviceSpec, Model};
//!
//! let mut model = Model::load("assets/models/SmolLM2-135M-Instruct.Q4_1.gguf", DeviceSpec::Cpu)?;
//! let text = model.text().clone();
//! let prompt = text.encode_prompt(&text.prompt_text(None, "A JSON list of three colours.", false)?)?;
//! let gbnf = r#"root ::= "[" item ("," " "? item){2} "]"
//! item ::= "\"" [a-z]{1,12} "\"""#;
//! let grammar = corral_grammar::compile_gbnf(gbnf, &Default::default())?;
//! let constraint = Constraint::new(grammar, text.space().clone());
//! let opts = GenerateOptions::default();
//! let out = generate(model.lm(), text.space(), Some(&constraint), &prompt, &opts, &mut |d| print!("{d}"))?;
//! println!("\n{:?}: {} tokens", out.finish_reason, out.tokens.len());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod attention;
mod candle_lm;
mod capped;
mod chat;
mod chunk_attention;
mod device;
mod error;
mod gguf_llama;
mod gguf_tokenizer;
pub mod gpt_oss;
pub mod harmony;
mod hf_folder;
mod hub;
mod kv_store;
pub mod llama;
mod logits;
mod prompt;
pub mod quant;
mod rope;
mod safetensors;
#[cfg(test)]
mod test_rng;

use candle_core::DType;
pub use candle_lm::{CandleLm, CandleNet, DEFAULT_PREFILL_CHUNK};
use chat::ChatTemplate;
pub use chat::Message;
use corral_engine::{CacheLimits, CausalLm, ConstraintCache};
use corral_trie::{TokenId, TokenSpace, Vocabulary};
pub use device::DeviceSpec;
pub use error::LoadError;
pub(crate) use error::without_backtrace;
pub use gguf_llama::load as load_gguf_llama;
pub use prompt::{Prompt, SpecialTokens};

use std::path::Path;
use std::sync::{Arc, OnceLock};

/// A loaded model: the network, and its text side ([`ModelText`]: tokenizer, chat
/// template, end-of-generation tokens, the token space and the constraints kept for it).
/// The text side is shared (`Arc`) and usable from any thread while one thread runs the
/// network: [`Model::into_parts`]. `Model` derefs to it.
pub struct Model {
    lm: Box<dyn CausalLm>,
    text: Arc<ModelText>,
}

/// Everything of a model but the network: what turns a request into token ids and a
/// constraint. Shared by reference (`Arc`), `Sync`.
pub struct ModelText {
    tokenizer: tokenizers::Tokenizer,
    /// The control tokens, for prompts whose user text stays text ([`prompt`]).
    specials: SpecialTokens,
    space: Arc<TokenSpace>,
    /// Constraints kept for reuse (made on first use: slicing the vocabulary takes a few
    /// milliseconds).
    constraints: OnceLock<ConstraintCache>,
    /// Bytes of the longest token, special tokens' text included (made on first use).
    longest_token: OnceLock<usize>,
    chat: Option<ChatTemplate>,
    bos: Option<u32>,
    add_bos: bool,
    name: String,
    max_positions: usize,
    /// The tokenizer is harmony's (gpt-oss): prompts are rendered by [`harmony`], not by a
    /// chat template.
    harmony: bool,
}

impl std::fmt::Debug for ModelText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelText")
            .field("name", &self.name)
            .field("vocab", &self.space.vocab().len())
            .field("eos", &self.space.eos())
            .field("bos", &self.bos)
            .field("add_bos", &self.add_bos)
            .field("max_positions", &self.max_positions)
            .field("chat_template", &self.chat.is_some())
            .field("harmony", &self.harmony)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model")
            .field("name", &self.text.name)
            .field("eos", &self.text.space.eos())
            .finish()
    }
}

impl std::ops::Deref for Model {
    type Target = ModelText;
    fn deref(&self) -> &ModelText {
        &self.text
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
            let (lm, tokenizer, info) = gguf_llama::load(&path, &dev)?;
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
        let lm = safetensors::load(&folder, dtype, &dev)?;
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
        let vocab =
            Vocabulary::from_tokenizer(&tokenizer).map_err(|e| LoadError::Format(e.to_string()))?;
        let specials = SpecialTokens::new(&tokenizer);
        let harmony = harmony::Renderer::new(&specials).is_ok();
        let mut eos: Vec<TokenId> = if eos.is_empty() {
            vocab.default_eos().into_iter().collect()
        } else {
            eos.into_iter().map(TokenId).collect()
        };
        if harmony {
            // A harmony output ends with its answer (`<|return|>`) or a tool call
            // (`<|call|>`), whatever the config lists.
            for end in ["<|return|>", "<|call|>"] {
                if let Some(id) = tokenizer.token_to_id(end).map(TokenId)
                    && !eos.contains(&id)
                {
                    eos.push(id);
                }
            }
        }
        let space = Arc::new(TokenSpace::new(vocab, Some(lm.logit_width()), eos));
        let max_positions = lm.max_positions();
        Ok(Model {
            lm,
            text: Arc::new(ModelText {
                specials,
                harmony,
                tokenizer,
                space,
                constraints: OnceLock::new(),
                longest_token: OnceLock::new(),
                chat,
                bos,
                add_bos,
                name: name.to_string(),
                max_positions,
            }),
        })
    }

    /// The same model taking at most `positions` positions (prompt and output), where
    /// that is fewer than its own: what bounds each sequence's KV cache. Call it before
    /// [`Model::text`] is shared: a shared text is an error.
    pub fn with_max_positions(
        mut self,
        positions: std::num::NonZeroUsize,
    ) -> Result<Model, LoadError> {
        let positions = positions.get();
        if positions >= self.lm.max_positions() {
            return Ok(self);
        }
        let Some(text) = Arc::get_mut(&mut self.text) else {
            return Err(LoadError::Option(
                "the model's text is already shared: cap its context first".into(),
            ));
        };
        text.max_positions = positions;
        self.lm = Box::new(capped::Capped {
            inner: self.lm,
            max: positions,
        });
        Ok(self)
    }

    /// The network.
    pub fn lm(&mut self) -> &mut dyn CausalLm {
        self.lm.as_mut()
    }

    /// The text side, shared.
    pub fn text(&self) -> &Arc<ModelText> {
        &self.text
    }

    /// The network and the text side apart: one thread runs the network, any thread turns
    /// requests into tokens and constraints.
    pub fn into_parts(self) -> (Box<dyn CausalLm>, Arc<ModelText>) {
        (self.lm, self.text)
    }

    /// A model of another network over this text side (a test's scripted network, a
    /// wrapper that measures).
    pub fn from_parts(lm: Box<dyn CausalLm>, text: Arc<ModelText>) -> Model {
        Model { lm, text }
    }
}

impl ModelText {
    /// Bytes of the longest token's text (special tokens' names included): no token covers
    /// more of a text, so a text of more than `max_positions` times this many bytes cannot
    /// fit the context, whatever its tokenization.
    pub fn longest_token_bytes(&self) -> usize {
        *self.longest_token.get_or_init(|| {
            let vocab = self.space.vocab();
            (0..vocab.len())
                .filter_map(|t| vocab.token_bytes(TokenId(t as u32)).map(<[u8]>::len))
                .chain(vocab.special_tokens().iter().map(|(_, name)| name.len()))
                .max()
                .unwrap_or(1)
        })
    }

    /// The tokens masks are computed over (width = the model's logits).
    pub fn space(&self) -> &Arc<TokenSpace> {
        &self.space
    }

    /// The constraints this model keeps for reuse (within [`CacheLimits::default`] unless
    /// [`ModelText::limit_constraints`] came first; one token-set cache shared by all): the
    /// one-call entry points look their grammar up here, so a grammar or schema used again
    /// starts warm.
    pub fn constraints(&self) -> &ConstraintCache {
        self.constraints.get_or_init(|| {
            ConstraintCache::with_limits(self.space.clone(), CacheLimits::default())
        })
    }

    /// Bounds the constraint cache; false (and nothing changes) once it is in use.
    pub fn limit_constraints(&self, limits: CacheLimits) -> bool {
        self.constraints
            .set(ConstraintCache::with_limits(self.space.clone(), limits))
            .is_ok()
    }

    /// The tokenizer (for a GGUF file, the one rebuilt from its metadata).
    pub fn tokenizer(&self) -> &tokenizers::Tokenizer {
        &self.tokenizer
    }

    /// The source the model was loaded from, as given to [`Model::load`].
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether the model came with a chat template ([`ModelText::chat_template`]).
    pub fn has_chat_template(&self) -> bool {
        self.chat.is_some()
    }

    /// Most positions (prompt plus output) the network supports.
    pub fn max_positions(&self) -> usize {
        self.max_positions
    }

    /// The chat template, if the model has one.
    pub fn chat_template(&self) -> Option<&ChatTemplate> {
        self.chat.as_ref()
    }

    /// A conversation through the chat template, ending with the assistant's turn opened
    /// (without a template: the messages' contents, one per line). `tools` (OpenAI's list)
    /// is passed to templates that describe tools themselves. The messages' contents and
    /// the tools are user text: a special token's name in them stays text ([`Prompt`]).
    pub fn chat_prompt(
        &self,
        messages: &[Message],
        tools: Option<&serde_json::Value>,
    ) -> Result<Prompt, LoadError> {
        let mut p = Prompt::default();
        let escaped: Vec<Message> = messages
            .iter()
            .map(|m| {
                let mut user =
                    |s: &Option<String>| s.as_deref().map(|s| p.escape_user(&self.specials, s));
                Message {
                    role: m.role.clone(),
                    name: user(&m.name),
                    tool_call_id: user(&m.tool_call_id),
                    reasoning_content: user(&m.reasoning_content),
                    content: p.escape_user(&self.specials, &m.content),
                }
            })
            .collect();
        let tools = tools.map(|t| escape_strings(t, &mut |s| p.escape_user(&self.specials, s)));
        let rendered = match &self.chat {
            Some(t) => t.render_with_tools(&escaped, tools.as_ref())?,
            None => escaped
                .iter()
                .map(|m| m.content.as_str())
                .collect::<Vec<_>>()
                .join("\n"),
        };
        Ok(p.rendered(rendered))
    }

    /// The prompt: the chat template applied to an optional system message and the user's
    /// message, their text kept as text; or with `raw` (or without a template) the text as
    /// is, trusted: special tokens' names in it are control tokens. A harmony model's
    /// prompt is rendered by [`harmony`] instead of a template: harmony's default system
    /// message, `system` as the developer's instructions, then the user's message.
    pub fn prompt_text(
        &self,
        system: Option<&str>,
        user: &str,
        raw: bool,
    ) -> Result<Prompt, LoadError> {
        if self.harmony && !raw {
            return self.harmony_prompt(system, user);
        }
        match (&self.chat, raw) {
            (Some(_), false) => {
                let mut msgs = Vec::new();
                if let Some(s) = system {
                    msgs.push(Message::new("system", s));
                }
                msgs.push(Message::new("user", user));
                self.chat_prompt(&msgs, None)
            }
            _ => Ok(Prompt::trusted(&match system {
                Some(s) if raw => format!("{s}\n{user}"),
                _ => user.to_string(),
            })),
        }
    }

    /// Whether prompts are harmony conversations (the tokenizer is gpt-oss's).
    pub fn is_harmony(&self) -> bool {
        self.harmony
    }

    /// The harmony renderer over this model's control tokens (`None`: not a harmony
    /// model).
    pub fn harmony_renderer(&self) -> Option<harmony::Renderer<'_>> {
        self.harmony
            .then(|| harmony::Renderer::new(&self.specials).ok())
            .flatten()
    }

    /// [`ModelText::prompt_text`] for a harmony model.
    fn harmony_prompt(&self, system: Option<&str>, user: &str) -> Result<Prompt, LoadError> {
        use harmony::{Content, DeveloperContent, Message as Turn, Role, SystemContent};
        let renderer =
            harmony::Renderer::new(&self.specials).map_err(|e| LoadError::Format(e.to_string()))?;
        let mut turns = vec![Turn {
            content: vec![Content::SystemContent(SystemContent::default())],
            ..Turn::text(Role::System, "")
        }];
        if let Some(s) = system {
            turns.push(Turn {
                content: vec![Content::DeveloperContent(DeveloperContent {
                    instructions: Some(s.to_string()),
                    tools: None,
                })],
                ..Turn::text(Role::Developer, "")
            });
        }
        turns.push(Turn::text(Role::User, user));
        renderer
            .for_completion(&turns, Role::Assistant, true)
            .map_err(|e| LoadError::Format(e.to_string()))
    }

    /// Text that is user text throughout (a completion's prompt): special tokens' names in
    /// it stay text.
    pub fn user_prompt(&self, text: &str) -> Prompt {
        let mut p = Prompt::default();
        p.push_user(&self.specials, text);
        p
    }

    /// The control tokens' names and ids (what user text may not become).
    pub fn special_tokens(&self) -> &SpecialTokens {
        &self.specials
    }

    /// Token ids of a prompt: control tokens where its trusted text names them, user text
    /// as text; BOS added if the model wants it.
    pub fn encode_prompt(&self, prompt: &Prompt) -> Result<Vec<TokenId>, LoadError> {
        let enc = self
            .specials
            .encode(prompt)
            .map_err(|e| LoadError::tokenizer("cannot encode the prompt", e))?;
        Ok(self.with_bos(enc))
    }

    fn with_bos(&self, enc: Vec<u32>) -> Vec<TokenId> {
        let mut ids = Vec::with_capacity(enc.len() + 1);
        if self.add_bos
            && let Some(b) = self.bos
        {
            ids.push(TokenId(b));
        }
        ids.extend(enc.into_iter().map(TokenId));
        ids
    }

    /// The text of `ids` (special tokens left out).
    pub fn decode(&self, ids: &[TokenId]) -> Result<String, LoadError> {
        self.tokenizer
            .decode(&TokenId::raw(ids), true)
            .map_err(|e| LoadError::tokenizer("cannot decode tokens", e))
    }

    /// Token ids of a trusted prompt text (special tokens' names in it are control
    /// tokens; BOS added if the model wants it). For text from users, see
    /// [`ModelText::encode_prompt`].
    pub fn encode(&self, text: &str) -> Result<Vec<TokenId>, LoadError> {
        let enc = self
            .tokenizer
            .encode(text, false)
            .map_err(|e| LoadError::tokenizer("cannot encode the prompt", e))?;
        Ok(self.with_bos(enc.get_ids().to_vec()))
    }
}

/// `v` with every string (keys included) passed through `f`.
fn escape_strings(v: &serde_json::Value, f: &mut dyn FnMut(&str) -> String) -> serde_json::Value {
    use serde_json::Value;
    match v {
        Value::String(s) => Value::String(f(s)),
        Value::Array(a) => Value::Array(a.iter().map(|x| escape_strings(x, f)).collect()),
        Value::Object(o) => Value::Object(
            o.iter()
                .map(|(k, x)| (f(k), escape_strings(x, f)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Fixes the number of threads candle's CPU kernels use, once, so candle stops counting
/// cores before every f32 matrix multiply: unless `RAYON_NUM_THREADS` is set, it reads
/// `/proc/cpuinfo` each time (about 60 reads per decoded token of SmolLM2: an eighth of
/// the decoding thread's time, measured with `perf record` on `examples/decode_speed`).
/// Sets `RAYON_NUM_THREADS` to the count candle would find; a value already set is kept.
///
/// # Safety
/// It sets an environment variable: call it before any other thread of the process runs
/// (first thing in `main`).
pub unsafe fn pin_thread_count() {
    if std::env::var_os("RAYON_NUM_THREADS").is_none() {
        let n = candle_core::utils::get_num_threads();
        // SAFETY: the caller guarantees no other thread runs (none reads the environment).
        unsafe { std::env::set_var("RAYON_NUM_THREADS", n.to_string()) };
    }
}
