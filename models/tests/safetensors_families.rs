//! The safetensors loaders (llama, qwen2, qwen3) on tiny models with random weights, built
//! here with candle's VarMap and saved the way the Hub ships models (config.json,
//! model.safetensors, tokenizer.json, tokenizer_config.json): load through `Model::load`,
//! apply the chat template, and generate under a grammar. A random model's output must
//! still be in the grammar's language. The Qwen models get a logit width wider than the
//! tokenizer (151,936 for 151,669 tokens), as the real ones have.

use candle_core::{DType, Device};
use candle_nn::{VarBuilder, VarMap};
use candle_transformers::models::{llama, qwen2, qwen3};
use corral_engine::{BatchItem, Constraint, GenerateOptions, Logits, SamplingOptions, generate};
use corral_grammar::{CompileOptions, MatchOutcome, compile_gbnf, match_bytes};
use corral_models::{DeviceSpec, Model};
use corral_trie::TokenId;
use std::path::{Path, PathBuf};

#[path = "../../tests/support/require.rs"]
mod require;

fn asset(name: &str) -> PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../assets/tokenizers")
        .join(name)
        .join("tokenizer.json");
    require::require_input(p, "run scripts/fetch-assets")
}

fn build(family: &str, tokenizer: &Path, vocab: usize) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("corral-tiny-{family}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = serde_json::json!({
        "model_type": family,
        "vocab_size": vocab,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 8,
        "attention_bias": false,
        "max_position_embeddings": 256,
        "sliding_window": 256,
        "max_window_layers": 2,
        "use_sliding_window": false,
        "tie_word_embeddings": true,
        "rope_theta": 10000.0,
        "rms_norm_eps": 1e-6,
        "hidden_act": "silu",
        "bos_token_id": 1,
        "eos_token_id": 2
    });
    let varmap = VarMap::new();
    let vb = VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu);
    match family {
        "llama" => {
            let c: llama::LlamaConfig = serde_json::from_value(config.clone()).unwrap();
            llama::Llama::load(vb, &c.into_config(false)).unwrap();
        }
        "qwen2" => {
            let c: qwen2::Config = serde_json::from_value(config.clone()).unwrap();
            qwen2::ModelForCausalLM::new(&c, vb).unwrap();
        }
        _ => {
            let c: qwen3::Config = serde_json::from_value(config.clone()).unwrap();
            qwen3::ModelForCausalLM::new(&c, vb).unwrap();
        }
    }
    varmap.save(dir.join("model.safetensors")).unwrap();
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    std::fs::copy(tokenizer, dir.join("tokenizer.json")).unwrap();
    let template = "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}";
    std::fs::write(
        dir.join("tokenizer_config.json"),
        serde_json::json!({"chat_template": template, "eos_token": "</s>", "bos_token": "<s>"})
            .to_string(),
    )
    .unwrap();
    dir
}

fn check(family: &str, tok: &str, vocab: usize) {
    let tokenizer = asset(tok);
    let dir = build(family, &tokenizer, vocab);
    let mut model = Model::load(dir.to_str().unwrap(), DeviceSpec::Cpu).unwrap();
    assert_eq!(model.space().width(), vocab);
    assert!(model.has_chat_template());
    let prompt = model.prompt_text(Some("sys"), "hi", false).unwrap();
    assert_eq!(prompt.text(), "<|system|>sys\n<|user|>hi\n<|assistant|>");
    let ids = model.encode_prompt(&prompt).unwrap();
    assert_eq!(ids, model.encode(&prompt.text()).unwrap());
    let g = compile_gbnf(
        r#"root ::= "{\"n\": " [0-9]{1,3} ", \"ok\": " ("true" | "false") "}""#,
        &CompileOptions::default(),
    )
    .unwrap();
    let space = model.space().clone();
    let c = Constraint::new(g.clone(), space.clone());
    let opts = GenerateOptions {
        max_tokens: 40,
        sampling: SamplingOptions::greedy(),
        ..GenerateOptions::default()
    };
    let out = generate(model.lm(), &space, Some(&c), &ids, &opts, &mut |_| {}).unwrap();
    assert_eq!(
        match_bytes(&g, out.text.as_bytes()).unwrap(),
        MatchOutcome::Accepted,
        "{family}: {:?}",
        out.text
    );
    // Sequences of their own: run as a batch, each gets the logits `forward` gives it.
    let lm = model.lm();
    let logits = |l: Box<dyn Logits>| l.to_masked_vec(None).unwrap();
    let a = logits(lm.forward(&ids, 0).unwrap());
    let a_next = logits(lm.forward(&[TokenId(5)], ids.len()).unwrap());
    let other = [TokenId(7), TokenId(8)];
    let b = logits(lm.forward(&other, 0).unwrap());
    let b_next = logits(lm.forward(&[TokenId(6)], other.len()).unwrap());
    let (mut s1, mut s2) = (lm.new_sequence(), lm.new_sequence());
    let rows = lm
        .forward_batch(&mut [
            BatchItem {
                tokens: &ids,
                pos: 0,
                sequence: &mut s1,
            },
            BatchItem {
                tokens: &other,
                pos: 0,
                sequence: &mut s2,
            },
        ])
        .unwrap();
    let rows: Vec<Vec<f32>> = rows.into_iter().map(logits).collect();
    assert_eq!(rows, [a, b], "{family}: prompts");
    let rows = lm
        .forward_batch(&mut [
            BatchItem {
                tokens: &[TokenId(5)],
                pos: ids.len(),
                sequence: &mut s1,
            },
            BatchItem {
                tokens: &[TokenId(6)],
                pos: other.len(),
                sequence: &mut s2,
            },
        ])
        .unwrap();
    let rows: Vec<Vec<f32>> = rows.into_iter().map(logits).collect();
    assert_eq!(rows, [a_next, b_next], "{family}: decoding steps");
    assert_eq!(rows[0].len(), vocab);
    std::fs::remove_dir_all(&dir).ok();
    eprintln!("{family}: {:?}", out.text);
}

#[test]
#[ignore = "needs scripts/fetch-assets"]
fn llama_family() {
    check("llama", "llama2", 32000);
}

#[test]
#[ignore = "needs scripts/fetch-assets"]
fn qwen2_family() {
    check("qwen2", "qwen3", 151_936);
}

#[test]
#[ignore = "needs scripts/fetch-assets"]
fn qwen3_family() {
    check("qwen3", "qwen3", 151_936);
}
