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
//! call payloads. The main loop is `GenericParser::process` (generic.rs): the
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

pub use generic::{BodyKind, Format, GenericParser, Region, RegionKind};
pub use harmony::{DEFAULT_MAX_HEADER, HarmonyMarkers, HarmonyMode, HarmonyParser};
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
    Begin {
        index: usize,
        name: String,
    },
    Arguments {
        index: usize,
        delta: String,
    },
    End {
        index: usize,
        name: String,
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
    /// The end of the stream: releases held-back text, closes what is open.
    fn finish(&mut self);
    /// Back to the start, for a new stream.
    fn reset(&mut self);
}

/// Output buffers shared by the splitters.
#[derive(Clone, Debug, Default)]
pub(crate) struct Outputs {
    pub content: String,
    pub reasoning: String,
    pub tools: Vec<ToolCallEvent>,
    /// Tool calls begun so far.
    pub calls: usize,
}

impl Outputs {
    pub fn begin_call(&mut self, name: &str) -> usize {
        let index = self.calls;
        self.calls += 1;
        self.tools.push(ToolCallEvent::Begin {
            index,
            name: name.to_string(),
        });
        index
    }

    pub fn call_arguments(&mut self, index: usize, delta: &str) {
        if delta.is_empty() {
            return;
        }
        if let Some(ToolCallEvent::Arguments { index: i, delta: d }) = self.tools.last_mut()
            && *i == index
        {
            d.push_str(delta);
            return;
        }
        self.tools.push(ToolCallEvent::Arguments {
            index,
            delta: delta.to_string(),
        });
    }

    pub fn end_call(&mut self, index: usize, name: &str, arguments: String) {
        self.tools.push(ToolCallEvent::End {
            index,
            name: name.to_string(),
            arguments,
        });
    }
}

/// An event of [`split_all`], in stream order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SplitEvent {
    Content(String),
    Reasoning(String),
    Tool(ToolCallEvent),
}

/// The whole result of a stream.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    pub content: String,
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
        let r = s.take_reasoning();
        if !r.is_empty() {
            sum.reasoning.push_str(&r);
            events.push(SplitEvent::Reasoning(r));
        }
        let c = s.take_content();
        if !c.is_empty() {
            sum.content.push_str(&c);
            events.push(SplitEvent::Content(c));
        }
        for t in s.take_tool_calls() {
            if let ToolCallEvent::End {
                name, arguments, ..
            } = &t
            {
                sum.tool_calls.push((name.clone(), arguments.clone()));
            }
            events.push(SplitEvent::Tool(t));
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
    fn finish(&mut self) {
        (**self).finish()
    }
    fn reset(&mut self) {
        (**self).reset()
    }
}
