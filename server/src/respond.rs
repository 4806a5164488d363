//! A generation's events turned into OpenAI's responses: one whole response, or
//! server-sent events.

use crate::admit::Admitted;
use crate::error::ApiError;
use crate::handlers::Kind;
use crate::logprobs::Logprobs;
use crate::scheduler::{Emitted, Event};
use crate::shape::{Piece, Shaper};
use crate::stop::StopFilter;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use corral_engine::FinishReason;
use serde_json::{Value, json};
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use tokio::sync::mpsc::{self, UnboundedReceiver};

/// What a response says besides the text.
pub(crate) struct Reply {
    pub(crate) id: String,
    created: u64,
    model: String,
    kind: Kind,
    prompt_tokens: usize,
}

impl Reply {
    pub(crate) fn new(model: &str, kind: Kind, p: &Admitted) -> Reply {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let prefix = match kind {
            Kind::Chat => "chatcmpl",
            Kind::Completion => "cmpl",
        };
        Reply {
            id: format!("{prefix}-{:x}", now.as_nanos()),
            created: now.as_secs(),
            model: model.to_string(),
            kind,
            prompt_tokens: p.prompt.len(),
        }
    }

    fn usage(&self, completion_tokens: usize) -> Value {
        json!({
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": self.prompt_tokens + completion_tokens,
        })
    }

    fn object(&self, chunk: bool) -> &'static str {
        match (self.kind, chunk) {
            (Kind::Chat, false) => "chat.completion",
            (Kind::Chat, true) => "chat.completion.chunk",
            (Kind::Completion, _) => "text_completion",
        }
    }

    /// The one choice of a whole response.
    fn message(&self, out: &Whole, finish: &str) -> Value {
        match self.kind {
            Kind::Chat => {
                let mut message = json!({"role": "assistant", "content": out.content});
                if !out.reasoning.is_empty() {
                    message["reasoning_content"] = json!(out.reasoning);
                    message["reasoning"] = json!(out.reasoning);
                }
                if !out.calls.is_empty() {
                    let calls: Vec<Value> = out
                        .calls
                        .iter()
                        .map(|c| {
                            json!({"id": c.id, "type": "function",
                                   "function": {"name": c.name, "arguments": c.arguments}})
                        })
                        .collect();
                    message["tool_calls"] = json!(calls);
                    if out.content.trim().is_empty() {
                        message["content"] = Value::Null;
                    }
                }
                json!({"index": 0, "message": message, "finish_reason": finish, "logprobs": null})
            }
            Kind::Completion => {
                json!({"index": 0, "text": out.content, "finish_reason": finish, "logprobs": null})
            }
        }
    }

    /// One streamed choice: a chat delta, or a completion's text.
    fn chunk_choice(&self, piece: Option<&Piece>, finish: Option<&str>, first: bool) -> Value {
        match self.kind {
            Kind::Chat => {
                let mut delta = piece.map(Piece::delta).unwrap_or_else(|| json!({}));
                if first {
                    delta["role"] = json!("assistant");
                }
                json!({"index": 0, "delta": delta, "finish_reason": finish, "logprobs": null})
            }
            Kind::Completion => {
                let text = match piece {
                    Some(Piece::Content(s)) => s.as_str(),
                    _ => "",
                };
                json!({"index": 0, "text": text, "finish_reason": finish, "logprobs": null})
            }
        }
    }

    fn envelope(&self, chunk: bool, choices: Vec<Value>, usage: Option<Value>) -> Value {
        let mut v = json!({
            "id": self.id,
            "object": self.object(chunk),
            "created": self.created,
            "model": self.model,
            "choices": choices,
        });
        if let Some(u) = usage {
            v["usage"] = u;
        }
        v
    }
}

/// OpenAI's finish reasons: a grammar that completed, within the budget or not, is `stop`.
fn finish_reason(f: FinishReason) -> &'static str {
    match f {
        FinishReason::GrammarComplete | FinishReason::Stop | FinishReason::BudgetCompleted => {
            "stop"
        }
        FinishReason::Length => "length",
    }
}

/// The end of a generation as the handler sees it.
enum End {
    Finished(&'static str, usize),
    Failed(ApiError),
}

/// A response's text on its way out: stop sequences first, then the shape.
pub(crate) struct Output {
    pub(crate) filter: StopFilter,
    pub(crate) shaper: Shaper,
    /// Tokens generated so far.
    pub(crate) tokens: usize,
    /// Set when a stop sequence ended the output (the scheduler then counts the
    /// generation as completed, not cancelled).
    pub(crate) stopped: Arc<AtomicBool>,
    /// The tokens' log-probabilities, when asked for.
    pub(crate) logprobs: Option<Logprobs>,
    /// The output ends after its first tool call (`parallel_tool_calls: false`).
    pub(crate) single_call: bool,
}

impl Output {
    /// One event: the pieces to pass on, and the end if it came.
    fn event(&mut self, e: Event) -> (Vec<Piece>, Option<End>) {
        match e {
            Event::Delta {
                out,
                tokens,
                logprobs,
            } => {
                self.tokens = tokens;
                if let Some(l) = self.logprobs.as_mut() {
                    l.push(logprobs);
                }
                let mut pieces = Vec::new();
                for e in out {
                    match e {
                        Emitted::Control { token, name, .. }
                            if self.shaper.reads_control_tokens() =>
                        {
                            pieces.extend(self.shaper.push_control(token, &name));
                        }
                        // Elsewhere a control token is text where the grammar named it.
                        Emitted::Control { named: false, .. } => {}
                        Emitted::Control { name: text, .. } | Emitted::Text(text) => {
                            let pass = self.filter.push(&text);
                            pieces.extend(self.shaper.push(&pass));
                        }
                    }
                }
                // A stop sequence, or the first call when only one is wanted, ends the
                // output; the caller drops the receiver, which stops the generation.
                let one_call = self.single_call && !self.shaper.calls().is_empty();
                let end = (self.filter.stopped() || one_call).then(|| {
                    self.stopped.store(true, Relaxed);
                    pieces.extend(self.shaper.finish());
                    End::Finished(self.finish_reason("stop"), tokens)
                });
                (pieces, end)
            }
            Event::Done { finish, stats } => {
                let rest = self.filter.finish();
                let mut pieces = self.shaper.push(&rest);
                pieces.extend(self.shaper.finish());
                let reason = self.finish_reason(finish_reason(finish));
                (pieces, Some(End::Finished(reason, stats.generated_tokens)))
            }
            Event::Failed(e) => (Vec::new(), Some(End::Failed(e))),
        }
    }

    /// `tool_calls` when the output made calls.
    fn finish_reason(&self, reason: &'static str) -> &'static str {
        if self.shaper.calls().is_empty() {
            reason
        } else {
            "tool_calls"
        }
    }
}

/// The scheduler dropped the request without a word (it stopped).
fn vanished() -> End {
    End::Failed(ApiError::unavailable("the server stopped the generation"))
}

/// A whole response's parts.
#[derive(Default)]
struct Whole {
    content: String,
    reasoning: String,
    calls: Vec<crate::shape::Call>,
}

pub(crate) async fn whole(
    reply: Reply,
    mut events: UnboundedReceiver<Event>,
    mut out: Output,
) -> Result<Response, ApiError> {
    let mut w = Whole::default();
    let end = loop {
        let Some(e) = events.recv().await else {
            break vanished();
        };
        let (pieces, end) = out.event(e);
        for p in pieces {
            match p {
                Piece::Content(s) => w.content.push_str(&s),
                Piece::Reasoning(s) => w.reasoning.push_str(&s),
                Piece::CallBegin { .. } | Piece::CallArguments { .. } => {}
            }
        }
        if let Some(end) = end {
            break end;
        }
    };
    match end {
        End::Finished(finish, tokens) => {
            w.calls = out.shaper.calls().to_vec();
            let mut choice = reply.message(&w, finish);
            if let Some(l) = out.logprobs.as_mut() {
                choice["logprobs"] = l.take();
            }
            let body = reply.envelope(false, vec![choice], Some(reply.usage(tokens)));
            Ok(axum::Json(body).into_response())
        }
        End::Failed(e) => Err(e),
    }
}

/// Server-sent events: a chunk per piece of text, a last chunk with the finish reason,
/// usage if asked, then `data: [DONE]`. An error after the stream began is sent as an error
/// object in a `data:` line. A client that goes away closes the channel: the task ends,
/// dropping the scheduler's receiver, which stops the generation.
pub(crate) fn stream(
    reply: Reply,
    mut events: UnboundedReceiver<Event>,
    mut out: Output,
    include_usage: bool,
) -> Sse<impl tokio_stream::Stream<Item = Result<SseEvent, Infallible>>> {
    let (tx, rx) = mpsc::channel::<Result<SseEvent, Infallible>>(64);
    tokio::spawn(async move {
        let data = |v: Value| Ok(SseEvent::default().data(v.to_string()));
        let chunk = |piece: Option<&Piece>, finish: Option<&str>, first: bool, lp: Value| {
            let mut choice = reply.chunk_choice(piece, finish, first);
            choice["logprobs"] = lp;
            data(reply.envelope(true, vec![choice], None))
        };
        if matches!(reply.kind, Kind::Chat)
            && tx.send(chunk(None, None, true, Value::Null)).await.is_err()
        {
            return;
        }
        let end = loop {
            let Some(e) = events.recv().await else {
                break vanished();
            };
            let (pieces, end) = out.event(e);
            for p in &pieces {
                let lp = out.logprobs.as_mut().map_or(Value::Null, Logprobs::take);
                if tx.send(chunk(Some(p), None, false, lp)).await.is_err() {
                    return;
                }
            }
            if let Some(end) = end {
                break end;
            }
        };
        drop(events);
        let last = match end {
            End::Finished(finish, tokens) => {
                let lp = out.logprobs.as_mut().map_or(Value::Null, Logprobs::take);
                let _ = tx.send(chunk(None, Some(finish), false, lp)).await;
                include_usage.then(|| reply.envelope(true, vec![], Some(reply.usage(tokens))))
            }
            End::Failed(e) => Some(e.body()),
        };
        if let Some(v) = last {
            let _ = tx.send(data(v)).await;
        }
        let _ = tx.send(Ok(SseEvent::default().data("[DONE]"))).await;
    });
    Sse::new(tokio_stream::wrappers::ReceiverStream::new(rx)).keep_alive(KeepAlive::default())
}
