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

/// A random gpt-oss of 2 layers with the real tokenizer, in a folder of its own.
fn random_folder(name: &str, seed: u64) -> std::path::PathBuf {
    let tokenizer = common::asset_tokenizer("gptoss");
    let dir = std::env::temp_dir().join(format!("corral-gpt-oss-{name}-{}", std::process::id()));
    let shape = GptOssShape::with_gpt_oss_vocabulary();
    write_random_gpt_oss(&dir, &shape, Some(&tokenizer), seed);
    dir
}

#[test]
#[ignore = "needs scripts/fetch-assets"]
fn a_random_gpt_oss_generates_valid_json_from_a_harmony_prompt() {
    let dir = random_folder("e2e", 5);
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

#[test]
#[ignore = "needs scripts/fetch-assets"]
fn corral_generate_runs_a_gpt_oss_folder_under_a_schema() {
    let dir = random_folder("cli", 9);
    let schema = common::temp_file(
        "gpt-oss-cli.schema.json",
        r#"{"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"], "additionalProperties": false}"#,
    );
    // The harmony prompt and splitter (the model's tokenizer is harmony's): the schema
    // applies in the final channel, whose header a reasoning budget of 0 forces at once (a
    // random network writes no header of its own); the answer goes to standard output.
    let (code, stdout, stderr) = common::run_corral(
        &[
            "generate",
            "-m",
            dir.to_str().unwrap(),
            "--json-schema",
            &schema,
            "-p",
            "Is it ok?",
            "--temperature",
            "0",
            "--max-tokens",
            "64",
            "--reasoning-budget",
            "0",
            "--stats",
        ],
        b"",
    );
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(code, 0, "{stderr}");
    let answer: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!("stdout {stdout:?} is not the JSON answer ({e}); stderr {stderr}")
    });
    assert!(answer["ok"].is_boolean(), "{answer}");
    let stats = stderr.lines().last().unwrap();
    assert!(stats.contains(r#""schema_valid":true"#), "{stats}");
    eprintln!("answer {stdout:?}; stats on stderr: {stderr:?}");
}
