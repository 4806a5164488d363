//! Structured output, the parts that need no model: validation of a generated value against
//! its whole JSON Schema (the `jsonschema` crate), the options of a structured generation,
//! its attempts, and the feedback that asks the model to correct itself.
//!
//! The grammar compiled from a schema guarantees the syntax and every constraint it can
//! express; what it cannot (or what a lenient compile left out, such as `uniqueItems`) is
//! checked here after generation. The retry loop itself lives where the model does (the
//! root crate's `generate_structured`):
//!
//! 1. compile the schema once, and a validator for it;
//! 2. generate under the grammar; parse the text as JSON;
//! 3. validate; if it fails, feed the errors back in the prompt ([`feedback`]) and try
//!    again, up to `max_attempts`;
//! 4. all attempts failing is a typed error listing each attempt's errors.

use crate::generate::{FinishReason, GenerateOptions};
use corral_grammar::schema::JsonSchemaOptions;
use serde_json::Value;

/// A JSON Schema validator (formats asserted).
pub struct Validator {
    inner: jsonschema::Validator,
}

impl Validator {
    /// A validator for `schema`; `Err` says why the schema is not usable.
    pub fn new(schema: &Value) -> Result<Validator, String> {
        jsonschema::options()
            .should_validate_formats(true)
            .build(schema)
            .map(|inner| Validator { inner })
            .map_err(|e| format!("the schema cannot be used for validation: {e}"))
    }

    /// The validation errors of `value`, each `at /pointer: message` (empty: valid).
    pub fn errors(&self, value: &Value) -> Vec<String> {
        self.inner
            .iter_errors(value)
            .map(|e| {
                let at = e.instance_path().to_string();
                let at = if at.is_empty() { "/".to_string() } else { at };
                format!("at {at}: {e}")
            })
            .collect()
    }

    pub fn is_valid(&self, value: &Value) -> bool {
        self.inner.is_valid(value)
    }
}

/// How to generate a structured value.
#[derive(Clone, Debug)]
pub struct StructuredOptions {
    pub generate: GenerateOptions,
    /// How the schema becomes a grammar. Structured generation closes objects (no
    /// properties beyond those the schema names) unless the schema itself allows more.
    pub schema: JsonSchemaOptions,
    /// Generations before giving up (the first included). Default 3.
    pub max_attempts: usize,
    /// When the prompt is longer than the model's context: summarize it with the same
    /// model until it fits, keeping what the schema asks for. Default off (an error).
    pub compaction: bool,
    /// Retries sample at this temperature at least (with a new seed each), so that a greedy
    /// first attempt is not simply repeated. Default 0.7.
    pub retry_temperature: f32,
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
                ..JsonSchemaOptions::default()
            },
            max_attempts: 3,
            compaction: false,
            retry_temperature: 0.7,
        }
    }
}

/// One try at a structured value.
#[derive(Clone, Debug, PartialEq)]
pub struct Attempt {
    /// The text generated.
    pub text: String,
    /// Why it was not accepted (not JSON, or the validation errors).
    pub errors: Vec<String>,
    pub finish_reason: FinishReason,
}

/// Tokens a prompt must leave free beside the answer for [`feedback`].
pub const FEEDBACK_TOKENS: usize = 256;

/// The prompt for the next attempt: the original request, then what went wrong last time
/// (the answer and its first errors, clipped so that the prompt grows by at most about
/// [`FEEDBACK_TOKENS`]).
pub fn feedback(user: &str, failed: &[Attempt]) -> String {
    let Some(last) = failed.last() else {
        return user.to_string();
    };
    let clip = |s: &str, n: usize| -> String {
        if s.chars().count() > n {
            format!("{}...", s.chars().take(n).collect::<String>())
        } else {
            s.to_string()
        }
    };
    let mut out = user.to_string();
    out.push_str("\n\nYour previous answer was not valid:\n");
    out.push_str(&clip(&last.text, 240));
    out.push_str("\nErrors:\n");
    for e in last.errors.iter().take(5) {
        out.push_str(&format!("- {}\n", clip(e, 120)));
    }
    out.push_str("\nAnswer again with JSON that fixes these errors.");
    out
}

/// Checks a generated text: the value if it is JSON valid for the schema, else the errors.
pub fn check(validator: &Validator, text: &str) -> Result<Value, Vec<String>> {
    let value: Value =
        serde_json::from_str(text).map_err(|e| vec![format!("not valid JSON: {e}")])?;
    let errors = validator.errors(&value);
    if errors.is_empty() {
        Ok(value)
    } else {
        Err(errors)
    }
}

/// What the schema asks for, in words, for the compaction prompt: the property names
/// (with descriptions) of the top level.
pub fn wanted_fields(schema: &Value) -> String {
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        return "the information the task asks for".to_string();
    };
    props
        .iter()
        .map(
            |(k, v)| match v.get("description").and_then(Value::as_str) {
                Some(d) => format!("{k} ({d})"),
                None => k.clone(),
            },
        )
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_errors_name_the_place() {
        let v = Validator::new(&serde_json::json!({
            "type": "object",
            "properties": {"tags": {"type": "array", "uniqueItems": true}, "when": {"type": "string", "format": "date"}},
        }))
        .unwrap();
        assert!(v.is_valid(&serde_json::json!({"tags": [1, 2]})));
        let e = v.errors(&serde_json::json!({"tags": [1, 1], "when": "2023-02-30"}));
        assert_eq!(e.len(), 2, "{e:?}");
        assert!(e[0].starts_with("at /tags: "), "{e:?}");
        assert!(e[1].starts_with("at /when: "), "{e:?}");
        assert!(check(&v, "{\"tags\": [1,").is_err());
    }

    #[test]
    fn feedback_lists_attempts() {
        let a = Attempt {
            text: "[1,1]".into(),
            errors: vec!["at /: has non-unique elements".into()],
            finish_reason: FinishReason::GrammarComplete,
        };
        let p = feedback("List two numbers.", &[a]);
        assert!(p.starts_with("List two numbers."));
        assert!(p.contains("[1,1]\nErrors:\n- at /: has non-unique"), "{p}");
        assert_eq!(feedback("x", &[]), "x");
    }
}
