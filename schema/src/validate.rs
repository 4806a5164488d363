//! Validation after generation, and the feedback that asks a model to correct itself.
//!
//! The grammar compiled from a schema guarantees the syntax and every constraint it can
//! express; what it cannot (or what a lenient compile left out, such as `uniqueItems`) is
//! checked here, on the generated value, with the `jsonschema` crate. A structured
//! generation (the `corral` facade's `generate_structured`) runs:
//!
//! 1. compile the schema once, and a [`Validator`] for it;
//! 2. generate under the grammar; [`check`] the text (JSON, then the schema);
//! 3. if it fails, ask again with [`feedback`] (the answer and its errors), up to a number
//!    of attempts.

use serde_json::Value;

/// The schema cannot be used for validation.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the schema cannot be used for validation: {0}")]
pub struct ValidatorError(pub String);

/// A JSON Schema validator (formats asserted).
pub struct Validator {
    inner: jsonschema::Validator,
}

impl std::fmt::Debug for Validator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Validator").finish_non_exhaustive()
    }
}

impl Validator {
    /// A validator for `schema`.
    pub fn new(schema: &Value) -> Result<Validator, ValidatorError> {
        jsonschema::options()
            .should_validate_formats(true)
            .build(schema)
            .map(|inner| Validator { inner })
            .map_err(|e| ValidatorError(e.to_string()))
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

    /// Whether `value` satisfies the schema (formats asserted), without collecting errors.
    pub fn is_valid(&self, value: &Value) -> bool {
        self.inner.is_valid(value)
    }
}

/// An answer that was not accepted, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejected {
    /// The text generated.
    pub text: String,
    /// Why it was not accepted (not JSON, or the validation errors).
    pub errors: Vec<String>,
}

/// Checks a generated text: the value if it is JSON valid for the schema, else the errors.
pub fn check(validator: &Validator, text: &str) -> Result<Value, Vec<String>> {
    let value: Value = serde_json::from_str(text)
        .map_err(|e| vec![format!("not valid JSON: {}", crate::json_error(&e))])?;
    let errors = validator.errors(&value);
    if errors.is_empty() {
        Ok(value)
    } else {
        Err(errors)
    }
}

/// How much of a rejected answer and its errors [`feedback`] quotes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FeedbackLimits {
    /// Characters of the rejected answer. Default 240.
    pub answer_chars: usize,
    /// Errors listed. Default 5.
    pub errors: usize,
    /// Characters of each error. Default 120.
    pub error_chars: usize,
}

impl Default for FeedbackLimits {
    fn default() -> FeedbackLimits {
        FeedbackLimits {
            answer_chars: 240,
            errors: 5,
            error_chars: 120,
        }
    }
}

impl FeedbackLimits {
    /// Tokens the feedback adds to a prompt at most, roughly (a token holds about 3
    /// characters of this kind of text, and the fixed wording takes about 30): what a
    /// prompt must leave free for a retry.
    pub fn tokens(&self) -> usize {
        (self.answer_chars + self.errors * (self.error_chars + 4)) / 3 + 30
    }
}

/// The prompt for the next attempt: the original request, then what went wrong last time
/// (the answer and its first errors, clipped by `limits`).
pub fn feedback(user: &str, last: Option<&Rejected>, limits: &FeedbackLimits) -> String {
    let Some(last) = last else {
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
    out.push_str(&clip(&last.text, limits.answer_chars));
    out.push_str("\nErrors:\n");
    for e in last.errors.iter().take(limits.errors) {
        out.push_str(&format!("- {}\n", clip(e, limits.error_chars)));
    }
    out.push_str("\nAnswer again with JSON that fixes these errors.");
    out
}

/// What the schema asks for, in words (for a prompt that summarizes a long text): the
/// property names (with descriptions) of the top level.
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
    fn feedback_quotes_the_last_answer() {
        let a = Rejected {
            text: "[1,1]".into(),
            errors: vec!["at /: has non-unique elements".into()],
        };
        let limits = FeedbackLimits::default();
        let p = feedback("List two numbers.", Some(&a), &limits);
        assert!(p.starts_with("List two numbers."));
        assert!(p.contains("[1,1]\nErrors:\n- at /: has non-unique"), "{p}");
        assert_eq!(feedback("x", None, &limits), "x");
        assert!(limits.tokens() >= 200 && limits.tokens() <= 400);
    }
}
