//! The harmony format (gpt-oss):
//!
//! ```text
//! <|start|>assistant<|channel|>analysis<|message|>thinking...<|end|>
//! <|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city":"Paris"}<|call|>
//! <|start|>assistant<|channel|>final<|message|>The answer.<|return|>
//! ```
//!
//! A small state machine ([`State`]), one short function per state. Channels: `analysis` is
//! reasoning, `final` is content, a message with a recipient (`to=functions.NAME`, in the
//! channel part or the role part of the header) is a tool call whose arguments are the
//! message body, `commentary` without a recipient is content. `<|return|>` and `<|call|>`
//! stop the stream. The stream may start with `<|start|>` or directly inside the header (a
//! prompt ends with `<|start|>assistant`). `<` and `<|` that do not make a marker are text.
//!
//! Markers arrive as text, or, on the token-id path ([`HarmonyParser::process_token`]), as
//! the special tokens they are.

use super::scanner::{Flow, MarkerScanner, Scan};
use super::{Outputs, SplitEvent, Splitter, Stop, ToolCallEvent};

const MARKERS: [&str; 7] = [
    "<|start|>",
    "<|channel|>",
    "<|message|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|constrain|>",
];
const START: usize = 0;
const CHANNEL: usize = 1;
const MESSAGE: usize = 2;
const END: usize = 3;
const RETURN: usize = 4;
const CALL: usize = 5;
const CONSTRAIN: usize = 6;

/// The header of the final channel: an answer's constraint applies after it.
pub const FINAL_HEADER: &str = "<|channel|>final<|message|>";

/// A commentary header up to a tool call's recipient (`to=functions.NAME`), which
/// follows it. A preamble's header (`<|channel|>commentary<|message|>`) does not match.
pub const COMMENTARY: &str = "<|channel|>commentary ";

/// The marker that opens a message's body.
pub const MESSAGE_OPEN: &str = "<|message|>";

/// What forces a header (`header`: [`FINAL_HEADER`] or [`COMMENTARY`]) once the model has
/// written something: in an open body (after [`MESSAGE_OPEN`]), the body's end and a new
/// assistant header; anywhere else, a new header (which abandons one half written). Before
/// any output, the header alone follows the prompt's `<|start|>assistant`.
pub fn forced_header(header: &str) -> (String, String) {
    (
        format!("<|end|><|start|>assistant{header}"),
        format!("<|start|>assistant{header}"),
    )
}

/// How malformed streams are read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HarmonyMode {
    /// A stop marker inside an unfinished header discards the header.
    Strict,
    /// A stop marker inside an unfinished header turns the header into content (and so do
    /// stray text between messages and an overlong header).
    #[default]
    Lenient,
}

/// Token ids of the harmony markers, for the token-id path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HarmonyMarkers {
    /// `<|start|>`: opens a message's header.
    pub start: u32,
    /// `<|channel|>`: precedes the channel name in a header.
    pub channel: u32,
    /// `<|message|>`: ends the header and opens the body.
    pub message: u32,
    /// `<|end|>`: ends a message; more may follow.
    pub end: u32,
    /// `<|return|>`: ends the final answer and the stream.
    pub return_: u32,
    /// `<|call|>`: ends a tool call and the stream.
    pub call: u32,
    /// `<|constrain|>`: precedes the body's content type in a header (`json`).
    pub constrain: u32,
}

impl HarmonyMarkers {
    /// The gpt-oss (o200k_harmony) ids.
    pub const GPT_OSS: HarmonyMarkers = HarmonyMarkers {
        start: 200006,
        channel: 200005,
        message: 200008,
        end: 200007,
        return_: 200002,
        call: 200012,
        constrain: 200003,
    };

    /// The markers' ids as `id_of` gives them by name (a tokenizer's lookup); `None` if
    /// one is missing (not a harmony tokenizer).
    pub fn find(id_of: impl Fn(&str) -> Option<u32>) -> Option<HarmonyMarkers> {
        Some(HarmonyMarkers {
            start: id_of(MARKERS[START])?,
            channel: id_of(MARKERS[CHANNEL])?,
            message: id_of(MARKERS[MESSAGE])?,
            end: id_of(MARKERS[END])?,
            return_: id_of(MARKERS[RETURN])?,
            call: id_of(MARKERS[CALL])?,
            constrain: id_of(MARKERS[CONSTRAIN])?,
        })
    }

    fn marker(&self, id: u32) -> Option<usize> {
        [
            self.start,
            self.channel,
            self.message,
            self.end,
            self.return_,
            self.call,
            self.constrain,
        ]
        .iter()
        .position(|&m| m == id)
    }
}

/// Where a message body goes.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Route {
    Content,
    Reasoning,
    Tool {
        index: usize,
        name: String,
        args: String,
    },
}

/// Which part of a header is being read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Part {
    Role,
    Channel,
    Constrain,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum State {
    /// Between messages, waiting for `<|start|>`.
    Between,
    /// Reading a header until `<|message|>`.
    Header { part: Part },
    /// In a message body.
    Body(Route),
    /// Stopped by `<|return|>` or `<|call|>`.
    Done,
}

/// The default of [`HarmonyParser::with_max_header`].
pub const DEFAULT_MAX_HEADER: usize = 1024;

/// The harmony stream parser. See the module docs.
#[derive(Clone, Debug)]
pub struct HarmonyParser {
    scanner: MarkerScanner,
    core: Core,
    /// The markers' token ids, where control tokens come by id
    /// ([`Splitter::process_control`]).
    markers: Option<HarmonyMarkers>,
}

/// Everything but the scanner (so the scanner can drive it without being moved out).
#[derive(Clone, Debug)]
struct Core {
    mode: HarmonyMode,
    state: State,
    role: String,
    channel: String,
    /// The header as written, markers included (lenient mode turns it into content).
    raw_header: String,
    /// Most bytes a header may have; beyond, it is not a header.
    max_header: usize,
    /// The stream ended inside a tool call's body (before `<|call|>`).
    truncated: bool,
    out: Outputs,
    stop: Option<Stop>,
}

impl Default for HarmonyParser {
    fn default() -> HarmonyParser {
        HarmonyParser::new(HarmonyMode::Lenient)
    }
}

impl HarmonyParser {
    /// A parser that reads malformed streams as `mode` says and starts in a header's role
    /// (a leading `<|start|>` is also taken), with no marker ids.
    pub fn new(mode: HarmonyMode) -> HarmonyParser {
        HarmonyParser {
            scanner: MarkerScanner::new(&MARKERS).expect("harmony's markers are a valid set"),
            core: Core {
                mode,
                state: State::Header { part: Part::Role },
                role: String::new(),
                channel: String::new(),
                raw_header: String::new(),
                max_header: DEFAULT_MAX_HEADER,
                truncated: false,
                out: Outputs::default(),
                stop: None,
            },
            markers: None,
        }
    }

    /// Most bytes a message header (role, channel, recipient, constraint) may have; a longer
    /// one is not a header (lenient: its text becomes content; strict: it is dropped), so a
    /// stream without the closing marker holds back at most this much. Default
    /// [`DEFAULT_MAX_HEADER`] (1,024).
    pub fn with_max_header(mut self, bytes: usize) -> HarmonyParser {
        self.core.max_header = bytes;
        self
    }

    /// Reads control tokens by id ([`Splitter::process_control`]) with these markers.
    pub fn with_markers(mut self, markers: HarmonyMarkers) -> HarmonyParser {
        self.markers = Some(markers);
        self
    }

    /// Feeds one token: a marker token by id, any other by its text.
    pub fn process_token(&mut self, markers: &HarmonyMarkers, id: u32, text: &str) -> Option<Stop> {
        if self.core.stop.is_some() {
            return self.core.stop;
        }
        match markers.marker(id) {
            Some(m) => {
                self.flush_held_text();
                self.core.on_marker(m);
                self.core.stop
            }
            None => self.text_by_id(text),
        }
    }

    /// Text on the token-id path: text, whatever it spells (a marker comes as its token).
    fn text_by_id(&mut self, text: &str) -> Option<Stop> {
        if self.core.stop.is_none() {
            self.flush_held_text();
            self.core.on_text(text);
        }
        self.core.stop
    }

    /// A partial marker the scanner held back is text after all.
    fn flush_held_text(&mut self) {
        let core = &mut self.core;
        self.scanner.flush(&mut |e| {
            if let Scan::Text(t) = e {
                core.on_text(t);
            }
            Flow::Continue
        });
    }

    /// Appends the content and reasoning produced since the last call to the given strings
    /// (no allocation; the token-by-token counterpart of `take_content`/`take_reasoning`).
    pub fn drain_into(&mut self, content: &mut String, reasoning: &mut String) {
        self.core.out.drain_into(content, reasoning);
    }
}

impl Core {
    fn emit(&mut self, text: &str) {
        match &mut self.state {
            State::Body(Route::Content) | State::Between => self.out.push_content(text),
            State::Body(Route::Reasoning) => self.out.push_reasoning(text),
            State::Body(Route::Tool { index, args, .. }) => {
                args.push_str(text);
                let index = *index;
                self.out.call_arguments(index, text);
            }
            State::Header { .. } | State::Done => {}
        }
    }

    fn on_text(&mut self, text: &str) {
        match self.state {
            State::Between => {
                if self.mode == HarmonyMode::Lenient {
                    self.emit(text);
                }
            }
            State::Header { part } => {
                self.raw_header.push_str(text);
                match part {
                    Part::Role => self.role.push_str(text),
                    Part::Channel => self.channel.push_str(text),
                    Part::Constrain => {}
                }
                if self.raw_header.len() > self.max_header {
                    self.abandon_header();
                }
            }
            State::Body(_) => self.emit(text),
            State::Done => {}
        }
    }

    /// Not a header after all: lenient mode keeps it as content (and what follows), strict
    /// mode drops it.
    fn abandon_header(&mut self) {
        let raw = std::mem::take(&mut self.raw_header);
        self.role.clear();
        self.channel.clear();
        self.state = State::Body(Route::Content);
        if self.mode == HarmonyMode::Lenient {
            self.out.push_content(&raw);
        }
    }

    fn on_marker(&mut self, m: usize) {
        match self.state.clone() {
            State::Done => {}
            State::Between => self.marker_between(m),
            State::Header { .. } => self.marker_in_header(m),
            State::Body(route) => self.marker_in_body(m, route),
        }
    }

    fn start_header(&mut self) {
        self.role.clear();
        self.channel.clear();
        self.raw_header.clear();
        self.state = State::Header { part: Part::Role };
    }

    fn marker_between(&mut self, m: usize) {
        match m {
            START => self.start_header(),
            RETURN => self.halt(Stop::Return),
            CALL => self.halt(Stop::Call),
            _ => {
                if self.mode == HarmonyMode::Lenient {
                    self.out.push_content(MARKERS[m]);
                }
            }
        }
    }

    fn marker_in_header(&mut self, m: usize) {
        match m {
            START => self.start_header(),
            CHANNEL => {
                self.raw_header.push_str(MARKERS[m]);
                self.state = State::Header {
                    part: Part::Channel,
                };
            }
            CONSTRAIN => {
                self.raw_header.push_str(MARKERS[m]);
                self.state = State::Header {
                    part: Part::Constrain,
                };
            }
            MESSAGE => self.open_body(),
            // A stop marker inside an unfinished header.
            _ => {
                let raw = std::mem::take(&mut self.raw_header);
                if self.mode == HarmonyMode::Lenient {
                    self.out.push_content(&raw);
                }
                self.state = State::Between;
                match m {
                    RETURN => self.halt(Stop::Return),
                    CALL => self.halt(Stop::Call),
                    _ => {}
                }
            }
        }
    }

    /// Reads the header: channel and recipient decide where the body goes.
    fn open_body(&mut self) {
        let channel = self
            .channel
            .split_whitespace()
            .next()
            .unwrap_or("")
            .to_string();
        let recipient = self
            .channel
            .split_whitespace()
            .chain(self.role.split_whitespace())
            .find_map(|w| w.strip_prefix("to="))
            .map(|r| r.strip_prefix("functions.").unwrap_or(r).to_string());
        let route = match (channel.as_str(), recipient) {
            (_, Some(name)) => {
                let index = self.out.begin_call(&name);
                Route::Tool {
                    index,
                    name,
                    args: String::new(),
                }
            }
            ("analysis", None) => Route::Reasoning,
            _ => Route::Content,
        };
        self.raw_header.clear();
        self.state = State::Body(route);
    }

    fn close_body(&mut self, route: Route) {
        if let Route::Tool { index, name, args } = route {
            self.out.end_call(index, &name, args);
        }
    }

    fn marker_in_body(&mut self, m: usize, route: Route) {
        match m {
            END => {
                self.close_body(route);
                self.state = State::Between;
            }
            START => {
                self.close_body(route);
                self.start_header();
            }
            RETURN | CALL => {
                self.close_body(route);
                self.halt(if m == RETURN {
                    Stop::Return
                } else {
                    Stop::Call
                });
            }
            // <|channel|>, <|message|>, <|constrain|> inside a body are text.
            _ => self.emit(MARKERS[m]),
        }
    }

    fn halt(&mut self, stop: Stop) {
        self.state = State::Done;
        self.stop = Some(stop);
    }
}

impl Splitter for HarmonyParser {
    /// Text; with markers by id ([`HarmonyParser::with_markers`]) it is text whatever it
    /// spells, else the markers are read in it.
    fn process(&mut self, text: &str) -> Option<Stop> {
        if self.markers.is_some() {
            return self.text_by_id(text);
        }
        if self.core.stop.is_none() {
            let core = &mut self.core;
            let _ = self.scanner.feed(text, &mut |e| {
                match e {
                    Scan::Text(t) => core.on_text(t),
                    Scan::Marker(m) => core.on_marker(m),
                }
                if core.stop.is_some() {
                    Flow::Stop
                } else {
                    Flow::Continue
                }
            });
        }
        self.core.stop
    }

    fn take_content(&mut self) -> String {
        self.core.out.take_content()
    }

    fn take_reasoning(&mut self) -> String {
        self.core.out.take_reasoning()
    }

    fn take_tool_calls(&mut self) -> Vec<ToolCallEvent> {
        self.core.out.take_tool_calls()
    }

    fn take_events(&mut self) -> Vec<SplitEvent> {
        self.core.out.take_events()
    }

    fn finish(&mut self) {
        if self.core.stop.is_some() {
            return;
        }
        self.flush_held_text();
        let core = &mut self.core;
        match core.state.clone() {
            State::Body(route) => {
                core.truncated = matches!(route, Route::Tool { .. });
                core.close_body(route)
            }
            State::Header { .. } if !core.raw_header.is_empty() => {
                // The stream ended inside a header.
                let raw = std::mem::take(&mut core.raw_header);
                if core.mode == HarmonyMode::Lenient {
                    core.out.push_content(&raw);
                }
            }
            _ => {}
        }
        core.state = State::Done;
    }

    fn truncated_call(&self) -> bool {
        self.core.truncated
    }

    fn reset(&mut self) {
        let markers = self.markers;
        *self = HarmonyParser::new(self.core.mode).with_max_header(self.core.max_header);
        self.markers = markers;
    }

    fn reads_control_tokens(&self) -> bool {
        self.markers.is_some()
    }

    fn process_control(&mut self, token: u32, name: &str) -> Option<Stop> {
        match self.markers {
            Some(m) => self.process_token(&m, token, name),
            None => self.process(name),
        }
    }
}
