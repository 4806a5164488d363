//! The generic splitter: reasoning markers (`<think>`/`</think>` by default) and tool-call
//! envelopes, all described by data: a [`Format`] is a list of [`Region`]s, each an opening
//! marker, a closing marker (or "until the JSON value is complete", or "until the end"),
//! and what the region holds. Built-in formats: [`Format::hermes`], [`Format::llama3`],
//! [`Format::mistral`], [`Format::qwen3_coder`].
//!
//! The parser (`parser.rs`) has a state per place in the stream, one function each: answer
//! text (markers of every region and code fences are watched), a code fence (only the
//! closing fence is watched: tags there are content), a reasoning region (only its closing
//! marker), a tool-call region (characters are read one by one: a closing marker inside a
//! JSON string does not close the call).
//! An unclosed reasoning region at the end is reasoning; a template that pre-fills the
//! opening tag starts the stream inside reasoning.

mod parser;

pub use parser::{DEFAULT_MAX_CALL_BYTES, GenericParser};

/// How a tool call's body is written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BodyKind {
    /// One JSON object: the function name under `name_key`, the arguments under the first
    /// of `args_keys` present.
    JsonObject {
        /// The key of the function name (a JSON string).
        name_key: String,
        /// The keys that may hold the arguments, in order of preference; with none of them
        /// present the arguments are `{}`, and a JSON string there is taken as their text.
        args_keys: Vec<String>,
    },
    /// A JSON array of such objects (several calls).
    JsonArray {
        /// The key of each call's function name (a JSON string).
        name_key: String,
        /// The keys that may hold each call's arguments, in order of preference.
        args_keys: Vec<String>,
    },
    /// `<function=NAME><parameter=KEY>VALUE</parameter>...</function>`, any number.
    QwenXml,
}

impl BodyKind {
    fn is_json(&self) -> bool {
        !matches!(self, BodyKind::QwenXml)
    }
}

/// What a region holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RegionKind {
    /// Reasoning text, reported apart from the answer.
    Reasoning,
    /// Tool calls, written as the body kind says.
    ToolCall(BodyKind),
}

/// A marked region of the stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Region {
    /// The marker that opens the region.
    pub open: String,
    /// `None`: a JSON body ends when its value is complete; any other ends with the stream.
    pub close: Option<String>,
    /// What the region holds.
    pub kind: RegionKind,
}

/// A format: its regions, and whether a bare JSON tool call may open the answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Format {
    /// The format's name (`hermes`, `llama3`, ...: what [`Format::by_name`] takes).
    pub name: String,
    /// The regions whose opening markers are watched in answer text.
    pub regions: Vec<Region>,
    /// A JSON object at the start of the answer (after whitespace) is a tool call of this
    /// shape if it decodes as one, content otherwise (llama3's bare JSON calls).
    pub bare_json: Option<BodyKind>,
    /// Triple backticks open and close code blocks, whose tags are content.
    pub code_fences: bool,
    /// The chat template already wrote the opening reasoning marker: the stream starts
    /// inside the first reasoning region.
    pub think_prefilled: bool,
}

fn json_body(name: &str, args: &[&str]) -> (String, Vec<String>) {
    (
        name.to_string(),
        args.iter().map(|s| s.to_string()).collect(),
    )
}

impl Format {
    fn think() -> Region {
        Region {
            open: "<think>".into(),
            close: Some("</think>".into()),
            kind: RegionKind::Reasoning,
        }
    }

    /// `<think>` reasoning and `<tool_call>{"name": ..., "arguments": ...}</tool_call>`
    /// (Hermes, Qwen2.5/Qwen3); several calls per response.
    pub fn hermes() -> Format {
        let (name_key, args_keys) = json_body("name", &["arguments", "parameters"]);
        Format {
            name: "hermes".into(),
            regions: vec![
                Format::think(),
                Region {
                    open: "<tool_call>".into(),
                    close: Some("</tool_call>".into()),
                    kind: RegionKind::ToolCall(BodyKind::JsonObject {
                        name_key,
                        args_keys,
                    }),
                },
            ],
            bare_json: None,
            code_fences: true,
            think_prefilled: false,
        }
    }

    /// Llama 3.x: `<|python_tag|>{"name": ..., "parameters": ...}`, or a bare JSON object
    /// with those keys as the whole answer.
    pub fn llama3() -> Format {
        let (name_key, args_keys) = json_body("name", &["parameters", "arguments"]);
        let body = BodyKind::JsonObject {
            name_key,
            args_keys,
        };
        Format {
            name: "llama3".into(),
            regions: vec![
                Format::think(),
                Region {
                    open: "<|python_tag|>".into(),
                    close: None,
                    kind: RegionKind::ToolCall(body.clone()),
                },
            ],
            bare_json: Some(body),
            code_fences: true,
            think_prefilled: false,
        }
    }

    /// Mistral: `[TOOL_CALLS][{"name": ..., "arguments": ...}, ...]`.
    pub fn mistral() -> Format {
        let (name_key, args_keys) = json_body("name", &["arguments", "parameters"]);
        Format {
            name: "mistral".into(),
            regions: vec![
                Format::think(),
                Region {
                    open: "[TOOL_CALLS]".into(),
                    close: None,
                    kind: RegionKind::ToolCall(BodyKind::JsonArray {
                        name_key,
                        args_keys,
                    }),
                },
            ],
            bare_json: None,
            code_fences: true,
            think_prefilled: false,
        }
    }

    /// Qwen3-Coder: `<tool_call><function=NAME><parameter=KEY>VALUE</parameter></function></tool_call>`.
    pub fn qwen3_coder() -> Format {
        Format {
            name: "qwen3-coder".into(),
            regions: vec![
                Format::think(),
                Region {
                    open: "<tool_call>".into(),
                    close: Some("</tool_call>".into()),
                    kind: RegionKind::ToolCall(BodyKind::QwenXml),
                },
            ],
            bare_json: None,
            code_fences: true,
            think_prefilled: false,
        }
    }

    /// A built-in format by name.
    pub fn by_name(name: &str) -> Option<Format> {
        match name {
            "hermes" => Some(Format::hermes()),
            "llama3" => Some(Format::llama3()),
            "mistral" => Some(Format::mistral()),
            "qwen3-coder" => Some(Format::qwen3_coder()),
            _ => None,
        }
    }

    /// Custom reasoning markers instead of `<think>`/`</think>`.
    pub fn with_reasoning_markers(mut self, open: &str, close: &str) -> Format {
        for r in &mut self.regions {
            if r.kind == RegionKind::Reasoning {
                r.open = open.into();
                r.close = Some(close.into());
            }
        }
        self
    }

    /// Sets [`Format::think_prefilled`]: whether the stream starts inside reasoning.
    pub fn prefilled(mut self, yes: bool) -> Format {
        self.think_prefilled = yes;
        self
    }
}
