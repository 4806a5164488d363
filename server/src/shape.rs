//! The output's shape: with a tool-call format, the text streams through corral-split's
//! splitter into content, reasoning and tool calls; without one, all of it is content.

use corral_split::{
    Format, GenericParser, HarmonyMarkers, HarmonyMode, HarmonyParser, SplitEvent, Splitter,
    ToolCallEvent,
};
use serde_json::{Value, json};

/// A piece of the response, in stream order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Piece {
    /// Answer text.
    Content(String),
    /// Reasoning text (before the answer; a harmony stream's analysis channel).
    Reasoning(String),
    /// A tool call opens.
    CallBegin {
        /// The call's place among the response's calls, from 0.
        index: usize,
        /// The call's id (see [`Call::id`]).
        id: String,
        /// The function called.
        name: String,
    },
    /// More of a call's arguments (JSON text).
    CallArguments {
        /// The call's place among the response's calls, from 0.
        index: usize,
        /// The text that follows what came before.
        delta: String,
    },
}

impl Piece {
    /// The piece as a chat chunk's `delta`.
    pub fn delta(&self) -> Value {
        match self {
            Piece::Content(s) => json!({"content": s}),
            // Both names are in use by clients.
            Piece::Reasoning(s) => json!({"reasoning_content": s, "reasoning": s}),
            Piece::CallBegin { index, id, name } => json!({"tool_calls": [{
                "index": index, "id": id, "type": "function",
                "function": {"name": name, "arguments": ""},
            }]}),
            Piece::CallArguments { index, delta } => json!({"tool_calls": [{
                "index": index, "function": {"arguments": delta},
            }]}),
        }
    }
}

/// A finished call.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Call {
    /// `call_<response id>_<index>`.
    pub id: String,
    /// The function called.
    pub name: String,
    /// The arguments as the model wrote them (JSON text).
    pub arguments: String,
    /// Whether its arguments were streamed as deltas already.
    streamed: bool,
}

/// What one of the splitter's calls is in the response.
enum Slot {
    /// The response's call at this index.
    Call(usize),
    /// A call to a function the request does not allow: text of the answer (`streamed`:
    /// some of it went out already).
    Text { streamed: bool },
}

/// Splits a response's text as it streams.
pub struct Shaper {
    splitter: Option<Box<dyn Splitter + Send>>,
    id: String,
    calls: Vec<Call>,
    /// The functions a call may name (`None`: any); the splitter's calls, in order.
    allowed: Option<Vec<String>>,
    slots: Vec<Slot>,
    /// Whitespace at the start of the content is dropped (set while none but whitespace
    /// came yet): a constrained answer after reasoning is exactly what the grammar matched,
    /// without the line breaks the model writes after `</think>`.
    trim_content: bool,
}

impl std::fmt::Debug for Shaper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shaper")
            .field("splits", &self.splitter.is_some())
            .field("id", &self.id)
            .field("calls", &self.calls)
            .field("allowed", &self.allowed)
            .field("trim_content", &self.trim_content)
            .finish_non_exhaustive()
    }
}

impl Shaper {
    /// `prefix`: what the prompt already opened (a call's marker), fed to the splitter
    /// first. `id` names the response (call ids derive from it). `harmony`: the output is
    /// a harmony stream with these control tokens, split by channel (`format` is then not
    /// used).
    pub fn new(
        format: Option<Format>,
        harmony: Option<HarmonyMarkers>,
        prefix: &str,
        id: &str,
    ) -> Result<Shaper, String> {
        let splitter: Option<Box<dyn Splitter + Send>> = match (harmony, format) {
            (Some(m), _) => Some(Box::new(
                HarmonyParser::new(HarmonyMode::Lenient).with_markers(m),
            )),
            (None, Some(f)) => Some(Box::new(
                GenericParser::new(f).map_err(|e| format!("tool-call format: {e}"))?,
            )),
            (None, None) => None,
        };
        let mut s = Shaper {
            splitter,
            id: id.to_string(),
            calls: Vec::new(),
            allowed: None,
            slots: Vec::new(),
            trim_content: false,
        };
        if !prefix.is_empty()
            && let Some(sp) = s.splitter.as_mut()
        {
            sp.process(prefix);
        }
        Ok(s)
    }

    /// Whether control tokens carry the output's structure (harmony): they go to
    /// [`Shaper::push_control`], not into the text.
    pub fn reads_control_tokens(&self) -> bool {
        self.splitter
            .as_ref()
            .is_some_and(|s| s.reads_control_tokens())
    }

    /// Only calls to these functions are tool calls; a call to another (one the request
    /// did not offer, or with `tool_choice` `none`) is text of the answer.
    pub fn allow_calls(mut self, names: Vec<String>) -> Shaper {
        self.allowed = Some(names);
        self
    }

    /// Drops whitespace before the content's first other character.
    pub fn trim_leading_content(mut self, yes: bool) -> Shaper {
        self.trim_content = yes;
        self
    }

    /// The tool calls so far, in order (a call's arguments are whole once it ended).
    pub fn calls(&self) -> &[Call] {
        &self.calls
    }

    /// Feeds a text delta; the pieces it completes (text the splitter holds back while it
    /// may begin a marker comes out later).
    pub fn push(&mut self, text: &str) -> Vec<Piece> {
        match self.splitter.as_mut() {
            None if text.is_empty() => Vec::new(),
            None => vec![Piece::Content(text.to_string())],
            Some(sp) => {
                sp.process(text);
                self.take()
            }
        }
    }

    /// A control token of a harmony stream, by id (`name`: its text); other outputs take
    /// control tokens as text, through [`Shaper::push`].
    pub fn push_control(&mut self, token: u32, name: &str) -> Vec<Piece> {
        if let Some(sp) = self.splitter.as_mut() {
            sp.process_control(token, name);
        }
        self.take()
    }

    /// The end of the text: what the splitter held back, calls closed.
    pub fn finish(&mut self) -> Vec<Piece> {
        match self.splitter.as_mut() {
            None => Vec::new(),
            Some(sp) => {
                sp.finish();
                self.take()
            }
        }
    }

    fn take(&mut self) -> Vec<Piece> {
        let Some(sp) = self.splitter.as_mut() else {
            return Vec::new();
        };
        let events = sp.take_events();
        let mut out = Vec::new();
        for e in events {
            let e = match e {
                SplitEvent::Reasoning(r) => {
                    out.push(Piece::Reasoning(r));
                    continue;
                }
                SplitEvent::Content(c) => {
                    let c = if self.trim_content {
                        let t = c.trim_start_matches(|c: char| c.is_ascii_whitespace());
                        if t.is_empty() {
                            continue;
                        }
                        self.trim_content = false;
                        t.to_string()
                    } else {
                        c
                    };
                    out.push(Piece::Content(c));
                    continue;
                }
                SplitEvent::Tool(e) => e,
            };
            match e {
                // The splitter numbers its calls in order, as `slots` holds them.
                ToolCallEvent::Begin { name, .. } => {
                    let allowed = self.allowed.as_ref().is_none_or(|a| a.contains(&name));
                    if !allowed {
                        // Not a call the request allows: its text is the answer's.
                        self.slots.push(Slot::Text { streamed: false });
                        continue;
                    }
                    let at = self.calls.len();
                    self.slots.push(Slot::Call(at));
                    let id = format!("call_{}_{at}", self.id);
                    self.calls.push(Call {
                        id: id.clone(),
                        name: name.clone(),
                        ..Call::default()
                    });
                    out.push(Piece::CallBegin {
                        index: at,
                        id,
                        name,
                    });
                }
                ToolCallEvent::Arguments { index, delta } => match self.slots.get_mut(index) {
                    Some(Slot::Call(at)) => {
                        let at = *at;
                        if let Some(c) = self.calls.get_mut(at) {
                            c.streamed = true;
                            c.arguments.push_str(&delta);
                        }
                        out.push(Piece::CallArguments { index: at, delta });
                    }
                    Some(Slot::Text { streamed }) => {
                        *streamed = true;
                        out.push(Piece::Content(delta));
                    }
                    None => {}
                },
                ToolCallEvent::End {
                    index, arguments, ..
                } => match self.slots.get(index) {
                    Some(&Slot::Call(at)) => {
                        if let Some(c) = self.calls.get_mut(at) {
                            if !c.streamed {
                                out.push(Piece::CallArguments {
                                    index: at,
                                    delta: arguments.clone(),
                                });
                            }
                            c.arguments = arguments;
                        }
                    }
                    Some(&Slot::Text { streamed: false }) => out.push(Piece::Content(arguments)),
                    Some(Slot::Text { .. }) | None => {}
                },
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(format: Option<Format>, prefix: &str, chunks: &[&str]) -> (Vec<Piece>, Vec<Call>) {
        let mut s = Shaper::new(format, None, prefix, "x").unwrap();
        let mut pieces = Vec::new();
        for c in chunks {
            pieces.extend(s.push(c));
        }
        pieces.extend(s.finish());
        (pieces, s.calls().to_vec())
    }

    #[test]
    fn hermes_calls_come_apart_from_content_and_reasoning() {
        let text = "<think>hmm</think>Sure.<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>";
        let chunks: Vec<&str> = text.split_inclusive(['>', ',']).collect();
        let (pieces, calls) = run(Some(Format::hermes()), "", &chunks);
        let content: String = pieces
            .iter()
            .filter_map(|p| match p {
                Piece::Content(s) => Some(s.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(content, "Sure.");
        assert!(pieces.contains(&Piece::Reasoning("hmm".into())));
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].name, "f");
        let args: Value = serde_json::from_str(&calls[0].arguments).unwrap();
        assert_eq!(args, json!({"a": 1}));
    }

    #[test]
    fn a_call_opened_by_the_prompt_is_one_call() {
        let (_, calls) = run(
            Some(Format::hermes()),
            "<tool_call>",
            &["{\"name\": \"g\", ", "\"arguments\": {}}"],
        );
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].name, "g");
        assert_eq!(calls[0].arguments.trim(), "{}");
    }

    #[test]
    fn without_a_format_everything_is_content() {
        let (pieces, calls) = run(None, "", &["<tool_call>", "x"]);
        assert_eq!(
            pieces,
            vec![
                Piece::Content("<tool_call>".into()),
                Piece::Content("x".into())
            ]
        );
        assert!(calls.is_empty());
    }

    #[test]
    fn a_harmony_call_to_a_function_not_allowed_is_text() {
        let m = HarmonyMarkers::GPT_OSS;
        let mut s = Shaper::new(None, Some(m), "", "x")
            .unwrap()
            .allow_calls(vec!["f".into()]);
        let mut pieces = Vec::new();
        for (id, text) in [
            (m.channel, "<|channel|>"),
            (0, "commentary to=functions.g "),
            (m.message, "<|message|>"),
            (0, "{\"a\":1}"),
            (m.call, "<|call|>"),
        ] {
            pieces.extend(match id {
                0 => s.push(text),
                _ => s.push_control(id, text),
            });
        }
        pieces.extend(s.finish());
        assert!(s.calls().is_empty(), "{pieces:?}");
        assert_eq!(pieces, vec![Piece::Content("{\"a\":1}".into())]);
        // An allowed one is a call, numbered from 0.
        let mut s = Shaper::new(None, Some(m), "", "x")
            .unwrap()
            .allow_calls(vec!["f".into()]);
        s.push_control(m.channel, "<|channel|>");
        s.push("commentary to=functions.f ");
        s.push_control(m.message, "<|message|>");
        s.push("{}");
        s.push_control(m.call, "<|call|>");
        s.finish();
        assert_eq!(s.calls().len(), 1);
        assert_eq!(
            (s.calls()[0].name.as_str(), s.calls()[0].arguments.as_str()),
            ("f", "{}")
        );
    }
}
