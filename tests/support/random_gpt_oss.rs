//! A gpt-oss Hugging Face folder with random weights (dense weights bf16, experts MXFP4),
//! for tests and benches that need a gpt-oss of some shape and not its values (included
//! with `#[path]`). The values that matter are checked against transformers on
//! `tests/data/gpt-oss`.

use candle_core::{DType, Device, Tensor};
use std::collections::HashMap;
use std::path::Path;

/// A gpt-oss shape.
pub struct GptOssShape {
    pub width: usize,
    pub layers: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub experts: usize,
    pub top_k: usize,
    /// Each expert's inner width.
    pub expert_width: usize,
    pub vocab: usize,
    pub sliding_window: usize,
}

impl GptOssShape {
    /// Two small layers over the real gpt-oss vocabulary (201,088 tokens): what the tests
    /// that pair a random network with the real tokenizer use.
    #[allow(dead_code)] // the bench that includes this file makes shapes of its own
    pub fn with_gpt_oss_vocabulary() -> GptOssShape {
        GptOssShape {
            width: 64,
            layers: 2,
            heads: 4,
            kv_heads: 2,
            head_dim: 16,
            experts: 4,
            top_k: 2,
            expert_width: 64,
            vocab: 201_088,
            sliding_window: 128,
        }
    }
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// bf16 values uniform in `offset ± scale`.
    fn bf16(&mut self, dims: &[usize], scale: f32, offset: f32) -> Tensor {
        let n: usize = dims.iter().product();
        let v: Vec<f32> = (0..n)
            .map(|_| offset + scale * ((self.next() % 20_001) as f32 / 10_000.0 - 1.0))
            .collect();
        Tensor::from_vec(v, dims, &Device::Cpu)
            .and_then(|t| t.to_dtype(DType::BF16))
            .unwrap()
    }

    /// Random bytes in `low..low + span`.
    fn bytes(&mut self, dims: &[usize], low: u64, span: u64) -> Tensor {
        let n: usize = dims.iter().product();
        let v: Vec<u8> = (0..n).map(|_| (low + self.next() % span) as u8).collect();
        Tensor::from_vec(v, dims, &Device::Cpu).unwrap()
    }
}

/// Writes `config.json` and `model.safetensors` for `s` into `dir` (and copies
/// `tokenizer`, if given, as `tokenizer.json`); returns the config.
pub fn write_random_gpt_oss(
    dir: &Path,
    s: &GptOssShape,
    tokenizer: Option<&Path>,
    seed: u64,
) -> serde_json::Value {
    let mut rng = Rng(seed | 1);
    let (e, inter) = (s.experts, s.expert_width);
    let (qn, kn) = (s.heads * s.head_dim, s.kv_heads * s.head_dim);
    let mut t: HashMap<String, Tensor> = HashMap::new();
    let mut put = |name: String, tensor: Tensor| {
        t.insert(name, tensor);
    };
    put(
        "model.embed_tokens.weight".into(),
        rng.bf16(&[s.vocab, s.width], 1.0, 0.0),
    );
    put(
        "lm_head.weight".into(),
        rng.bf16(&[s.vocab, s.width], 0.2, 0.0),
    );
    put("model.norm.weight".into(), rng.bf16(&[s.width], 0.1, 1.0));
    for i in 0..s.layers {
        let p = format!("model.layers.{i}");
        for name in ["input_layernorm", "post_attention_layernorm"] {
            put(format!("{p}.{name}.weight"), rng.bf16(&[s.width], 0.1, 1.0));
        }
        for (name, out, inp) in [
            ("q", qn, s.width),
            ("k", kn, s.width),
            ("v", kn, s.width),
            ("o", s.width, qn),
        ] {
            let scale = 1.0 / (inp as f32).sqrt();
            put(
                format!("{p}.self_attn.{name}_proj.weight"),
                rng.bf16(&[out, inp], scale, 0.0),
            );
            put(
                format!("{p}.self_attn.{name}_proj.bias"),
                rng.bf16(&[out], 0.1, 0.0),
            );
        }
        put(
            format!("{p}.self_attn.sinks"),
            rng.bf16(&[s.heads], 1.0, 0.0),
        );
        put(
            format!("{p}.mlp.router.weight"),
            rng.bf16(&[e, s.width], 0.2, 0.0),
        );
        put(format!("{p}.mlp.router.bias"), rng.bf16(&[e], 0.1, 0.0));
        put(
            format!("{p}.mlp.experts.gate_up_proj_bias"),
            rng.bf16(&[e, 2 * inter], 0.1, 0.0),
        );
        put(
            format!("{p}.mlp.experts.down_proj_bias"),
            rng.bf16(&[e, s.width], 0.1, 0.0),
        );
        for (name, rows, cols) in [
            ("gate_up_proj", 2 * inter, s.width),
            ("down_proj", s.width, inter),
        ] {
            put(
                format!("{p}.mlp.experts.{name}_blocks"),
                rng.bytes(&[e, rows, cols / 32, 16], 0, 256),
            );
            // Scales near 2^-5: values of a few tenths.
            put(
                format!("{p}.mlp.experts.{name}_scales"),
                rng.bytes(&[e, rows, cols / 32], 119, 4),
            );
        }
    }
    std::fs::create_dir_all(dir).unwrap();
    candle_core::safetensors::save(&t, dir.join("model.safetensors")).unwrap();
    let config = serde_json::json!({
        "model_type": "gpt_oss",
        "architectures": ["GptOssForCausalLM"],
        "vocab_size": s.vocab, "hidden_size": s.width, "intermediate_size": inter,
        "num_attention_heads": s.heads, "num_key_value_heads": s.kv_heads, "head_dim": s.head_dim,
        "num_hidden_layers": s.layers, "num_local_experts": e, "num_experts_per_tok": s.top_k,
        "sliding_window": s.sliding_window, "max_position_embeddings": 131072,
        "rms_norm_eps": 1e-5, "rope_theta": 150000.0,
        "rope_scaling": {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                         "truncate": false, "original_max_position_embeddings": 4096},
        "swiglu_limit": 7.0, "attention_bias": true, "tie_word_embeddings": false,
        "eos_token_id": 200002, "pad_token_id": 199999,
        "quantization_config": {"quant_method": "mxfp4"}
    });
    std::fs::write(
        dir.join("config.json"),
        serde_json::to_string_pretty(&config).unwrap(),
    )
    .unwrap();
    if let Some(tok) = tokenizer {
        std::fs::copy(tok, dir.join("tokenizer.json")).unwrap();
    }
    config
}
