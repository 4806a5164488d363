//! `corral split`: a model's raw output split into content, reasoning and tool calls.
//! Events as JSON lines, or one summary object; tooling relies on the field names.

use crate::Failure;
use anyhow::{Context, anyhow};
use clap::ValueEnum;
use corral::split::postproc::{FinalStats, PostEvent, PostProcessor, PostprocOptions};
use corral::split::toolcall::{CodecOutcome, ToolCallCodec};
use corral::split::{
    Format, GenericParser, HarmonyMode, HarmonyParser, SplitEvent, Splitter, Stop, ToolCallEvent,
};
use serde_json::{Value, json};
use std::io::Read;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SplitFormat {
    /// gpt-oss harmony channels.
    Harmony,
    /// `<think>` reasoning and tool-call envelopes.
    Generic,
}

#[derive(clap::Args)]
pub struct SplitArgs {
    #[arg(long, value_enum)]
    format: SplitFormat,
    /// Tool-call syntax of the generic format: hermes, llama3, mistral, qwen3-coder.
    #[arg(long, default_value = "hermes")]
    tool_format: String,
    /// The chat template already opened the reasoning block (the stream starts inside it).
    #[arg(long)]
    think_prefilled: bool,
    /// Generic: most bytes of one tool call held until it closes; a longer one is content.
    #[arg(long, default_value_t = corral::split::DEFAULT_MAX_CALL_BYTES)]
    max_call_bytes: usize,
    /// Harmony: drop malformed headers instead of keeping them as content.
    #[arg(long)]
    strict: bool,
    /// Tools (OpenAI-style JSON list) to repair and validate tool-call arguments against.
    #[arg(long)]
    tools: Option<PathBuf>,
    /// Feed the splitter chunks of N characters (default: each piece as it is read, up to
    /// 64 KiB).
    #[arg(long)]
    chunk_size: Option<usize>,
    /// Print one summary object instead of the events.
    #[arg(long)]
    summary: bool,
    /// Post-process: reasoning budget, n-gram suppression, whitespace collapse, service
    /// token filter, leak detection; adds a `final` event with statistics.
    #[arg(long)]
    postprocess: bool,
    /// Input file, or `-` for standard input.
    #[arg(default_value = "-")]
    input: String,
}

/// The input as UTF-8 text in pieces of about [`READ_BYTES`], read as it comes: a
/// sequence cut by a read waits for the next; invalid UTF-8 is an error with its offset.
struct Utf8Pieces {
    input: Box<dyn Read>,
    name: String,
    buf: Vec<u8>,
    /// Bytes of the input before `buf`.
    offset: u64,
}

/// Bytes read from the input at a time.
const READ_BYTES: usize = 1 << 16;

impl Utf8Pieces {
    fn open(input: &str) -> anyhow::Result<Utf8Pieces> {
        let (input, name): (Box<dyn Read>, String) = if input == "-" {
            (Box::new(std::io::stdin()), "standard input".into())
        } else {
            let f = std::fs::File::open(input).with_context(|| format!("cannot read {input}"))?;
            (Box::new(f), input.to_string())
        };
        Ok(Utf8Pieces {
            input,
            name,
            buf: Vec::new(),
            offset: 0,
        })
    }

    fn next_piece(&mut self) -> anyhow::Result<Option<String>> {
        loop {
            let held = self.buf.len();
            self.buf.resize(held + READ_BYTES, 0);
            let n = loop {
                match self.input.read(&mut self.buf[held..]) {
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    r => break r.with_context(|| format!("cannot read {}", self.name))?,
                }
            };
            self.buf.truncate(held + n);
            // The text before a bad byte goes out first: what is printed before the error
            // does not depend on where reads end.
            let valid = match std::str::from_utf8(&self.buf) {
                Ok(_) => self.buf.len(),
                Err(e) if e.valid_up_to() > 0 => e.valid_up_to(),
                Err(e) if e.error_len().is_some() || n == 0 => Err(anyhow!(
                    "{}: invalid UTF-8 at byte {}",
                    self.name,
                    self.offset
                ))?,
                Err(_) => 0,
            };
            if n == 0 && valid == 0 {
                return Ok(None);
            }
            if valid > 0 {
                let rest = self.buf.split_off(valid);
                let text = String::from_utf8(std::mem::replace(&mut self.buf, rest))
                    .expect("checked above");
                self.offset += valid as u64;
                return Ok(Some(text));
            }
        }
    }
}

fn splitter(args: &SplitArgs) -> anyhow::Result<Box<dyn Splitter>> {
    Ok(match args.format {
        SplitFormat::Harmony => Box::new(HarmonyParser::new(if args.strict {
            HarmonyMode::Strict
        } else {
            HarmonyMode::Lenient
        })),
        SplitFormat::Generic => {
            let f = Format::by_name(&args.tool_format).ok_or_else(|| {
                anyhow!(
                    "unknown --tool-format {:?}: hermes, llama3, mistral or qwen3-coder",
                    args.tool_format
                )
            })?;
            Box::new(
                GenericParser::new(f.prefilled(args.think_prefilled))
                    .context("the tool format's markers")?
                    .with_max_call_bytes(args.max_call_bytes),
            )
        }
    })
}

/// `--chunk-size`: the input cut into pieces of `n` characters, counted across reads.
struct Chunker {
    n: Option<usize>,
    /// Characters in the current chunk so far.
    filled: usize,
}

impl Chunker {
    fn cut<'a>(&mut self, text: &'a str) -> Vec<&'a str> {
        let Some(n) = self.n.filter(|&n| n > 0) else {
            return vec![text];
        };
        let mut out = Vec::new();
        let mut start = 0;
        for (i, _) in text.char_indices() {
            if self.filled == n {
                out.push(&text[start..i]);
                start = i;
                self.filled = 0;
            }
            self.filled += 1;
        }
        out.push(&text[start..]);
        out
    }
}

/// `arguments` as JSON when they parse (through the codec when tools are given), else the
/// raw string.
fn arguments(codec: Option<&ToolCallCodec>, name: &str, raw: &str) -> Value {
    if let Some(c) = codec {
        return match c.decode_payload(Some(name.to_string()), raw) {
            Ok(call) => call.arguments,
            Err(reason) => json!({"raw": raw, "error": reason.to_string()}),
        };
    }
    serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_string()))
}

fn tool_event(codec: Option<&ToolCallCodec>, e: &ToolCallEvent) -> Value {
    match e {
        ToolCallEvent::Begin { index, name } => {
            json!({"type": "tool_call_begin", "index": index, "name": name})
        }
        ToolCallEvent::Arguments { index, delta } => {
            json!({"type": "tool_call_arguments", "index": index, "delta": delta})
        }
        ToolCallEvent::End {
            index,
            name,
            arguments: raw,
        } => {
            json!({"type": "tool_call", "index": index, "name": name, "arguments": arguments(codec, name, raw)})
        }
    }
}

pub fn run(args: &SplitArgs) -> Result<(), Failure> {
    let codec = match &args.tools {
        Some(p) => {
            let tools: Value = serde_json::from_str(&crate::input::read_text(p, "tools")?)
                .with_context(|| format!("{}: not JSON", p.display()))?;
            Some(
                ToolCallCodec::from_json(&tools, Duration::from_millis(50))
                    .map_err(anyhow::Error::from)?,
            )
        }
        None => None,
    };
    let mut input = Utf8Pieces::open(&args.input)?;
    let mut chunker = Chunker {
        n: args.chunk_size,
        filled: 0,
    };
    let mut out = Out {
        codec: codec.as_ref(),
        summary: args.summary.then(Summary::default),
        postprocess: args.postprocess,
    };
    // Without --postprocess the splitter is driven directly: nothing is kept but what the
    // splitter holds back, so memory stays bounded however long the stream.
    let mut stage = if args.postprocess {
        Stage::Post(Box::new(PostProcessor::new(
            splitter(args)?,
            PostprocOptions::default(),
        )))
    } else {
        Stage::Plain(splitter(args)?, None)
    };
    'read: while let Some(piece) = input.next_piece()? {
        for c in chunker.cut(&piece) {
            let (events, stopped) = stage.push(c);
            out.events(events, false)?;
            if stopped {
                break 'read;
            }
        }
    }
    let (events, truncated) = stage.finish();
    out.events(events, truncated)
}

/// The splitter, with or without post-processing.
enum Stage {
    Post(Box<PostProcessor<Box<dyn Splitter>>>),
    /// The splitter and why it stopped, once it has.
    Plain(Box<dyn Splitter>, Option<Stop>),
}

impl Stage {
    /// Feeds text: the events in stream order, and whether the stream asked to stop.
    fn push(&mut self, text: &str) -> (Vec<PostEvent>, bool) {
        match self {
            Stage::Post(p) => {
                let events = p.push(text);
                (events, p.stopped())
            }
            Stage::Plain(s, stop) => {
                *stop = s.process(text);
                (plain_events(s.as_mut()), stop.is_some())
            }
        }
    }

    /// The end of the input: the last events (a `Final` last), and whether it cut a tool
    /// call short.
    fn finish(&mut self) -> (Vec<PostEvent>, bool) {
        match self {
            Stage::Post(p) => {
                let events = p.finish();
                (events, p.splitter().truncated_call())
            }
            Stage::Plain(s, stop) => {
                if stop.is_none() {
                    s.finish();
                }
                let mut events = plain_events(s.as_mut());
                events.push(PostEvent::Final(FinalStats {
                    stop: *stop,
                    ..FinalStats::default()
                }));
                (events, s.truncated_call())
            }
        }
    }
}

fn plain_events(s: &mut dyn Splitter) -> Vec<PostEvent> {
    s.take_events()
        .into_iter()
        .map(|e| match e {
            SplitEvent::Content(c) => PostEvent::Delta(c),
            SplitEvent::Reasoning(r) => PostEvent::Reasoning(r),
            SplitEvent::Tool(t) => PostEvent::ToolCall(t),
        })
        .collect()
}

/// What `--summary` prints, gathered as the events come.
#[derive(Default)]
struct Summary {
    content: String,
    reasoning: String,
    calls: Vec<Value>,
}

/// Where events go: printed as JSON lines as they come, or gathered for the summary.
struct Out<'a> {
    codec: Option<&'a ToolCallCodec>,
    summary: Option<Summary>,
    postprocess: bool,
}

impl Out<'_> {
    /// Prints or gathers `events`; `truncated`: the last finished tool call among them was
    /// cut short by the end of the input.
    fn events(&mut self, events: Vec<PostEvent>, truncated: bool) -> Result<(), Failure> {
        let last_end = events
            .iter()
            .rposition(|e| matches!(e, PostEvent::ToolCall(ToolCallEvent::End { .. })));
        for (i, e) in events.iter().enumerate() {
            let cut = truncated && Some(i) == last_end;
            let line = match e {
                PostEvent::Delta(d) => {
                    self.gather(|s| s.content.push_str(d));
                    json!({"type": "delta", "text": d})
                }
                PostEvent::Reasoning(r) => {
                    self.gather(|s| s.reasoning.push_str(r));
                    json!({"type": "reasoning", "text": r})
                }
                PostEvent::ToolCall(t) => {
                    let mut line = tool_event(self.codec, t);
                    if let ToolCallEvent::End {
                        name,
                        arguments: raw,
                        ..
                    } = t
                    {
                        let mut call =
                            json!({"name": name, "arguments": arguments(self.codec, name, raw)});
                        if cut {
                            call["truncated"] = json!(true);
                            line["truncated"] = json!(true);
                        }
                        self.gather(|s| s.calls.push(call));
                    }
                    line
                }
                PostEvent::Final(f) => {
                    let stop = f.stop.map_or("end_of_input", |s| s.as_str());
                    if let Some(s) = &mut self.summary {
                        let sum = std::mem::take(s);
                        self.print_summary(sum, stop)?;
                        continue;
                    }
                    if !self.postprocess {
                        continue;
                    }
                    json!({
                        "type": "final",
                        "reasoning_tokens": f.reasoning_tokens,
                        "final_tokens": f.final_tokens,
                        "reasoning_ratio": f.reasoning_ratio,
                        "leak_detected": f.leak_detected,
                        "reasoning_text": f.reasoning_text,
                        "stop": stop,
                    })
                }
            };
            if self.summary.is_none() {
                crate::outln!("{line}")?;
            }
        }
        Ok(())
    }

    fn gather(&mut self, f: impl FnOnce(&mut Summary)) {
        if let Some(s) = &mut self.summary {
            f(s);
        }
    }

    fn print_summary(&self, mut sum: Summary, stop: &str) -> Result<(), Failure> {
        // Without tools, a bare tool call in the content stays content; with tools, the
        // codec's ordered gate may still find one (envelope or bare JSON) the splitter left
        // as text.
        if let Some(c) = self.codec
            && sum.calls.is_empty()
            && let CodecOutcome::Calls { calls: found, .. } = c.decode(&[], &sum.content)
        {
            sum.calls.extend(
                found
                    .into_iter()
                    .map(|f| json!({"name": f.name, "arguments": f.arguments})),
            );
        }
        crate::outln!(
            "{}",
            json!({"content": sum.content, "reasoning": sum.reasoning, "tool_calls": sum.calls, "stop": stop})
        )?;
        Ok(())
    }
}
