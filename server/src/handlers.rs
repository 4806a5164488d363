//! The routes: parsing and checking a request, queueing it, and answering in OpenAI's
//! shapes, in one response or as server-sent events.

use crate::admit;
use crate::api::{ChatRequest, CompletionRequest};
use crate::error::ApiError;
use crate::logprobs::Logprobs;
use crate::metrics::Metrics;
use crate::respond::{Output, Reply, stream, whole};
use crate::scheduler::{Event, Job};
use crate::shape::Shaper;
use crate::stop::StopFilter;
use crate::{AppState, Ready};
use axum::Router;
use axum::body::Bytes;
use axum::extract::Request;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
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
pub(crate) enum Kind {
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
    // A place is taken before the request is admitted (its prompt tokenized, its
    // constraint compiled), so a full server refuses at once and preparation is bounded
    // like generation; the time limit counts from here.
    let admission = Admission::take(st)?;
    let deadline = Instant::now() + st.config.request_timeout;
    let text = ready.text.clone();
    let state = st.clone();
    let preparing = tokio::task::spawn_blocking(move || {
        let admitted = match kind {
            Kind::Chat => parse::<ChatRequest>(body, true)
                .and_then(|r| admit::chat(&text, &state.config, &state.metrics, r)),
            Kind::Completion => parse::<CompletionRequest>(body, false)
                .and_then(|r| admit::completion(&text, &state.config, &state.metrics, r)),
        };
        // The place is held until preparation ends, even when the handler gave up.
        (admitted, admission)
    });
    let (admitted, admission) = match tokio::time::timeout_at(deadline.into(), preparing).await {
        Ok(joined) => {
            joined.map_err(|e| ApiError::internal(format!("request preparation failed: {e}")))?
        }
        Err(_) => {
            Metrics::add(&st.metrics.timed_out, 1);
            return Err(ApiError::timeout(st.config.request_timeout.as_secs()));
        }
    };
    let admitted = admitted?;
    let reply = Reply::new(&st.config.model_name, kind, &admitted);
    let shaper = Shaper::new(
        admitted.format,
        admitted.harmony,
        &admitted.prefix,
        &reply.id,
    )
    .map_err(ApiError::internal)?
    .trim_leading_content(admitted.trim_answer);
    let shaper = match admitted.calls_allowed {
        Some(names) => shaper.allow_calls(names),
        None => shaper,
    };
    let stopped = Arc::new(AtomicBool::new(false));
    let events = enqueue(
        st,
        ready,
        (admitted.decoder, admitted.prompt),
        (deadline, stopped.clone()),
        admission,
    )?;
    let out = Output {
        filter: StopFilter::new(admitted.stops),
        shaper,
        tokens: 0,
        stopped,
        logprobs: admitted
            .logprobs
            .map(|_| Logprobs::new(ready.text.space().clone(), matches!(kind, Kind::Chat))),
        single_call: admitted.single_call,
    };
    if admitted.stream {
        Ok(stream(reply, events, out, admitted.include_usage).into_response())
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
