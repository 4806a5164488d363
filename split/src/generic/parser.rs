//! The generic splitter's state machine: [`GenericParser`] reads the stream for a
//! [`Format`], one function per [`State`].

use super::{BodyKind, Format, RegionKind};
use crate::scanner::{Flow, MarkerError, MarkerScanner, Scan};
use crate::toolcall::repair_json;
use crate::{Outputs, SplitEvent, Splitter, Stop, ToolCallEvent};

const FENCE: &str = "```";

/// Incremental JSON structure tracking: nesting depth and whether inside a string.
#[derive(Clone, Debug, Default)]
struct JsonTrack {
    depth: u32,
    in_string: bool,
    escape: bool,
    started: bool,
}

impl JsonTrack {
    /// Feeds one character; true when the top-level value just closed.
    fn push(&mut self, c: char) -> bool {
        if self.in_string {
            if self.escape {
                self.escape = false;
            } else if c == '\\' {
                self.escape = true;
            } else if c == '"' {
                self.in_string = false;
            }
            return false;
        }
        match c {
            '"' => self.in_string = true,
            '{' | '[' => {
                self.depth += 1;
                self.started = true;
            }
            '}' | ']' if self.depth > 0 => {
                self.depth -= 1;
                return self.started && self.depth == 0;
            }
            _ => {}
        }
        false
    }
}

#[derive(Clone, Debug)]
enum State {
    /// Answer text.
    Answer,
    /// Inside a code fence.
    Fence,
    /// Inside a reasoning region.
    Reasoning,
    /// Inside tool-call region `region` (`bare`: a bare JSON candidate, no marker).
    Tool {
        region: Option<usize>,
        body: String,
        json: JsonTrack,
        close: Box<MarkerScanner>,
    },
}

/// The generic splitter. See the module docs.
#[derive(Clone, Debug)]
pub struct GenericParser {
    format: Format,
    state: State,
    /// Scanner for the answer state: every region's opening marker, the fence, and `{` while
    /// a bare JSON call may still come (markers `0..n` are regions, `n` the fence, `n+1` `{`).
    scanner: MarkerScanner,
    /// Scanner for reasoning regions (closing markers) and fences.
    inner: MarkerScanner,
    /// Only whitespace so far in the answer.
    answer_blank: bool,
    out: Outputs,
    /// The stream ended inside an explicitly closed tool call.
    truncated: bool,
    /// Most bytes of one tool call's body held until it closes (see
    /// [`GenericParser::with_max_call_bytes`]).
    max_call_bytes: usize,
}

/// The default of [`GenericParser::with_max_call_bytes`]: 8 MiB.
pub const DEFAULT_MAX_CALL_BYTES: usize = 8 << 20;

impl GenericParser {
    /// Holds at most `bytes` of a tool call's body (default [`DEFAULT_MAX_CALL_BYTES`]): a
    /// call's body is kept whole until it closes, to be decoded; one that grows past the
    /// bound is not taken for a call, and its text (marker and body so far, then what
    /// follows) is content. Memory stays bounded whatever the stream.
    pub fn with_max_call_bytes(mut self, bytes: usize) -> GenericParser {
        self.max_call_bytes = bytes;
        self
    }

    /// A parser for `format`; an error if its markers cannot be scanned for (empty, more
    /// than 62 regions, or one inside another).
    pub fn new(format: Format) -> Result<GenericParser, MarkerError> {
        let mut markers: Vec<&str> = format.regions.iter().map(|r| r.open.as_str()).collect();
        markers.push(FENCE);
        markers.push("{");
        let scanner = MarkerScanner::new(&markers)?;
        let closes: Vec<&str> = format
            .regions
            .iter()
            .map(|r| r.close.as_deref().unwrap_or("\u{0}"))
            .chain([FENCE])
            .collect();
        let inner = MarkerScanner::new(&closes)?;
        let mut p = GenericParser {
            state: State::Answer,
            scanner,
            inner,
            answer_blank: true,
            out: Outputs::default(),
            truncated: false,
            max_call_bytes: DEFAULT_MAX_CALL_BYTES,
            format,
        };
        p.start();
        Ok(p)
    }

    /// The state at the start of a stream.
    fn start(&mut self) {
        self.state = State::Answer;
        self.answer_blank = true;
        self.truncated = false;
        self.out = Outputs::default();
        self.scanner.reset();
        self.inner.reset();
        self.scanner.set_active(self.answer_mask());
        if self.format.think_prefilled
            && let Some(r) = self
                .format
                .regions
                .iter()
                .position(|r| r.kind == RegionKind::Reasoning)
        {
            self.enter(r);
        }
    }

    /// The format it splits by.
    pub fn format(&self) -> &Format {
        &self.format
    }

    fn n(&self) -> usize {
        self.format.regions.len()
    }

    fn answer_mask(&self) -> u64 {
        let n = self.n();
        let mut m = (1u64 << n) - 1;
        if self.format.code_fences {
            m |= 1 << n;
        }
        if self.format.bare_json.is_some() && self.answer_blank {
            m |= 1 << (n + 1);
        }
        m
    }

    fn answer_text(&mut self, t: &str) {
        if self.answer_blank && !t.trim().is_empty() {
            self.answer_blank = false;
        }
        self.out.push_content(t);
    }

    /// Enters region `r` after its opening marker.
    fn enter(&mut self, r: usize) {
        match &self.format.regions[r].kind {
            RegionKind::Reasoning => {
                self.inner.set_active(1 << r);
                self.state = State::Reasoning;
            }
            RegionKind::ToolCall(_) => {
                let close = match &self.format.regions[r].close {
                    // Checked with the format's other markers in `new`.
                    Some(c) => Box::new(MarkerScanner::new(&[c.as_str()]).unwrap_or_default()),
                    None => Box::default(),
                };
                self.state = State::Tool {
                    region: Some(r),
                    body: String::new(),
                    json: JsonTrack::default(),
                    close,
                };
            }
        }
    }

    /// The answer state: text, or a marker that opens a region, a fence or a bare call.
    /// Returns the bytes of `text` consumed.
    fn run_answer(&mut self, text: &str) -> usize {
        let n = self.n();
        let mut scanner = std::mem::take(&mut self.scanner);
        let used = scanner.feed(text, &mut |e| match e {
            Scan::Text(t) => {
                self.answer_text(t);
                Flow::Mask(self.answer_mask())
            }
            Scan::Marker(m) => {
                if m < n {
                    self.enter(m);
                } else if m == n {
                    self.out.push_content(FENCE);
                    self.answer_blank = false;
                    self.inner.set_active(1 << n);
                    self.state = State::Fence;
                } else {
                    // A bare JSON object may be a tool call: hold it until it closes.
                    let mut json = JsonTrack::default();
                    json.push('{');
                    self.state = State::Tool {
                        region: None,
                        body: "{".into(),
                        json,
                        close: Box::default(),
                    };
                }
                Flow::Stop
            }
        });
        self.scanner = scanner;
        used
    }

    /// Inside a fence or a reasoning region: text until the closing marker.
    fn run_inner(&mut self, text: &str) -> usize {
        let n = self.n();
        let mut inner = std::mem::take(&mut self.inner);
        let used = inner.feed(text, &mut |e| match e {
            Scan::Text(t) => {
                match self.state {
                    State::Reasoning => self.out.push_reasoning(t),
                    _ => self.out.push_content(t),
                }
                Flow::Continue
            }
            Scan::Marker(m) => {
                if m == n {
                    self.out.push_content(FENCE);
                }
                self.state = State::Answer;
                Flow::Stop
            }
        });
        self.inner = inner;
        used
    }

    /// Inside a tool call: characters one by one; returns bytes consumed.
    fn run_tool(&mut self, text: &str) -> usize {
        for (i, c) in text.char_indices() {
            let State::Tool {
                region,
                body,
                json,
                close,
            } = &mut self.state
            else {
                unreachable!()
            };
            let is_json = match region {
                Some(r) => {
                    matches!(&self.format.regions[*r].kind, RegionKind::ToolCall(b) if b.is_json())
                }
                None => true,
            };
            let has_close = region
                .and_then(|r| self.format.regions[r].close.as_ref())
                .is_some();
            let mut closed = false;
            if is_json && json.in_string {
                body.push(c);
                json.push(c);
            } else if has_close {
                let mut buf = [0u8; 4];
                let mut pieces: Vec<String> = Vec::new();
                close.feed(c.encode_utf8(&mut buf), &mut |e| {
                    match e {
                        Scan::Text(t) => pieces.push(t.to_string()),
                        Scan::Marker(_) => closed = true,
                    }
                    Flow::Continue
                });
                for p in pieces {
                    for pc in p.chars() {
                        body.push(pc);
                        if is_json {
                            json.push(pc);
                        }
                    }
                }
            } else {
                body.push(c);
                if is_json && json.push(c) {
                    closed = true;
                }
            }
            if closed {
                self.close_tool();
                return i + c.len_utf8();
            }
            if body.len() > self.max_call_bytes {
                self.give_up_call();
                return i + c.len_utf8();
            }
        }
        text.len()
    }

    /// A call's body outgrew [`GenericParser::with_max_call_bytes`]: its marker and body
    /// are content, and so is what follows.
    fn give_up_call(&mut self) {
        let State::Tool { region, body, .. } = std::mem::replace(&mut self.state, State::Answer)
        else {
            return;
        };
        if let Some(r) = region {
            let open = self.format.regions[r].open.clone();
            self.answer_text(&open);
        }
        self.answer_text(&body);
    }

    /// Ends the tool-call region: decodes the body into calls (or, for a bare JSON object
    /// that is not a call, content).
    fn close_tool(&mut self) {
        let State::Tool { region, body, .. } = std::mem::replace(&mut self.state, State::Answer)
        else {
            return;
        };
        let kind = match region {
            Some(r) => match &self.format.regions[r].kind {
                RegionKind::ToolCall(b) => b.clone(),
                RegionKind::Reasoning => unreachable!("tool state"),
            },
            None => self.format.bare_json.clone().expect("bare JSON configured"),
        };
        let calls = decode_body(&kind, &body);
        if region.is_none() && calls.as_ref().is_none_or(|c| c.is_empty()) {
            // Not a call after all: it was the answer.
            self.answer_text(&body);
            return;
        }
        self.answer_blank = false;
        match calls {
            Some(calls) if !calls.is_empty() => {
                for (name, args) in calls {
                    let i = self.out.begin_call(&name);
                    self.out.call_arguments(i, &args);
                    self.out.end_call(i, &name, args);
                }
            }
            // Undecodable: the raw body, with no name; the codec can try harder.
            _ => {
                let i = self.out.begin_call("");
                self.out.call_arguments(i, &body);
                self.out.end_call(i, "", body);
            }
        }
    }
}

/// `(name, arguments as JSON text)` of each call in a body, if it decodes.
fn decode_body(kind: &BodyKind, body: &str) -> Option<Vec<(String, String)>> {
    let body = body.trim();
    let object =
        |v: &serde_json::Value, name_key: &str, args_keys: &[String]| -> Option<(String, String)> {
            let name = v.get(name_key)?.as_str()?.to_string();
            let args = args_keys
                .iter()
                .find_map(|k| v.get(k))
                .cloned()
                .unwrap_or(serde_json::json!({}));
            let args = match args {
                serde_json::Value::String(s) => s,
                other => other.to_string(),
            };
            Some((name, args))
        };
    let parse = |s: &str| {
        serde_json::from_str::<serde_json::Value>(s)
            .ok()
            .or_else(|| repair_json(s).ok())
    };
    match kind {
        BodyKind::JsonObject {
            name_key,
            args_keys,
        } => {
            let v = parse(body)?;
            object(&v, name_key, args_keys).map(|c| vec![c])
        }
        BodyKind::JsonArray {
            name_key,
            args_keys,
        } => match parse(body)? {
            serde_json::Value::Array(items) => items
                .iter()
                .map(|v| object(v, name_key, args_keys))
                .collect(),
            v => object(&v, name_key, args_keys).map(|c| vec![c]),
        },
        BodyKind::QwenXml => {
            let mut calls = Vec::new();
            let mut rest = body;
            while let Some(start) = rest.find("<function=") {
                let after = &rest[start + "<function=".len()..];
                let name_end = after.find('>')?;
                let name = after[..name_end].trim().to_string();
                let end = after.find("</function>").unwrap_or(after.len());
                let inner = &after[name_end + 1..end];
                let mut args = serde_json::Map::new();
                let mut p = inner;
                while let Some(ps) = p.find("<parameter=") {
                    let a = &p[ps + "<parameter=".len()..];
                    let key_end = a.find('>')?;
                    let key = a[..key_end].trim().to_string();
                    let vend = a.find("</parameter>").unwrap_or(a.len());
                    let raw = a[key_end + 1..vend].trim_matches('\n');
                    let value = serde_json::from_str(raw)
                        .unwrap_or_else(|_| serde_json::Value::String(raw.to_string()));
                    args.insert(key, value);
                    p = &a[(vend + "</parameter>".len()).min(a.len())..];
                }
                calls.push((name, serde_json::Value::Object(args).to_string()));
                rest = &after[(end + "</function>".len()).min(after.len())..];
            }
            Some(calls)
        }
    }
}

impl Splitter for GenericParser {
    fn process(&mut self, text: &str) -> Option<Stop> {
        let mut rest = text;
        while !rest.is_empty() {
            let used = match self.state {
                State::Answer => self.run_answer(rest),
                State::Fence | State::Reasoning => self.run_inner(rest),
                State::Tool { .. } => self.run_tool(rest),
            };
            rest = &rest[used..];
        }
        None
    }

    fn take_content(&mut self) -> String {
        self.out.take_content()
    }

    fn take_reasoning(&mut self) -> String {
        self.out.take_reasoning()
    }

    fn take_tool_calls(&mut self) -> Vec<ToolCallEvent> {
        self.out.take_tool_calls()
    }

    fn take_events(&mut self) -> Vec<SplitEvent> {
        self.out.take_events()
    }

    fn finish(&mut self) {
        match &mut self.state {
            State::Answer => {
                let mut held = Vec::new();
                self.scanner.flush(&mut |e| {
                    if let Scan::Text(t) = e {
                        held.push(t.to_string());
                    }
                    Flow::Continue
                });
                for t in held {
                    self.answer_text(&t);
                }
            }
            State::Fence | State::Reasoning => {
                let mut held = Vec::new();
                self.inner.flush(&mut |e| {
                    if let Scan::Text(t) = e {
                        held.push(t.to_string());
                    }
                    Flow::Continue
                });
                for t in held {
                    match self.state {
                        // An unclosed reasoning block is reasoning.
                        State::Reasoning => self.out.push_reasoning(&t),
                        _ => self.out.push_content(&t),
                    }
                }
            }
            State::Tool {
                region,
                body,
                close,
                ..
            } => {
                self.truncated = region.is_some_and(|r| {
                    let r = &self.format.regions[r];
                    r.close.is_some()
                        || matches!(
                            r.kind,
                            RegionKind::ToolCall(
                                BodyKind::JsonObject { .. } | BodyKind::JsonArray { .. }
                            )
                        )
                });
                let mut held = String::new();
                close.flush(&mut |e| {
                    if let Scan::Text(t) = e {
                        held.push_str(t);
                    }
                    Flow::Continue
                });
                body.push_str(&held);
                self.close_tool();
            }
        }
        self.state = State::Answer;
    }

    fn truncated_call(&self) -> bool {
        self.truncated
    }

    fn reset(&mut self) {
        self.start();
    }
}
