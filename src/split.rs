//! `corral split`: a model's raw output split into content, reasoning and tool calls.
//! Events as JSON lines, or one summary object; tooling relies on the field names.

use crate::Failure;
use anyhow::{Context, anyhow};
use clap::ValueEnum;
use corral::split::postproc::{PostEvent, PostProcessor, PostprocOptions};
use corral::split::toolcall::{CodecOutcome, ToolCallCodec};
use corral::split::{Format, GenericParser, HarmonyMode, HarmonyParser, Splitter, ToolCallEvent};
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
    /// Harmony: drop malformed headers instead of keeping them as content.
    #[arg(long)]
    strict: bool,
    /// Tools (OpenAI-style JSON list) to repair and validate tool-call arguments against.
    #[arg(long)]
    tools: Option<PathBuf>,
    /// Feed the input in chunks of N characters (default: all at once).
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

fn read_input(input: &str) -> anyhow::Result<String> {
    let mut s = String::new();
    if input == "-" {
        std::io::stdin()
            .read_to_string(&mut s)
            .context("cannot read standard input")?;
    } else {
        s = std::fs::read_to_string(input).with_context(|| format!("cannot read {input}"))?;
    }
    Ok(s)
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
                    .context("the tool format's markers")?,
            )
        }
    })
}

/// Chunks of `n` characters.
fn chunks(text: &str, n: Option<usize>) -> Vec<&str> {
    let Some(n) = n.filter(|&n| n > 0) else {
        return vec![text];
    };
    let mut out = Vec::new();
    let mut start = 0;
    for (count, (i, _)) in text.char_indices().enumerate() {
        if count > 0 && count % n == 0 {
            out.push(&text[start..i]);
            start = i;
        }
    }
    out.push(&text[start..]);
    out
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
    let text = read_input(&args.input)?;
    let codec = match &args.tools {
        Some(p) => {
            let tools: Value = serde_json::from_str(
                &std::fs::read_to_string(p)
                    .with_context(|| format!("cannot read {}", p.display()))?,
            )
            .with_context(|| format!("{}: not JSON", p.display()))?;
            Some(
                ToolCallCodec::from_json(&tools, Duration::from_millis(50))
                    .map_err(anyhow::Error::from)?,
            )
        }
        None => None,
    };
    let mut post = PostProcessor::new(
        splitter(args)?,
        if args.postprocess {
            PostprocOptions::default()
        } else {
            PostprocOptions::passthrough()
        },
    );
    let mut events: Vec<PostEvent> = Vec::new();
    for c in chunks(&text, args.chunk_size) {
        events.extend(post.push(c));
    }
    events.extend(post.finish());
    let mut content = String::new();
    let mut reasoning = String::new();
    let mut calls = Vec::new();
    let mut stop = "end_of_input";
    let mut lines = Vec::new();
    for e in &events {
        match e {
            PostEvent::Delta(d) => {
                content.push_str(d);
                lines.push(json!({"type": "delta", "text": d}));
            }
            PostEvent::Reasoning(r) => {
                reasoning.push_str(r);
                lines.push(json!({"type": "reasoning", "text": r}));
            }
            PostEvent::ToolCall(t) => {
                if let ToolCallEvent::End {
                    name,
                    arguments: raw,
                    ..
                } = t
                {
                    calls.push(
                        json!({"name": name, "arguments": arguments(codec.as_ref(), name, raw)}),
                    );
                }
                lines.push(tool_event(codec.as_ref(), t));
            }
            PostEvent::Final(f) => {
                if let Some(s) = f.stop {
                    stop = s.as_str();
                }
                if args.postprocess {
                    lines.push(json!({
                        "type": "final",
                        "reasoning_tokens": f.reasoning_tokens,
                        "final_tokens": f.final_tokens,
                        "reasoning_ratio": f.reasoning_ratio,
                        "leak_detected": f.leak_detected,
                        "reasoning_text": f.reasoning_text,
                        "stop": stop,
                    }));
                }
            }
        }
    }
    // Without tools, a bare tool call in the content stays content; with tools, the codec's
    // ordered gate may still find one (envelope or bare JSON) the splitter left as text.
    if let Some(c) = &codec
        && calls.is_empty()
        && let CodecOutcome::Calls { calls: found, .. } = c.decode(&[], &content)
    {
        calls.extend(
            found
                .into_iter()
                .map(|f| json!({"name": f.name, "arguments": f.arguments})),
        );
    }
    if args.summary {
        crate::outln!(
            "{}",
            json!({"content": content, "reasoning": reasoning, "tool_calls": calls, "stop": stop})
        )?;
    } else {
        for l in lines {
            crate::outln!("{l}")?;
        }
    }
    Ok(())
}
