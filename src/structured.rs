//! Typed structured output with self-healing retry, extraction from free text, and
//! compaction of prompts too long for the model. The steps of one structured generation
//! are in [`corral_schema::validate`]: compile and validate with corral-schema, generate
//! here with the model.

use crate::{Error, Model, Prompt};
use corral_engine::{Constraint, FinishReason, GenerateOptions, Generation};
use corral_schema::validate::{FeedbackLimits, Rejected, Validator, check, feedback};
use corral_schema::{JsonSchemaOptions, compile_json_schema_value};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::sync::Arc;

/// How to generate a structured value.
#[derive(Clone, Debug)]
pub struct StructuredOptions {
    /// Each generation's options (`max_tokens` 512 by default); a retry raises the
    /// temperature to at least `retry_temperature` and moves the seed on.
    pub generate: GenerateOptions,
    /// How the schema becomes a grammar. Structured generation closes objects (no
    /// properties beyond those the schema names) unless the schema itself allows more.
    pub schema: JsonSchemaOptions,
    /// Generations before giving up (the first included). Default 3.
    pub max_attempts: usize,
    /// Retries sample at this temperature at least (with a new seed each), so that a greedy
    /// first attempt is not simply repeated. Default 0.7.
    pub retry_temperature: f32,
    /// How much of a failed answer a retry's prompt quotes.
    pub feedback: FeedbackLimits,
    /// When the prompt is longer than the model's context: summarize it with the same
    /// model until it fits, keeping what the schema asks for. Default off (an error).
    pub compaction: bool,
    /// Rounds of compaction before giving up. Default 4.
    pub compaction_rounds: usize,
}

impl Default for StructuredOptions {
    fn default() -> StructuredOptions {
        StructuredOptions {
            generate: GenerateOptions {
                max_tokens: 512,
                ..GenerateOptions::default()
            },
            schema: JsonSchemaOptions {
                closed_objects: true,
                ..JsonSchemaOptions::for_generation()
            },
            max_attempts: 3,
            retry_temperature: 0.7,
            feedback: FeedbackLimits::default(),
            compaction: false,
            compaction_rounds: 4,
        }
    }
}

/// One try at a structured value that was not accepted.
#[derive(Clone, Debug, PartialEq)]
pub struct Attempt {
    /// The text generated.
    pub text: String,
    /// Why it was not accepted (not JSON, or the validation errors).
    pub errors: Vec<String>,
    /// Why its generation stopped (a cut-off output ends with [`FinishReason::Length`]).
    pub finish_reason: FinishReason,
}

/// Why a structured generation failed.
#[derive(Debug, thiserror::Error)]
pub enum StructuredError {
    /// Every attempt (`max_attempts`) was rejected; each one's text and errors, in order.
    #[error("every attempt failed validation ({} attempts): {}", .0.len(), summary(.0))]
    Attempts(Vec<Attempt>),
    /// The valid value does not deserialize into the requested type, or that type's schema
    /// does not serialize to JSON.
    #[error("the value does not deserialize into the type: {0}")]
    Deserialize(String),
    /// The schema cannot be made into a validator.
    #[error(transparent)]
    Validator(#[from] corral_schema::validate::ValidatorError),
    /// The prompt, with room for the answer (`max_tokens`) and a retry's feedback, does not
    /// fit the model's context: compaction is off, or its rounds did not shrink it enough.
    #[error(
        "the prompt takes {tokens} tokens and the answer needs room for {room} more (max_tokens and a retry's feedback), past the model's context of {max} (lower max_tokens, or set compaction to summarize the prompt)"
    )]
    PromptTooLong {
        /// The prompt's tokens (after the last round of compaction, if any ran).
        tokens: usize,
        /// The positions kept for the answer: `max_tokens` and a retry's feedback.
        room: usize,
        /// The model's context, in positions.
        max: usize,
    },
}

fn summary(attempts: &[Attempt]) -> String {
    attempts
        .iter()
        .enumerate()
        .map(|(i, a)| format!("attempt {}: {}", i + 1, a.errors.join("; ")))
        .collect::<Vec<_>>()
        .join(" | ")
}

/// A structured value and the attempts that came before it.
#[derive(Clone, Debug)]
pub struct StructuredOutput {
    /// The value, valid under the whole schema.
    pub value: Value,
    /// The failed attempts before the one that succeeded.
    pub failed: Vec<Attempt>,
    /// The generation that produced `value`.
    pub generation: Generation,
}

/// Generates a `T` (its JSON Schema from `schemars`) after `prompt`: constrained by the
/// schema's grammar, validated against the whole schema, retried with the errors fed back.
pub fn generate_structured<T: DeserializeOwned + JsonSchema>(
    model: &mut Model,
    prompt: impl Into<Prompt>,
    options: &StructuredOptions,
) -> Result<T, Error> {
    let schema = serde_json::to_value(schemars::schema_for!(T))
        .map_err(|e| StructuredError::Deserialize(e.to_string()))?;
    let out = generate_json(model, &schema, prompt, options)?;
    serde_json::from_value(out.value)
        .map_err(|e| StructuredError::Deserialize(e.to_string()).into())
}

/// Extracts a `T` from free text (the fallback of a failed parse: the model reads the text
/// and writes the value, under the schema's grammar).
pub fn extract<T: DeserializeOwned + JsonSchema>(
    model: &mut Model,
    text: &str,
    options: &StructuredOptions,
) -> Result<T, Error> {
    let prompt = Prompt {
        system: Some(
            "You extract structured data. Answer with one JSON value and nothing else.".into(),
        ),
        user: format!("Extract the information from the text below as JSON.\n\nText:\n{text}"),
        raw: false,
    };
    generate_structured(model, prompt, options)
}

/// [`generate_structured`] for a schema given as JSON: the valid value and the attempts.
pub fn generate_json(
    model: &mut Model,
    schema: &Value,
    prompt: impl Into<Prompt>,
    options: &StructuredOptions,
) -> Result<StructuredOutput, Error> {
    let mut prompt = prompt.into();
    let constraint = schema_constraint(model, schema, options)?;
    let validator = Validator::new(schema).map_err(StructuredError::Validator)?;
    let mut last: Option<Rejected> = None;
    fit_prompt(model, &mut prompt, schema, options)?;
    let mut failed: Vec<Attempt> = Vec::new();
    for attempt in 0..options.max_attempts.max(1) {
        let attempt_prompt = Prompt {
            user: feedback(&prompt.user, last.as_ref(), &options.feedback),
            ..prompt.clone()
        };
        let mut generate = options.generate.clone();
        if attempt > 0 {
            let s = &mut generate.sampling;
            s.temperature = s.temperature.max(options.retry_temperature);
            s.seed = s.seed.wrapping_add(attempt as u64);
        }
        let generation = crate::generate_with(
            model,
            Some(&constraint),
            attempt_prompt,
            &generate,
            &mut |_| {},
        )?;
        match check(&validator, &generation.text) {
            Ok(value) => {
                return Ok(StructuredOutput {
                    value,
                    failed,
                    generation,
                });
            }
            Err(errors) => {
                last = Some(Rejected {
                    text: generation.text.clone(),
                    errors: errors.clone(),
                });
                failed.push(Attempt {
                    text: generation.text,
                    errors,
                    finish_reason: generation.finish_reason,
                });
            }
        }
    }
    Err(StructuredError::Attempts(failed).into())
}

/// Makes the prompt fit the model's context: unchanged if it does; else compacted (the
/// model summarizes it in pieces, keeping what the schema asks for) if the options allow,
/// else an error.
fn fit_prompt(
    model: &mut Model,
    prompt: &mut Prompt,
    schema: &Value,
    options: &StructuredOptions,
) -> Result<(), Error> {
    let max = model.lm().max_positions();
    let tokens = |model: &mut Model, p: &Prompt| -> Result<usize, Error> {
        let text = model.prompt_text(p.system.as_deref(), &p.user, p.raw)?;
        Ok(model.encode_prompt(&text)?.len())
    };
    // The answer, and the feedback of a failed attempt.
    let room = options.generate.max_tokens + options.feedback.tokens();
    let mut n = tokens(model, prompt)?;
    if n + room <= max {
        return Ok(());
    }
    if !options.compaction {
        return Err(StructuredError::PromptTooLong {
            tokens: n,
            room,
            max,
        }
        .into());
    }
    let fields = corral_schema::validate::wanted_fields(schema);
    for _round in 0..options.compaction_rounds {
        let budget = max.saturating_sub(room).max(64);
        prompt.user = compact(model, &prompt.user, &fields, budget, &options.generate)?;
        n = tokens(model, prompt)?;
        if n + room <= max {
            return Ok(());
        }
    }
    Err(StructuredError::PromptTooLong {
        tokens: n,
        room,
        max,
    }
    .into())
}

/// One round of compaction: the text in pieces that fit, each summarized by the model.
fn compact(
    model: &mut Model,
    text: &str,
    fields: &str,
    budget: usize,
    generate: &GenerateOptions,
) -> Result<String, Error> {
    let ids = model.encode_prompt(&model.user_prompt(text))?;
    // Pieces of about half the budget, so that the summary prompt and its answer fit.
    let piece = (budget / 2).max(32);
    let mut out = String::new();
    for chunk in ids.chunks(piece) {
        let chunk_text = model.decode(chunk)?;
        let p = Prompt {
            system: Some("You summarize text faithfully.".into()),
            user: format!(
                "Summarize this text in at most {} words. Keep every name, number and fact about: {fields}.\n\nText:\n{chunk_text}",
                piece / 4
            ),
            raw: false,
        };
        let opts = GenerateOptions {
            max_tokens: (piece / 3).max(16),
            complete_within_budget: false,
            ..generate.clone()
        };
        let g = crate::generate_with(model, None, p, &opts, &mut |_| {})?;
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(g.text.trim());
    }
    Ok(out)
}

/// The constraint for a schema: compiled once, then taken from the model's
/// [`ModelText::constraints`](corral_models::ModelText::constraints) (keyed by the schema and its options) on every later call.
pub fn schema_constraint(
    model: &Model,
    schema: &Value,
    options: &StructuredOptions,
) -> Result<Arc<Constraint>, Error> {
    let key = format!("json-schema\0{:?}\0{schema}", options.schema);
    let cache = model.constraints();
    cache.get_or_compile(&key, || {
        let options = options
            .schema
            .clone()
            .with_dfa_cache(Some(cache.dfas().clone()));
        compile_json_schema_value(schema, &options)
            .map(|c| c.grammar)
            .map_err(Error::from)
    })
}
