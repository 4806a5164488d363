//! `corral serve`: the OpenAI-compatible server (corral-server) on a model.

use crate::Failure;
use anyhow::{Context, anyhow};
use corral::models::{DeviceSpec, Model};
use corral::server::{Reasoning, ServeConfig, spawn};
use std::time::Duration;

#[derive(clap::Args)]
pub struct ServeArgs {
    /// A GGUF file, a safetensors folder, a Hub repo id (`owner/name`, or
    /// `owner/name:file.gguf`). Default: SmolLM2-135M-Instruct Q4_1, fetched if missing.
    #[arg(long, short = 'm')]
    model: Option<String>,
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// 0 picks a free port (printed on standard error).
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// Clients must send `Authorization: Bearer KEY` (default: $CORRAL_API_KEY if set).
    #[arg(long, env = "CORRAL_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// Requests generating at once.
    #[arg(long, default_value_t = 4)]
    max_concurrent: usize,
    /// Requests waiting for a place; past this, 429.
    #[arg(long, default_value_t = 64)]
    queue: usize,
    /// Most seconds a request may take, queueing included.
    #[arg(long, default_value_t = 600)]
    request_timeout: u64,
    /// max_tokens for requests that give none.
    #[arg(long, default_value_t = 1024)]
    default_max_tokens: usize,
    /// Largest request body, in bytes.
    #[arg(long, default_value_t = 8 << 20)]
    max_body_bytes: usize,
    /// Most seconds a request's body may take to arrive (then 408).
    #[arg(long, default_value_t = 30)]
    body_timeout: u64,
    /// Most seconds a request's headers may take to arrive, and a connection may stay idle
    /// between requests (then it closes).
    #[arg(long, default_value_t = 30)]
    header_timeout: u64,
    /// Most connections open at once; more are closed as they arrive.
    #[arg(long, default_value_t = 1024)]
    max_connections: usize,
    /// While some request decodes, the prompt positions one forward pass runs (or one per
    /// decoding request, if more): bounds the delay a long prompt adds to the other streams.
    #[arg(long, default_value_t = corral::server::DEFAULT_PREFILL_PER_PASS)]
    prefill_per_pass: usize,
    /// Most heap bytes the constraint cache holds (compiled lexemes and token sets).
    #[arg(long, default_value_t = corral::engine::DEFAULT_CACHE_BYTES)]
    cache_bytes: usize,
    /// Most bytes the prompt cache holds (KV caches of earlier prompts, copied by a prompt
    /// that starts with the same tokens); 0 turns it off.
    #[arg(long, default_value_t = corral::server::DEFAULT_PROMPT_CACHE_BYTES)]
    prompt_cache_bytes: usize,
    /// The model's id in responses (default: the model file's name).
    #[arg(long)]
    model_name: Option<String>,
    /// Whether the model reasons before answering (`<think>...</think>`): auto (when its chat
    /// template writes `</think>`), think or off.
    #[arg(long, value_enum, default_value = "auto")]
    reasoning: ReasoningArg,
    /// cpu, cuda or cuda:N.
    #[arg(long, default_value = "cpu")]
    device: String,
    /// Most positions (prompt and output) a request may hold, below the model's own (the
    /// GGUF file's context length): what bounds each sequence's KV cache's memory.
    #[arg(long)]
    ctx_size: Option<std::num::NonZeroUsize>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum ReasoningArg {
    Auto,
    Think,
    Off,
}

pub fn run(args: &ServeArgs) -> Result<(), Failure> {
    let device: DeviceSpec = args.device.parse().map_err(anyhow::Error::from)?;
    if args.max_concurrent == 0 {
        return Err(anyhow!("--max-concurrent must be at least 1").into());
    }
    if args.prefill_per_pass == 0 {
        return Err(anyhow!("--prefill-per-pass must be at least 1").into());
    }
    if args.max_connections == 0 {
        return Err(anyhow!("--max-connections must be at least 1").into());
    }
    if args.request_timeout == 0 {
        return Err(anyhow!("--request-timeout must be at least 1 second").into());
    }
    let source = match &args.model {
        Some(m) => m.clone(),
        None => crate::generate::default_model()?,
    };
    let model_name = args.model_name.clone().unwrap_or_else(|| {
        let base = source.rsplit(['/', ':']).next().unwrap_or(&source);
        base.strip_suffix(".gguf").unwrap_or(base).to_string()
    });
    let config = ServeConfig {
        host: args.host.clone(),
        port: args.port,
        api_key: args.api_key.clone().filter(|k| !k.is_empty()),
        max_concurrent: args.max_concurrent,
        queue: args.queue,
        request_timeout: Duration::from_secs(args.request_timeout),
        default_max_tokens: args.default_max_tokens,
        max_body_bytes: args.max_body_bytes,
        body_timeout: Duration::from_secs(args.body_timeout),
        header_timeout: Duration::from_secs(args.header_timeout),
        max_connections: args.max_connections,
        prefill_per_pass: args.prefill_per_pass,
        cache_bytes: args.cache_bytes,
        prompt_cache_bytes: args.prompt_cache_bytes,
        model_name,
        reasoning: match args.reasoning {
            ReasoningArg::Auto => Reasoning::Auto,
            ReasoningArg::Think => Reasoning::Think,
            ReasoningArg::Off => Reasoning::Off,
        },
        handle_signals: true,
    };
    let load_from = source.clone();
    let ctx_size = args.ctx_size;
    let load = move || {
        let model = Model::load(&load_from, device)?;
        match ctx_size {
            Some(n) => model.with_max_positions(n),
            None => Ok(model),
        }
    };
    let server = spawn(config, Box::new(load)).context("corral serve")?;
    eprintln!(
        "corral: listening on http://{} (model {source} loading)",
        server.addr()
    );
    server.wait().context("corral serve")?;
    eprintln!("corral: stopped");
    Ok(())
}
