//! The KV cache of one sequence's layer, and attention for a decoding step computed by
//! hand on the CPU.
//!
//! A decoding step attends one new position to every cached one. Through candle tensors
//! that took about fifteen small operations per layer, each allocating, and a cache
//! concatenated into new tensors at every step (a copy of the whole cache: quadratic in
//! the output's length). Here, on the CPU, keys and values are appended in place to one
//! buffer per layer, and a step's attention is three loops over it:
//!
//! 1. rotate the new query and key (RoPE, interleaved pairs as candle's `rope_i`), append
//!    the key and value ([`push_step`]);
//! 2. for each key-value head (in parallel, and across the sequences of a batch), the
//!    scores of the query heads sharing it against its cached keys, scaled by
//!    `1/sqrt(head_dim)`, then softmax ([`attend_steps`]);
//! 3. the value rows weighted by the softmax.
//!
//! Several new positions of one sequence (a short prompt, or a piece of one beside other
//! sequences' steps) go the same way, each row seeing its own prefix of the cache, so a
//! position's result is the same however its rows are grouped within step passes. Long
//! prompt chunks attend by hand too, in blocks of rows that share each key
//! ([`crate::chunk_attention`]), rounding differently. On
//! other devices (CUDA) the cache stays candle tensors, concatenated as before.

use crate::kv_store::{KvType, Values, ValuesRef};
use candle_core::{Result, Tensor};

/// Keys and values of the positions a layer has seen.
#[derive(Clone, Debug)]
pub(crate) enum KvCache {
    /// On the CPU: `[position][kv_head][head_dim]`, appended in place.
    Host { k: Values, v: Values },
    /// On another device: `(1, kv_heads, positions, head_dim)` tensors, or none yet.
    Device(Option<(Tensor, Tensor)>),
}

/// The attention shape shared by every layer.
#[derive(Clone, Debug)]
pub(crate) struct Heads {
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub rope: Rope,
}

/// Which pairs of a head's values RoPE turns together.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Rope {
    /// `(x[2i], x[2i+1])`, as candle's `rope_i` (llama.cpp's GGUF llama layout).
    Interleaved,
    /// `(x[i], x[i + head_dim/2])`, as transformers' `rotate_half` (gpt-oss).
    Halves,
}

/// What a layer's attention adds to plain causal attention (gpt-oss; llama has neither).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Span<'a> {
    /// Each row sees only its last `window` positions (its own included).
    pub window: Option<usize>,
    /// One learned logit per query head, in the softmax's denominator only: a head may
    /// give part of its weight to no position.
    pub sinks: Option<&'a [f32]>,
}

impl Heads {
    /// Floats of one position's keys (or values).
    pub(crate) fn row(&self) -> usize {
        self.kv_heads * self.head_dim
    }
}

impl KvCache {
    /// An empty cache; `ty` is the type of a host one's values.
    pub(crate) fn new(on_cpu: bool, ty: KvType) -> KvCache {
        match on_cpu {
            true => KvCache::Host {
                k: Values::new(ty),
                v: Values::new(ty),
            },
            false => KvCache::Device(None),
        }
    }

    pub(crate) fn clear(&mut self) {
        match self {
            KvCache::Host { k, v } => {
                k.clear();
                v.clear();
            }
            KvCache::Device(c) => *c = None,
        }
    }

    /// Host bytes held (capacity), zero for a cache on a device.
    pub(crate) fn host_bytes(&self) -> usize {
        match self {
            KvCache::Host { k, v } => k.bytes() + v.bytes(),
            KvCache::Device(_) => 0,
        }
    }

    /// Bytes held, on the host (capacity) or on a device.
    pub(crate) fn bytes(&self) -> usize {
        match self {
            KvCache::Host { .. } => self.host_bytes(),
            KvCache::Device(None) => 0,
            KvCache::Device(Some((k, v))) => {
                (k.elem_count() + v.elem_count()) * k.dtype().size_in_bytes()
            }
        }
    }

    /// A copy of the first `positions` positions (at most those held), sized to them.
    pub(crate) fn copy_prefix(&self, positions: usize, heads: &Heads) -> Result<KvCache> {
        Ok(match self {
            KvCache::Host { k, v } => {
                let n = positions.saturating_mul(heads.row());
                KvCache::Host {
                    k: k.prefix(n),
                    v: v.prefix(n),
                }
            }
            KvCache::Device(None) => KvCache::Device(None),
            KvCache::Device(Some((k, v))) => match positions.min(k.dim(2)?) {
                0 => KvCache::Device(None),
                n => KvCache::Device(Some((
                    k.narrow(2, 0, n)?.contiguous()?,
                    v.narrow(2, 0, n)?.contiguous()?,
                ))),
            },
        })
    }

    /// Positions held.
    pub(crate) fn len(&self, heads: &Heads) -> Result<usize> {
        match self {
            KvCache::Host { k, .. } => Ok(k.len() / heads.row()),
            KvCache::Device(None) => Ok(0),
            KvCache::Device(Some((k, _))) => k.dim(2),
        }
    }

    /// Appends `k` and `v` (`(1, kv_heads, seq, head_dim)`, keys rotated) and returns the
    /// whole cache as such tensors, for attention through candle.
    pub(crate) fn append_tensors(&mut self, k: Tensor, v: Tensor) -> Result<(Tensor, Tensor)> {
        match self {
            KvCache::Host { k: ck, v: cv } => {
                let (_, kv_heads, _, head_dim) = k.dims4()?;
                let rows = |t: &Tensor| {
                    t.squeeze(0)?
                        .transpose(0, 1)?
                        .flatten_all()?
                        .to_vec1::<f32>()
                };
                ck.append(&rows(&k)?, kv_heads * head_dim);
                cv.append(&rows(&v)?, kv_heads * head_dim);
                let n = ck.len() / (kv_heads * head_dim);
                let whole = |c: &Values| -> Result<Tensor> {
                    Tensor::from_slice(&c.view().to_f32(), (n, kv_heads, head_dim), k.device())?
                        .transpose(0, 1)?
                        .contiguous()?
                        .unsqueeze(0)
                };
                Ok((whole(ck)?, whole(cv)?))
            }
            KvCache::Device(c) => {
                let (k, v) = match c.take() {
                    Some((ck, cv)) => (Tensor::cat(&[&ck, &k], 2)?, Tensor::cat(&[&cv, &v], 2)?),
                    None => (k, v),
                };
                *c = Some((k.clone(), v.clone()));
                Ok((k, v))
            }
        }
    }
}

/// The weights a batch's sequences share, once the batch is checked: at least one
/// sequence, one input (with tokens) and one position per sequence, and one set of weights
/// (`weights`: each sequence's).
pub(crate) fn batch_weights<'a, W: 'a>(
    weights: impl ExactSizeIterator<Item = &'a std::sync::Arc<W>>,
    tokens: &[&[u32]],
    pos: &[usize],
) -> Result<std::sync::Arc<W>> {
    let n = weights.len();
    let mut weights = weights;
    let Some(first) = weights.next() else {
        return Err(candle_core::Error::Msg("an empty batch".into()));
    };
    if tokens.len() != n || pos.len() != n || tokens.iter().any(|t| t.is_empty()) {
        return Err(candle_core::Error::Msg(format!(
            "{n} sequences, {} inputs (each with tokens) and {} positions",
            tokens.len(),
            pos.len()
        )));
    }
    if weights.any(|w| !std::sync::Arc::ptr_eq(w, first)) {
        return Err(candle_core::Error::Msg(
            "a batch's sequences must share one model's weights".into(),
        ));
    }
    Ok(first.clone())
}

/// The first half of a decoding step of one sequence's layer on the CPU: rotates `q`
/// (`heads x head_dim`) and `k` (`kv_heads x head_dim`) for their position with the
/// tables' row `cos`/`sin` (`head_dim / 2` each), and appends `k` and `v` to the cache.
pub(crate) fn push_step(
    cache: &mut KvCache,
    heads: &Heads,
    (cos, sin): (&[f32], &[f32]),
    q: &mut [f32],
    k: &mut [f32],
    v: &[f32],
) -> Result<()> {
    let KvCache::Host { k: ck, v: cv } = cache else {
        return Err(candle_core::Error::Msg(
            "a decoding step by hand needs the cache on the CPU".into(),
        ));
    };
    for head in q
        .chunks_exact_mut(heads.head_dim)
        .chain(k.chunks_exact_mut(heads.head_dim))
    {
        match heads.rope {
            Rope::Interleaved => rotate(head, cos, sin),
            Rope::Halves => rotate_halves(head, cos, sin),
        }
    }
    ck.append(k, heads.row());
    cv.append(v, heads.row());
    Ok(())
}

/// The second half, for several rows at once: row i attends to the first `views[i].1`
/// positions of cache `views[i].0` (its own position and those before it: several rows of
/// one sequence each see their own prefix). `q` holds each row's rotated queries
/// (`heads x head_dim` each, in the order of `views`), `out` gets each one's attention
/// output in the same layout; `span` narrows what each row sees. The work is split by
/// (row, key-value head) among candle's pool of threads; each part reads its keys and
/// values once for the query heads that share them. A row's result does not depend on the
/// other rows of the batch.
pub(crate) fn attend_steps(
    views: &[(&KvCache, usize)],
    heads: &Heads,
    span: Span,
    q: &[f32],
    out: &mut [f32],
) -> Result<()> {
    let d = heads.head_dim;
    let qn = heads.heads * d;
    let groups = heads.heads / heads.kv_heads;
    let row = heads.row();
    let mut host = Vec::with_capacity(views.len());
    for &(cache, seen) in views {
        match cache {
            KvCache::Host { k, v } if seen * row <= k.len() => {
                let first = span.window.map_or(0, |w| seen.saturating_sub(w));
                let span = first * row..seen * row;
                host.push((k.view().slice(span.clone()), v.view().slice(span)))
            }
            KvCache::Host { k, .. } => {
                return Err(candle_core::Error::Msg(format!(
                    "a row attends to {seen} positions; the cache holds {}",
                    k.len() / row
                )));
            }
            KvCache::Device(_) => {
                return Err(candle_core::Error::Msg(
                    "a decoding step by hand needs the cache on the CPU".into(),
                ));
            }
        }
    }
    if span.sinks.is_some_and(|s| s.len() != heads.heads) {
        return Err(candle_core::Error::Msg(format!(
            "{} heads, {} attention sinks",
            heads.heads,
            span.sinks.map_or(0, <[f32]>::len)
        )));
    }
    if q.len() != views.len() * qn || out.len() != q.len() {
        return Err(candle_core::Error::Msg(format!(
            "{} rows, {} query values and {} outputs",
            views.len(),
            q.len(),
            out.len()
        )));
    }
    let parts = views.len() * heads.kv_heads;
    let base = out.as_mut_ptr() as usize;
    let part = |p: usize| {
        let (i, g) = (p / heads.kv_heads, p % heads.kv_heads);
        let at = i * qn + g * groups * d;
        let len = groups * d;
        // SAFETY: part p writes `out[at..at + len]`, the outputs of row i's query heads of
        // key-value head g, which no other part writes; `out` outlives the call
        // (execute_chunked returns when every part is done).
        let o = unsafe { std::slice::from_raw_parts_mut((base as *mut f32).add(at), len) };
        let sinks = span.sinks.map(|s| &s[g * groups..(g + 1) * groups]);
        attend_group(host[i], heads, g, sinks, &q[at..at + len], o);
    };
    if parts == 1 {
        part(0);
    } else {
        candle_core::utils::barrier_pool().execute_chunked(parts, |range| range.for_each(part));
    }
    Ok(())
}

/// Attention of the query heads sharing key-value head `g` (`q` and `out`: those heads'
/// `groups x head_dim` values, `sinks`: their sink logits) over the positions of one
/// sequence's cache it sees.
fn attend_group(
    (ck, cv): (ValuesRef, ValuesRef),
    heads: &Heads,
    g: usize,
    sinks: Option<&[f32]>,
    q: &[f32],
    out: &mut [f32],
) {
    let d = heads.head_dim;
    let row = heads.row();
    let n = ck.len() / row;
    let groups = q.len() / d;
    let scale = 1.0 / (d as f32).sqrt();
    // scores[r * n + j]: query head r of the group against position j.
    let mut scores = vec![0f32; groups * n];
    let mut scratch = vec![0f32; d];
    for j in 0..n {
        let key = ck.read(j * row + g * d, &mut scratch);
        for (r, qh) in q.chunks_exact(d).enumerate() {
            scores[r * n + j] = dot(qh, key) * scale;
        }
    }
    let mut totals = vec![0f32; groups];
    for (r, s) in scores.chunks_exact_mut(n).enumerate() {
        let sink = sinks.map(|k| k[r]);
        let max = s
            .iter()
            .chain(&sink)
            .fold(f32::NEG_INFINITY, |m, &x| m.max(x));
        for x in s.iter_mut() {
            *x = (*x - max).exp();
            totals[r] += *x;
        }
        if let Some(sink) = sink {
            totals[r] += (sink - max).exp();
        }
    }
    out.fill(0.0);
    for j in 0..n {
        let value = cv.read(j * row + g * d, &mut scratch);
        for (r, oh) in out.chunks_exact_mut(d).enumerate() {
            let w = scores[r * n + j] / totals[r];
            for (o, x) in oh.iter_mut().zip(value) {
                *o += w * x;
            }
        }
    }
}

/// RoPE on one head, interleaved pairs: `(x[2i], x[2i+1])` turned by angle `i`.
fn rotate(x: &mut [f32], cos: &[f32], sin: &[f32]) {
    for (pair, (&c, &s)) in x.chunks_exact_mut(2).zip(cos.iter().zip(sin)) {
        let (a, b) = (pair[0], pair[1]);
        pair[0] = a * c - b * s;
        pair[1] = a * s + b * c;
    }
}

/// RoPE on one head, halves: `(x[i], x[i + d/2])` turned by angle `i`.
fn rotate_halves(x: &mut [f32], cos: &[f32], sin: &[f32]) {
    let (a, b) = x.split_at_mut(x.len() / 2);
    for ((a, b), (&c, &s)) in a.iter_mut().zip(b).zip(cos.iter().zip(sin)) {
        let (x1, x2) = (*a, *b);
        *a = x1 * c - x2 * s;
        *b = x2 * c + x1 * s;
    }
}

/// In eight lanes, so that it vectorises.
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ac, bc) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ac
        .remainder()
        .iter()
        .zip(bc.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ac.zip(bc) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    acc.iter().sum::<f32>() + tail
}
