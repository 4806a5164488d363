//! Attention for a chunk of a prompt by hand on the CPU: many new positions of one
//! sequence, each seeing the cache up to its own position.
//!
//! [`crate::attention::attend_steps`] gives each row its own pass over the keys, which is
//! right for decoding steps (one row a sequence) but reads every key once per row of a
//! prompt. Here the rows go in blocks of [`BLOCK`]: one part of the work takes a block and
//! a key-value head, and reads each key and value once for the block's rows and the query
//! heads sharing that key-value head. Keys go in tiles of [`KEYS`] positions: the tile's
//! keys are transposed so that each query's scores against them are a few vector FMAs, the
//! softmax runs online (a running maximum and sum per query, the output rescaled when the
//! maximum grows), and the exponentials are a polynomial that vectorizes ([`exp`]). The
//! parts run on candle's pool of threads.
//!
//! The result is attention's up to rounding: the sums run in another order than
//! [`crate::attention::attend_steps`]'s.

use crate::attention::Heads;
use crate::kv_store::ValuesRef;
use candle_core::Result;

/// Rows of the chunk per part.
const BLOCK: usize = 16;
/// Keys per tile.
const KEYS: usize = 32;

/// Attention of the `n` new positions `pos..pos + n` of one sequence, whose keys and
/// values (`k`, `v`: `[position][kv_head][head_dim]`, rotated) are in the cache up to
/// position `pos + n`. `q` holds each row's rotated queries (`heads x head_dim`), `out`
/// gets each row's output in the same layout. Head sizes other than 64 and 128 return
/// `Ok(false)` (the caller attends another way), having written nothing.
pub(crate) fn attend_chunk(
    kv: (ValuesRef, ValuesRef),
    heads: &Heads,
    pos: usize,
    n: usize,
    q: &[f32],
    out: &mut [f32],
) -> Result<bool> {
    attend(kv, heads, (pos, n), q, out, avx512_available())
}

/// [`attend_chunk`], its tile loops on AVX-512 or portable.
fn attend(
    (k, v): (ValuesRef, ValuesRef),
    heads: &Heads,
    (pos, n): (usize, usize),
    q: &[f32],
    out: &mut [f32],
    avx512: bool,
) -> Result<bool> {
    let d = heads.head_dim;
    let qn = heads.heads * d;
    let row = heads.row();
    if k.len() < (pos + n) * row || v.len() < (pos + n) * row {
        return Err(candle_core::Error::Msg(format!(
            "{} new positions after {pos}: the cache holds {}",
            n,
            k.len() / row.max(1)
        )));
    }
    if q.len() != n * qn || out.len() != q.len() {
        return Err(candle_core::Error::Msg(format!(
            "{n} rows, {} query values and {} outputs",
            q.len(),
            out.len()
        )));
    }
    if !takes(d) || n == 0 {
        return Ok(takes(d));
    }
    let job = Part {
        kt: transposed(k, heads, pos + n),
        v,
        heads,
        pos,
        n,
        q,
        out: out.as_mut_ptr() as usize,
        avx512,
    };
    let blocks = n.div_ceil(BLOCK);
    let parts = blocks * heads.kv_heads;
    // Later blocks see more keys: hand them out first, so that the last parts are short.
    let run = |p: usize| {
        let (b, g) = (blocks - 1 - p / heads.kv_heads, p % heads.kv_heads);
        match d {
            64 => job.run::<64>(b, g),
            _ => job.run::<128>(b, g),
        }
    };
    if parts == 1 {
        run(0);
    } else {
        candle_core::utils::barrier_pool().execute_chunked(parts, |range| range.for_each(run));
    }
    Ok(true)
}

/// Whether [`attend_chunk`] takes heads of `head_dim` values.
pub(crate) fn takes(head_dim: usize) -> bool {
    matches!(head_dim, 64 | 128)
}

/// The first `end` keys, per key-value head, per tile of [`KEYS`] positions, transposed:
/// `[head][tile][value][position in the tile]`, the last tile padded with zeros. Made once
/// per chunk and read by every block.
fn transposed(k: ValuesRef, heads: &Heads, end: usize) -> Vec<[f32; KEYS]> {
    let (d, row) = (heads.head_dim, heads.row());
    let tiles = end.div_ceil(KEYS);
    let mut kt = vec![[0f32; KEYS]; heads.kv_heads * tiles * d];
    let mut scratch = vec![0f32; row];
    for j in 0..end {
        let key = k.read(j * row, &mut scratch);
        let (t, i) = (j / KEYS, j % KEYS);
        for (g, head) in key.chunks_exact(d).enumerate() {
            let tile = &mut kt[(g * tiles + t) * d..(g * tiles + t + 1) * d];
            for (col, &x) in tile.iter_mut().zip(head) {
                col[i] = x;
            }
        }
    }
    kt
}

/// The operands every part shares.
struct Part<'a> {
    /// The keys, [`transposed`].
    kt: Vec<[f32; KEYS]>,
    v: ValuesRef<'a>,
    heads: &'a Heads,
    pos: usize,
    n: usize,
    q: &'a [f32],
    /// `out`'s address: each part writes its own rows' values of its own heads.
    out: usize,
    /// Whether the tile loops run on AVX-512 ([`avx512`]) or portable loops.
    avx512: bool,
}

fn avx512_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx512f")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

impl Part<'_> {
    /// Block `b`'s rows, the query heads of key-value head `g`.
    fn run<const D: usize>(&self, b: usize, g: usize) {
        let h = self.heads;
        let groups = h.heads / h.kv_heads;
        let (qn, row) = (h.heads * D, h.row());
        let rows = b * BLOCK..self.n.min((b + 1) * BLOCK);
        let nq = rows.len() * groups;
        let scale = 1.0 / (D as f32).sqrt();
        // The block's queries, scaled: query i is row `rows.start + i / groups`, head
        // `g * groups + i % groups`.
        let mut qs = vec![0f32; nq * D];
        for (i, qv) in qs.chunks_exact_mut(D).enumerate() {
            let (r, head) = (rows.start + i / groups, g * groups + i % groups);
            let at = r * qn + head * D;
            for (x, &y) in qv.iter_mut().zip(&self.q[at..at + D]) {
                *x = y * scale;
            }
        }
        // Each query's last key: its own position.
        let last = |i: usize| self.pos + rows.start + i / groups;
        let mut acc = vec![0f32; nq * D];
        let mut max = vec![f32::NEG_INFINITY; nq];
        let mut sum = vec![0f32; nq];
        let mut scores = vec![[0f32; KEYS]; nq];
        let mut scratch = vec![0f32; KEYS * D];
        let tiles = (self.pos + self.n).div_ceil(KEYS);
        let end = self.pos + rows.end;
        for (t, j0) in (0..end).step_by(KEYS).enumerate() {
            let keys = KEYS.min(end - j0);
            let at = (g * tiles + t) * D;
            let kt: &[[f32; KEYS]; D] = self.kt[at..at + D].try_into().expect("D rows");
            // The tile's values of head g: in place where the cache is f32 (`row` apart),
            // else converted into `scratch` (`D` apart).
            let values = match self.v {
                ValuesRef::F32(v) => (&v[j0 * row + g * D..], row),
                ValuesRef::F16(_) => {
                    for (j, dst) in scratch.chunks_exact_mut(D).take(keys).enumerate() {
                        self.v.read((j0 + j) * row + g * D, dst);
                    }
                    (&scratch[..], D)
                }
            };
            // The queries that see some of the tile: all but those of the first rows,
            // in the diagonal tile.
            let first = (0..nq).find(|&i| last(i) >= j0).unwrap_or(nq);
            tile_scores(&qs[first * D..], kt, &mut scores[first..], self.avx512);
            for (i, s) in scores.iter_mut().enumerate().skip(first) {
                // Keys after the query's own position are not seen.
                let seen = (last(i) + 1 - j0).min(keys);
                let tile_max = s[..seen].iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
                let new_max = max[i].max(tile_max);
                // The output so far, rescaled to the new maximum.
                let rescale = exp(max[i] - new_max);
                sum[i] *= rescale;
                max[i] = new_max;
                for (j, s) in s.iter_mut().enumerate() {
                    *s = if j < seen { exp(*s - new_max) } else { 0.0 };
                }
                sum[i] += s.iter().sum::<f32>();
                let a = &mut acc[i * D..(i + 1) * D];
                tile_values::<D>(&s[..seen], values, rescale, a, self.avx512);
            }
        }
        for i in 0..nq {
            let (r, head) = (rows.start + i / groups, g * groups + i % groups);
            let at = r * qn + head * D;
            // SAFETY: this part alone writes row r's values of head `head` (its block's
            // rows, its key-value head's query heads), and `out` holds n x qn values and
            // outlives the call.
            let o = unsafe { std::slice::from_raw_parts_mut((self.out as *mut f32).add(at), D) };
            let inv = 1.0 / sum[i];
            for (o, &x) in o.iter_mut().zip(&acc[i * D..(i + 1) * D]) {
                *o = x * inv;
            }
        }
    }
}

/// `s[i][j]`: query `i` of `qs` (`D` values each) against key `j` of the transposed tile.
fn tile_scores<const D: usize>(
    qs: &[f32],
    kt: &[[f32; KEYS]; D],
    s: &mut [[f32; KEYS]],
    avx512: bool,
) {
    #[cfg(target_arch = "x86_64")]
    if avx512 {
        let mut i = 0;
        while i + 4 <= s.len() {
            // SAFETY: AVX-512 F is present (checked at run time); 4 queries of D values.
            unsafe { avx512::scores::<D, 4>(&qs[i * D..], kt, &mut s[i..i + 4]) };
            i += 4;
        }
        while i < s.len() {
            // SAFETY: as above, one query.
            unsafe { avx512::scores::<D, 1>(&qs[i * D..], kt, &mut s[i..i + 1]) };
            i += 1;
        }
        return;
    }
    let _ = avx512;
    for (s, q) in s.iter_mut().zip(qs.chunks_exact(D)) {
        *s = [0.0; KEYS];
        for (&x, col) in q.iter().zip(kt) {
            for (s, &y) in s.iter_mut().zip(col) {
                *s = x.mul_add(y, *s);
            }
        }
    }
}

/// `a = a * rescale + sum_j p[j] * v_j`, value `j` at `values[j * stride..][..D]`.
fn tile_values<const D: usize>(
    p: &[f32],
    values: (&[f32], usize),
    rescale: f32,
    a: &mut [f32],
    avx512: bool,
) {
    let (v, stride) = values;
    assert!(p.is_empty() || v.len() >= (p.len() - 1) * stride + D);
    #[cfg(target_arch = "x86_64")]
    if avx512 {
        // SAFETY: AVX-512 F is present (checked at run time); `a` holds D values and `v`
        // the values of every weight of `p` (asserted).
        unsafe { avx512::values::<D>(p, values, rescale, a) };
        return;
    }
    let _ = avx512;
    a.iter_mut().for_each(|x| *x *= rescale);
    for (j, &p) in p.iter().enumerate() {
        for (a, &y) in a.iter_mut().zip(&v[j * stride..j * stride + D]) {
            *a = p.mul_add(y, *a);
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::KEYS;
    use std::arch::x86_64::*;

    const _: () = assert!(KEYS == 32, "the score kernel holds a tile in two registers");

    /// `s[r] = kt^T q[r]` for `Q` queries (`q`: `Q x D` values), sharing each load of the
    /// tile.
    ///
    /// # Safety
    /// AVX-512 F is available; `q` holds `Q x D` values and `s` `Q` rows.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn scores<const D: usize, const Q: usize>(
        q: &[f32],
        kt: &[[f32; KEYS]; D],
        s: &mut [[f32; KEYS]],
    ) {
        assert!(q.len() >= Q * D && s.len() >= Q);
        let mut a = [[_mm512_setzero_ps(); 2]; Q];
        for (c, col) in kt.iter().enumerate() {
            // SAFETY: a row of the tile holds 32 values.
            let (k0, k1) = unsafe {
                (
                    _mm512_loadu_ps(col.as_ptr()),
                    _mm512_loadu_ps(col.as_ptr().add(16)),
                )
            };
            for (r, a) in a.iter_mut().enumerate() {
                let x = _mm512_set1_ps(q[r * D + c]);
                a[0] = _mm512_fmadd_ps(x, k0, a[0]);
                a[1] = _mm512_fmadd_ps(x, k1, a[1]);
            }
        }
        for (s, a) in s.iter_mut().zip(&a) {
            // SAFETY: a row of scores holds 32 values.
            unsafe {
                _mm512_storeu_ps(s.as_mut_ptr(), a[0]);
                _mm512_storeu_ps(s.as_mut_ptr().add(16), a[1]);
            }
        }
    }

    /// `a = a * rescale + sum_j p[j] * v_j`, `a` held in registers across the keys.
    ///
    /// # Safety
    /// AVX-512 F is available; `D` is a multiple of 16 and at most 128, `a` holds `D`
    /// values, and `values` the `D` values of each of `p`'s keys, `stride` apart.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn values<const D: usize>(
        p: &[f32],
        (v, stride): (&[f32], usize),
        rescale: f32,
        a: &mut [f32],
    ) {
        assert!(D.is_multiple_of(16) && D <= 128 && a.len() >= D);
        let n = D / 16;
        let r = _mm512_set1_ps(rescale);
        let mut acc = [_mm512_setzero_ps(); 8];
        for (t, acc) in acc.iter_mut().enumerate().take(n) {
            // SAFETY: `a` holds D values.
            *acc = _mm512_mul_ps(r, unsafe { _mm512_loadu_ps(a.as_ptr().add(16 * t)) });
        }
        for (j, &p) in p.iter().enumerate() {
            let x = _mm512_set1_ps(p);
            let value = v[j * stride..j * stride + D].as_ptr();
            for (t, acc) in acc.iter_mut().enumerate().take(n) {
                // SAFETY: `value` holds D values.
                let y = unsafe { _mm512_loadu_ps(value.add(16 * t)) };
                *acc = _mm512_fmadd_ps(x, y, *acc);
            }
        }
        for (t, acc) in acc.iter().enumerate().take(n) {
            // SAFETY: `a` holds D values.
            unsafe { _mm512_storeu_ps(a.as_mut_ptr().add(16 * t), *acc) };
        }
    }
}

/// `e^x` for `x <= 0` (what softmax takes after subtracting the maximum), in a form that
/// vectorizes: `2^k * 2^r` with `k` an integer and `|r| <= 1/2`, `2^r` a degree-6
/// polynomial (relative error under 1e-6, tested), and 0 below -87 (where `e^x` is under f32's
/// normal range).
#[inline(always)]
pub(crate) fn exp(x: f32) -> f32 {
    const LOG2_E: f32 = std::f32::consts::LOG2_E;
    // ln 2 in two parts (Cody and Waite): `k * LN2_HI` is exact for the k used here.
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // Rounds to the nearest integer for |t| < 2^22.
    const ROUND: f32 = 12_582_912.0;
    let below = x < -87.0;
    // Not `max`, which would turn NaN into -87: NaN stays NaN.
    let x = if below { -87.0 } else { x };
    let k = (x * LOG2_E + ROUND) - ROUND;
    let r = (x - k * LN2_HI) - k * LN2_LO;
    // e^r by its Taylor series to r^6 (|r| <= ln 2 / 2).
    let p = 1.0
        + r * (1.0
            + r * (0.5
                + r * (1.0 / 6.0 + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r * (1.0 / 720.0))))));
    // `k + 127` (in 1..=127) sits in the low bits of `ROUND + k + 127`'s mantissa; shifted
    // into the exponent's place, every higher bit falls off the top: `2^k`. (A
    // float-to-integer conversion here kept loops over it from vectorizing.)
    let two_k = f32::from_bits((k + (127.0 + ROUND)).to_bits() << 23);
    if below { 0.0 } else { p * two_k }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attention::{KvCache, Rope, Span, attend_steps};
    use crate::kv_store::{KvType, Values};

    #[test]
    fn the_polynomial_exp_is_close_to_the_library_one() {
        let mut worst = 0f64;
        for i in 0..=200_000 {
            let x = -90.0 * i as f32 / 200_000.0;
            let want = f64::from(x).exp();
            let got = f64::from(exp(x));
            if want > 1e-37 {
                worst = worst.max(((got - want) / want).abs());
            } else {
                assert!(got < 1e-37, "{x}: {got}");
            }
        }
        assert!(worst < 1e-6, "largest relative error {worst}");
        assert_eq!(exp(0.0), 1.0);
        assert_eq!(exp(f32::NEG_INFINITY), 0.0);
        assert!(exp(f32::NAN).is_nan());
    }

    /// Every row of a chunk, at several positions of a cache that already holds some,
    /// against [`attend_steps`] (each row alone), for grouped heads of 64 and 128 values.
    #[test]
    fn a_chunk_attends_as_its_rows_do_one_by_one() {
        let mut rng = crate::test_rng::rng(7);
        for (heads, kv_heads, d, pos, n) in [
            (9, 3, 64, 0, 1),
            (9, 3, 64, 0, 37),
            (9, 3, 64, 70, 50),
            (4, 4, 128, 5, 16),
            (8, 2, 128, 33, 40),
        ] {
            let shape = Heads {
                heads,
                kv_heads,
                head_dim: d,
                rope: Rope::Interleaved,
            };
            let row = kv_heads * d;
            let mut values = |len: usize| -> Vec<f32> {
                (0..len)
                    .map(|_| 3.0 * ((rng() >> 40) as f32 / (1u64 << 24) as f32 - 0.5))
                    .collect()
            };
            let (k, v) = (values((pos + n) * row), values((pos + n) * row));
            let q = values(n * heads * d);
            // On a cache of either type: both read the same stored values.
            for ty in [KvType::F32, KvType::F16] {
                let (mut ck, mut cv) = (Values::new(ty), Values::new(ty));
                ck.append(&k, row);
                cv.append(&v, row);
                let mut got = [vec![0f32; q.len()], vec![0f32; q.len()]];
                for (out, fast) in got.iter_mut().zip([false, avx512_available()]) {
                    let kv = (ck.view(), cv.view());
                    assert!(attend(kv, &shape, (pos, n), &q, out, fast).unwrap());
                }
                let cache = KvCache::Host { k: ck, v: cv };
                let views: Vec<(&KvCache, usize)> =
                    (pos..pos + n).map(|p| (&cache, p + 1)).collect();
                let mut want = vec![0f32; q.len()];
                attend_steps(&views, &shape, Span::default(), &q, &mut want).unwrap();
                for got in &got {
                    let worst = got
                        .iter()
                        .zip(&want)
                        .map(|(a, b)| (a - b).abs())
                        .fold(0f32, f32::max);
                    assert!(
                        worst < 1e-5,
                        "{ty:?}, {heads}/{kv_heads} heads of {d}, {pos}+{n}: {worst}"
                    );
                }
            }
        }
    }

    #[test]
    fn other_head_sizes_are_declined_and_short_caches_refused() {
        let shape = Heads {
            heads: 2,
            kv_heads: 1,
            head_dim: 80,
            rope: Rope::Interleaved,
        };
        let (k, v, q) = (vec![0f32; 80 * 3], vec![0f32; 80 * 3], vec![0f32; 160 * 3]);
        let mut out = vec![0f32; q.len()];
        let kv = (ValuesRef::F32(&k), ValuesRef::F32(&v));
        assert!(!attend_chunk(kv, &shape, 0, 3, &q, &mut out).unwrap());
        assert!(attend_chunk(kv, &shape, 1, 3, &q, &mut out).is_err());
    }
}
