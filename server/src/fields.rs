//! The request fields every endpoint shares, checked and turned into options: sampling,
//! `logit_bias`, `logprobs`, the model's name, and the fields that are refused.

use crate::ServeConfig;
use crate::api::{Common, Stop};
use crate::error::ApiError;
use corral_engine::{SamplerMethod, SamplingOptions, SmcOptions};
use corral_trie::TokenId;
use serde_json::Value;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Seeds for requests without one: different per request.
static SEEDS: AtomicU64 = AtomicU64::new(0);

pub(crate) fn sampling(c: &Common, vocab: usize) -> Result<SamplingOptions, ApiError> {
    let f = |v: Option<f64>| v.map(|x| x as f32);
    let seed = c.seed.unwrap_or_else(|| {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        t ^ SEEDS.fetch_add(0x9E37_79B9_7F4A_7C15, Relaxed)
    });
    Ok(SamplingOptions {
        // OpenAI's defaults: temperature 1, top-p 1.
        temperature: f(c.temperature).unwrap_or(1.0),
        top_k: match c.top_k {
            None | Some(0) => None,
            Some(k) => Some(usize::try_from(k).unwrap_or(usize::MAX)),
        },
        top_p: f(c.top_p).filter(|&p| p != 1.0),
        min_p: f(c.min_p).filter(|&p| p != 0.0),
        repetition_penalty: f(c.repetition_penalty).unwrap_or(1.0),
        presence_penalty: f(c.presence_penalty).unwrap_or(0.0),
        frequency_penalty: f(c.frequency_penalty).unwrap_or(0.0),
        logit_bias: logit_bias(c, vocab)?,
        seed,
        ..SamplingOptions::default()
    })
}

/// The `sampler` extension: plain masking (the default) or SMC, whose particles each take
/// one of the server's `max_concurrent` places. SMC is refused where it cannot apply: with
/// log-probabilities (each particle has its own) and stop sequences (they would cut the
/// particles' outputs where the weights do not see); the sampling settings it cannot weigh
/// (top-p, top-k, min-p, temperature 0) are refused with the others.
pub(crate) fn sampler(
    c: &Common,
    max_concurrent: usize,
    logprobs: Option<usize>,
) -> Result<SamplerMethod, ApiError> {
    let Some(f) = &c.sampler else {
        return Ok(SamplerMethod::Plain);
    };
    let bad = |m: String| Err(ApiError::invalid_param("sampler", m));
    match f.method.as_str() {
        "plain" if f.particles.is_none() && f.ess_threshold.is_none() => {
            return Ok(SamplerMethod::Plain);
        }
        "plain" => return bad("particles and ess_threshold need the method smc".into()),
        "smc" => {}
        m => return bad(format!("sampler method {m:?}: plain or smc")),
    }
    let places = max_concurrent.max(1);
    let default = SmcOptions::new(8.min(places));
    let particles = match f.particles {
        None => default.particles,
        Some(n) if n >= 1 && n as usize <= places.min(SmcOptions::MAX_PARTICLES) => n as usize,
        Some(n) => {
            return bad(format!(
                "particles is {n}: 1 to {} on this server (each particle takes one of its {places} places)",
                places.min(SmcOptions::MAX_PARTICLES)
            ));
        }
    };
    if logprobs.is_some() {
        return bad(
            "logprobs do not apply with the smc sampler (each particle has its own)".into(),
        );
    }
    let stops = match &c.stop {
        Some(Stop::One(_)) => true,
        Some(Stop::Many(v)) => !v.is_empty(),
        None => false,
    };
    if stops {
        return bad("stop sequences do not apply with the smc sampler".into());
    }
    Ok(SamplerMethod::Smc(SmcOptions {
        particles,
        ess_threshold: f.ess_threshold.unwrap_or(default.ess_threshold),
    }))
}

/// `logit_bias`: token ids (written as strings, as OpenAI's clients send them) of the
/// model's vocabulary, each with its bias (its range is checked with the other settings).
pub(crate) fn logit_bias(c: &Common, vocab: usize) -> Result<Vec<(TokenId, f32)>, ApiError> {
    let Some(map) = &c.logit_bias else {
        return Ok(Vec::new());
    };
    map.iter()
        .map(|(k, &b)| match k.parse::<u32>() {
            Ok(t) if (t as usize) < vocab => Ok((TokenId(t), b as f32)),
            _ => Err(ApiError::invalid_param(
                "logit_bias",
                format!("logit_bias key {k:?} is not a token id of the model's {vocab} tokens"),
            )),
        })
        .collect()
}

/// How many of the most likely tokens to list with each token's log-probability, if they
/// are asked for: chat's `logprobs` (true or false) and `top_logprobs`, or a completion's
/// `logprobs` (a count). At most [`MAX_TOP_LOGPROBS`].
pub(crate) fn logprobs(c: &Common, chat: bool) -> Result<Option<usize>, ApiError> {
    let bad = |m: String| Err(ApiError::invalid_param("logprobs", m));
    let top = |n: u64, field: &'static str| match usize::try_from(n) {
        Ok(n) if n <= MAX_TOP_LOGPROBS => Ok(n),
        _ => Err(ApiError::invalid_param(
            field,
            format!("{field} is {n}: at most {MAX_TOP_LOGPROBS}"),
        )),
    };
    match (chat, &c.logprobs) {
        (true, None | Some(Value::Null) | Some(Value::Bool(false))) => match c.top_logprobs {
            None | Some(0) => Ok(None),
            Some(_) => Err(ApiError::invalid_param(
                "top_logprobs",
                "top_logprobs needs logprobs: true",
            )),
        },
        (true, Some(Value::Bool(true))) => {
            Ok(Some(top(c.top_logprobs.unwrap_or(0), "top_logprobs")?))
        }
        (true, Some(v)) => bad(format!("logprobs is {v}: expected true or false")),
        (false, None | Some(Value::Null)) => Ok(None),
        (false, Some(v)) => match v.as_u64() {
            Some(n) => Ok(Some(top(n, "logprobs")?)),
            None => bad(format!(
                "logprobs is {v}: expected how many of the most likely tokens to list (0 to {MAX_TOP_LOGPROBS})"
            )),
        },
    }
}

/// Most of the likeliest tokens listed with each token's log-probability (OpenAI's bound).
pub const MAX_TOP_LOGPROBS: usize = 20;

/// Refuses what a request asks for that is not served: `echo`, `suffix`, `best_of` other
/// than 1, output modalities other than text, `stream_options` without `stream`.
pub(crate) fn refuse_unserved(c: &Common) -> Result<(), ApiError> {
    if c.echo == Some(true) {
        return Err(ApiError::invalid_param(
            "echo",
            "echo is not served: the response holds the completion only",
        ));
    }
    if c.suffix.as_deref().is_some_and(|s| !s.is_empty()) {
        return Err(ApiError::invalid_param(
            "suffix",
            "suffix (insertion) is not served",
        ));
    }
    if let Some(n) = c.best_of.filter(|&n| n != 1) {
        return Err(ApiError::invalid_param(
            "best_of",
            format!("best_of is {n}: one completion per request is served"),
        ));
    }
    if let Some(m) = c
        .modalities
        .as_ref()
        .filter(|m| m.iter().any(|x| x != "text"))
    {
        return Err(ApiError::invalid_param(
            "modalities",
            format!("modalities {m:?}: only text is served"),
        ));
    }
    if c.stream_options.is_some() && !c.stream {
        return Err(ApiError::invalid_param(
            "stream_options",
            "stream_options is only allowed when stream is true",
        ));
    }
    Ok(())
}

/// A request's `model`, if given, must be the one served: 404 `model_not_found` otherwise.
pub(crate) fn check_model(model: Option<&str>, config: &ServeConfig) -> Result<(), ApiError> {
    match model {
        Some(m) if m != config.model_name => Err(ApiError {
            code: Some("model_not_found"),
            ..ApiError::not_found(format!(
                "the model {m:?} does not exist: this server serves {:?} (GET /v1/models)",
                config.model_name
            ))
            .with_param_name("model".into())
        }),
        _ => Ok(()),
    }
}
