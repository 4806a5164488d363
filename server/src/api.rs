//! OpenAI's request shapes, and the extensions for structured output: llama-server's
//! `grammar`, a `regex`, and vLLM's `structured_outputs`.
//!
//! Every field a request sends is honoured or refused, never ignored: [`check_fields`]
//! refuses a field this server does not know (as OpenAI does), and the fields it knows
//! but does not serve are refused where they are read (`echo`, `suffix`, `best_of` above
//! 1, audio, ...). The only fields accepted without effect are those that do not change
//! what OpenAI generates either: `user`, `metadata`, `store`, `service_tier`,
//! `prompt_cache_key`, `safety_identifier`.

use serde::Deserialize;
use serde_json::Value;

/// `POST /v1/chat/completions`.
#[derive(Debug, Deserialize)]
pub struct ChatRequest {
    /// If given, must be the served model's name (404 otherwise).
    #[serde(default)]
    pub model: Option<String>,
    /// The conversation, rendered by the model's chat template; at least one message.
    pub messages: Vec<ChatMessage>,
    /// `low`, `medium` or `high`: a harmony model's (gpt-oss) system message says it;
    /// refused for other models.
    #[serde(default)]
    pub reasoning_effort: Option<String>,
    /// The fields both endpoints share.
    #[serde(flatten)]
    pub common: Common,
}

/// `POST /v1/completions`.
#[derive(Debug, Deserialize)]
pub struct CompletionRequest {
    /// If given, must be the served model's name (404 otherwise).
    #[serde(default)]
    pub model: Option<String>,
    /// The prompt, continued as it is (no chat template).
    pub prompt: PromptInput,
    /// The fields both endpoints share.
    #[serde(flatten)]
    pub common: Common,
}

/// A completion's prompt: a string, a list holding one string, token ids, or a list
/// holding one list of token ids.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum PromptInput {
    /// A text prompt.
    One(String),
    /// A list of text prompts; only a list of one is served.
    Many(Vec<String>),
    /// Token ids, taken as given (each must be one of the model's).
    Ids(Vec<u64>),
    /// A list of token-id prompts; only a list of one is served.
    ManyIds(Vec<Vec<u64>>),
}

/// The fields both endpoints share.
#[derive(Debug, Default, Deserialize)]
pub struct Common {
    /// Most tokens to generate (at least 1). Absent: [`crate::ServeConfig::default_max_tokens`],
    /// or what the context leaves after the prompt if that is less.
    pub max_tokens: Option<u64>,
    /// Chat's newer name for `max_tokens`; wins when both are given.
    pub max_completion_tokens: Option<u64>,
    /// 0 is greedy. Default 1 (OpenAI's).
    pub temperature: Option<f64>,
    /// Nucleus sampling's probability mass. Default 1 (off).
    pub top_p: Option<f64>,
    /// Only the `k` likeliest tokens are sampled from; absent or 0: off. An extension.
    pub top_k: Option<u64>,
    /// Tokens less likely than this fraction of the likeliest one's probability are dropped.
    /// Default 0 (off). An extension.
    pub min_p: Option<f64>,
    /// Divides the positive (multiplies the negative) logits of the tokens among the last
    /// 64 of prompt and output. Default 1 (off). An extension.
    pub repetition_penalty: Option<f64>,
    /// The sampler's seed; absent: a different one per request.
    pub seed: Option<u64>,
    /// Stop sequences; refused for a constrained output.
    pub stop: Option<Stop>,
    /// Choices per request: only 1 is served.
    pub n: Option<u64>,
    /// Answer as server-sent events; absent or null: one JSON response.
    #[serde(default, deserialize_with = "null_is_false")]
    pub stream: bool,
    /// Streaming options; refused without `stream: true`.
    pub stream_options: Option<StreamOptions>,
    /// `text`, `json_object` or `json_schema`.
    pub response_format: Option<ResponseFormat>,
    /// GBNF text (llama-server's extension).
    pub grammar: Option<String>,
    /// A regular expression the whole output matches.
    pub regex: Option<String>,
    /// vLLM's structured outputs.
    pub structured_outputs: Option<StructuredOutputs>,
    /// OpenAI's function tools (`{"type": "function", "function": {"name", "parameters"}}`);
    /// chat only.
    pub tools: Option<Vec<Value>>,
    /// Reasoning tokens before the end of reasoning is forced (reasoning models).
    pub reasoning_budget: Option<u64>,
    /// The end-of-generation tokens are never sampled: the output runs to `max_tokens`
    /// (or until its grammar is complete). vLLM's and SGLang's extension; for benchmarks.
    #[serde(default, deserialize_with = "null_is_false")]
    pub ignore_eos: bool,
    /// `none`, `auto` (the default), `required`, or `{"type": "function", "function":
    /// {"name": ...}}` naming one of `tools`.
    pub tool_choice: Option<Value>,
    /// A completion's prompt text may name control tokens (`<|im_start|>`), which are then
    /// tokenized as control tokens; by default, names in it are text like the rest. An
    /// extension, for clients that write a chat template themselves.
    #[serde(default, deserialize_with = "null_is_false")]
    pub parse_special: bool,
    /// Chat: `true` or `false`; completions: how many of the most likely tokens to list
    /// with each (0 to 20), which also turns them on.
    pub logprobs: Option<Value>,
    /// Chat: the most likely tokens listed with each token (0 to 20; needs `logprobs`).
    pub top_logprobs: Option<u64>,
    /// Token id (as a string) -> bias added to its logit, in [-100, 100].
    pub logit_bias: Option<std::collections::BTreeMap<String, f64>>,
    /// Subtracted from the logit of each token the output already holds. Default 0.
    pub presence_penalty: Option<f64>,
    /// Subtracted from a token's logit once per time the output already holds it. Default 0.
    pub frequency_penalty: Option<f64>,
    /// Completions: not served (refused when set).
    pub echo: Option<bool>,
    /// Completions: not served (refused unless empty).
    pub suffix: Option<String>,
    /// Completions: only 1 is served.
    pub best_of: Option<u64>,
    /// `false`: at most one tool call, then the output ends.
    pub parallel_tool_calls: Option<bool>,
    /// Only `["text"]` is served.
    pub modalities: Option<Vec<String>>,
    /// How the output is drawn: `{"method": "plain"}` (the default) or `{"method": "smc",
    /// "particles": N, "ess_threshold": F}` (docs/sampling.md). An extension.
    pub sampler: Option<SamplerField>,
}

/// `sampler`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SamplerField {
    /// `plain` or `smc`.
    pub method: String,
    /// SMC's particles: 1 to 64, and at most the server's `max_concurrent` (each particle
    /// takes a place). Default 8, or `max_concurrent` if that is less.
    pub particles: Option<u64>,
    /// SMC resamples when the effective sample size falls below this fraction of the
    /// particles. Default 0.5.
    pub ess_threshold: Option<f64>,
}

/// The fields of each endpoint's request, OpenAI's and this server's extensions: a field
/// outside these is refused.
const COMMON_FIELDS: &[&str] = &[
    "model",
    "max_tokens",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "repetition_penalty",
    "seed",
    "stop",
    "n",
    "stream",
    "stream_options",
    "response_format",
    "grammar",
    "regex",
    "structured_outputs",
    "reasoning_budget",
    "ignore_eos",
    "logprobs",
    "logit_bias",
    "presence_penalty",
    "frequency_penalty",
    "sampler",
    // Chat's, refused by the completions endpoint with a message of their own.
    "tools",
    "tool_choice",
    // Accepted without effect: they change nothing OpenAI generates either.
    "user",
    "metadata",
    "store",
    "service_tier",
    "prompt_cache_key",
    "safety_identifier",
];

const CHAT_FIELDS: &[&str] = &[
    "messages",
    "reasoning_effort",
    "max_completion_tokens",
    "parallel_tool_calls",
    "top_logprobs",
    "modalities",
];

const COMPLETION_FIELDS: &[&str] = &["prompt", "echo", "suffix", "best_of", "parse_special"];

/// Fields OpenAI has that this server does not serve, with why: refused by name.
const NOT_SERVED: &[(&str, &str)] = &[
    ("audio", "audio output is not served"),
    ("prediction", "predicted outputs are not served"),
    ("web_search_options", "web search is not served"),
    ("functions", "`functions` is not served: use `tools`"),
    (
        "function_call",
        "`function_call` is not served: use `tool_choice`",
    ),
    ("verbosity", "verbosity is not served"),
];

/// Refuses a request that sends a field it cannot serve: one of `NOT_SERVED`, or one
/// neither OpenAI's request nor this server's extensions have (`chat`: the chat endpoint's
/// fields, else the completions endpoint's). `Err((field, message))`.
pub fn check_fields(body: &Value, chat: bool) -> Result<(), (String, String)> {
    let Some(fields) = body.as_object() else {
        return Ok(());
    };
    let own = if chat { CHAT_FIELDS } else { COMPLETION_FIELDS };
    for (name, value) in fields {
        if let Some((_, why)) = NOT_SERVED.iter().find(|(n, _)| n == name) {
            if !value.is_null() {
                return Err((name.clone(), why.to_string()));
            }
            continue;
        }
        if !COMMON_FIELDS.contains(&name.as_str()) && !own.contains(&name.as_str()) {
            let endpoint = if chat {
                "chat completions"
            } else {
                "completions"
            };
            return Err((
                name.clone(),
                format!(
                    "unrecognized request argument supplied: {name} (not a field of {endpoint})"
                ),
            ));
        }
    }
    Ok(())
}

/// `stop`: the output ends before the first of these strings (unconstrained output only).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Stop {
    /// One stop sequence.
    One(String),
    /// Several stop sequences.
    Many(Vec<String>),
}

impl Stop {
    /// The stop sequences as a list.
    pub fn into_vec(self) -> Vec<String> {
        match self {
            Stop::One(s) => vec![s],
            Stop::Many(v) => v,
        }
    }
}

/// `stream_options`, allowed only with `stream: true`.
#[derive(Debug, Default, Deserialize)]
pub struct StreamOptions {
    /// The stream's last chunk before `[DONE]` carries the token counts (`usage`).
    #[serde(default)]
    pub include_usage: bool,
}

/// `response_format`.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ResponseFormat {
    /// No constraint.
    Text,
    /// Any JSON object (the schema `{"type": "object"}`).
    JsonObject,
    /// The output follows the given schema.
    JsonSchema {
        /// The schema, with its name.
        json_schema: JsonSchemaFormat,
    },
}

/// `response_format.json_schema`.
#[derive(Debug, Deserialize)]
pub struct JsonSchemaFormat {
    /// The schema's name: a label, type-checked and not otherwise used.
    #[serde(default)]
    #[expect(
        dead_code,
        reason = "a label: deserialized so that a mistyped one is refused"
    )]
    pub name: Option<String>,
    /// The JSON Schema the output follows; a request without it is refused.
    pub schema: Option<Value>,
    /// Type-checked and not otherwise used: the schema is enforced either way (`false`
    /// asks for less than the server gives).
    #[serde(default)]
    #[expect(
        dead_code,
        reason = "the schema is always enforced, which strict: false allows"
    )]
    pub strict: Option<bool>,
}

/// vLLM's `structured_outputs`: exactly one of these.
#[derive(Debug, Default, Deserialize)]
pub struct StructuredOutputs {
    /// A JSON Schema (an object, or a string holding one).
    pub json: Option<Value>,
    /// A regular expression the whole output matches.
    pub regex: Option<String>,
    /// GBNF text.
    pub grammar: Option<String>,
    /// The output is exactly one of these strings (an empty list is refused).
    pub choice: Option<Vec<String>>,
}

/// A chat message. `content` is a string or a list of parts, of which the text parts are
/// read.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChatMessage {
    /// `system`, `developer`, `user`, `assistant` or `tool`; another is refused.
    pub role: String,
    /// Absent or null: empty text (or an assistant's `refusal`, if it has one).
    #[serde(default)]
    pub content: Option<Content>,
    /// An assistant's earlier calls: `[{"id", "type", "function": {"name", "arguments"}}]`.
    #[serde(default)]
    pub tool_calls: Option<Vec<Value>>,
    /// The participant's name, and the call a tool message answers: passed to the chat
    /// template as the message's fields (a template that does not read them drops them, as
    /// the model's own template would).
    #[serde(default)]
    pub name: Option<String>,
    /// A tool message's answer to this call: the `id` of one of the earlier `tool_calls`.
    #[serde(default)]
    pub tool_call_id: Option<String>,
    /// An assistant's earlier refusal or reasoning: text of the message for the template.
    #[serde(default)]
    pub refusal: Option<String>,
    /// An assistant's earlier reasoning, passed to the chat template (a harmony prompt
    /// writes it as the turn's analysis).
    #[serde(default)]
    pub reasoning_content: Option<String>,
}

/// A message's `content`: see [`Content::text`].
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Content {
    /// A plain string.
    Text(String),
    /// A list of parts, joined in order.
    Parts(Vec<ContentPart>),
}

/// One part of a message's `content` list; only `text` parts are served.
#[derive(Debug, Deserialize)]
pub struct ContentPart {
    /// The part's `type`: `text`, or another kind (`image_url`, ...), which is refused.
    #[serde(rename = "type")]
    pub kind: String,
    /// A `text` part's text (a part without it is refused).
    #[serde(default)]
    pub text: Option<String>,
}

impl Content {
    /// The text parts, joined; a part of another kind (an image) is an error naming it.
    pub fn text(&self) -> Result<String, String> {
        match self {
            Content::Text(s) => Ok(s.clone()),
            Content::Parts(parts) => {
                let mut out = String::new();
                for p in parts {
                    match (p.kind.as_str(), &p.text) {
                        ("text", Some(t)) => out.push_str(t),
                        (kind, _) => {
                            return Err(format!(
                                "content parts of type {kind:?} are not supported (text only)"
                            ));
                        }
                    }
                }
                Ok(out)
            }
        }
    }
}

/// `false` for an absent or null boolean (clients send `"stream": null`).
fn null_is_false<'de, D: serde::Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    Ok(<Option<bool> as serde::Deserialize>::deserialize(d)?.unwrap_or(false))
}
