//! Stream splitters: a model's streamed text into content (the answer), reasoning and tool
//! calls, in one forward pass.
//!
//! Two splitters share one [`Splitter`] interface and one marker scanner:
//! - [`HarmonyParser`] for gpt-oss's harmony format (`<|channel|>analysis<|message|>...`);
//! - [`GenericParser`] for `<think>` reasoning and tool-call envelopes (hermes, llama3,
//!   mistral, qwen3-coder), configured by a [`Format`] table, not by branches.
//!
//! Both are O(n) over the whole stream: every character is looked at a bounded number of
//! times, and text that might be the start of a marker is held back (at most the longest
//! marker minus one character), never re-scanned from the start. The same code path serves
//! one-shot and token-by-token input, so every chunking gives the same result.
//!
//! Key types: the [`Splitter`] trait (`process` a piece, `take_*` what it produced,
//! `finish`), its [`ToolCallEvent`]s, [`split_all`] for a whole stream, [`postproc`] for
//! the events a caller shows, and [`toolcall::ToolCallCodec`], which decodes and validates
//! call payloads. The main loop is `GenericParser::process` (generic/parser.rs): the
//! [`MarkerScanner`] finds the next marker, the text before it goes to the current region.
//!
//! ```
//! use corral_split::{split_all, Format, GenericParser};
//!
//! let mut parser = GenericParser::new(Format::hermes()).unwrap();
//! // Any chunking of the stream gives the same result: here, 5 bytes at a time.
//! let stream = "<think>Weather, so call the tool.</think>Checking.<tool_call>\n\
//!               {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>";
//! let chunks: Vec<&str> = stream.as_bytes().chunks(5).map(|c| std::str::from_utf8(c).unwrap()).collect();
//! let (summary, _events) = split_all(&mut parser, chunks);
//! assert_eq!(summary.reasoning, "Weather, so call the tool.");
//! assert_eq!(summary.content, "Checking.");
//! assert_eq!(summary.tool_calls[0].0, "get_weather");
//! ```

mod generic;
mod harmony;
pub mod postproc;
mod scanner;
pub mod toolcall;

pub use generic::{BodyKind, DEFAULT_MAX_CALL_BYTES, Format, GenericParser, Region, RegionKind};
pub use harmony::{
    COMMENTARY, DEFAULT_MAX_HEADER, FINAL_HEADER, HarmonyMarkers, HarmonyMode, HarmonyParser,
    MESSAGE_OPEN, forced_header,
};
pub use scanner::{MarkerError, MarkerScanner};

/// Why the stream asked to stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// Harmony `<|return|>`: the answer is complete.
    Return,
    /// Harmony `<|call|>`: a tool call is complete; run it and come back.
    Call,
}

impl Stop {
    /// The stop's name: `return` or `call`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Stop::Return => "return",
            Stop::Call => "call",
        }
    }
}

/// A tool-call event. Arguments stream as deltas between `Begin` and `End`; `End` carries
/// the whole raw arguments text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolCallEvent {
    /// A call opens; its function name is known.
    Begin {
        /// The call's number in the stream, from 0.
        index: usize,
        /// The function's name.
        name: String,
    },
    /// More of a call's arguments text.
    Arguments {
        /// The call's number in the stream, from 0.
        index: usize,
        /// The arguments text since the last delta of this call.
        delta: String,
    },
    /// A call closes.
    End {
        /// The call's number in the stream, from 0.
        index: usize,
        /// The function's name.
        name: String,
        /// The whole raw arguments text.
        arguments: String,
    },
}

/// A splitter. Feed text, then take what it produced since the last take.
pub trait Splitter {
    /// Feeds a piece of the stream; `Some` when the stream asks to stop (the rest of this
    /// piece is ignored).
    fn process(&mut self, text: &str) -> Option<Stop>;
    /// Answer text produced since the last call.
    fn take_content(&mut self) -> String;
    /// Reasoning text produced since the last call.
    fn take_reasoning(&mut self) -> String;
    /// Tool-call events produced since the last call.
    fn take_tool_calls(&mut self) -> Vec<ToolCallEvent>;
    /// Everything produced since the last call, in stream order (the `take_*` methods give
    /// the same text grouped by kind). A caller uses one or the other.
    fn take_events(&mut self) -> Vec<SplitEvent>;
    /// The end of the stream: releases held-back text, closes what is open.
    fn finish(&mut self);
    /// Whether the stream ended inside a tool call that its format closes explicitly (a
    /// closing marker, or a JSON value not yet complete): the call `finish` closed is
    /// truncated, not complete. Default: never.
    fn truncated_call(&self) -> bool {
        false
    }
    /// Back to the start, for a new stream.
    fn reset(&mut self);
    /// Whether the format's structure is in control tokens read by id (harmony given its
    /// markers): a stream's control tokens then go to [`Splitter::process_control`]. A
    /// splitter that does not read them takes a control token the grammar named as its
    /// name's text (`process`), and never sees the others. Default: no.
    fn reads_control_tokens(&self) -> bool {
        false
    }
    /// Feeds a control token by id (`name`: its text). Default: the name as text.
    fn process_control(&mut self, token: u32, name: &str) -> Option<Stop> {
        let _ = token;
        self.process(name)
    }
}

/// Output buffers shared by the splitters: what was produced since the last take, by kind,
/// and the order it came in.
#[derive(Clone, Debug, Default)]
pub(crate) struct Outputs {
    content: String,
    reasoning: String,
    tools: Vec<ToolCallEvent>,
    /// Runs of one kind in stream order: content and reasoning by bytes, tools by events.
    order: Vec<(Kind, usize)>,
    /// Tool calls begun so far.
    pub calls: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Content,
    Reasoning,
    Tool,
}

impl Outputs {
    fn note(&mut self, kind: Kind, n: usize) {
        match self.order.last_mut() {
            Some((k, m)) if *k == kind => *m += n,
            _ => self.order.push((kind, n)),
        }
    }

    pub fn push_content(&mut self, text: &str) {
        if !text.is_empty() {
            self.content.push_str(text);
            self.note(Kind::Content, text.len());
        }
    }

    pub fn push_reasoning(&mut self, text: &str) {
        if !text.is_empty() {
            self.reasoning.push_str(text);
            self.note(Kind::Reasoning, text.len());
        }
    }

    fn push_tool(&mut self, e: ToolCallEvent) {
        self.tools.push(e);
        self.note(Kind::Tool, 1);
    }

    pub fn begin_call(&mut self, name: &str) -> usize {
        let index = self.calls;
        self.calls += 1;
        self.push_tool(ToolCallEvent::Begin {
            index,
            name: name.to_string(),
        });
        index
    }

    pub fn call_arguments(&mut self, index: usize, delta: &str) {
        if delta.is_empty() {
            return;
        }
        // Joined to the previous delta of the call only when nothing came between.
        if matches!(self.order.last(), Some((Kind::Tool, _)))
            && let Some(ToolCallEvent::Arguments { index: i, delta: d }) = self.tools.last_mut()
            && *i == index
        {
            d.push_str(delta);
            return;
        }
        self.push_tool(ToolCallEvent::Arguments {
            index,
            delta: delta.to_string(),
        });
    }

    pub fn end_call(&mut self, index: usize, name: &str, arguments: String) {
        self.push_tool(ToolCallEvent::End {
            index,
            name: name.to_string(),
            arguments,
        });
    }

    fn forget(&mut self, kind: Kind) {
        self.order.retain(|(k, _)| *k != kind);
    }

    pub fn take_content(&mut self) -> String {
        self.forget(Kind::Content);
        std::mem::take(&mut self.content)
    }

    pub fn take_reasoning(&mut self) -> String {
        self.forget(Kind::Reasoning);
        std::mem::take(&mut self.reasoning)
    }

    pub fn take_tool_calls(&mut self) -> Vec<ToolCallEvent> {
        self.forget(Kind::Tool);
        std::mem::take(&mut self.tools)
    }

    /// Appends the content and reasoning since the last take (no allocation).
    pub fn drain_into(&mut self, content: &mut String, reasoning: &mut String) {
        content.push_str(&self.content);
        self.content.clear();
        reasoning.push_str(&self.reasoning);
        self.reasoning.clear();
        self.order.retain(|(k, _)| *k == Kind::Tool);
    }

    /// Everything since the last take, in stream order.
    pub fn take_events(&mut self) -> Vec<SplitEvent> {
        let (mut c, mut r) = (0, 0);
        let mut tools = std::mem::take(&mut self.tools).into_iter();
        let mut events = Vec::with_capacity(self.order.len());
        for (kind, n) in self.order.drain(..) {
            match kind {
                Kind::Content => {
                    events.push(SplitEvent::Content(self.content[c..c + n].to_string()));
                    c += n;
                }
                Kind::Reasoning => {
                    events.push(SplitEvent::Reasoning(self.reasoning[r..r + n].to_string()));
                    r += n;
                }
                Kind::Tool => events.extend(tools.by_ref().take(n).map(SplitEvent::Tool)),
            }
        }
        self.content.clear();
        self.reasoning.clear();
        events
    }
}

/// An event of [`split_all`], in stream order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SplitEvent {
    /// A run of answer text.
    Content(String),
    /// A run of reasoning text.
    Reasoning(String),
    /// A tool-call event.
    Tool(ToolCallEvent),
}

/// The whole result of a stream.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// All the answer text.
    pub content: String,
    /// All the reasoning text.
    pub reasoning: String,
    /// `(name, raw arguments)` of each completed call.
    pub tool_calls: Vec<(String, String)>,
    /// `None`: the input ended.
    pub stop: Option<Stop>,
}

/// Runs a splitter over `chunks` (stopping early if the stream says stop) and finishes it:
/// the events as they came, and the summary.
pub fn split_all<'a>(
    s: &mut dyn Splitter,
    chunks: impl IntoIterator<Item = &'a str>,
) -> (Summary, Vec<SplitEvent>) {
    let mut events = Vec::new();
    let mut sum = Summary::default();
    let collect = |s: &mut dyn Splitter, events: &mut Vec<SplitEvent>, sum: &mut Summary| {
        for e in s.take_events() {
            match &e {
                SplitEvent::Reasoning(r) => sum.reasoning.push_str(r),
                SplitEvent::Content(c) => sum.content.push_str(c),
                SplitEvent::Tool(ToolCallEvent::End {
                    name, arguments, ..
                }) => sum.tool_calls.push((name.clone(), arguments.clone())),
                SplitEvent::Tool(_) => {}
            }
            events.push(e);
        }
    };
    for chunk in chunks {
        sum.stop = s.process(chunk);
        collect(s, &mut events, &mut sum);
        if sum.stop.is_some() {
            break;
        }
    }
    if sum.stop.is_none() {
        s.finish();
        collect(s, &mut events, &mut sum);
    }
    (sum, events)
}

impl<S: Splitter + ?Sized> Splitter for Box<S> {
    fn process(&mut self, text: &str) -> Option<Stop> {
        (**self).process(text)
    }
    fn take_content(&mut self) -> String {
        (**self).take_content()
    }
    fn take_reasoning(&mut self) -> String {
        (**self).take_reasoning()
    }
    fn take_tool_calls(&mut self) -> Vec<ToolCallEvent> {
        (**self).take_tool_calls()
    }
    fn take_events(&mut self) -> Vec<SplitEvent> {
        (**self).take_events()
    }
    fn finish(&mut self) {
        (**self).finish()
    }
    fn truncated_call(&self) -> bool {
        (**self).truncated_call()
    }
    fn reset(&mut self) {
        (**self).reset()
    }
    fn reads_control_tokens(&self) -> bool {
        (**self).reads_control_tokens()
    }
    fn process_control(&mut self, token: u32, name: &str) -> Option<Stop> {
        (**self).process_control(token, name)
    }
}
