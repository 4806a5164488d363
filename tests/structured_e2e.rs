//! Structured output end to end on the real SmolLM2-135M-Instruct Q4_1 model: typed values
//! from `generate_structured` for several schemas, `extract` from free text, a lenient
//! `uniqueItems` schema showing the retry at work, a token budget just above the shortest
//! completion still giving valid JSON, and prompts longer than the context (refused, or
//! compacted). Greedy decoding throughout, so every run is the same. Skipped, with a note,
//! when the model has not been fetched.

mod common;

use corral::engine::SamplingOptions;
use corral::schema::validate::Validator;
use corral::{
    DeviceSpec, Error, FinishReason, GenerateOptions, Model, StructuredError, StructuredOptions,
    extract, generate_json, generate_structured,
};
use schemars::JsonSchema;
use serde::Deserialize;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

fn model() -> &'static Mutex<Model> {
    static MODEL: OnceLock<Mutex<Model>> = OnceLock::new();
    MODEL.get_or_init(|| {
        let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("assets/models/SmolLM2-135M-Instruct.Q4_1.gguf");
        let p = common::require_input(p, "run scripts/fetch-assets model");
        Mutex::new(Model::load(p.to_str().unwrap(), DeviceSpec::Cpu).unwrap())
    })
}

fn options(max_tokens: usize) -> StructuredOptions {
    StructuredOptions {
        generate: GenerateOptions {
            max_tokens,
            sampling: SamplingOptions::greedy(),
            ..GenerateOptions::default()
        },
        ..StructuredOptions::default()
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[allow(dead_code)] // fields are read by Debug, in the test output
struct Person {
    name: String,
    age: u32,
    hobbies: Vec<String>,
}

#[derive(Debug, Deserialize, JsonSchema, PartialEq)]
enum Diet {
    Vegan,
    Vegetarian,
    Omnivore,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct Ingredient {
    name: String,
    grams: u32,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[allow(dead_code)] // fields are read by Debug, in the test output
struct Recipe {
    title: String,
    diet: Diet,
    ingredients: Vec<Ingredient>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[allow(dead_code)] // fields are read by Debug, in the test output
struct Contact {
    name: String,
    age: u32,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[allow(dead_code)] // fields are read by Debug, in the test output
struct Verdict {
    answer: bool,
    #[schemars(range(min = 0, max = 10))]
    confidence: u8,
}

#[test]
#[ignore = "needs scripts/fetch-assets"]
fn generate_structured_returns_typed_values() {
    let m = model();
    let mut m = m.lock().unwrap_or_else(|e| e.into_inner());
    let p: Person = generate_structured(
        &mut m,
        "Describe a fictional person as JSON: name, age, hobbies.",
        &options(200),
    )
    .unwrap();
    eprintln!("{p:?}");
    assert!(p.age < 200);

    let r: Recipe = generate_structured(
        &mut m,
        "Give a simple pancake recipe as JSON with a title, a diet and the ingredients with their weight in grams.",
        &options(300),
    )
    .unwrap();
    eprintln!("{r:?}");
    assert!(
        r.ingredients
            .iter()
            .all(|i| !i.name.is_empty() || i.grams < u32::MAX)
    );

    let v: Verdict = generate_structured(
        &mut m,
        "Is the sky blue on a clear day? Answer as JSON with answer and a confidence from 0 to 10.",
        &options(60),
    )
    .unwrap();
    eprintln!("{v:?}");
    assert!(v.confidence <= 10);
}

#[test]
#[ignore = "needs scripts/fetch-assets"]
fn extract_reads_free_text() {
    let m = model();
    let mut m = m.lock().unwrap_or_else(|e| e.into_inner());
    let p: Person = extract(
        &mut m,
        "Maria Lopez is 34 years old. She enjoys climbing, chess and baking bread on weekends.",
        &options(120),
    )
    .unwrap();
    eprintln!("{p:?}");
    assert!(p.name.contains("Maria"), "{p:?}");
}

#[test]
#[ignore = "needs scripts/fetch-assets"]
fn unique_items_in_lenient_mode_is_retried_with_feedback() {
    let m = model();
    let mut m = m.lock().unwrap_or_else(|e| e.into_inner());
    // The grammar cannot say "all different": lenient mode leaves it to validation, and a
    // model asked for repeated items produces them; the errors go back into the prompt.
    let schema = serde_json::json!({
        "type": "array",
        "items": {"type": "integer", "minimum": 1, "maximum": 3},
        "minItems": 3, "maxItems": 3, "uniqueItems": true
    });
    let mut o = options(40);
    o.schema.lenient = true;
    let validator = Validator::new(&schema).unwrap();
    match generate_json(&mut m, &schema, "Write the list [1, 1, 1] as JSON.", &o) {
        Ok(out) => {
            eprintln!(
                "after {} failed attempt(s): {}",
                out.failed.len(),
                out.value
            );
            assert!(
                !out.failed.is_empty(),
                "the first attempt should have repeated items"
            );
            assert!(validator.is_valid(&out.value));
            for a in &out.failed {
                eprintln!("  failed: {} {:?}", a.text, a.errors);
                assert!(
                    a.errors.iter().any(|e| e.contains("unique")),
                    "{:?}",
                    a.errors
                );
            }
        }
        Err(Error::Structured(StructuredError::Attempts(attempts))) => {
            eprintln!("all {} attempts failed: {attempts:?}", attempts.len());
            assert_eq!(attempts.len(), o.max_attempts);
            assert!(
                attempts
                    .iter()
                    .all(|a| a.errors.iter().any(|e| e.contains("unique")))
            );
        }
        Err(e) => panic!("{e}"),
    }
    // Strict mode refuses the schema up front, naming the keyword.
    let err = generate_json(&mut m, &schema, "x", &options(40)).unwrap_err();
    assert!(err.to_string().contains("uniqueItems"), "{err}");
}

#[test]
#[ignore = "needs scripts/fetch-assets"]
fn a_budget_just_above_the_shortest_completion_still_gives_valid_json() {
    let m = model();
    let mut m = m.lock().unwrap_or_else(|e| e.into_inner());
    let schema = serde_json::to_value(schemars::schema_for!(Recipe)).unwrap();
    let validator = Validator::new(&schema).unwrap();
    // The shortest Recipe ({"title":"","diet":"Vegan","ingredients":[]}) is about 16 tokens.
    for max_tokens in [18, 24, 40] {
        let (hits, misses) = m.constraints().stats();
        let out = generate_json(
            &mut m,
            &schema,
            "Give a long, detailed lasagna recipe as JSON with many ingredients.",
            &options(max_tokens),
        )
        .unwrap();
        eprintln!(
            "{max_tokens} tokens: {} ({}, {} tokens)",
            out.value,
            out.generation.finish_reason.as_str(),
            out.generation.stats.generated_tokens
        );
        assert!(out.generation.stats.generated_tokens <= max_tokens);
        assert!(validator.is_valid(&out.value));
        // Compiled once: later calls with the same schema find its constraint.
        let now = m.constraints().stats();
        if max_tokens > 18 {
            assert_eq!(now, (hits + 1, misses), "the schema's constraint is reused");
        }
        assert!(out.failed.is_empty());
        if max_tokens < 40 {
            assert_eq!(out.generation.finish_reason, FinishReason::BudgetCompleted);
        }
    }
    // No completion fits: refused up front.
    let err = generate_json(&mut m, &schema, "x", &options(5)).unwrap_err();
    assert!(
        err.to_string()
            .contains("no output of the grammar fits in 5 tokens"),
        "{err}"
    );
}

#[test]
#[ignore = "needs scripts/fetch-assets"]
fn prompts_longer_than_the_context_are_refused_or_compacted() {
    let m = model();
    let mut m = m.lock().unwrap_or_else(|e| e.into_inner());
    let story = "Maria Lopez, aged 34, lives in Seville and works as a nurse. ".repeat(2)
        + &"The weather that spring was mild and the orange trees were in bloom along every street. ".repeat(40)
        + "In her free time Maria likes climbing and chess.";
    // An answer budget that leaves little room (about 790 positions) for the prompt in the
    // 8192-position context.
    let mut o = options(7400);
    let err = extract::<Contact>(&mut m, &story, &o).unwrap_err();
    assert!(err.to_string().contains("set compaction"), "{err}");
    // The message names the room kept for the answer: the prompt alone fits the context.
    assert!(err.to_string().contains("room for 7"), "{err}");
    o.compaction = true;
    let p: Contact = extract(&mut m, &story, &o).unwrap();
    eprintln!("after compaction: {p:?}");
}
