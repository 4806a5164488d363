//! The tool-call codec: the one place where tool calls are decoded.
//!
//! 1. **One ordered gate.** Native tool calls (already structured by the runtime) first;
//!    else `<tool_call>...</tool_call>` envelopes in the text; else the whole text as bare
//!    JSON, only if it parses strictly *and* validates against a tool's schema. When a
//!    response holds several of these, exactly one path wins, and a `tracing` event says
//!    which and what was ignored.
//! 2. **Payload-only normalisation.** Bidirectional control characters are stripped (and
//!    counted) and the payload is NFKC-normalised; the user's text is never touched.
//! 3. **Strict parse first, repair only on failure.** The repair is deterministic:
//!    single quotes to double, barewords quoted (any script: Hebrew keys and values too),
//!    trailing commas dropped, unclosed strings, brackets and braces closed.
//! 4. **Validation** of the arguments against the tool's JSON Schema (`jsonschema`).
//! 5. **A time budget** for the whole decode. A payload that cannot be decoded in time, or
//!    at all, comes back as raw text with the reason: the caller's stream never waits on it.

use std::time::{Duration, Instant};
use unicode_normalization::UnicodeNormalization;

/// Why the codec could not be built, or a payload could not be decoded into a call.
#[derive(Debug, thiserror::Error)]
pub enum ToolCallError {
    /// The tool list is not an OpenAI-style list of tools.
    #[error("tools: {0}")]
    BadToolList(&'static str),
    /// A tool's parameter schema does not compile.
    #[error("tool {tool}: bad schema: {source}")]
    BadSchema {
        /// The tool's name.
        tool: String,
        /// The schema compiler's error.
        #[source]
        source: Box<jsonschema::ValidationError<'static>>,
    },
    /// The payload is not JSON, and the repair step could not make it JSON either.
    #[error("not JSON ({strict}), and repair failed: {repair}")]
    NotJson {
        /// Why the strict parse failed.
        #[source]
        strict: serde_json::Error,
        /// Why the repaired text did not parse either.
        repair: RepairError,
    },
    /// A payload without a known name is not an object with `name` and `arguments`.
    #[error("no \"name\" and \"arguments\" in the payload")]
    NoCallParts,
    /// The payload names a tool the codec was not given.
    #[error("unknown tool {0:?}")]
    UnknownTool(String),
    /// The arguments break the tool's schema: one message per violation, with its path.
    #[error("arguments of {tool} do not match its schema: {}", violations.join("; "))]
    InvalidArguments {
        /// The tool's name.
        tool: String,
        /// One message per violation, led by the offending value's path in the arguments.
        violations: Vec<String>,
    },
    /// The codec's time budget ran out before every payload was decoded.
    #[error("time budget of {0:?} exceeded")]
    OverBudget(Duration),
}

/// The repaired text still does not parse.
#[derive(Debug, thiserror::Error)]
#[error("{source} (after repair: {repaired})")]
pub struct RepairError {
    /// The parse error of the repaired text.
    #[source]
    pub source: serde_json::Error,
    /// What the repair made of the input.
    pub repaired: String,
}

/// A tool the model may call.
#[derive(Clone, Debug)]
pub struct ToolSpec {
    /// The name a call gives.
    pub name: String,
    /// JSON Schema of the arguments.
    pub parameters: serde_json::Value,
}

/// A call the runtime already produced in structured form.
#[derive(Clone, Debug, PartialEq)]
pub struct NativeCall {
    /// The tool's name.
    pub name: String,
    /// The arguments as JSON text (repaired if it does not parse).
    pub arguments: String,
}

/// Which decoding path produced the calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallPath {
    /// Calls the runtime gave in structured form ([`NativeCall`]).
    Native,
    /// `<tool_call>...</tool_call>` envelopes in the text.
    Envelope,
    /// The whole text as one JSON call object, parsed strictly (no repair) and validated.
    BareJson,
}

impl CallPath {
    /// The path's name: `native`, `envelope` or `bare_json`.
    pub fn as_str(&self) -> &'static str {
        match self {
            CallPath::Native => "native",
            CallPath::Envelope => "envelope",
            CallPath::BareJson => "bare_json",
        }
    }
}

/// A decoded call.
#[derive(Clone, Debug, PartialEq)]
pub struct DecodedCall {
    /// The tool's name.
    pub name: String,
    /// The arguments, parsed (and validated when the codec knows tools).
    pub arguments: serde_json::Value,
    /// The payload needed the repair step.
    pub repaired: bool,
    /// Bidirectional control characters removed from the payload.
    pub bidi_removed: usize,
}

/// What the codec made of a response.
#[derive(Clone, Debug, PartialEq)]
pub enum CodecOutcome {
    /// No tool call in the response.
    None,
    /// Every call decoded, by one path.
    Calls {
        /// The path that won the gate.
        path: CallPath,
        /// The calls, in the order they came.
        calls: Vec<DecodedCall>,
    },
    /// A tool call that could not be decoded: its raw text and why.
    Raw {
        /// The payload that failed (the whole response when the time budget ran out).
        text: String,
        /// The error, as text.
        reason: String,
    },
}

/// The codec. See the module docs.
pub struct ToolCallCodec {
    tools: Vec<(ToolSpec, jsonschema::Validator)>,
    budget: Duration,
}

impl std::fmt::Debug for ToolCallCodec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolCallCodec")
            .field(
                "tools",
                &self.tools.iter().map(|t| &t.0.name).collect::<Vec<_>>(),
            )
            .field("budget", &self.budget)
            .finish()
    }
}

/// Bidirectional control characters (marks, embeddings, overrides, isolates).
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{200E}' | '\u{200F}' | '\u{061C}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

/// Strips bidi controls (returning how many) and NFKC-normalises.
pub fn normalize_payload(s: &str) -> (String, usize) {
    let mut removed = 0;
    let stripped: String = s
        .chars()
        .filter(|&c| {
            let bidi = is_bidi_control(c);
            removed += usize::from(bidi);
            !bidi
        })
        .collect();
    (stripped.nfkc().collect(), removed)
}

impl ToolCallCodec {
    /// A codec for `tools`; a tool whose schema does not compile is an error naming it.
    pub fn new(tools: Vec<ToolSpec>, budget: Duration) -> Result<ToolCallCodec, ToolCallError> {
        let tools = tools
            .into_iter()
            .map(|t| match jsonschema::validator_for(&t.parameters) {
                Ok(v) => Ok((t, v)),
                Err(e) => Err(ToolCallError::BadSchema {
                    tool: t.name,
                    source: Box::new(e),
                }),
            })
            .collect::<Result<_, _>>()?;
        Ok(ToolCallCodec { tools, budget })
    }

    /// Tools from an OpenAI-style list: `[{"type": "function", "function": {"name",
    /// "parameters"}}]` or `[{"name", "parameters"}]`.
    pub fn from_json(
        tools: &serde_json::Value,
        budget: Duration,
    ) -> Result<ToolCallCodec, ToolCallError> {
        let list = tools
            .as_array()
            .ok_or(ToolCallError::BadToolList("expected a JSON array"))?;
        let specs = list
            .iter()
            .map(|t| {
                let f = t.get("function").unwrap_or(t);
                let name = f
                    .get("name")
                    .and_then(|n| n.as_str())
                    .ok_or(ToolCallError::BadToolList("a tool without a name"))?;
                let parameters = f
                    .get("parameters")
                    .cloned()
                    .unwrap_or(serde_json::json!({"type": "object"}));
                Ok(ToolSpec {
                    name: name.to_string(),
                    parameters,
                })
            })
            .collect::<Result<_, ToolCallError>>()?;
        ToolCallCodec::new(specs, budget)
    }

    /// The tools it knows, in the order given.
    pub fn tools(&self) -> impl Iterator<Item = &ToolSpec> {
        self.tools.iter().map(|t| &t.0)
    }

    /// Decodes a response through the ordered gate.
    pub fn decode(&self, native: &[NativeCall], text: &str) -> CodecOutcome {
        let start = Instant::now();
        let envelopes = envelopes(text);
        let bare = text.trim();
        let bare_candidate = bare.starts_with('{') && bare.ends_with('}');
        if !native.is_empty() {
            if !envelopes.is_empty() || bare_candidate {
                tracing::info!(
                    path = "native",
                    ignored = if envelopes.is_empty() {
                        "bare_json"
                    } else {
                        "envelope"
                    },
                    "tool calls in several formats; native wins"
                );
            }
            return self.finish(
                start,
                CallPath::Native,
                native
                    .iter()
                    .map(|c| (Some(c.name.clone()), c.arguments.clone()))
                    .collect(),
                text,
            );
        }
        if !envelopes.is_empty() {
            if bare_candidate && envelopes.len() == 1 && envelopes[0].len() + 24 < bare.len() {
                tracing::info!(
                    path = "envelope",
                    ignored = "bare_json",
                    "tool calls in several formats; the envelope wins"
                );
            }
            return self.finish(
                start,
                CallPath::Envelope,
                envelopes
                    .into_iter()
                    .map(|p| (None, p.to_string()))
                    .collect(),
                text,
            );
        }
        if bare_candidate {
            // Bare JSON only if it parses strictly and validates: no repair here, or any
            // answer that happens to be JSON would become a call.
            let (norm, bidi) = normalize_payload(bare);
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(&norm)
                && let Some((name, args)) = call_parts(&v)
                && self.validate(&name, &args).is_ok()
            {
                return CodecOutcome::Calls {
                    path: CallPath::BareJson,
                    calls: vec![DecodedCall {
                        name,
                        arguments: args,
                        repaired: false,
                        bidi_removed: bidi,
                    }],
                };
            }
        }
        CodecOutcome::None
    }

    /// Decodes payloads (`(known name, payload)`): normalise, parse or repair, validate.
    fn finish(
        &self,
        start: Instant,
        path: CallPath,
        payloads: Vec<(Option<String>, String)>,
        text: &str,
    ) -> CodecOutcome {
        let mut calls = Vec::new();
        for (name, payload) in payloads {
            if start.elapsed() > self.budget {
                return CodecOutcome::Raw {
                    text: text.to_string(),
                    reason: ToolCallError::OverBudget(self.budget).to_string(),
                };
            }
            match self.decode_payload(name, &payload) {
                Ok(c) => calls.push(c),
                Err(e) => {
                    return CodecOutcome::Raw {
                        text: payload,
                        reason: e.to_string(),
                    };
                }
            }
        }
        CodecOutcome::Calls { path, calls }
    }

    /// One payload: with a known name (native) it is the arguments; otherwise an object
    /// `{"name", "arguments"}`.
    pub fn decode_payload(
        &self,
        name: Option<String>,
        payload: &str,
    ) -> Result<DecodedCall, ToolCallError> {
        let (norm, bidi) = normalize_payload(payload);
        let (value, repaired) = match serde_json::from_str::<serde_json::Value>(&norm) {
            Ok(v) => (v, false),
            Err(strict) => match repair_json(&norm) {
                Ok(v) => (v, true),
                Err(repair) => return Err(ToolCallError::NotJson { strict, repair }),
            },
        };
        let (name, args) = match name {
            Some(n) => (n, value),
            None => call_parts(&value).ok_or(ToolCallError::NoCallParts)?,
        };
        self.validate(&name, &args)?;
        Ok(DecodedCall {
            name,
            arguments: args,
            repaired,
            bidi_removed: bidi,
        })
    }

    /// Validates arguments against the named tool's schema (any name passes when no tools
    /// were given).
    pub fn validate(&self, name: &str, args: &serde_json::Value) -> Result<(), ToolCallError> {
        if self.tools.is_empty() {
            return Ok(());
        }
        let (_, v) = self
            .tools
            .iter()
            .find(|t| t.0.name == name)
            .ok_or_else(|| ToolCallError::UnknownTool(name.to_string()))?;
        let violations: Vec<String> = v
            .iter_errors(args)
            .map(|e| format!("{}: {e}", e.instance_path()))
            .collect();
        if violations.is_empty() {
            Ok(())
        } else {
            Err(ToolCallError::InvalidArguments {
                tool: name.to_string(),
                violations,
            })
        }
    }
}

/// The payloads of `<tool_call>...</tool_call>` envelopes (an unclosed last one runs to the
/// end of the text).
fn envelopes(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(s) = rest.find("<tool_call>") {
        let body = &rest[s + "<tool_call>".len()..];
        match body.find("</tool_call>") {
            Some(e) => {
                out.push(body[..e].trim());
                rest = &body[e + "</tool_call>".len()..];
            }
            None => {
                out.push(body.trim());
                break;
            }
        }
    }
    out
}

/// `{"name": ..., "arguments"|"parameters": ...}` -> (name, arguments); arguments given as
/// a JSON string are parsed.
fn call_parts(v: &serde_json::Value) -> Option<(String, serde_json::Value)> {
    let name = v.get("name")?.as_str()?.to_string();
    let args = v
        .get("arguments")
        .or_else(|| v.get("parameters"))
        .cloned()
        .unwrap_or(serde_json::json!({}));
    let args = match args {
        serde_json::Value::String(s) => {
            serde_json::from_str(&s).unwrap_or(serde_json::Value::String(s))
        }
        a => a,
    };
    Some((name, args))
}

/// The string in either quote starting at `chars[i]`, unescaped, and the index past its
/// closing quote; an unclosed string runs to the end.
fn quoted(chars: &[char], mut i: usize) -> (String, usize) {
    let q = chars[i];
    let mut text = String::new();
    i += 1;
    while i < chars.len() && chars[i] != q {
        if chars[i] == '\\' && i + 1 < chars.len() {
            match chars[i + 1] {
                'n' => text.push('\n'),
                't' => text.push('\t'),
                'r' => text.push('\r'),
                'b' => text.push('\u{8}'),
                'f' => text.push('\u{c}'),
                'u' if i + 5 < chars.len() => {
                    let hex: String = chars[i + 2..i + 6].iter().collect();
                    match u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32) {
                        Some(ch) => {
                            text.push(ch);
                            i += 4;
                        }
                        None => text.push('u'),
                    }
                }
                other => text.push(other),
            }
            i += 2;
            continue;
        }
        text.push(chars[i]);
        i += 1;
    }
    (text, i + 1)
}

/// A bareword or number as JSON: literals and numbers as they are, anything else quoted;
/// the whitespace that followed it kept.
fn bareword(chars: &[char], out: &mut String) {
    let word: String = chars.iter().collect::<String>().trim().to_string();
    let literal = matches!(word.as_str(), "true" | "false" | "null")
        || serde_json::from_str::<serde_json::Number>(&word).is_ok();
    if literal {
        out.push_str(&word);
    } else {
        out.push_str(&serde_json::Value::String(word).to_string());
    }
    let trailing: String = chars
        .iter()
        .rev()
        .take_while(|c| c.is_whitespace())
        .collect();
    out.push_str(&trailing.chars().rev().collect::<String>());
}

/// Deterministic best-effort JSON repair. See the module docs.
pub fn repair_json(s: &str) -> Result<serde_json::Value, RepairError> {
    let chars: Vec<char> = s.trim().chars().collect();
    let mut out = String::with_capacity(s.len() + 16);
    let mut stack: Vec<char> = Vec::new();
    let mut i = 0;
    let push_str = |out: &mut String, text: &str| {
        out.push_str(&serde_json::Value::String(text.to_string()).to_string());
    };
    let drop_trailing_comma = |out: &mut String| {
        let trimmed = out.trim_end().len();
        if out[..trimmed].ends_with(',') {
            out.truncate(trimmed - 1);
        }
    };
    while i < chars.len() {
        let c = chars[i];
        match c {
            '"' | '\'' => {
                let (text, next) = quoted(&chars, i);
                i = next;
                push_str(&mut out, &text);
            }
            '{' | '[' => {
                stack.push(if c == '{' { '}' } else { ']' });
                out.push(c);
                i += 1;
            }
            '}' | ']' => {
                drop_trailing_comma(&mut out);
                if let Some(want) = stack.pop() {
                    out.push(want);
                }
                i += 1;
            }
            ',' | ':' => {
                out.push(c);
                i += 1;
            }
            c if c.is_whitespace() => {
                out.push(c);
                i += 1;
            }
            _ => {
                // A bareword or number: up to the next delimiter.
                let start = i;
                while i < chars.len()
                    && !matches!(
                        chars[i],
                        ',' | ':' | '}' | ']' | '{' | '[' | '"' | '\'' | '\n'
                    )
                {
                    i += 1;
                }
                bareword(&chars[start..i], &mut out);
            }
        }
    }
    drop_trailing_comma(&mut out);
    while let Some(close) = stack.pop() {
        drop_trailing_comma(&mut out);
        out.push(close);
    }
    serde_json::from_str(&out).map_err(|source| RepairError {
        source,
        repaired: out,
    })
}

#[cfg(test)]
mod tests;
