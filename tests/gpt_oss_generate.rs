//! gpt-oss through the whole library path: a random-weight gpt-oss folder of a few layers
//! with the real gpt-oss tokenizer (vocabulary 201,088) loads with `Model::load`, takes a
//! harmony prompt from `corral_models::harmony`, and generates under a JSON Schema until
//! the grammar completes; the output is valid under the schema. The logits themselves are checked
//! against transformers in `models/tests/gpt_oss_logits.rs`.

mod common;
#[path = "support/random_gpt_oss.rs"]
mod random_gpt_oss;

use corral::engine::{Constraint, FinishReason, GenerateOptions, SamplingOptions, generate};
use corral::models::harmony::{Message, Renderer, Role};
use corral::schema::validate::Validator;
use corral::{DeviceSpec, JsonSchemaOptions, Model, compile_json_schema_value};
use random_gpt_oss::{GptOssShape, write_random_gpt_oss};

#[test]
fn a_random_gpt_oss_generates_valid_json_from_a_harmony_prompt() {
    let Some(tokenizer) = common::asset_tokenizer("gptoss") else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("corral-gpt-oss-e2e-{}", std::process::id()));
    let shape = GptOssShape {
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
    };
    write_random_gpt_oss(&dir, &shape, Some(&tokenizer), 5);
    let mut model = Model::load(dir.to_str().unwrap(), DeviceSpec::Cpu).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(model.max_positions(), 131_072);
    let text = model.text().clone();

    let renderer = Renderer::new(text.special_tokens()).unwrap();
    let messages = [Message::text(Role::User, "A city and a number, as JSON.")];
    let prompt = renderer
        .for_completion(&messages, Role::Assistant, true)
        .unwrap();
    let ids = text.encode_prompt(&prompt).unwrap();

    let schema = serde_json::json!({
        "type": "object",
        "properties": {
            "city": {"enum": ["Paris", "Lima", "Oslo"]},
            "n": {"type": "integer", "minimum": 0, "maximum": 99}
        },
        "required": ["city", "n"],
        "additionalProperties": false
    });
    let grammar = compile_json_schema_value(&schema, &JsonSchemaOptions::for_generation())
        .unwrap()
        .grammar;
    let constraint = Constraint::new(grammar, text.space().clone());
    let opts = GenerateOptions {
        max_tokens: 64,
        sampling: SamplingOptions::greedy(),
        ..GenerateOptions::default()
    };
    let out = generate(
        model.lm(),
        text.space(),
        Some(&constraint),
        &ids,
        &opts,
        &mut |_| {},
    )
    .unwrap();
    let json = text.decode(&out.tokens).unwrap();
    // The grammar ends the output (or <|return|>, the config's end token, does).
    assert!(
        matches!(
            out.finish_reason,
            FinishReason::GrammarComplete | FinishReason::Stop
        ),
        "{:?}: {json}",
        out.finish_reason
    );
    assert_eq!(text.tokenizer().token_to_id("<|return|>"), Some(200_002));
    let value: serde_json::Value =
        serde_json::from_str(json.trim()).unwrap_or_else(|e| panic!("{json:?}: {e}"));
    let errors = Validator::new(&schema).unwrap().errors(&value);
    assert!(errors.is_empty(), "{json}: {errors:?}");
    eprintln!("random gpt-oss, greedy, under the schema: {json}");
}
