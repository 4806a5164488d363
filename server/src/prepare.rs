//! A request turned into what the scheduler runs: the prompt's tokens (the chat template
//! applied), the constraint (from the model's constraint cache, compiled on a miss), and a
//! [`Decoder`] with the request's sampling and budget. Everything that can be refused is
//! refused here, before the request takes a place in the queue.

use crate::api::{ChatRequest, Common, CompletionRequest, PromptInput, ResponseFormat};
use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::tools::{self, Tools};
use crate::{Reasoning, ServeConfig};
use corral_engine::{
    Constraint, ConstraintCache, Decoder, GenerateError, GenerateOptions, ModelError,
    SamplingOptions, Scope,
};
use corral_grammar::CompileOptions;
use corral_models::ModelText;
use corral_models::chat::Message;
use corral_schema::JsonSchemaOptions;
use corral_split::Format;
use corral_trie::TokenId;
use serde_json::Value;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Instant;

/// The reasoning block's markers (the hermes family's, as Qwen3 and DeepSeek-R1 write them).
const THINK_OPEN: &str = "<think>";
const THINK_CLOSE: &str = "</think>";

/// A request ready to queue.
pub struct Prepared {
    pub decoder: Decoder,
    pub prompt: Vec<TokenId>,
    /// The output is split into content, reasoning and tool calls in this format (chat
    /// requests with tools); `prefix` is what the prompt already opened (a call's marker).
    pub format: Option<Format>,
    pub prefix: String,
    /// Stop sequences: only for unconstrained output (a constrained one ends where its
    /// grammar does, never cut short by a stop sequence).
    pub stops: Vec<String>,
    pub stream: bool,
    pub include_usage: bool,
    /// Whitespace before the answer's first character is not content (a constrained answer
    /// after reasoning).
    pub trim_answer: bool,
}

/// What the output must match.
#[derive(Debug)]
enum Spec {
    Schema(Value),
    Gbnf(String),
    Regex(String),
    Choice(Vec<String>),
}

pub fn chat(
    text: &ModelText,
    config: &ServeConfig,
    metrics: &Metrics,
    req: ChatRequest,
) -> Result<Prepared, ApiError> {
    if req.messages.is_empty() {
        return Err(ApiError::invalid_param(
            "messages",
            "messages must hold at least one message",
        ));
    }
    let template = text.chat_template().map(|t| t.source());
    let tools = tools::parse(
        req.common.tools.as_ref(),
        req.common.tool_choice.as_ref(),
        template,
    )?;
    let mut messages = Vec::with_capacity(req.messages.len() + 1);
    for (i, m) in req.messages.iter().enumerate() {
        let mut content = match &m.content {
            Some(c) => c
                .text()
                .map_err(|e| ApiError::invalid_param("messages", format!("messages[{i}]: {e}")))?,
            None => String::new(),
        };
        // Earlier calls go back into the text as the model wrote them.
        for call in m.tool_calls.iter().flatten() {
            let f = &call["function"];
            let args = match &f["arguments"] {
                Value::String(s) => s.clone(),
                v => v.to_string(),
            };
            content.push_str(&format!(
                "<tool_call>\n{{\"name\": {}, \"arguments\": {args}}}\n</tool_call>",
                f["name"]
            ));
        }
        messages.push(Message::new(&m.role, &content));
    }
    let describes = Tools::template_describes(template);
    if let Some(t) = tools.as_ref().filter(|_| !describes) {
        let text = t.instructions();
        match messages.first_mut() {
            Some(m) if m.role == "system" => m.content = format!("{}\n\n{text}", m.content),
            _ => messages.insert(0, Message::new("system", &text)),
        }
    }
    let listed = tools.as_ref().filter(|_| describes).map(|t| &t.list);
    let mut prompt = text
        .chat_prompt(&messages, listed)
        .map_err(|e| ApiError::invalid_param("messages", format!("chat template: {e:#}")))?;
    let (mut scope, prefix, mut format, call) = match &tools {
        Some(t) => {
            let (scope, prefix) = t.scope();
            (scope, prefix, Some(t.format.clone()), Some(t.call_schema()))
        }
        None => (Scope::Whole, String::new(), None, None),
    };
    let reasoning = match config.reasoning {
        Reasoning::Auto => template.is_some_and(|t| t.contains(THINK_CLOSE)),
        Reasoning::Think => true,
        Reasoning::Off => false,
    };
    if reasoning {
        if prefix.is_empty() {
            // The output starts inside the reasoning block; the grammar (if any) applies
            // after it, and the splitter sends what comes before as reasoning.
            if !prompt.trim_end().ends_with(THINK_OPEN) {
                prompt.push_str(THINK_OPEN);
                prompt.push('\n');
            }
            let budget = req
                .common
                .reasoning_budget
                .map(|b| usize::try_from(b).unwrap_or(usize::MAX));
            if scope == Scope::Whole {
                scope = Scope::After {
                    trigger: THINK_CLOSE.into(),
                    budget,
                };
            }
            format = Some(format.unwrap_or_else(Format::hermes).prefilled(true));
        } else {
            // A call from the first token: the reasoning block is closed empty first.
            if !prompt.trim_end().ends_with(THINK_OPEN) {
                prompt.push_str(THINK_OPEN);
            }
            prompt.push_str(&format!("\n{THINK_CLOSE}\n\n"));
        }
    }
    prompt.push_str(&prefix);
    let after_reasoning = matches!(scope, Scope::After { .. });
    let mut p = prepare(text, config, metrics, &prompt, req.common, call, scope)?;
    p.trim_answer = after_reasoning && p.decoder.is_constrained();
    p.format = format;
    p.prefix = prefix;
    Ok(p)
}

pub fn completion(
    text: &ModelText,
    config: &ServeConfig,
    metrics: &Metrics,
    req: CompletionRequest,
) -> Result<Prepared, ApiError> {
    if req.common.tools.as_ref().is_some_and(|t| !t.is_empty()) {
        return Err(ApiError::invalid_param(
            "tools",
            "tools are served by /v1/chat/completions",
        ));
    }
    let prompt = match req.prompt {
        PromptInput::One(s) => s,
        PromptInput::Many(mut v) if v.len() == 1 => v.remove(0),
        PromptInput::Many(v) => {
            return Err(ApiError::invalid_param(
                "prompt",
                format!("one prompt per request is served ({} given)", v.len()),
            ));
        }
    };
    prepare(
        text,
        config,
        metrics,
        &prompt,
        req.common,
        None,
        Scope::Whole,
    )
    .map_err(|e| e.for_param("messages", "prompt"))
}

fn prepare(
    text: &ModelText,
    config: &ServeConfig,
    metrics: &Metrics,
    prompt: &str,
    c: Common,
    tool_call: Option<Value>,
    scope: Scope,
) -> Result<Prepared, ApiError> {
    if let Some(n) = c.n.filter(|&n| n != 1) {
        return Err(ApiError::invalid_param(
            "n",
            format!("n is {n}: one choice per request is served"),
        ));
    }
    let requested = match c.max_completion_tokens.or(c.max_tokens) {
        Some(0) => {
            return Err(ApiError::invalid_param(
                "max_tokens",
                "max_tokens must be at least 1",
            ));
        }
        Some(n) => Some(usize::try_from(n).unwrap_or(usize::MAX)),
        None => None,
    };
    let sampling = sampling(&c)?;
    check_prompt_bytes(text, prompt)?;
    let spec = match (spec(&c)?, tool_call) {
        (None, call) => call.map(|c| ("tools", Spec::Schema(c))),
        (Some(s), None) => Some(s),
        (Some((param, _)), Some(_)) => {
            return Err(ApiError::invalid_param(
                param,
                "a request with tools takes no other constraint",
            ));
        }
    };
    let constrained_by = spec.as_ref().map(|(param, _)| *param);
    let constraint = match spec {
        Some((param, spec)) => {
            let t = Instant::now();
            let r = constraint(text.constraints(), param, spec);
            Metrics::add(&metrics.compiles, 1);
            Metrics::add(&metrics.compile_us, t.elapsed().as_micros() as u64);
            Some(r?)
        }
        None => None,
    };
    let ids = text
        .encode(prompt)
        .map_err(|e| ApiError::invalid(format!("{e:#}")))?;
    // Without max_tokens: the default, or what the context leaves after the prompt (a
    // prompt that leaves nothing is refused by the decoder as too long).
    let room = text.max_positions().saturating_sub(ids.len() + 1);
    let max_tokens = requested.unwrap_or(config.default_max_tokens.min(room));
    let options = GenerateOptions {
        max_tokens,
        sampling,
        jump_forward: true,
        overlap_mask: false,
        ignore_eos: c.ignore_eos,
        complete_within_budget: true,
        scope,
    };
    let mut decoder = Decoder::new(
        text.space().clone(),
        constraint,
        &ids,
        text.max_positions(),
        &options,
    )
    .map_err(|e| decoder_error(e, ids.len(), max_tokens))?;
    // The first mask now, on this preparing thread: a grammar that cannot be used (a
    // lexeme whose automaton outgrows its limit once built) is the request's error, a 400
    // naming the field, not a failure of the generation.
    if let Some(param) = constrained_by
        && let Err(e) = decoder.prepare()
    {
        return Err(ApiError::invalid_param(param, format!("{param}: {e}")));
    }
    let stops = match decoder.is_constrained() {
        true => Vec::new(),
        false => c.stop.map(|s| s.into_vec()).unwrap_or_default(),
    };
    Ok(Prepared {
        decoder,
        prompt: ids,
        format: None,
        prefix: String::new(),
        stops,
        stream: c.stream,
        include_usage: c.stream_options.is_some_and(|o| o.include_usage),
        trim_answer: false,
    })
}

/// A prompt of more bytes than the context's positions can hold, each token covering at
/// most the longest token's bytes, is refused before it is tokenized (or its constraint
/// compiled): the cost of a refusal does not grow with the prompt.
fn check_prompt_bytes(text: &ModelText, prompt: &str) -> Result<(), ApiError> {
    let longest = text.longest_token_bytes();
    let max = text.max_positions();
    if prompt.len() > max.saturating_mul(longest) {
        return Err(ApiError {
            code: Some("context_length_exceeded"),
            ..ApiError::invalid_param(
                "messages",
                format!(
                    "the prompt has {} bytes: more than the model's context of {max} positions holds (a token is at most {longest} bytes)",
                    prompt.len()
                ),
            )
        });
    }
    Ok(())
}

/// The API error for a decoder refused over a prompt of `prompt` tokens.
fn decoder_error(e: GenerateError, prompt: usize, max_tokens: usize) -> ApiError {
    match e {
        GenerateError::Model(ModelError::Context {
            what: "the prompt and max_tokens",
            max,
            ..
        }) => ApiError {
            code: Some("context_length_exceeded"),
            ..ApiError::invalid_param(
                "max_tokens",
                format!(
                    "the prompt takes {prompt} tokens and the model's context is {max} positions: \
                     max_tokens may be at most {}, not {max_tokens}",
                    max.saturating_sub(prompt + 1)
                ),
            )
        },
        GenerateError::Model(ModelError::Context { needed, max, .. }) => ApiError {
            code: Some("context_length_exceeded"),
            ..ApiError::invalid_param(
                "messages",
                format!(
                    "the prompt takes {} tokens; the model's context is {max} positions, and the output needs at least one",
                    needed - 1
                ),
            )
        },
        GenerateError::Sampling(s) => ApiError::invalid_param(s.name, s.to_string()),
        e @ GenerateError::EmptyPrompt => ApiError::invalid_param("messages", e.to_string()),
        e @ GenerateError::BudgetTooSmall { .. } => {
            ApiError::invalid_param("max_tokens", e.to_string())
        }
        e => ApiError::internal(e.to_string()),
    }
}

/// Seeds for requests without one: different per request.
static SEEDS: AtomicU64 = AtomicU64::new(0);

fn sampling(c: &Common) -> Result<SamplingOptions, ApiError> {
    let f = |v: Option<f64>| v.map(|x| x as f32);
    let seed = c.seed.unwrap_or_else(|| {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        t ^ SEEDS.fetch_add(0x9E37_79B9_7F4A_7C15, Relaxed)
    });
    Ok(SamplingOptions {
        // OpenAI's defaults: temperature 1, top-p 1.
        temperature: f(c.temperature).unwrap_or(1.0),
        top_k: match c.top_k {
            None | Some(0) => None,
            Some(k) => Some(usize::try_from(k).unwrap_or(usize::MAX)),
        },
        top_p: f(c.top_p).filter(|&p| p != 1.0),
        min_p: f(c.min_p).filter(|&p| p != 0.0),
        repetition_penalty: f(c.repetition_penalty).unwrap_or(1.0),
        seed,
        ..SamplingOptions::default()
    })
}

/// The one structured-output field of the request, if any.
fn spec(c: &Common) -> Result<Option<(&'static str, Spec)>, ApiError> {
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

/// The constraint for `spec`, from the cache or compiled into it. A compile error keeps
/// corral's positioned message.
fn constraint(
    cache: &ConstraintCache,
    param: &'static str,
    spec: Spec,
) -> Result<Arc<Constraint>, ApiError> {
    let invalid = |e: &dyn std::fmt::Display| ApiError::invalid_param(param, e.to_string());
    let opts = |origin: &str| {
        CompileOptions::default()
            .origin(origin)
            .dfa_cache(Some(cache.dfas().clone()))
    };
    match spec {
        Spec::Schema(schema) => {
            let key = format!("json-schema\0{schema}");
            cache.get_or_compile(&key, || {
                let mut o = JsonSchemaOptions::default()
                    .with_origin("schema")
                    .with_dfa_cache(Some(cache.dfas().clone()));
                o.closed_objects = true;
                corral_schema::compile_json_schema_value(&schema, &o)
                    .map(|c| c.grammar)
                    .map_err(|e| invalid(&e))
            })
        }
        Spec::Gbnf(text) => cache.get_or_compile(&format!("gbnf\0{text}"), || {
            corral_grammar::compile_gbnf(&text, &opts("grammar")).map_err(|e| invalid(&e))
        }),
        Spec::Regex(re) => cache.get_or_compile(&format!("regex\0{re}"), || {
            corral_grammar::compile_regex(&re, &opts("regex")).map_err(|e| invalid(&e))
        }),
        Spec::Choice(choices) => {
            let re = choices
                .iter()
                .map(|c| regex_syntax::escape(c))
                .collect::<Vec<_>>()
                .join("|");
            cache.get_or_compile(&format!("regex\0{re}"), || {
                corral_grammar::compile_regex(&re, &opts("choice")).map_err(|e| invalid(&e))
            })
        }
    }
}
