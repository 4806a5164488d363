//! A request's structured-output field (`response_format`, `grammar`, `regex`, `choice`,
//! gpt-oss tool calls) and the constraint it names, from the model's cache or compiled.

use crate::admit::Spec;
use crate::api::{Common, ResponseFormat};
use crate::error::ApiError;
use corral_engine::{Constraint, ConstraintCache};
use corral_grammar::CompileOptions;
use corral_schema::JsonSchemaOptions;
use serde_json::Value;
use std::sync::Arc;

/// The one structured-output field of the request, if any.
pub(crate) fn spec(c: &Common) -> Result<Option<(&'static str, Spec)>, ApiError> {
    let mut found: Vec<(&'static str, Spec)> = Vec::new();
    match &c.response_format {
        None | Some(ResponseFormat::Text) => {}
        Some(ResponseFormat::JsonObject) => found.push((
            "response_format",
            Spec::Schema(serde_json::json!({"type": "object"})),
        )),
        Some(ResponseFormat::JsonSchema { json_schema }) => {
            let schema = json_schema.schema.clone().ok_or_else(|| {
                ApiError::invalid_param(
                    "response_format",
                    "response_format.json_schema has no `schema`",
                )
            })?;
            found.push(("response_format", Spec::Schema(schema)));
        }
    }
    if let Some(g) = &c.grammar {
        found.push(("grammar", Spec::Gbnf(g.clone())));
    }
    if let Some(r) = &c.regex {
        found.push(("regex", Spec::Regex(r.clone())));
    }
    if let Some(s) = &c.structured_outputs {
        let mut n = 0;
        if let Some(j) = &s.json {
            let schema = match j {
                Value::String(text) => serde_json::from_str(text).map_err(|e| {
                    ApiError::invalid_param(
                        "structured_outputs",
                        format!("structured_outputs.json is not JSON: {e}"),
                    )
                })?,
                v => v.clone(),
            };
            found.push(("structured_outputs", Spec::Schema(schema)));
            n += 1;
        }
        if let Some(r) = &s.regex {
            found.push(("structured_outputs", Spec::Regex(r.clone())));
            n += 1;
        }
        if let Some(g) = &s.grammar {
            found.push(("structured_outputs", Spec::Gbnf(g.clone())));
            n += 1;
        }
        if let Some(ch) = &s.choice {
            if ch.is_empty() {
                return Err(ApiError::invalid_param(
                    "structured_outputs",
                    "structured_outputs.choice is empty",
                ));
            }
            found.push(("structured_outputs", Spec::Choice(ch.clone())));
            n += 1;
        }
        if n != 1 {
            return Err(ApiError::invalid_param(
                "structured_outputs",
                "structured_outputs needs exactly one of json, regex, grammar, choice",
            ));
        }
    }
    match found.len() {
        0 => Ok(None),
        1 => Ok(found.pop()),
        _ => Err(ApiError::invalid(format!(
            "give one constraint per request; this one has {}",
            found
                .iter()
                .map(|(name, _)| *name)
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

/// The constraint for `spec`: from the cache, or compiled, with the key to keep it under
/// once the request is accepted. A compile error keeps corral's positioned message.
pub(crate) fn constraint(
    cache: &ConstraintCache,
    param: &'static str,
    spec: Spec,
) -> Result<(Arc<Constraint>, Option<String>), ApiError> {
    let invalid = |e: &dyn std::fmt::Display| ApiError::invalid_param(param, e.to_string());
    let opts = |origin: &str| {
        CompileOptions::default()
            .origin(origin)
            .dfa_cache(Some(cache.dfas().clone()))
    };
    let (key, compile): (String, Box<dyn FnOnce() -> Result<_, ApiError>>) = match spec {
        Spec::Schema(schema) => (
            format!("json-schema\0{schema}"),
            Box::new(move || {
                let mut o = JsonSchemaOptions::for_generation()
                    .with_origin("schema")
                    .with_dfa_cache(Some(cache.dfas().clone()));
                o.closed_objects = true;
                corral_schema::compile_json_schema_value(&schema, &o)
                    .map(|c| c.grammar)
                    .map_err(|e| invalid(&e))
            }),
        ),
        Spec::Gbnf(text) => (
            format!("gbnf\0{text}"),
            Box::new(move || {
                corral_grammar::compile_gbnf(&text, &opts("grammar")).map_err(|e| invalid(&e))
            }),
        ),
        Spec::Regex(re) => (
            format!("regex\0{re}"),
            Box::new(move || {
                corral_grammar::compile_regex(&re, &opts("regex")).map_err(|e| invalid(&e))
            }),
        ),
        Spec::HarmonyCall(tools) => (
            format!("harmony-call\0{}", tools.key()),
            Box::new(move || {
                let mut o = JsonSchemaOptions::for_generation()
                    .with_origin("tools")
                    .with_dfa_cache(Some(cache.dfas().clone()));
                o.closed_objects = true;
                let rules = tools.harmony_call(&o).map_err(|e| invalid(&e))?;
                corral_grammar::compile_rules(&rules, &opts("tools")).map_err(|e| invalid(&e))
            }),
        ),
        Spec::Choice(choices) => {
            let re = choices
                .iter()
                .map(|c| regex_syntax::escape(c))
                .collect::<Vec<_>>()
                .join("|");
            (
                format!("regex\0{re}"),
                Box::new(move || {
                    corral_grammar::compile_regex(&re, &opts("choice")).map_err(|e| invalid(&e))
                }),
            )
        }
    };
    match cache.get(&key) {
        Some(c) => Ok((c, None)),
        None => Ok((cache.compile(compile()?), Some(key))),
    }
}
