//! gpt-oss's shape, from a Hugging Face `config.json` or GGUF metadata, and its RoPE
//! frequencies (YaRN).

use serde::Deserialize;

/// Most layers a config may declare (the published models have 24 and 36): a corrupt count
/// is an error before anything is sized by it.
pub const MAX_LAYERS: usize = 1024;

/// What the network needs to know about its shape.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// Tokens in the vocabulary: rows of the embedding and of the output head.
    pub vocab: usize,
    /// The residual stream's width (a multiple of 32, for MXFP4 blocks).
    pub hidden: usize,
    /// Each expert's inner width.
    pub intermediate: usize,
    /// Query heads per layer.
    pub heads: usize,
    /// Key-value heads per layer; `heads` is a multiple of it (grouped-query attention).
    pub kv_heads: usize,
    /// One head's width, even (`hidden / heads` where the config does not say).
    pub head_dim: usize,
    /// Experts per layer.
    pub experts: usize,
    /// Experts each position runs.
    pub top_k: usize,
    /// Per layer: `Some(window)` for sliding-window attention, `None` for full.
    pub windows: Vec<Option<usize>>,
    /// Most positions a sequence may hold (`max_position_embeddings`, GGUF
    /// `context_length`).
    pub max_positions: usize,
    /// The RMS norms' epsilon.
    pub eps: f32,
    /// RoPE's base and YaRN scaling.
    pub rope: RopeConfig,
    /// The clamped SwiGLU's `alpha` and `limit`.
    pub swiglu_alpha: f32,
    /// The SwiGLU clamp: the gate is capped at `limit`, the linear half kept within
    /// `-limit..=limit` (7.0 where the config does not say).
    pub swiglu_limit: f32,
}

/// RoPE's base and, for YaRN, its scaling.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct RopeConfig {
    /// RoPE's base (150,000 where absent).
    #[serde(default = "default_theta")]
    pub rope_theta: f64,
    /// `yarn` for YaRN scaling; `None` or `default` for plain RoPE. Others are refused by
    /// [`Config::check`].
    #[serde(default)]
    pub rope_type: Option<String>,
    /// YaRN's context scaling factor (1 where absent).
    #[serde(default)]
    pub factor: Option<f64>,
    /// YaRN's `beta_fast`, in rotations: dimensions turning more times than this over the
    /// original context keep their frequency (32 where absent).
    #[serde(default)]
    pub beta_fast: Option<f64>,
    /// YaRN's `beta_slow`, in rotations: dimensions turning fewer times than this over the
    /// original context are fully interpolated (1 where absent).
    #[serde(default)]
    pub beta_slow: Option<f64>,
    /// Whether YaRN's correction range is rounded out to whole dimensions (true where
    /// absent, as in transformers; the GGUF loader sets false).
    #[serde(default)]
    pub truncate: Option<bool>,
    /// The context the model was trained at, before YaRN stretched it (`max_positions`
    /// where absent).
    #[serde(default)]
    pub original_max_position_embeddings: Option<usize>,
}

fn default_theta() -> f64 {
    150_000.0
}

/// The fields of a Hugging Face `GptOssConfig` this crate reads.
#[derive(Deserialize)]
struct HfConfig {
    vocab_size: usize,
    hidden_size: usize,
    intermediate_size: usize,
    num_attention_heads: usize,
    num_key_value_heads: usize,
    #[serde(default)]
    head_dim: Option<usize>,
    num_hidden_layers: usize,
    num_local_experts: usize,
    num_experts_per_tok: usize,
    #[serde(default)]
    sliding_window: Option<usize>,
    #[serde(default)]
    layer_types: Option<Vec<String>>,
    max_position_embeddings: usize,
    rms_norm_eps: f64,
    /// transformers 5 writes `rope_parameters` (with `rope_theta` inside); the published
    /// checkpoints have `rope_scaling` and `rope_theta` beside it.
    #[serde(default)]
    rope_parameters: Option<RopeConfig>,
    #[serde(default)]
    rope_scaling: Option<RopeConfig>,
    #[serde(default)]
    rope_theta: Option<f64>,
    #[serde(default)]
    swiglu_alpha: Option<f32>,
    #[serde(default)]
    swiglu_limit: Option<f32>,
    #[serde(default)]
    attention_bias: Option<bool>,
}

impl Config {
    /// From a Hugging Face `config.json`.
    pub fn from_hf(json: &serde_json::Value) -> Result<Config, String> {
        let c: HfConfig = serde_json::from_value(json.clone())
            .map_err(|e| format!("config.json does not describe a gpt-oss model: {e}"))?;
        if c.num_hidden_layers == 0 || c.num_hidden_layers > MAX_LAYERS {
            return Err(format!(
                "gpt-oss shape not supported: {} layers (1 to {MAX_LAYERS})",
                c.num_hidden_layers
            ));
        }
        if c.attention_bias == Some(false) {
            return Err("gpt-oss without attention biases is not supported".into());
        }
        let mut rope = c
            .rope_parameters
            .or(c.rope_scaling)
            .unwrap_or_else(|| RopeConfig {
                rope_theta: default_theta(),
                rope_type: None,
                factor: None,
                beta_fast: None,
                beta_slow: None,
                truncate: None,
                original_max_position_embeddings: None,
            });
        if let Some(theta) = c.rope_theta {
            rope.rope_theta = theta;
        }
        // transformers' default: even layers slide, odd ones see everything.
        let types = c.layer_types.unwrap_or_else(|| {
            (0..c.num_hidden_layers)
                .map(|i| match i % 2 {
                    0 => "sliding_attention".to_string(),
                    _ => "full_attention".to_string(),
                })
                .collect()
        });
        let windows = types
            .iter()
            .map(|t| match t.as_str() {
                "sliding_attention" => c
                    .sliding_window
                    .map(Some)
                    .ok_or_else(|| "a sliding layer and no sliding_window".to_string()),
                "full_attention" => Ok(None),
                other => Err(format!("layer type {other:?} is not supported")),
            })
            .collect::<Result<Vec<_>, _>>()?;
        let config = Config {
            vocab: c.vocab_size,
            hidden: c.hidden_size,
            intermediate: c.intermediate_size,
            heads: c.num_attention_heads,
            kv_heads: c.num_key_value_heads,
            head_dim: c
                .head_dim
                .unwrap_or(c.hidden_size / c.num_attention_heads.max(1)),
            experts: c.num_local_experts,
            top_k: c.num_experts_per_tok,
            windows,
            max_positions: c.max_position_embeddings,
            eps: c.rms_norm_eps as f32,
            rope,
            swiglu_alpha: c.swiglu_alpha.unwrap_or(1.702),
            swiglu_limit: c.swiglu_limit.unwrap_or(7.0),
        };
        config.check(c.num_hidden_layers)?;
        Ok(config)
    }

    /// Sizes the network can run: a clear error rather than a panic deep in a pass.
    pub fn check(&self, layers: usize) -> Result<(), String> {
        let bad = |what: String| Err(format!("gpt-oss shape not supported: {what}"));
        if self.windows.len() != layers {
            return bad(format!(
                "{} layer types for {layers} layers",
                self.windows.len()
            ));
        }
        if self.heads == 0 || self.kv_heads == 0 || !self.heads.is_multiple_of(self.kv_heads) {
            return bad(format!(
                "{} heads, {} key-value heads",
                self.heads, self.kv_heads
            ));
        }
        if self.head_dim == 0 || !self.head_dim.is_multiple_of(2) {
            return bad(format!("head size {}", self.head_dim));
        }
        if self.top_k == 0 || self.top_k > self.experts {
            return bad(format!(
                "{} of {} experts per position",
                self.top_k, self.experts
            ));
        }
        for (what, n) in [
            ("hidden size", self.hidden),
            ("expert width", self.intermediate),
        ] {
            if n == 0 || !n.is_multiple_of(super::mxfp4::BLOCK) {
                return bad(format!("{what} {n} (MXFP4 needs a multiple of 32)"));
            }
        }
        if let Some(w) = self.windows.iter().flatten().find(|&&w| w == 0) {
            return bad(format!("sliding window {w}"));
        }
        if self.vocab == 0 || self.max_positions == 0 {
            return bad(format!(
                "vocabulary {}, positions {}",
                self.vocab, self.max_positions
            ));
        }
        match self.rope.rope_type.as_deref() {
            None | Some("default") | Some("yarn") => Ok(()),
            Some(other) => bad(format!("RoPE type {other:?}")),
        }
    }

    /// Refuses `tokens` at positions `pos..` where they cannot run: none, past the
    /// model's positions, or outside its vocabulary.
    pub fn check_input(&self, tokens: &[u32], pos: usize) -> candle_core::Result<()> {
        if tokens.is_empty() {
            return Err(candle_core::Error::Msg("no tokens to run".into()));
        }
        if pos + tokens.len() > self.max_positions {
            return Err(candle_core::Error::Msg(format!(
                "positions {pos}..{}: the model's positions end at {}",
                pos + tokens.len(),
                self.max_positions
            )));
        }
        if let Some(bad) = tokens.iter().find(|&&id| id as usize >= self.vocab) {
            return Err(candle_core::Error::Msg(format!(
                "token {bad} is outside the model's vocabulary of {}",
                self.vocab
            )));
        }
        Ok(())
    }

    /// RoPE's inverse frequencies (`head_dim / 2`) and the factor its cosines and sines
    /// are scaled by, computed in f32 as transformers does.
    pub fn rope_frequencies(&self) -> (Vec<f32>, f32) {
        let dim = self.head_dim;
        let r = &self.rope;
        let base = r.rope_theta as f32;
        let pos_freqs: Vec<f32> = (0..dim)
            .step_by(2)
            .map(|i| base.powf(i as f32 / dim as f32))
            .collect();
        let yarn = r.rope_type.as_deref() == Some("yarn");
        let factor = r.factor.unwrap_or(1.0);
        if !yarn {
            return (pos_freqs.iter().map(|p| 1.0 / p).collect(), 1.0);
        }
        let attention = match factor <= 1.0 {
            true => 1.0,
            false => 0.1 * factor.ln() + 1.0,
        };
        let original = r
            .original_max_position_embeddings
            .unwrap_or(self.max_positions) as f64;
        let correction = |rotations: f64| {
            (dim as f64 * (original / (rotations * 2.0 * std::f64::consts::PI)).ln())
                / (2.0 * r.rope_theta.ln())
        };
        let (mut low, mut high) = (
            correction(r.beta_fast.unwrap_or(32.0)),
            correction(r.beta_slow.unwrap_or(1.0)),
        );
        if r.truncate.unwrap_or(true) {
            (low, high) = (low.floor(), high.ceil());
        }
        let (low, mut high) = (low.max(0.0) as f32, high.min(dim as f64 - 1.0) as f32);
        if low == high {
            high += 0.001;
        }
        let inv = pos_freqs
            .iter()
            .enumerate()
            .map(|(i, &p)| {
                let ramp = ((i as f32 - low) / (high - low)).clamp(0.0, 1.0);
                let extrapolation = 1.0 - ramp;
                let interpolated = 1.0 / (factor as f32 * p);
                interpolated * (1.0 - extrapolation) + (1.0 / p) * extrapolation
            })
            .collect();
        (inv, attention as f32)
    }
}
