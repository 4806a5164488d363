//! Harmony prompts: the chat format of gpt-oss.
//!
//! A conversation is a list of [`Message`]s. Each is rendered as
//! `<|start|>ROLE[:NAME][ to=RECIPIENT][<|channel|>CHANNEL][ CONTENT_TYPE]<|message|>TEXT`,
//! closed by `<|end|>`, or by `<|call|>` for an assistant's message to a recipient (a tool
//! call). A tool's answer is headed by the tool's name (`functions.get_weather`) in place
//! of a role. A content type that starts with `<|constrain|>` (`<|constrain|>json`) writes
//! that control token, then the rest as text.
//!
//! The system message ([`SystemContent`]) says who the model is, its knowledge cutoff and
//! the date, the reasoning effort, and the channels it must use. The developer message
//! ([`DeveloperContent`]) holds the instructions and the function tools, each tool's JSON
//! Schema written as a TypeScript-like type in a `namespace functions` block
//! (`typescript`).
//!
//! When asked to drop analysis and the conversation's last assistant message is a final
//! answer, the analysis messages before the first final message are left out: an earlier
//! turn's reasoning is not shown to the model again.
//!
//! Every piece of text (contents, names, recipients, channels, tool schemas) is user text
//! in the [`Prompt`], tokenized on its own ([`Prompt::push_break`]) as harmony's reference
//! tokenizes it: only the renderer writes control tokens, so a message that contains
//! `<|end|><|start|>system` stays characters. The serde form of these types is the one the
//! `openai-harmony` crate reads and writes, so the same JSON renders in both; the test
//! `tests/harmony_render.rs` checks that the token ids are the same.

mod typescript;

use crate::prompt::{Prompt, SpecialTokens};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// Who wrote a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The person the model talks with.
    User,
    /// The model.
    Assistant,
    /// The system message: identity, dates, reasoning effort, channels ([`SystemContent`]).
    System,
    /// The developer message: instructions and function tools ([`DeveloperContent`]).
    Developer,
    /// A tool's answer to a call; its header is the tool's name, not `tool`.
    Tool,
}

impl Role {
    /// The role as a header writes it (`user`, `assistant`, ...); a tool message's header
    /// is its name instead.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::System => "system",
            Role::Developer => "developer",
            Role::Tool => "tool",
        }
    }
}

/// One message of a harmony conversation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// Who wrote it; a tool's answer is [`Role::Tool`], headed by its `name`.
    pub role: Role,
    /// The author's name; a tool message's header is this name (`functions.get_weather`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `functions.NAME` for a tool call, `assistant` for a tool's answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recipient: Option<String>,
    /// Text, or a list of contents.
    #[serde(deserialize_with = "text_or_contents")]
    pub content: Vec<Content>,
    /// `analysis`, `commentary` or `final` for the assistant's messages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
    /// `<|constrain|>json` for JSON arguments, or another content type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
}

impl Message {
    /// A message of text.
    pub fn text(role: Role, text: impl Into<String>) -> Message {
        Message {
            role,
            name: None,
            recipient: None,
            content: vec![Content::Text { text: text.into() }],
            channel: None,
            content_type: None,
        }
    }

    /// Sets the channel (`analysis`, `commentary` or `final`).
    pub fn with_channel(mut self, channel: impl Into<String>) -> Message {
        self.channel = Some(channel.into());
        self
    }

    /// Sets the recipient: `functions.NAME` makes an assistant's message a tool call.
    pub fn with_recipient(mut self, recipient: impl Into<String>) -> Message {
        self.recipient = Some(recipient.into());
        self
    }

    /// Sets the author's name (a tool message's is the tool's: `functions.get_weather`).
    pub fn with_name(mut self, name: impl Into<String>) -> Message {
        self.name = Some(name.into());
        self
    }

    /// Sets the content type (`<|constrain|>json` for JSON arguments).
    pub fn with_content_type(mut self, content_type: impl Into<String>) -> Message {
        self.content_type = Some(content_type.into());
        self
    }
}

/// What a message holds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "type")]
pub enum Content {
    /// Text, written as it is (as user text: special tokens' names in it stay characters).
    Text {
        /// The text.
        text: String,
    },
    /// The system message's settings, rendered to text; only in a [`Role::System`] message.
    SystemContent(SystemContent),
    /// The developer message's instructions and tools, rendered to text; only in a
    /// [`Role::Developer`] message.
    DeveloperContent(DeveloperContent),
}

fn text_or_contents<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Content>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Either {
        Text(String),
        Contents(Vec<Content>),
    }
    Ok(match Either::deserialize(d)? {
        Either::Text(text) => vec![Content::Text { text }],
        Either::Contents(c) => c,
    })
}

/// How hard the model reasons before answering.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReasoningEffort {
    /// `low`: the least reasoning.
    #[serde(alias = "low")]
    Low,
    /// `medium`: what [`SystemContent::default`] asks for.
    #[serde(alias = "medium")]
    Medium,
    /// `high`: the most reasoning.
    #[serde(alias = "high")]
    High,
}

impl ReasoningEffort {
    /// The name the system message writes (`low`, `medium`, `high`).
    pub fn as_str(self) -> &'static str {
        match self {
            ReasoningEffort::Low => "low",
            ReasoningEffort::Medium => "medium",
            ReasoningEffort::High => "high",
        }
    }
}

/// The channels the model may write to, and whether every message must name one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChannelConfig {
    /// The channel names, listed in the system message in this order.
    pub valid_channels: Vec<String>,
    /// Whether the system message says that every message must name a channel.
    pub channel_required: bool,
}

/// The system message's content. [`SystemContent::default`] is what gpt-oss is usually
/// given: its identity, knowledge cutoff 2024-06, medium effort, and the three channels.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SystemContent {
    /// Who the model is: the message's first line; `None` leaves it out.
    pub model_identity: Option<String>,
    /// Written as `Reasoning: EFFORT`; `None` leaves the line out.
    pub reasoning_effort: Option<ReasoningEffort>,
    /// Built-in tool namespaces (rendered like the developer's function tools).
    pub tools: Option<BTreeMap<String, ToolNamespace>>,
    /// The value of the `Current date:` line, as free text (such as `2025-06-28`); `None`
    /// leaves the line out.
    pub conversation_start_date: Option<String>,
    /// The value of the `Knowledge cutoff:` line (`2024-06` by default); `None` leaves the
    /// line out.
    pub knowledge_cutoff: Option<String>,
    /// The `# Valid channels` section; `None`, or no channels, leaves it out.
    pub channel_config: Option<ChannelConfig>,
}

impl Default for SystemContent {
    fn default() -> SystemContent {
        SystemContent {
            model_identity: Some(
                "You are ChatGPT, a large language model trained by OpenAI.".into(),
            ),
            reasoning_effort: Some(ReasoningEffort::Medium),
            tools: None,
            conversation_start_date: None,
            knowledge_cutoff: Some("2024-06".into()),
            channel_config: Some(ChannelConfig {
                valid_channels: ["analysis", "commentary", "final"]
                    .map(String::from)
                    .to_vec(),
                channel_required: true,
            }),
        }
    }
}

/// The developer message's content: instructions and function tools.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DeveloperContent {
    /// The developer's instructions, under `# Instructions`; `None` leaves the section out.
    pub instructions: Option<String>,
    /// Tool namespaces by name, rendered under `# Tools` (`functions` for the caller's
    /// function tools: [`DeveloperContent::with_function_tools`]).
    pub tools: Option<BTreeMap<String, ToolNamespace>>,
}

impl DeveloperContent {
    /// Sets the `functions` namespace to `tools`.
    pub fn with_function_tools(mut self, tools: Vec<ToolDescription>) -> DeveloperContent {
        let ns = ToolNamespace {
            name: "functions".into(),
            description: None,
            tools,
        };
        self.tools
            .get_or_insert_with(BTreeMap::new)
            .insert(ns.name.clone(), ns);
        self
    }
}

/// A namespace of tools (`functions` for the caller's function tools).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolNamespace {
    /// The namespace's name: its `## NAME` heading, its `namespace NAME` block, and the
    /// prefix of its tools' calls.
    pub name: String,
    /// Lines written under the namespace's heading (as `//` comments where it has tools).
    pub description: Option<String>,
    /// Its tools, in order; a namespace without tools renders only its heading and
    /// description.
    pub tools: Vec<ToolDescription>,
}

/// One tool: its name, what it does, and its parameters' JSON Schema.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolDescription {
    /// The tool's name in its namespace: a call to it goes to `NAMESPACE.NAME`.
    pub name: String,
    /// What the tool does, written as `//` comment lines above its type.
    pub description: String,
    /// Its parameters' JSON Schema, written as a TypeScript-like type; `None` for a tool
    /// that takes no arguments (`() => any`).
    pub parameters: Option<Value>,
}

/// Why a conversation cannot be rendered.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum HarmonyError {
    /// A tool message without a `name`, which its header is made of.
    #[error("a tool message needs the tool's name (`name`)")]
    ToolWithoutName,
    /// System or developer content (the first name) in a message of another role (the
    /// second).
    #[error("{0} content may only appear in a {0} message, found in a {1} message")]
    MisplacedContent(&'static str, &'static str),
    /// The tokenizer has no control token of this name.
    #[error("the tokenizer has no control token {0}: not a harmony tokenizer")]
    NotHarmony(&'static str),
}

/// Harmony's control tokens.
const START: &str = "<|start|>";
const CHANNEL: &str = "<|channel|>";
const CONSTRAIN: &str = "<|constrain|>";
const MESSAGE: &str = "<|message|>";
const END: &str = "<|end|>";
const CALL: &str = "<|call|>";

/// Renders conversations for one tokenizer (whose special tokens must include harmony's).
pub struct Renderer<'a> {
    specials: &'a SpecialTokens,
}

impl std::fmt::Debug for Renderer<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Renderer")
            .field("special_tokens", &self.specials.names().len())
            .finish_non_exhaustive()
    }
}

impl<'a> Renderer<'a> {
    /// A renderer for the tokenizer whose special tokens are `specials`. Fails with
    /// [`HarmonyError::NotHarmony`] where one of harmony's control tokens (`<|start|>`,
    /// `<|channel|>`, `<|constrain|>`, `<|message|>`, `<|end|>`, `<|call|>`) is not among them.
    pub fn new(specials: &'a SpecialTokens) -> Result<Renderer<'a>, HarmonyError> {
        for name in [START, CHANNEL, CONSTRAIN, MESSAGE, END, CALL] {
            if !specials.names().iter().any(|(n, _)| n == name) {
                return Err(HarmonyError::NotHarmony(name));
            }
        }
        Ok(Renderer { specials })
    }

    /// The conversation, then the header of the next message's role: what the model
    /// continues (`next` is [`Role::Assistant`] to generate a reply).
    pub fn for_completion(
        &self,
        messages: &[Message],
        next: Role,
        drop_analysis: bool,
    ) -> Result<Prompt, HarmonyError> {
        let mut p = self.conversation(messages, drop_analysis)?;
        p.push_trusted(START);
        p.push_trusted(next.as_str());
        Ok(p)
    }

    /// The conversation's messages, each closed.
    pub fn conversation(
        &self,
        messages: &[Message],
        drop_analysis: bool,
    ) -> Result<Prompt, HarmonyError> {
        let last_assistant_final = messages
            .iter()
            .rev()
            .find(|m| m.role == Role::Assistant)
            .is_some_and(|m| m.channel.as_deref() == Some("final"));
        let first_final = messages
            .iter()
            .position(|m| m.channel.as_deref() == Some("final"));
        let dropped = |i: usize, m: &Message| {
            drop_analysis
                && last_assistant_final
                && first_final.is_some_and(|f| i < f)
                && m.channel.as_deref() == Some("analysis")
        };
        let function_tools = messages.iter().any(has_function_tools);
        let mut p = Prompt::default();
        for (i, m) in messages.iter().enumerate() {
            if !dropped(i, m) {
                self.message(&mut p, m, function_tools)?;
            }
        }
        Ok(p)
    }

    /// One piece of text, tokenized on its own: the reference tokenizes each piece of a
    /// header and each content item apart, and joining two could change the ids (two
    /// contents "foo" and "bar" are not the tokens of "foobar").
    fn piece(&self, p: &mut Prompt, text: &str) {
        p.push_break();
        p.push_user(self.specials, text);
    }

    fn message(
        &self,
        p: &mut Prompt,
        m: &Message,
        function_tools: bool,
    ) -> Result<(), HarmonyError> {
        p.push_trusted(START);
        if m.role == Role::Tool {
            self.piece(p, m.name.as_deref().ok_or(HarmonyError::ToolWithoutName)?);
        } else {
            p.push_trusted(m.role.as_str());
            if let Some(name) = &m.name {
                self.piece(p, &format!(":{name}"));
            }
        }
        if let Some(r) = m.recipient.as_deref().filter(|r| *r != "all") {
            self.piece(p, &format!(" to={r}"));
        }
        if let Some(c) = &m.channel {
            p.push_trusted(CHANNEL);
            self.piece(p, c);
        }
        if let Some(ct) = &m.content_type {
            match ct.strip_prefix(CONSTRAIN) {
                Some(rest) => {
                    self.piece(p, " ");
                    p.push_trusted(CONSTRAIN);
                    self.piece(p, rest);
                }
                None => self.piece(p, &format!(" {ct}")),
            }
        }
        p.push_trusted(MESSAGE);
        for c in &m.content {
            let text = match c {
                Content::Text { text } => text.clone(),
                Content::SystemContent(s) if m.role == Role::System => {
                    system_text(s, function_tools)
                }
                Content::DeveloperContent(d) if m.role == Role::Developer => developer_text(d),
                Content::SystemContent(_) => {
                    return Err(HarmonyError::MisplacedContent("system", m.role.as_str()));
                }
                Content::DeveloperContent(_) => {
                    return Err(HarmonyError::MisplacedContent("developer", m.role.as_str()));
                }
            };
            self.piece(p, &text);
        }
        let call = m.role == Role::Assistant && m.recipient.is_some();
        p.push_trusted(if call { CALL } else { END });
        Ok(())
    }
}

fn has_function_tools(m: &Message) -> bool {
    m.content.iter().any(|c| match c {
        Content::DeveloperContent(d) => d
            .tools
            .as_ref()
            .and_then(|t| t.get("functions"))
            .is_some_and(|ns| !ns.tools.is_empty()),
        _ => false,
    })
}

fn system_text(s: &SystemContent, function_tools: bool) -> String {
    let mut sections = Vec::new();
    let top: Vec<String> = [
        s.model_identity.clone(),
        s.knowledge_cutoff
            .as_ref()
            .map(|k| format!("Knowledge cutoff: {k}")),
        s.conversation_start_date
            .as_ref()
            .map(|d| format!("Current date: {d}")),
    ]
    .into_iter()
    .flatten()
    .collect();
    if !top.is_empty() {
        sections.push(top.join("\n"));
    }
    if let Some(e) = s.reasoning_effort {
        sections.push(format!("Reasoning: {}", e.as_str()));
    }
    if let Some(tools) = s.tools.as_ref().filter(|t| !t.is_empty()) {
        sections.push(tools_section(tools));
    }
    if let Some(c) = s
        .channel_config
        .as_ref()
        .filter(|c| !c.valid_channels.is_empty())
    {
        let mut header = format!("# Valid channels: {}.", c.valid_channels.join(", "));
        if c.channel_required {
            header.push_str(" Channel must be included for every message.");
        }
        if function_tools {
            header
                .push_str("\nCalls to these tools must go to the commentary channel: 'functions'.");
        }
        sections.push(header);
    }
    sections.join("\n\n")
}

fn developer_text(d: &DeveloperContent) -> String {
    let mut sections = Vec::new();
    if let Some(i) = &d.instructions {
        sections.push("# Instructions".to_string());
        sections.push(i.clone());
    }
    if let Some(tools) = d.tools.as_ref().filter(|t| !t.is_empty()) {
        sections.push(tools_section(tools));
    }
    sections.join("\n\n")
}

/// `# Tools`, then one `## NAMESPACE` section each: its description, and its tools as
/// TypeScript-like function types in a `namespace` block.
fn tools_section(namespaces: &BTreeMap<String, ToolNamespace>) -> String {
    let mut sections = vec!["# Tools".to_string()];
    for ns in namespaces.values() {
        let mut lines = vec![format!("## {}\n", ns.name)];
        let comment = if ns.tools.is_empty() { "" } else { "// " };
        for line in ns.description.iter().flat_map(|d| d.lines()) {
            lines.push(format!("{comment}{line}"));
        }
        if !ns.tools.is_empty() {
            lines.push(format!("namespace {} {{\n", ns.name));
            for tool in &ns.tools {
                lines.extend(tool.description.lines().map(|l| format!("// {l}")));
                lines.push(match &tool.parameters {
                    Some(params) => format!(
                        "type {} = (_: {}) => any;\n",
                        tool.name,
                        typescript::type_of(params, "")
                    ),
                    None => format!("type {} = () => any;\n", tool.name),
                });
            }
            lines.push(format!("}} // namespace {}", ns.name));
        }
        sections.push(lines.join("\n"));
    }
    sections.join("\n\n")
}
