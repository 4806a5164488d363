//! gpt-oss on a candle device (CUDA): the network of [`super::GptOss`] written in candle's
//! tensor ops, so it runs wherever candle does.
//!
//! It is built from a loaded [`super::GptOss`] ([`GptOss::to_device`]): every weight is
//! unpacked to f32 on the device, the MXFP4 experts included. That is four times the
//! experts' packed bytes, and the published 20B model's 13 GB of experts become about
//! 50 GB: a path that proves the network on the device, not one for serving large models
//! on small cards. Each sequence keeps its keys and values on the device (rotated, per
//! layer, `kv_heads x positions x head_dim`); a batch runs its sequences one after another.
//! Routing reads the router's scores back to the host: which rows go to which expert is
//! decided there, as on the CPU, and each expert then multiplies its rows on the device.
//!
//! `tests/gpt_oss_logits.rs` runs it on the CPU device against transformers' logits;
//! `scripts/gpu-check` runs it on cuda:0 against the CPU network.

use super::{GptOss, Weights};
use crate::candle_lm::CandleNet;
use candle_core::{D, DType, Device, Result, Tensor};
use std::sync::Arc;

/// A weight matrix and its bias, on the device.
#[derive(Clone)]
struct Linear {
    w: Tensor,
    b: Option<Tensor>,
}

impl Linear {
    fn new(d: &super::Dense, device: &Device) -> Result<Linear> {
        let (w, b) = d.to_device(device)?;
        Ok(Linear { w, b })
    }

    /// `x (n x cols)` times the matrix's transpose, plus the bias.
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let y = x.matmul(&self.w.t()?)?;
        match &self.b {
            Some(b) => y.broadcast_add(b),
            None => Ok(y),
        }
    }
}

struct Layer {
    attn_norm: Tensor,
    ffn_norm: Tensor,
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    /// `(heads, 1, 1)`.
    sinks: Tensor,
    window: Option<usize>,
    router: Linear,
    /// Per expert: gate and up interleaved by row, `(2 * intermediate, hidden)`.
    gate_up: Vec<Linear>,
    down: Vec<Linear>,
}

struct DeviceWeights {
    host: Arc<Weights>,
    device: Device,
    embeddings: Tensor,
    layers: Vec<Layer>,
    norm: Tensor,
    output: Linear,
}

/// gpt-oss on a device: shared weights, one sequence's caches.
#[derive(Clone)]
pub struct DeviceGptOss {
    weights: Arc<DeviceWeights>,
    /// Per layer, the rotated keys and the values so far.
    caches: Vec<Option<(Tensor, Tensor)>>,
}

impl std::fmt::Debug for DeviceGptOss {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let cached_positions = match self.caches.first() {
            Some(Some((k, _))) => k.dim(1).unwrap_or(0),
            _ => 0,
        };
        f.debug_struct("DeviceGptOss")
            .field("device", &self.weights.device)
            .field("layers", &self.weights.layers.len())
            .field("cached_positions", &cached_positions)
            .finish_non_exhaustive()
    }
}

impl GptOss {
    /// The same network on `device`, its weights unpacked to f32 there (see
    /// [`crate::gpt_oss::device`]).
    pub fn to_device(&self, device: &Device) -> Result<DeviceGptOss> {
        let w = &self.weights;
        let vector = |v: &[f32]| Tensor::new(v, device);
        let mut layers = Vec::with_capacity(w.layers.len());
        for l in &w.layers {
            let (inter, hidden) = (w.config.intermediate, w.config.hidden);
            let expert = |m: &super::Matrix, bias: &[f32]| -> Result<Linear> {
                Ok(Linear {
                    w: m.to_device(device)?,
                    b: Some(vector(bias)?),
                })
            };
            let gate_up = (0..w.config.experts)
                .map(|e| {
                    expert(
                        &l.gate_up[e],
                        &l.gate_up_bias[e * 2 * inter..(e + 1) * 2 * inter],
                    )
                })
                .collect::<Result<Vec<_>>>()?;
            let down = (0..w.config.experts)
                .map(|e| expert(&l.down[e], &l.down_bias[e * hidden..(e + 1) * hidden]))
                .collect::<Result<Vec<_>>>()?;
            layers.push(Layer {
                attn_norm: vector(&l.attn_norm)?,
                ffn_norm: vector(&l.ffn_norm)?,
                q: Linear::new(&l.q, device)?,
                k: Linear::new(&l.k, device)?,
                v: Linear::new(&l.v, device)?,
                o: Linear::new(&l.o, device)?,
                sinks: vector(&l.sinks)?.reshape((l.sinks.len(), 1, 1))?,
                window: l.window,
                router: Linear::new(&l.router, device)?,
                gate_up,
                down,
            });
        }
        let (embeddings, _) = w.embeddings.to_device(device)?;
        let weights = DeviceWeights {
            host: w.clone(),
            device: device.clone(),
            embeddings,
            norm: vector(&w.norm)?,
            output: Linear::new(&w.output, device)?,
            layers,
        };
        Ok(DeviceGptOss {
            caches: vec![None; weights.layers.len()],
            weights: Arc::new(weights),
        })
    }
}

impl DeviceGptOss {
    /// The logits of every one of `tokens`' positions (`(tokens, vocabulary)`, on the
    /// device), which sit at positions `pos..` of this sequence; position 0 starts a new
    /// sequence.
    pub fn forward_all(&mut self, tokens: &[u32], pos: usize) -> Result<Tensor> {
        self.run(tokens, pos, true)
    }

    fn run(&mut self, tokens: &[u32], pos: usize, every: bool) -> Result<Tensor> {
        let w = self.weights.clone();
        let c = &w.host.config;
        c.check_input(tokens, pos)?;
        let held = match &self.caches[0] {
            Some((k, _)) => k.dim(1)?,
            None => 0,
        };
        if pos == 0 {
            self.clear_kv_cache();
        } else if held != pos {
            return Err(candle_core::Error::Msg(format!(
                "the KV cache holds {held} positions, not the {pos} before this input"
            )));
        }
        let dev = &w.device;
        let n = tokens.len();
        let positions: Vec<usize> = (pos..pos + n).collect();
        let (cos, sin) = w.host.rope_rows(&positions);
        let half = c.head_dim / 2;
        let cos = Tensor::from_vec(cos, (1, n, half), dev)?;
        let sin = Tensor::from_vec(sin, (1, n, half), dev)?;
        let mut x = w.embeddings.index_select(&Tensor::new(tokens, dev)?, 0)?;
        // The caches change once the whole pass has run: a failed one leaves them as they
        // were.
        let mut caches = Vec::with_capacity(w.layers.len());
        for (l, layer) in w.layers.iter().enumerate() {
            let h = rms_norm(&x, &layer.attn_norm, c.eps)?;
            let heads = |t: Tensor, count: usize| {
                t.reshape((n, count, c.head_dim))?
                    .transpose(0, 1)?
                    .contiguous()
            };
            let q = rotate_halves(&heads(layer.q.forward(&h)?, c.heads)?, &cos, &sin)?;
            let k = rotate_halves(&heads(layer.k.forward(&h)?, c.kv_heads)?, &cos, &sin)?;
            let v = heads(layer.v.forward(&h)?, c.kv_heads)?;
            let (k, v) = match &self.caches[l] {
                Some((ck, cv)) => (Tensor::cat(&[ck, &k], 1)?, Tensor::cat(&[cv, &v], 1)?),
                None => (k, v),
            };
            caches.push((k.clone(), v.clone()));
            let y = attend(&q, &k, &v, layer, pos, c.heads / c.kv_heads)?;
            let y = y.transpose(0, 1)?.reshape((n, c.heads * c.head_dim))?;
            x = (x + layer.o.forward(&y)?)?;
            let h = rms_norm(&x, &layer.ffn_norm, c.eps)?;
            x = (&x + experts(&h, layer, c)?)?;
        }
        let x = match every {
            true => x,
            false => x.narrow(0, n - 1, 1)?,
        };
        let logits = w.output.forward(&rms_norm(&x, &w.norm, c.eps)?)?;
        self.caches = caches.into_iter().map(Some).collect();
        Ok(logits)
    }
}

/// RMS norm of each row: `x / sqrt(mean(x^2) + eps) * weight`.
fn rms_norm(x: &Tensor, weight: &Tensor, eps: f32) -> Result<Tensor> {
    let ms = x.sqr()?.mean_keepdim(D::Minus1)?;
    let x = x.broadcast_div(&(ms + f64::from(eps))?.sqrt()?)?;
    x.broadcast_mul(weight)
}

/// RoPE on halves of each head (`(heads, n, head_dim)`), with `(1, n, head_dim / 2)`
/// tables.
fn rotate_halves(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
    let half = x.dim(D::Minus1)? / 2;
    let (a, b) = (
        x.narrow(D::Minus1, 0, half)?,
        x.narrow(D::Minus1, half, half)?,
    );
    let ra = (a.broadcast_mul(cos)? - b.broadcast_mul(sin)?)?;
    let rb = (b.broadcast_mul(cos)? + a.broadcast_mul(sin)?)?;
    Tensor::cat(&[&ra, &rb], D::Minus1)
}

/// Attention of queries `q` (`(heads, n, head_dim)`, at positions `pos..`) over all the
/// sequence's keys and values (`(kv_heads, seen, head_dim)`): causal, within the layer's
/// window, with each head's sink logit in the softmax's denominator.
fn attend(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    layer: &Layer,
    pos: usize,
    groups: usize,
) -> Result<Tensor> {
    let (heads, n, d) = q.dims3()?;
    let (kv_heads, seen, _) = k.dims3()?;
    let repeat = |t: &Tensor| {
        t.unsqueeze(1)?
            .broadcast_as((kv_heads, groups, seen, d))?
            .reshape((heads, seen, d))
    };
    let (k, v) = (repeat(k)?, repeat(v)?);
    let scores = (q.matmul(&k.t()?)? / (d as f64).sqrt())?;
    // Row i (position pos + i) sees keys first..=pos + i.
    let mut mask = vec![0f32; n * seen];
    for (i, row) in mask.chunks_exact_mut(seen).enumerate() {
        let at = pos + i;
        let first = layer.window.map_or(0, |w| (at + 1).saturating_sub(w));
        for (j, m) in row.iter_mut().enumerate() {
            if j < first || j > at {
                *m = f32::NEG_INFINITY;
            }
        }
    }
    let mask = Tensor::from_vec(mask, (1, n, seen), q.device())?;
    let scores = scores.broadcast_add(&mask)?;
    let sinks = layer
        .sinks
        .broadcast_as((heads, n, 1))?
        .to_dtype(scores.dtype())?
        .contiguous()?;
    let with_sinks = Tensor::cat(&[&scores, &sinks], D::Minus1)?.contiguous()?;
    let probs = candle_nn::ops::softmax_last_dim(&with_sinks)?
        .narrow(D::Minus1, 0, seen)?
        .contiguous()?;
    probs.matmul(&v)
}

/// The mixture of experts for rows `h` (`(n, hidden)`): routed on the host, each expert's
/// rows multiplied on the device.
fn experts(h: &Tensor, layer: &Layer, c: &super::Config) -> Result<Tensor> {
    let scores = layer
        .router
        .forward(h)?
        .to_dtype(DType::F32)?
        .to_vec2::<f32>()?;
    let mut routed: Vec<Vec<(u32, f32)>> = vec![Vec::new(); c.experts];
    for (r, s) in scores.iter().enumerate() {
        for (e, weight) in super::route(s, c.top_k) {
            routed[e].push((r as u32, weight));
        }
    }
    let mut out = h.zeros_like()?;
    let limit = f64::from(c.swiglu_limit);
    for (e, list) in routed.iter().enumerate() {
        if list.is_empty() {
            continue;
        }
        let m = list.len();
        let rows: Vec<u32> = list.iter().map(|&(r, _)| r).collect();
        let weights: Vec<f32> = list.iter().map(|&(_, w)| w).collect();
        let rows = Tensor::new(rows.as_slice(), h.device())?;
        let xs = h.index_select(&rows, 0)?;
        let gu = layer.gate_up[e]
            .forward(&xs)?
            .reshape((m, c.intermediate, 2))?;
        let gate = gu.narrow(2, 0, 1)?.squeeze(2)?.minimum(limit)?;
        let up = gu.narrow(2, 1, 1)?.squeeze(2)?.clamp(-limit, limit)?;
        let sig = ((gate.affine(-f64::from(c.swiglu_alpha), 0.0)?.exp()? + 1.0)?).recip()?;
        let act = ((up + 1.0)? * (gate * sig)?)?;
        let y = layer.down[e].forward(&act)?;
        let weights = Tensor::from_vec(weights, (m, 1), h.device())?;
        out = out.index_add(&rows, &y.broadcast_mul(&weights)?, 0)?;
    }
    Ok(out)
}

impl CandleNet for DeviceGptOss {
    fn forward(&mut self, input: &Tensor, pos: usize) -> Result<Tensor> {
        let tokens = input.flatten_all()?.to_vec1::<u32>()?;
        self.run(&tokens, pos, false)
    }

    fn clear_kv_cache(&mut self) {
        self.caches.iter_mut().for_each(|c| *c = None);
    }
}
