//! The routes: parsing and checking a request, queueing it, and answering in OpenAI's
//! shapes, in one response or as server-sent events.

use crate::api::{ChatRequest, CompletionRequest};
use crate::error::ApiError;
use crate::logprobs::Logprobs;
use crate::metrics::Metrics;
use crate::prepare::{self, Prepared};
use crate::scheduler::{Emitted, Event, Job};
use crate::shape::{Piece, Shaper};
use crate::stop::StopFilter;
use crate::{AppState, Ready};
use axum::Router;
use axum::body::Bytes;
use axum::extract::Request;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use corral_engine::FinishReason;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::Instant;
use tokio::sync::mpsc::{self, UnboundedReceiver};

pub(crate) fn router(state: Arc<AppState>) -> Router {
    let limit = state.config.max_body_bytes;
    // The API key and the body's encoding are checked before the body is read.
    let api = Router::new()
        .route("/v1/models", get(models))
        .route("/v1/chat/completions", post(chat))
        .route("/v1/completions", post(completions))
        .route_layer(middleware::from_fn_with_state(state.clone(), gate));
    Router::new()
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .merge(api)
        .fallback(|| async { ApiError::not_found("no such route").into_response() })
        .method_not_allowed_fallback(|| async {
            ApiError {
                status: StatusCode::METHOD_NOT_ALLOWED,
                ..ApiError::invalid("this route does not take that method")
            }
            .into_response()
        })
        .layer(DefaultBodyLimit::max(limit))
        .with_state(state)
}

/// Before a request's body is read: the API key, and a body the server can read as sent
/// (no content encoding).
async fn gate(State(st): State<Arc<AppState>>, req: Request, next: middleware::Next) -> Response {
    let generation = req.method() == axum::http::Method::POST;
    let refuse = |e: ApiError| {
        if generation {
            Metrics::add(&st.metrics.requests, 1);
            Metrics::add(&st.metrics.request_errors, 1);
        }
        e.into_response()
    };
    if let Err(e) = authorize(&st, req.headers()) {
        return refuse(e);
    }
    if let Some(enc) = req.headers().get("content-encoding")
        && !enc.as_bytes().eq_ignore_ascii_case(b"identity")
    {
        let enc = String::from_utf8_lossy(enc.as_bytes()).into_owned();
        return refuse(ApiError {
            status: StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ..ApiError::invalid(format!(
                "Content-Encoding {enc:?} is not served: send the body uncompressed"
            ))
        });
    }
    if generation {
        let limit = st.config.max_body_bytes;
        let too_large = || ApiError {
            status: StatusCode::PAYLOAD_TOO_LARGE,
            ..ApiError::invalid(format!(
                "the request body is larger than the server's limit of {limit} bytes (--max-body-bytes)"
            ))
        };
        let wait = st.config.body_timeout;
        // A declared length over the limit is refused without keeping a byte of the body;
        // one past what is worth draining, before a byte of it is read.
        let declared = req
            .headers()
            .get(axum::http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if let Some(n) = declared.filter(|&n| n > limit as u64) {
            if n <= DRAIN_BYTES as u64 {
                drain(req.into_body(), wait).await;
            }
            return refuse(too_large());
        }
        // The body is read under its own time limit: a client that stops sending holds
        // a connection for at most that long.
        let (parts, body) = req.into_parts();
        let bytes = match tokio::time::timeout(wait, read_body(body, limit)).await {
            Ok(Ok(b)) => b,
            Ok(Err(BodyError::TooLarge(rest))) => {
                drain(rest, wait).await;
                return refuse(too_large());
            }
            Ok(Err(BodyError::Read(e))) => {
                return refuse(ApiError::invalid(format!("reading the body: {e}")));
            }
            Err(_) => {
                return refuse(ApiError {
                    status: StatusCode::REQUEST_TIMEOUT,
                    ..ApiError::invalid(format!(
                        "the request body did not arrive within {} s (--body-timeout)",
                        wait.as_secs_f64()
                    ))
                });
            }
        };
        return next
            .run(Request::from_parts(parts, axum::body::Body::from(bytes)))
            .await;
    }
    next.run(req).await
}

/// Bytes of a refused body read and dropped before the refusal is sent, so that a client
/// still sending reads the answer rather than a closed connection; past this many the
/// connection is closed on it.
const DRAIN_BYTES: usize = 256 << 10;

/// Why a body was not read.
enum BodyError {
    /// Longer than the limit: the rest of the body, unread.
    TooLarge(axum::body::Body),
    Read(axum::Error),
}

/// The body, at most `limit` bytes of it.
async fn read_body(mut body: axum::body::Body, limit: usize) -> Result<Bytes, BodyError> {
    use http_body_util::BodyExt;
    let mut buf = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(BodyError::Read)?;
        if let Some(data) = frame.data_ref() {
            if buf.len() + data.len() > limit {
                return Err(BodyError::TooLarge(body));
            }
            buf.extend_from_slice(data);
        }
    }
    Ok(Bytes::from(buf))
}

/// Reads and drops up to [`DRAIN_BYTES`] of `body`, for at most `wait`.
async fn drain(mut body: axum::body::Body, wait: std::time::Duration) {
    use http_body_util::BodyExt;
    let mut read = 0;
    let _ = tokio::time::timeout(wait, async {
        while read <= DRAIN_BYTES {
            match body.frame().await {
                Some(Ok(frame)) => read += frame.data_ref().map_or(0, |d| d.len()),
                _ => break,
            }
        }
    })
    .await;
}

async fn health(State(st): State<Arc<AppState>>) -> Response {
    match st.ready.get() {
        Some(_) => (StatusCode::OK, axum::Json(json!({"status": "ok"}))).into_response(),
        None => ApiError::unavailable("the model is loading").into_response(),
    }
}

async fn metrics(State(st): State<Arc<AppState>>) -> Response {
    let cache = st.ready.get().map(|r| r.text.constraints().cache_stats());
    (
        [("content-type", "text/plain; version=0.0.4")],
        st.metrics.render(cache),
    )
        .into_response()
}

async fn models(State(st): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    if let Err(e) = authorize(&st, &headers) {
        return e.into_response();
    }
    let created = st.ready.get().map(|r| r.created).unwrap_or(0);
    axum::Json(json!({
        "object": "list",
        "data": [{
            "id": st.config.model_name,
            "object": "model",
            "created": created,
            "owned_by": "corral",
        }],
    }))
    .into_response()
}

fn authorize(st: &AppState, headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(key) = &st.config.api_key else {
        return Ok(());
    };
    // The scheme's name is case-insensitive (RFC 7235): `Bearer`, `bearer`, `BEARER`.
    let sent = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, key)| key.trim_start());
    if sent == Some(key.as_str()) {
        Ok(())
    } else {
        Err(ApiError::unauthorized())
    }
}

/// The body as `T`: a body too large, not JSON, or not of the request's shape is a 400
/// (413 for size) naming the line and column; a field the endpoint does not serve (`chat`:
/// the chat endpoint) is a 400 naming it.
fn parse<T: DeserializeOwned>(
    body: Result<Bytes, BytesRejection>,
    chat: bool,
) -> Result<T, ApiError> {
    let body = body.map_err(|e| ApiError {
        status: e.status(),
        ..ApiError::invalid(e.body_text())
    })?;
    let shape = |e: serde_json::Error| {
        if !e.is_data()
            && let Some(at) = lone_surrogate(&body)
        {
            return ApiError::invalid(format!(
                "the request body is not valid JSON: {at} is a lone UTF-16 surrogate escape; a \\u escape of a surrogate must be a pair, high (\\uD800-\\uDBFF) then low (\\uDC00-\\uDFFF), to be a character"
            ));
        }
        let what = if e.is_data() {
            "the request does not have the expected shape"
        } else {
            "the request body is not valid JSON"
        };
        ApiError::invalid(format!("{what}: {e}"))
    };
    let value: Value = serde_json::from_slice(&body).map_err(shape)?;
    crate::api::check_fields(&value, chat)
        .map_err(|(field, message)| ApiError::invalid(message).with_param_name(field))?;
    serde_json::from_slice(&body).map_err(shape)
}

/// The first `\uXXXX` escape in `body` that is half a surrogate pair without its other
/// half, as `\uD800 at line L, column C` (serde_json's own words for it name the byte
/// after it, not the escape).
fn lone_surrogate(body: &[u8]) -> Option<String> {
    let hex = |i: usize| -> Option<u16> {
        let h = body.get(i..i + 4)?;
        u16::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok()
    };
    let (mut line, mut col) = (1, 1);
    let mut i = 0;
    let mut high: Option<(usize, usize, u16)> = None;
    while i < body.len() {
        let b = body[i];
        if b == b'\\' && body.get(i + 1) == Some(&b'u') {
            let u = hex(i + 2)?;
            match (u, high.take()) {
                (0xDC00..=0xDFFF, Some(_)) => {}
                (0xDC00..=0xDFFF, None) => {
                    return Some(format!("\\u{u:04X} at line {line}, column {col}"));
                }
                (_, Some((l, c, h))) => return Some(format!("\\u{h:04X} at line {l}, column {c}")),
                (0xD800..=0xDBFF, None) => high = Some((line, col, u)),
                _ => {}
            }
            i += 6;
            col += 6;
            continue;
        }
        if let Some((l, c, h)) = high.take() {
            return Some(format!("\\u{h:04X} at line {l}, column {c}"));
        }
        if b == b'\\' {
            // An escaped character (an escaped backslash too) starts no escape.
            i += 2;
            col += 2;
            continue;
        }
        if b == b'\n' {
            line += 1;
            col = 1;
        } else {
            col += 1;
        }
        i += 1;
    }
    high.map(|(l, c, h)| format!("\\u{h:04X} at line {l}, column {c}"))
}

#[derive(Clone, Copy)]
enum Kind {
    Chat,
    Completion,
}

async fn chat(
    State(st): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    serve(st, headers, Kind::Chat, body).await
}

async fn completions(
    State(st): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    serve(st, headers, Kind::Completion, body).await
}

async fn serve(
    st: Arc<AppState>,
    headers: HeaderMap,
    kind: Kind,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    Metrics::add(&st.metrics.requests, 1);
    match start(&st, &headers, kind, body).await {
        Ok(r) => r,
        Err(e) => {
            Metrics::add(&st.metrics.request_errors, 1);
            e.into_response()
        }
    }
}

async fn start(
    st: &Arc<AppState>,
    headers: &HeaderMap,
    kind: Kind,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    authorize(st, headers)?;
    let ready = st.ready()?;
    // A place is taken before the request is prepared (its prompt tokenized, its
    // constraint compiled), so a full server refuses at once and preparation is bounded
    // like generation; the time limit counts from here.
    let admission = Admission::take(st)?;
    let deadline = Instant::now() + st.config.request_timeout;
    let text = ready.text.clone();
    let state = st.clone();
    let preparing = tokio::task::spawn_blocking(move || {
        let prepared = match kind {
            Kind::Chat => parse::<ChatRequest>(body, true)
                .and_then(|r| prepare::chat(&text, &state.config, &state.metrics, r)),
            Kind::Completion => parse::<CompletionRequest>(body, false)
                .and_then(|r| prepare::completion(&text, &state.config, &state.metrics, r)),
        };
        // The place is held until preparation ends, even when the handler gave up.
        (prepared, admission)
    });
    let (prepared, admission) = match tokio::time::timeout_at(deadline.into(), preparing).await {
        Ok(joined) => {
            joined.map_err(|e| ApiError::internal(format!("request preparation failed: {e}")))?
        }
        Err(_) => {
            Metrics::add(&st.metrics.timed_out, 1);
            return Err(ApiError::timeout(st.config.request_timeout.as_secs()));
        }
    };
    let prepared = prepared?;
    let reply = Reply::new(&st.config.model_name, kind, &prepared);
    let shaper = Shaper::new(
        prepared.format,
        prepared.harmony,
        &prepared.prefix,
        &reply.id,
    )
    .map_err(ApiError::internal)?
    .trim_leading_content(prepared.trim_answer);
    let shaper = match prepared.calls_allowed {
        Some(names) => shaper.allow_calls(names),
        None => shaper,
    };
    let stopped = Arc::new(AtomicBool::new(false));
    let events = enqueue(
        st,
        ready,
        (prepared.decoder, prepared.prompt),
        (deadline, stopped.clone()),
        admission,
    )?;
    let out = Output {
        filter: StopFilter::new(prepared.stops),
        shaper,
        tokens: 0,
        stopped,
        logprobs: prepared
            .logprobs
            .map(|_| Logprobs::new(ready.text.space().clone(), matches!(kind, Kind::Chat))),
        single_call: prepared.single_call,
    };
    if prepared.stream {
        Ok(stream(reply, events, out, prepared.include_usage).into_response())
    } else {
        whole(reply, events, out).await
    }
}

/// A place among the requests preparing, queued or generating (what `--max-concurrent`
/// plus `--queue` bounds). Released when dropped, unless handed to the scheduler with the
/// job, which releases it when the generation ends.
struct Admission {
    metrics: Arc<Metrics>,
    held: bool,
}

impl Admission {
    fn take(st: &AppState) -> Result<Admission, ApiError> {
        let capacity = (st.config.max_concurrent + st.config.queue) as u64;
        if !st.metrics.admit(capacity) {
            return Err(ApiError::busy(st.config.queue));
        }
        Metrics::add(&st.metrics.queued, 1);
        Ok(Admission {
            metrics: st.metrics.clone(),
            held: true,
        })
    }

    fn hand_over(mut self) {
        self.held = false;
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        if self.held {
            Metrics::sub(&self.metrics.queued, 1);
            Metrics::sub(&self.metrics.in_system, 1);
        }
    }
}

fn enqueue(
    st: &AppState,
    ready: &Ready,
    (decoder, prompt): (corral_engine::Decoder, Vec<corral_trie::TokenId>),
    (deadline, stopped): (Instant, Arc<AtomicBool>),
    admission: Admission,
) -> Result<UnboundedReceiver<Event>, ApiError> {
    let (tx, rx) = mpsc::unbounded_channel();
    let job = Job {
        decoder,
        prompt,
        events: tx,
        deadline,
        timeout: st.config.request_timeout,
        stopped,
    };
    match ready.jobs.send(job) {
        Ok(()) => {
            admission.hand_over();
            Ok(rx)
        }
        Err(_) => Err(ApiError::unavailable("the server is stopping")),
    }
}

/// What a response says besides the text.
struct Reply {
    id: String,
    created: u64,
    model: String,
    kind: Kind,
    prompt_tokens: usize,
}

impl Reply {
    fn new(model: &str, kind: Kind, p: &Prepared) -> Reply {
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
struct Output {
    filter: StopFilter,
    shaper: Shaper,
    /// Tokens generated so far.
    tokens: usize,
    /// Set when a stop sequence ended the output (the scheduler then counts the
    /// generation as completed, not cancelled).
    stopped: Arc<AtomicBool>,
    /// The tokens' log-probabilities, when asked for.
    logprobs: Option<Logprobs>,
    /// The output ends after its first tool call (`parallel_tool_calls: false`).
    single_call: bool,
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

async fn whole(
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
fn stream(
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
