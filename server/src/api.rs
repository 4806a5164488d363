//! OpenAI's request shapes (the fields corral reads; others are ignored, as OpenAI-compatible
//! servers do), and the extensions for structured output: llama-server's `grammar`, a
//! `regex`, and vLLM's `structured_outputs`.

use serde::Deserialize;
use serde_json::Value;

/// `POST /v1/chat/completions`.
#[derive(Debug, Deserialize)]
pub struct ChatRequest {
    #[serde(default)]
    pub model: Option<String>,
    pub messages: Vec<ChatMessage>,
    #[serde(flatten)]
    pub common: Common,
}

/// `POST /v1/completions`.
#[derive(Debug, Deserialize)]
pub struct CompletionRequest {
    #[serde(default)]
    pub model: Option<String>,
    pub prompt: PromptInput,
    #[serde(flatten)]
    pub common: Common,
}

/// A completion's prompt: a string, or a list holding one string.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum PromptInput {
    One(String),
    Many(Vec<String>),
}

/// The fields both endpoints share.
#[derive(Debug, Default, Deserialize)]
pub struct Common {
    pub max_tokens: Option<u64>,
    pub max_completion_tokens: Option<u64>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<u64>,
    pub min_p: Option<f64>,
    pub repetition_penalty: Option<f64>,
    pub seed: Option<u64>,
    pub stop: Option<Stop>,
    pub n: Option<u64>,
    #[serde(default, deserialize_with = "null_is_false")]
    pub stream: bool,
    pub stream_options: Option<StreamOptions>,
    pub response_format: Option<ResponseFormat>,
    /// GBNF text (llama-server's extension).
    pub grammar: Option<String>,
    /// A regular expression the whole output matches.
    pub regex: Option<String>,
    /// vLLM's structured outputs.
    pub structured_outputs: Option<StructuredOutputs>,
    pub tools: Option<Vec<Value>>,
    /// Reasoning tokens before the end of reasoning is forced (reasoning models).
    pub reasoning_budget: Option<u64>,
    /// The end-of-generation tokens are never sampled: the output runs to `max_tokens`
    /// (or until its grammar is complete). vLLM's and SGLang's extension; for benchmarks.
    #[serde(default, deserialize_with = "null_is_false")]
    pub ignore_eos: bool,
    pub tool_choice: Option<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Stop {
    One(String),
    Many(Vec<String>),
}

impl Stop {
    pub fn into_vec(self) -> Vec<String> {
        match self {
            Stop::One(s) => vec![s],
            Stop::Many(v) => v,
        }
    }
}

#[derive(Debug, Default, Deserialize)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: bool,
}

/// `response_format`.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ResponseFormat {
    Text,
    JsonObject,
    JsonSchema { json_schema: JsonSchemaFormat },
}

#[derive(Debug, Deserialize)]
pub struct JsonSchemaFormat {
    #[serde(default)]
    pub name: Option<String>,
    pub schema: Option<Value>,
    #[serde(default)]
    pub strict: Option<bool>,
}

/// vLLM's `structured_outputs`: exactly one of these.
#[derive(Debug, Default, Deserialize)]
pub struct StructuredOutputs {
    /// A JSON Schema (an object, or a string holding one).
    pub json: Option<Value>,
    pub regex: Option<String>,
    pub grammar: Option<String>,
    pub choice: Option<Vec<String>>,
}

/// A chat message. `content` is a string or a list of parts, of which the text parts are
/// read.
#[derive(Debug, Deserialize)]
pub struct ChatMessage {
    pub role: String,
    #[serde(default)]
    pub content: Option<Content>,
    /// An assistant's earlier calls: `[{"id", "type", "function": {"name", "arguments"}}]`.
    #[serde(default)]
    pub tool_calls: Option<Vec<Value>>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Parts(Vec<ContentPart>),
}

#[derive(Debug, Deserialize)]
pub struct ContentPart {
    #[serde(rename = "type")]
    pub kind: String,
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
