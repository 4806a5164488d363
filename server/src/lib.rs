//! # corral-server
//!
//! `corral serve`: an OpenAI-compatible HTTP server (axum + tokio) whose outputs follow a
//! JSON Schema, a GBNF grammar, a regex or a list of choices, chosen per request.
//!
//! - Endpoints: `POST /v1/chat/completions`, `POST /v1/completions`, `GET /v1/models`,
//!   `GET /health` (200 once the model is loaded, 503 before), `GET /metrics` (Prometheus).
//! - Structured output: `response_format` (`json_schema`, `json_object`), `grammar`
//!   (GBNF), `regex`, vLLM's `structured_outputs` (`json`, `regex`, `grammar`, `choice`).
//!   Constraints live in the model's [`corral_engine::ConstraintCache`]: a schema seen
//!   again starts warm.
//! - Errors are OpenAI error objects (`error::ApiError`); an invalid schema or grammar is
//!   a 400 carrying corral's positioned message.
//!
//! A request's path:
//! 1. the handler reads the body (at most [`ServeConfig::max_body_bytes`]) and parses it;
//! 2. on a blocking thread, `admit` applies the chat template, tokenizes, finds or
//!    compiles the constraint, and makes the [`corral_engine::Decoder`];
//! 3. the job enters a bounded queue (full: 429) read by the `scheduler` thread, which
//!    owns the network and runs the decoding steps of up to
//!    [`ServeConfig::max_concurrent`] requests as one batched forward pass;
//! 4. text deltas come back on a channel; the handler applies stop sequences (`stop`)
//!    and answers in one response or as server-sent events. A client that goes away drops
//!    the channel, and the scheduler stops its generation at its next step.
//!
//! ```no_run
//! use corral_server::{ServeConfig, spawn};
//! let server = spawn(ServeConfig::default(), Box::new(|| {
//!     corral_models::Model::load("model.gguf", corral_models::DeviceSpec::Cpu)
//! }))?;
//! println!("listening on {}", server.addr());
//! server.wait()?;
//! # Ok::<(), corral_server::ServeError>(())
//! ```

mod admit;
mod api;
mod error;
mod fields;
mod handlers;
mod harmony;
mod logprobs;
mod metrics;
mod prompt_cache;
mod respond;
mod scheduler;
mod shape;
mod stop;
mod structured;
mod tools;

pub use scheduler::PREFILL_STEP;

use corral_models::{LoadError, Model, ModelText};
use error::ApiError;
use metrics::Metrics;
use scheduler::Job;
use std::net::SocketAddr;
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// How the server runs. Every limit here is configuration with a documented default.
#[derive(Clone, Debug)]
pub struct ServeConfig {
    /// Address or host name to listen on. Default `127.0.0.1`.
    pub host: String,
    /// 0 picks a free port ([`ServerHandle::addr`] says which).
    pub port: u16,
    /// Requests must send `Authorization: Bearer <key>` (`/health` and `/metrics` are
    /// open).
    pub api_key: Option<String>,
    /// Requests generating at once (each holds a KV cache). Default 4.
    pub max_concurrent: usize,
    /// Requests waiting for a generation slot; past this a request gets 429. Default 64.
    pub queue: usize,
    /// Most seconds a request may run, queueing included (then 504, or an error event).
    /// Default 600.
    pub request_timeout: Duration,
    /// `max_tokens` when a request gives none (the context may cut it). Default 1024.
    pub default_max_tokens: usize,
    /// Largest request body. Default 8 MiB.
    pub max_body_bytes: usize,
    /// Most time a request's body may take to arrive (then 408). Default 30 s.
    pub body_timeout: Duration,
    /// Most time a request's headers may take to arrive, and an open connection may stay
    /// idle between requests (then it is closed). Default 30 s.
    pub header_timeout: Duration,
    /// Most connections open at once; a connection past it is closed as soon as it is
    /// accepted. Each holds a socket, a task and its buffers (a few KiB). Default 1,024.
    pub max_connections: usize,
    /// While some request decodes, the prompt positions one forward pass runs (over all
    /// prompts still running), or one per decoding request if there are more: what bounds
    /// the delay a long prompt adds to the streams beside it (see
    /// `scheduler::PassBudget`). Default [`DEFAULT_PREFILL_PER_PASS`].
    pub prefill_per_pass: usize,
    /// Most heap bytes the constraint cache holds (lexeme DFAs and token sets; see
    /// [`corral_engine::CacheLimits`]). Default [`corral_engine::DEFAULT_CACHE_BYTES`]
    /// (1 GiB).
    pub cache_bytes: usize,
    /// Most bytes the prompt cache holds: the KV caches of earlier prompts, which a prompt
    /// starting with the same tokens copies instead of running them (see
    /// `scheduler`). 0 turns it off. Default [`DEFAULT_PROMPT_CACHE_BYTES`].
    pub prompt_cache_bytes: usize,
    /// The model's id in responses and `/v1/models`.
    pub model_name: String,
    /// Whether the model reasons before it answers. Default [`Reasoning::Auto`].
    pub reasoning: Reasoning,
    /// Stop on SIGINT and SIGTERM (the command line); tests stop through the handle.
    pub handle_signals: bool,
}

impl Default for ServeConfig {
    fn default() -> ServeConfig {
        ServeConfig {
            host: "127.0.0.1".into(),
            port: 8080,
            api_key: None,
            max_concurrent: 4,
            queue: 64,
            request_timeout: Duration::from_secs(600),
            default_max_tokens: 1024,
            max_body_bytes: 8 << 20,
            body_timeout: Duration::from_secs(30),
            header_timeout: Duration::from_secs(30),
            max_connections: 1024,
            prefill_per_pass: DEFAULT_PREFILL_PER_PASS,
            cache_bytes: corral_engine::DEFAULT_CACHE_BYTES,
            prompt_cache_bytes: DEFAULT_PROMPT_CACHE_BYTES,
            model_name: "corral".into(),
            reasoning: Reasoning::Auto,
            handle_signals: false,
        }
    }
}

/// Whether a chat model reasons first (`<think>...</think>`, then the answer). When it
/// does, the output starts inside the reasoning block, which streams as
/// `reasoning_content`; a constraint applies to the answer after it, and the request's
/// `reasoning_budget` forces its end after that many tokens.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Reasoning {
    /// When the chat template writes `</think>`.
    #[default]
    Auto,
    /// Always: the prompt opens `<think>` if the template did not.
    Think,
    /// Never: the output is all answer.
    Off,
}

/// The default of [`ServeConfig::prefill_per_pass`].
pub const DEFAULT_PREFILL_PER_PASS: usize = 2;

/// The default of [`ServeConfig::prompt_cache_bytes`]: 64 MiB, about 1,400 positions of
/// SmolLM2-135M's f32 KV cache (46 KiB each).
pub const DEFAULT_PROMPT_CACHE_BYTES: usize = 64 << 20;

/// Why the server could not run.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// Binding the listener, or reading back its local address, failed.
    #[error("cannot listen on {addr}")]
    Bind {
        /// The address tried, `host:port` as configured.
        addr: String,
        /// What the operating system said.
        #[source]
        source: std::io::Error,
    },
    /// The tokio runtime or the server's thread could not be created.
    #[error("cannot start the server's runtime")]
    Runtime(#[source] std::io::Error),
    /// The loader failed; the server stops after this.
    #[error("cannot load the model")]
    Load(#[source] LoadError),
    /// The server's thread panicked instead of returning (seen by [`ServerHandle::wait`]).
    #[error("the server thread panicked")]
    Panicked,
}

/// Loads the model on a background thread while the server already answers `/health`.
pub type Loader = Box<dyn FnOnce() -> Result<Model, LoadError> + Send>;

/// The model once loaded: its text side for the handlers, the queue to the scheduler.
struct Ready {
    text: Arc<ModelText>,
    jobs: Sender<Job>,
    created: u64,
}

/// What every handler sees.
struct AppState {
    config: ServeConfig,
    ready: OnceLock<Ready>,
    metrics: Arc<Metrics>,
}

impl AppState {
    fn ready(&self) -> Result<&Ready, ApiError> {
        self.ready
            .get()
            .ok_or_else(|| ApiError::unavailable("the model is loading; retry shortly"))
    }
}

/// A running server.
#[derive(Debug)]
pub struct ServerHandle {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: std::thread::JoinHandle<Result<(), ServeError>>,
}

impl ServerHandle {
    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting, lets requests in flight finish, and waits for the end.
    pub fn shutdown(mut self) -> Result<(), ServeError> {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        self.wait()
    }

    /// Waits until the server stops (a signal, with [`ServeConfig::handle_signals`]; or a
    /// model that fails to load).
    pub fn wait(self) -> Result<(), ServeError> {
        self.thread.join().map_err(|_| ServeError::Panicked)?
    }
}

/// Binds the listener, then serves on a thread of its own while `load` loads the model.
pub fn spawn(config: ServeConfig, load: Loader) -> Result<ServerHandle, ServeError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(ServeError::Runtime)?;
    let addr = format!("{}:{}", config.host, config.port);
    let listener = rt
        .block_on(tokio::net::TcpListener::bind(&addr))
        .map_err(|source| ServeError::Bind {
            addr: addr.clone(),
            source,
        })?;
    let local = listener
        .local_addr()
        .map_err(|source| ServeError::Bind { addr, source })?;
    let (stop, stopped) = tokio::sync::oneshot::channel();
    let thread = std::thread::Builder::new()
        .name("corral-serve".into())
        .spawn(move || rt.block_on(serve(listener, config, load, stopped)))
        .map_err(ServeError::Runtime)?;
    Ok(ServerHandle {
        addr: local,
        stop: Some(stop),
        thread,
    })
}

async fn serve(
    listener: tokio::net::TcpListener,
    config: ServeConfig,
    load: Loader,
    stopped: tokio::sync::oneshot::Receiver<()>,
) -> Result<(), ServeError> {
    let state = Arc::new(AppState {
        config,
        ready: OnceLock::new(),
        metrics: Arc::new(Metrics::default()),
    });
    let (load_failed, mut load_error) = tokio::sync::mpsc::channel::<LoadError>(1);
    let scheduler = Arc::new(Mutex::new(None));
    {
        let state = state.clone();
        let scheduler = scheduler.clone();
        std::thread::spawn(move || match load() {
            Ok(model) => {
                let (lm, text) = model.into_parts();
                text.limit_constraints(corral_engine::CacheLimits {
                    bytes: state.config.cache_bytes,
                    ..corral_engine::CacheLimits::default()
                });
                let (jobs, queue) = std::sync::mpsc::channel();
                let metrics = state.metrics.clone();
                let max = state.config.max_concurrent;
                let budget = scheduler::PassBudget {
                    prefill_while_decoding: state.config.prefill_per_pass,
                };
                let cache = state.config.prompt_cache_bytes;
                let h = std::thread::Builder::new()
                    .name("corral-scheduler".into())
                    .spawn(move || scheduler::run(lm, queue, max, budget, cache, metrics));
                if let Ok(h) = h {
                    *scheduler.lock().unwrap_or_else(|e| e.into_inner()) = Some(h);
                }
                let created = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_secs())
                    .unwrap_or(0);
                let _ = state.ready.set(Ready {
                    text,
                    jobs,
                    created,
                });
                tracing::info!("model loaded");
            }
            Err(e) => {
                let _ = load_failed.blocking_send(e);
            }
        });
    }
    let signals = state.config.handle_signals;
    let router = handlers::router(state.clone());
    let failure = Arc::new(Mutex::new(None));
    let shutdown = {
        let failure = failure.clone();
        async move {
            tokio::select! {
                _ = stopped => {}
                Some(e) = load_error.recv() => *failure.lock().unwrap_or_else(|e| e.into_inner()) = Some(e),
                _ = signal(signals) => {}
            }
        }
    };
    let limits = ConnectionLimits {
        header_timeout: state.config.header_timeout,
        max_connections: state.config.max_connections,
    };
    accept_loop(listener, router, limits, shutdown).await;
    // The scheduler ends when the queue's last sender (in the state) is gone and its
    // requests are done.
    drop(state);
    let h = scheduler.lock().unwrap_or_else(|e| e.into_inner()).take();
    if let Some(h) = h {
        let _ = tokio::task::spawn_blocking(move || h.join()).await;
    }
    let failure = failure.lock().unwrap_or_else(|e| e.into_inner()).take();
    match failure {
        Some(e) => Err(ServeError::Load(e)),
        None => Ok(()),
    }
}

/// What bounds the connections: how long a request's headers (or an idle connection's
/// next request) may take, and how many may be open at once.
#[derive(Clone, Copy, Debug)]
struct ConnectionLimits {
    header_timeout: Duration,
    max_connections: usize,
}

/// Serves connections from `listener` until `shutdown`, then waits for the requests in
/// flight. HTTP/1.1 only (an HTTP/2 preface is not a request it reads: the connection is
/// closed). A client has `header_timeout` to send a request's headers, and an idle
/// connection as long to start its next request, or the connection is closed; past
/// `max_connections` open ones, a new connection is closed as soon as it is accepted.
async fn accept_loop(
    listener: tokio::net::TcpListener,
    router: axum::Router,
    limits: ConnectionLimits,
    shutdown: impl std::future::Future<Output = ()>,
) {
    use hyper_util::rt::{TokioIo, TokioTimer};
    use tower::ServiceExt;
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let open = Arc::new(tokio::sync::Semaphore::new(limits.max_connections.max(1)));
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors and the like: wait, then accept again.
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let Ok(permit) = open.clone().try_acquire_owned() else {
            tracing::debug!("connection refused: {} open", limits.max_connections);
            drop(stream);
            continue;
        };
        let router = router.clone();
        let service =
            hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                router.clone().oneshot(req.map(axum::body::Body::new))
            });
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder
            .timer(TokioTimer::new())
            .header_read_timeout(limits.header_timeout);
        let conn = builder.serve_connection(TokioIo::new(stream), service);
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!("connection ended: {e}");
            }
            drop(permit);
        });
    }
    drop(listener);
    graceful.shutdown().await;
}

/// SIGINT or SIGTERM, when `enabled`; otherwise never.
async fn signal(enabled: bool) {
    if !enabled {
        return std::future::pending().await;
    }
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(t) => t,
                Err(_) => return std::future::pending().await,
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}
