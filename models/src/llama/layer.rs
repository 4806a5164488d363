//! One layer's attention (over a sequence, a batch of steps, or by hand over the KV cache)
//! and feed-forward, and the rotation and caching of new key rows.

use super::*;
use candle_core::DType;

impl Layer {
    /// Attention for a single sequence (any number of new positions).
    pub(super) fn attention(
        &self,
        cache: &mut KvCache,
        x: &Tensor,
        pos: usize,
        blocked: Option<&Tensor>,
        w: &Weights,
    ) -> Result<Tensor> {
        let shape = &w.heads;
        let (b, seq, _) = x.dims3()?;
        let heads = |t: Tensor, n: usize| -> Result<Tensor> {
            t.reshape((b, seq, n, shape.head_dim))?
                .transpose(1, 2)?
                .contiguous()
        };
        let (cos, sin) = w.rope.tensors(pos, seq, x.device())?;
        let rope = |t: &Tensor| candle_nn::rotary_emb::rope_i(t, &cos, &sin);
        let held = cache.len(shape)?;
        if held != pos {
            return Err(candle_core::Error::Msg(format!(
                "the KV cache holds {held} positions, not the {pos} before this input"
            )));
        }
        if b == 1
            && w.attention == Attention::ByHand
            && let Some(y) = self.attention_by_hand(cache, x, pos, w)?
        {
            return Ok(y);
        }
        let q = rope(&heads(self.q.forward(x)?, shape.heads)?)?;
        let k = rope(&heads(self.k.forward(x)?, shape.kv_heads)?)?;
        let v = heads(self.v.forward(x)?, shape.kv_heads)?;
        let (k, v) = cache.append_tensors(k, v)?;
        // Grouped-query attention without copying keys and values per query head: the
        // `groups` query heads sharing a key-value head are consecutive, so they stack as
        // rows of one multiplication with it.
        let groups = shape.heads / shape.kv_heads;
        let q = q.reshape((b, shape.kv_heads, groups * seq, shape.head_dim))?;
        let scores = (q.matmul(&k.t()?)? / (shape.head_dim as f64).sqrt())?;
        let kv = k.dim(2)?;
        let scores = scores.reshape((b, shape.heads, seq, kv))?;
        let scores = match blocked {
            Some(blocked) => {
                let minus_inf = Tensor::new(f32::NEG_INFINITY, x.device())?
                    .to_dtype(scores.dtype())?
                    .broadcast_as(scores.shape())?;
                blocked
                    .broadcast_as(scores.shape())?
                    .where_cond(&minus_inf, &scores)?
            }
            None => scores,
        };
        let weights = candle_nn::ops::softmax_last_dim(&scores)?.reshape((
            b,
            shape.kv_heads,
            groups * seq,
            kv,
        ))?;
        let y = weights
            .matmul(&v)?
            .reshape((b, shape.heads, seq, shape.head_dim))?;
        let y = y
            .transpose(1, 2)?
            .reshape((b, seq, shape.heads * shape.head_dim))?;
        self.o.forward(&y)
    }

    /// Attention for the rows of a step pass by hand on the CPU: sequence i
    /// (`caches[i]`) runs `seqs[i].1` new positions from `seqs[i].0`, its rows consecutive
    /// in `x` (`(rows, 1, width)`), each row seeing the cache up to its own position.
    pub(super) fn attention_steps(
        &self,
        caches: &mut [&mut KvCache],
        x: &Tensor,
        seqs: &[(usize, usize)],
        w: &Weights,
    ) -> Result<Tensor> {
        let shape = &w.heads;
        let rows = |t: Tensor| t.flatten_all()?.to_vec1::<f32>();
        let mut q = rows(self.q.forward_rows(x)?)?;
        let mut k = rows(self.k.forward_rows(x)?)?;
        let v = rows(self.v.forward_rows(x)?)?;
        let (qn, kn) = (
            shape.heads * shape.head_dim,
            shape.kv_heads * shape.head_dim,
        );
        let mut r = 0;
        for (cache, &(pos, n)) in caches.iter_mut().zip(seqs) {
            let held = cache.len(shape)?;
            if held != pos {
                return Err(candle_core::Error::Msg(format!(
                    "the KV cache holds {held} positions, not the {pos} before this input"
                )));
            }
            let rows = r * qn..(r + n) * qn;
            let kv = r * kn..(r + n) * kn;
            push_rows(cache, w, pos, &mut q[rows], &mut k[kv.clone()], &v[kv])?;
            r += n;
        }
        let mut y = vec![0f32; q.len()];
        let views: Vec<(&KvCache, usize)> = caches
            .iter()
            .zip(seqs)
            .flat_map(|(c, &(pos, n))| (pos..pos + n).map(move |p| (&**c, p + 1)))
            .collect();
        attend_steps(&views, shape, Span::default(), &q, &mut y)?;
        let y = Tensor::from_vec(y, (r, 1, qn), x.device())?;
        self.o.forward_rows(&y)
    }

    /// Attention for a chunk of one sequence's prompt (`x`: `(1, seq, width)`) by hand,
    /// blocked ([`crate::chunk_attention`]), where the cache is on the host and the head
    /// size is one it takes; `None` (the cache unchanged) elsewhere.
    pub(super) fn attention_by_hand(
        &self,
        cache: &mut KvCache,
        x: &Tensor,
        pos: usize,
        w: &Weights,
    ) -> Result<Option<Tensor>> {
        let shape = &w.heads;
        if !matches!(cache, KvCache::Host { .. }) || !crate::chunk_attention::takes(shape.head_dim)
        {
            return Ok(None);
        }
        let (_, seq, _) = x.dims3()?;
        let rows = |t: Tensor| t.flatten_all()?.to_vec1::<f32>();
        let mut q = rows(self.q.forward(x)?)?;
        let mut k = rows(self.k.forward(x)?)?;
        let v = rows(self.v.forward(x)?)?;
        push_rows(cache, w, pos, &mut q, &mut k, &v)?;
        let KvCache::Host { k: ck, v: cv } = &*cache else {
            return Ok(None);
        };
        let mut y = vec![0f32; q.len()];
        crate::chunk_attention::attend_chunk((ck.view(), cv.view()), shape, pos, seq, &q, &mut y)?;
        let y = Tensor::from_vec(y, (1, seq, shape.heads * shape.head_dim), x.device())?;
        self.o.forward(&y).map(Some)
    }

    /// The rest of the layer after attention `a`: residual, feed-forward, residual
    /// (`rows`: the rows of a step pass, multiplied as [`Linear::forward_rows`] does).
    pub(super) fn feed_forward(&self, x: &Tensor, a: Tensor, rows: bool) -> Result<Tensor> {
        let x = (a + x)?;
        let h = self.ffn_norm.forward(&x)?;
        let mul = |l: &Linear, t: &Tensor| match rows {
            true => l.forward_rows(t),
            false => l.forward(t),
        };
        let (g, u) = (mul(&self.gate, &h)?, mul(&self.up, &h)?);
        let gated = match self.own_silu {
            true => silu_mul(&g, &u)?,
            false => (candle_nn::ops::silu(&g)? * u)?,
        };
        mul(&self.down, &gated)? + x
    }
}

/// `silu(g) * u`, value by value. On the host in one loop that vectorizes (candle's silu
/// calls the library's exp one value at a time, a cost each batched row pays again):
/// `silu(v) = v / (1 + e^-v)`, written with `t = e^-|v|` (`v >= 0`) or `v t / (1 + t)`
/// (`v < 0`), so that the exp sees no argument above 0 and never overflows.
pub(super) fn silu_mul(g: &Tensor, u: &Tensor) -> Result<Tensor> {
    if !g.device().is_cpu() || g.dtype() != DType::F32 || u.dtype() != DType::F32 {
        return candle_nn::ops::silu(g)? * u;
    }
    if g.dims() != u.dims() {
        return Err(candle_core::Error::Msg(format!(
            "silu_mul: shapes {:?} and {:?}",
            g.dims(),
            u.dims()
        )));
    }
    let mut gv = g.flatten_all()?.to_vec1::<f32>()?;
    let uv = u.flatten_all()?.to_vec1::<f32>()?;
    for (a, &b) in gv.iter_mut().zip(&uv) {
        let v = *a;
        let t = crate::chunk_attention::exp(-v.abs());
        let top = if v >= 0.0 { v } else { v * t };
        *a = top / (1.0 + t) * b;
    }
    Tensor::from_vec(gv, g.dims(), g.device())
}

/// Rotates the queries and keys of `n` new rows of one sequence (`q`: `n x heads x
/// head_dim`, `k` and `v`: `n x kv_heads x head_dim`) for positions `pos..pos + n` and
/// appends the keys and values to its cache.
fn push_rows(
    cache: &mut KvCache,
    w: &Weights,
    pos: usize,
    q: &mut [f32],
    k: &mut [f32],
    v: &[f32],
) -> Result<()> {
    let shape = &w.heads;
    let (qn, kn) = (
        shape.heads * shape.head_dim,
        shape.kv_heads * shape.head_dim,
    );
    let n = q.len() / qn;
    if pos.saturating_add(n) > w.rope.positions() {
        return Err(candle_core::Error::Msg(format!(
            "positions {pos}..{}: the model's positions end at {}",
            pos.saturating_add(n),
            w.rope.positions()
        )));
    }
    let half = shape.head_dim / 2;
    let (cos, sin) = w.rope.rows(pos, n);
    for (j, ((q, k), v)) in q
        .chunks_exact_mut(qn)
        .zip(k.chunks_exact_mut(kn))
        .zip(v.chunks_exact(kn))
        .enumerate()
    {
        let at = j * half..(j + 1) * half;
        push_step(cache, shape, (&cos[at.clone()], &sin[at]), q, k, v)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn silu_mul_by_hand_is_candles_within_a_millionth() {
        let dev = Device::Cpu;
        let mut g: Vec<f32> = (0..4000).map(|i| (i as f32 - 2000.0) / 20.0).collect();
        g.extend([0.0, -0.0, 1e-30, -1e-30, 200.0, -200.0, f32::MAX, f32::MIN]);
        let u: Vec<f32> = (0..g.len()).map(|i| 0.5 + (i % 7) as f32 * 0.25).collect();
        let shape = (g.len() / 2, 2);
        let gt = Tensor::from_vec(g.clone(), shape, &dev).unwrap();
        let ut = Tensor::from_vec(u.clone(), shape, &dev).unwrap();
        let got: Vec<f32> = silu_mul(&gt, &ut)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        let want: Vec<f32> = (candle_nn::ops::silu(&gt).unwrap() * &ut)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        for (i, (&a, &b)) in got.iter().zip(&want).enumerate() {
            let scale = b.abs().max(1e-30);
            assert!(
                (a - b).abs() / scale < 1e-6 || (a - b).abs() < 1e-30,
                "g {} u {}: {a} against candle's {b}",
                g[i],
                u[i]
            );
        }
        // NaN stays NaN; shapes must agree.
        let nan = Tensor::new(&[f32::NAN], &dev).unwrap();
        let one = Tensor::new(&[1f32], &dev).unwrap();
        let out: Vec<f32> = silu_mul(&nan, &one).unwrap().to_vec1().unwrap();
        assert!(out[0].is_nan());
        let two = Tensor::new(&[1f32, 2.0], &dev).unwrap();
        assert!(silu_mul(&one, &two).is_err());
    }
}
