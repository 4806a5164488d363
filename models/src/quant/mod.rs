//! corral's own CPU kernels for GGUF weight matrices: a few input rows (one decoding step,
//! or the steps of several sequences batched) times a quantized matrix, each weight block
//! read and unpacked once for all the rows. Two kernels:
//! - the tiled one ([`Packed`], `tiles.rs`), for eight layouts on CPUs with AVX-512 VNNI;
//! - the AVX2 one below ([`matmul`]), for Q4_1 and Q8_0 elsewhere.
//!
//! Why not candle's: its Q4_1 dot product has no hand-written SIMD (LLVM vectorises its
//! scalar loop only under `-C target-cpu=native`), and its kernel takes the input one row
//! at a time, so the decoding steps of B sequences in one pass cost B single steps
//! (docs/performance.md, "Server"). How the AVX2 kernel runs:
//!
//! 1. each input row is quantized in blocks of 32 values to signed bytes with an f32 scale
//!    (`d = max |x| / 127`) and, for Q4_1's offset, the block's sum times its scale;
//! 2. output features are split in chunks among candle's pool of threads (a small matrix
//!    runs on the calling thread: splitting it costs more than it saves);
//! 3. for each output feature, each 32-weight block is unpacked once into 32 bytes and
//!    multiplied with the same block of every row: AVX2's `maddubs` multiplies unsigned
//!    weight bytes by signed activation bytes and adds pairs, `madd` adds the pairs'
//!    pairs into 32-bit sums, which are scaled and accumulated in f32 by FMA.
//!
//! Without AVX2, FMA and F16C a portable loop computes the same sums (also what the tests
//! compare against). Other weight types, and CUDA, keep candle's kernels.

use half::f16;

mod layout;
mod tiles;

pub use tiles::{Packed, TILED_TYPES, tiled_kernel_is_fast};

/// Values per quantized block (Q4_1, Q8_0 and the activations alike).
const BLOCK: usize = 32;

/// Sizes a kernel cannot multiply.
#[derive(Debug, thiserror::Error)]
pub enum ShapeError {
    /// Rows that do not split into the type's blocks.
    #[error("{inp} inputs is not a multiple of {ty}'s {block} values")]
    Inputs {
        /// Inputs per row.
        inp: usize,
        /// The weight type's name.
        ty: String,
        /// Values per block of the type.
        block: usize,
    },
    /// Weight bytes that are not `out` rows of `inp` weights.
    #[error("{got} weight bytes for a {out}x{inp} {ty} matrix (expected {expected})")]
    Bytes {
        /// Bytes given.
        got: usize,
        /// Bytes the shape takes.
        expected: usize,
        /// Output features.
        out: usize,
        /// Inputs per row.
        inp: usize,
        /// The weight type's name.
        ty: String,
    },
    /// An input or output slice whose length does not fit the matrix.
    #[error("input of {x} values and output of {dst} for a {out}x{inp} matrix")]
    Operands {
        /// Input values given.
        x: usize,
        /// Output values given.
        dst: usize,
        /// Output features.
        out: usize,
        /// Inputs per row.
        inp: usize,
    },
}

impl ShapeError {
    /// Checks `x (rows x inp)` and `dst (rows x out)`.
    fn check_operands(x: usize, dst: usize, out: usize, inp: usize) -> Result<(), ShapeError> {
        if x.is_multiple_of(inp) && dst == x / inp * out {
            Ok(())
        } else {
            Err(ShapeError::Operands { x, dst, out, inp })
        }
    }
}

/// The weight types this kernel multiplies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WeightType {
    /// 20-byte blocks: scale `d` and minimum `m` (f16), 16 bytes of 4-bit values
    /// (the low nibbles are values 0..16, the high ones 16..32); a value is `q * d + m`.
    Q4_1,
    /// 34-byte blocks: scale `d` (f16), 32 signed bytes; a value is `q * d`.
    Q8_0,
}

impl WeightType {
    /// Bytes per block.
    fn block_bytes(self) -> usize {
        match self {
            WeightType::Q4_1 => 20,
            WeightType::Q8_0 => 34,
        }
    }
}

/// One block of an input row, quantized.
#[derive(Clone, Copy, Default)]
#[repr(C)]
struct RowBlock {
    qs: [i8; BLOCK],
    /// Scale: a value is `qs[i] * d`.
    d: f32,
    /// `d` times the sum of `qs` (what Q4_1's minimum multiplies).
    s: f32,
}

/// Most rows one pass over the weights takes at a time (accumulators stay in registers).
const MAX_ROWS_PER_PASS: usize = 8;

/// Multiply-adds below which a multiplication runs on the calling thread.
const PARALLEL_MIN_WORK: usize = 1 << 18;

/// `dst (rows x out) = x (rows x inp) * w^T`, where `w` holds `out` rows of `inp` weights
/// quantized as `ty`. `inp` must be a multiple of 32 and the slices of matching sizes
/// (checked: a mismatch is an error, not a panic).
pub fn matmul(
    ty: WeightType,
    w: &[u8],
    out: usize,
    inp: usize,
    x: &[f32],
    dst: &mut [f32],
) -> Result<(), ShapeError> {
    if inp == 0 || !inp.is_multiple_of(BLOCK) {
        return Err(ShapeError::Inputs {
            inp,
            ty: format!("{ty:?}"),
            block: BLOCK,
        });
    }
    let blocks = inp / BLOCK;
    let row_bytes = blocks * ty.block_bytes();
    if w.len() != out * row_bytes {
        return Err(ShapeError::Bytes {
            got: w.len(),
            expected: out * row_bytes,
            out,
            inp,
            ty: format!("{ty:?}"),
        });
    }
    ShapeError::check_operands(x.len(), dst.len(), out, inp)?;
    let rows = x.len() / inp;
    if rows == 0 || out == 0 {
        return Ok(());
    }
    let q: Vec<RowBlock> = quantize_pieces(x, quantize_block);
    let pass = Pass {
        ty,
        simd: simd_available(),
        w,
        row_bytes,
        q: &q,
        blocks,
        rows,
    };
    // Results feature-major (`cols[f * rows + r]`), so that threads own disjoint slices.
    let mut cols = vec![0f32; out * rows];
    if out * inp * rows < PARALLEL_MIN_WORK {
        pass.features(0, &mut cols);
    } else {
        // candle's pool of spinning threads, which its own kernels use: a step makes
        // about 200 of these calls, and waking sleeping threads for each costs more.
        let per_chunk = 16;
        let chunks = out.div_ceil(per_chunk);
        let base = cols.as_mut_ptr() as usize;
        let len = cols.len();
        candle_core::utils::barrier_pool().execute_chunked(chunks, |range| {
            for c in range {
                let start = c * per_chunk * rows;
                let end = len.min(start + per_chunk * rows);
                // SAFETY: chunk c covers `cols[start..end]`, which no other chunk covers,
                // and `cols` outlives the call (execute_chunked returns when all are done).
                let chunk = unsafe {
                    std::slice::from_raw_parts_mut((base as *mut f32).add(start), end - start)
                };
                pass.features(c * per_chunk, chunk);
            }
        });
    }
    for (f, results) in cols.chunks_exact(rows).enumerate() {
        for (r, &v) in results.iter().enumerate() {
            dst[r * out + f] = v;
        }
    }
    Ok(())
}

/// One multiplication's operands.
struct Pass<'a> {
    ty: WeightType,
    simd: bool,
    w: &'a [u8],
    row_bytes: usize,
    /// Every input row's blocks, row after row.
    q: &'a [RowBlock],
    blocks: usize,
    rows: usize,
}

impl Pass<'_> {
    /// The results of the features from `first` on, as many as `chunk` holds.
    fn features(&self, first: usize, chunk: &mut [f32]) {
        let mut r0 = 0;
        while r0 < self.rows {
            let n = (self.rows - r0).min(MAX_ROWS_PER_PASS);
            // The row count is a constant of each instance, so the accumulators stay in
            // registers.
            match n {
                1 => self.group::<1>(first, r0, chunk),
                2 => self.group::<2>(first, r0, chunk),
                3 => self.group::<3>(first, r0, chunk),
                4 => self.group::<4>(first, r0, chunk),
                5 => self.group::<5>(first, r0, chunk),
                6 => self.group::<6>(first, r0, chunk),
                7 => self.group::<7>(first, r0, chunk),
                _ => self.group::<8>(first, r0, chunk),
            }
            r0 += n;
        }
    }

    /// Rows `r0..r0 + R` against the chunk's features, `F` features at a time: F x R
    /// independent sums per block, so that no sum waits on the previous block's (one
    /// row alone would be bound by the latency of its one accumulator).
    fn group<const R: usize>(&self, first: usize, r0: usize, chunk: &mut [f32]) {
        match (self.ty, R) {
            // Q8_0's rows are long (34 bytes a block) and its matrices large (the output
            // layer): one row at a time streams memory best (measured with
            // examples/qmatmul_batch: 4 rows interleaved were 1.9x slower on one row).
            (WeightType::Q8_0, _) => self.tiles::<1, R>(first, r0, chunk),
            (_, 1 | 2) => self.tiles::<4, R>(first, r0, chunk),
            (_, 3 | 4) => self.tiles::<2, R>(first, r0, chunk),
            _ => self.tiles::<1, R>(first, r0, chunk),
        }
    }

    fn tiles<const F: usize, const R: usize>(&self, first: usize, r0: usize, chunk: &mut [f32]) {
        let xs: [&[RowBlock]; R] =
            std::array::from_fn(|i| &self.q[(r0 + i) * self.blocks..(r0 + i + 1) * self.blocks]);
        let features = chunk.len() / self.rows;
        let wrow = |f: usize| &self.w[f * self.row_bytes..(f + 1) * self.row_bytes];
        let mut i = 0;
        while i < features {
            if i + F <= features {
                let ws: [&[u8]; F] = std::array::from_fn(|j| wrow(first + i + j));
                for (j, res) in dots(self.ty, self.simd, &ws, &xs).iter().enumerate() {
                    let at = (i + j) * self.rows + r0;
                    chunk[at..at + R].copy_from_slice(res);
                }
                i += F;
            } else {
                let [res] = dots(self.ty, self.simd, &[wrow(first + i)], &xs);
                let at = i * self.rows + r0;
                chunk[at..at + R].copy_from_slice(&res);
                i += 1;
            }
        }
    }
}

fn quantize_block(x: &[f32]) -> RowBlock {
    let mut b = RowBlock::default();
    let (d, halves) = quantize_32(x, &mut b.qs);
    b.d = d;
    b.s = d * (halves[0] + halves[1]) as f32;
    b
}

/// Quantizes 32 activations to `qs[i] * d` with `|qs[i]| <= 127`, and returns `d` with the
/// sums of `qs` over each half (what the weights' offsets multiply).
///
/// A scale too small to invert quantizes the values to zeros; a value that is not finite
/// makes `d` NaN, so that it reaches the output as a plain f32 product would carry it.
pub(crate) fn quantize_32(x: &[f32], qs: &mut [i8; 32]) -> (f32, [i32; 2]) {
    let x: &[f32; 32] = x.try_into().expect("32 values");
    // Lane by lane, so that the loops vectorize.
    let mut amax = [0f32; 16];
    let mut finite = [true; 16];
    for half in x.chunks_exact(16) {
        for ((m, f), &v) in amax.iter_mut().zip(&mut finite).zip(half) {
            *m = m.max(v.abs());
            *f &= v.is_finite();
        }
    }
    if !finite.iter().fold(true, |a, &f| a & f) {
        *qs = [0; 32];
        return (f32::NAN, [0; 2]);
    }
    let amax = amax.iter().fold(0f32, |m, &v| m.max(v));
    let d = match amax / 127.0 {
        d if d.is_normal() => d,
        _ => 0.0,
    };
    let inv = if d > 0.0 { 1.0 / d } else { 0.0 };
    for (q, &v) in qs.iter_mut().zip(x) {
        // |v * inv| <= 127 up to rounding; clamped so that -128 never appears. Ties go to
        // even, as the SIMD rounding instructions do.
        *q = (v * inv).round_ties_even().clamp(-127.0, 127.0) as i8;
    }
    let sum = |h: &[i8]| h.iter().map(|&q| i32::from(q)).sum::<i32>();
    (d, [sum(&qs[..16]), sum(&qs[16..])])
}

/// Values from which [`quantize_pieces`] splits the work among threads.
const PARALLEL_MIN_VALUES: usize = 1 << 15;

/// `quantize` of each 32 values of `x` (a multiple of 32 long), in order; a long input's
/// pieces are split among candle's pool of threads.
pub(crate) fn quantize_pieces<T: Copy + Default + Send + Sync>(
    x: &[f32],
    quantize: fn(&[f32]) -> T,
) -> Vec<T> {
    if x.len() < PARALLEL_MIN_VALUES {
        return x.chunks_exact(32).map(quantize).collect();
    }
    let pieces = x.len() / 32;
    let mut out = vec![T::default(); pieces];
    let per_chunk = 256;
    let base = out.as_mut_ptr() as usize;
    candle_core::utils::barrier_pool().execute_chunked(pieces.div_ceil(per_chunk), |range| {
        for c in range {
            let at = c * per_chunk..pieces.min((c + 1) * per_chunk);
            // SAFETY: chunk c writes only pieces `at`, which no other chunk writes, and
            // `out` (`pieces` long) outlives the call.
            let dst =
                unsafe { std::slice::from_raw_parts_mut((base as *mut T).add(at.start), at.len()) };
            for (d, piece) in dst
                .iter_mut()
                .zip(x[at.start * 32..at.end * 32].chunks_exact(32))
            {
                *d = quantize(piece);
            }
        }
    });
    out
}

fn simd_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx2")
            && std::is_x86_feature_detected!("fma")
            && std::is_x86_feature_detected!("f16c")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// `dot(ws[f], xs[r])` for each of the `F` weight rows and `R` input rows.
fn dots<const F: usize, const R: usize>(
    ty: WeightType,
    simd: bool,
    ws: &[&[u8]; F],
    xs: &[&[RowBlock]; R],
) -> [[f32; R]; F] {
    #[cfg(target_arch = "x86_64")]
    if simd {
        // SAFETY: the CPU has AVX2, FMA and F16C (checked at run time); each of `ws` holds
        // `xs[r].len()` blocks of `ty` for every r (checked by `matmul`).
        return unsafe {
            match ty {
                WeightType::Q4_1 => avx2::q4_1(ws, xs),
                WeightType::Q8_0 => avx2::q8_0(ws, xs),
            }
        };
    }
    let _ = simd;
    ws.map(|w| xs.map(|x| portable_dot(ty, w, x)))
}

/// The same sums without SIMD: per block, the integer dot product scaled by both scales
/// (plus, for Q4_1, the minimum times the row block's scaled sum).
fn portable_dot(ty: WeightType, wrow: &[u8], x: &[RowBlock]) -> f32 {
    let scale = |b: &[u8]| f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32();
    let mut total = 0f32;
    for (wb, xb) in wrow.chunks_exact(ty.block_bytes()).zip(x) {
        match ty {
            WeightType::Q4_1 => {
                let (d, m) = (scale(&wb[0..2]), scale(&wb[2..4]));
                let mut sum = 0i32;
                for (j, &byte) in wb[4..20].iter().enumerate() {
                    sum += i32::from(byte & 0x0F) * i32::from(xb.qs[j]);
                    sum += i32::from(byte >> 4) * i32::from(xb.qs[j + 16]);
                }
                total += sum as f32 * d * xb.d + m * xb.s;
            }
            WeightType::Q8_0 => {
                let d = scale(&wb[0..2]);
                let sum: i32 = wb[2..34]
                    .iter()
                    .zip(&xb.qs)
                    .map(|(&w, &a)| i32::from(w as i8) * i32::from(a))
                    .sum();
                total += sum as f32 * d * xb.d;
            }
        }
    }
    total
}

#[cfg(target_arch = "x86_64")]
mod avx2;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_rng::rng;

    /// A random matrix quantized as `ty`, with its dequantized values.
    fn random_weights(ty: WeightType, out: usize, inp: usize, seed: u64) -> (Vec<u8>, Vec<f32>) {
        let mut next = rng(seed);
        let mut bytes = Vec::new();
        let mut values = Vec::new();
        for _ in 0..out * inp / BLOCK {
            let d = f16::from_f32((next() % 1000) as f32 / 50_000.0 + 1e-4);
            bytes.extend_from_slice(&d.to_bits().to_le_bytes());
            let d = d.to_f32();
            match ty {
                WeightType::Q4_1 => {
                    let m = f16::from_f32(-((next() % 1000) as f32) / 10_000.0);
                    bytes.extend_from_slice(&m.to_bits().to_le_bytes());
                    let m = m.to_f32();
                    let qs: Vec<u8> = (0..16).map(|_| next() as u8).collect();
                    let mut block = [0f32; BLOCK];
                    for (j, &q) in qs.iter().enumerate() {
                        block[j] = f32::from(q & 0x0F) * d + m;
                        block[j + 16] = f32::from(q >> 4) * d + m;
                    }
                    bytes.extend_from_slice(&qs);
                    values.extend_from_slice(&block);
                }
                WeightType::Q8_0 => {
                    for _ in 0..BLOCK {
                        // Every byte, -128 included.
                        let q = next() as u8;
                        bytes.push(q);
                        values.push(f32::from(q as i8) * d);
                    }
                }
            }
        }
        (bytes, values)
    }

    /// Both paths agree with the f32 product of the dequantized weights (within the
    /// activations' 8-bit quantization) and with each other (within f32 rounding), for
    /// every row count a pass groups, on matrices small and large enough to split.
    #[test]
    fn products_match_the_dequantized_weights() {
        for ty in [WeightType::Q4_1, WeightType::Q8_0] {
            for (out, inp) in [(3, 32), (40, 96), (600, 576)] {
                let (w, wf) = random_weights(ty, out, inp, out as u64);
                for rows in [1, 2, 5, 8, 9, 17] {
                    let mut next = rng(rows as u64);
                    let x: Vec<f32> = (0..rows * inp)
                        .map(|_| (next() % 2001) as f32 / 1000.0 - 1.0)
                        .collect();
                    let mut got = vec![0f32; rows * out];
                    matmul(ty, &w, out, inp, &x, &mut got).unwrap();
                    let q: Vec<RowBlock> = x.chunks_exact(BLOCK).map(quantize_block).collect();
                    for r in 0..rows {
                        for f in 0..out {
                            let wrow = &wf[f * inp..(f + 1) * inp];
                            let xrow = &x[r * inp..(r + 1) * inp];
                            let exact: f32 = wrow.iter().zip(xrow).map(|(a, b)| a * b).sum();
                            let norm: f32 = wrow.iter().zip(xrow).map(|(a, b)| (a * b).abs()).sum();
                            let g = got[r * out + f];
                            assert!(
                                (g - exact).abs() <= 0.02 * norm + 1e-4,
                                "{ty:?} {out}x{inp} rows {rows} [{r},{f}]: {g} vs {exact}"
                            );
                            let blocks = inp / BLOCK;
                            let row_bytes = blocks * ty.block_bytes();
                            let portable = portable_dot(
                                ty,
                                &w[f * row_bytes..(f + 1) * row_bytes],
                                &q[r * blocks..(r + 1) * blocks],
                            );
                            assert!(
                                (g - portable).abs() <= 1e-5 * norm.max(1.0),
                                "{ty:?} simd {g} vs portable {portable}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn mismatched_sizes_are_errors() {
        let (w, _) = random_weights(WeightType::Q4_1, 4, 64, 1);
        let x = vec![0f32; 64];
        let mut dst = vec![0f32; 4];
        assert!(matmul(WeightType::Q4_1, &w, 4, 64, &x, &mut dst).is_ok());
        assert!(matmul(WeightType::Q4_1, &w, 4, 48, &x[..48], &mut dst).is_err());
        assert!(matmul(WeightType::Q4_1, &w[1..], 4, 64, &x, &mut dst).is_err());
        assert!(matmul(WeightType::Q4_1, &w, 4, 64, &x, &mut dst[1..]).is_err());
        assert!(matmul(WeightType::Q8_0, &w, 4, 64, &x, &mut dst).is_err());
    }

    /// An activation that is not finite makes its row's outputs NaN, as in the tiled
    /// kernel; the other rows are untouched.
    #[test]
    fn activations_that_are_not_finite_poison_their_row() {
        for ty in [WeightType::Q4_1, WeightType::Q8_0] {
            let (w, _) = random_weights(ty, 4, 64, 2);
            let mut x = vec![0.5f32; 2 * 64];
            x[64 + 33] = f32::NAN;
            let mut dst = vec![0f32; 2 * 4];
            matmul(ty, &w, 4, 64, &x, &mut dst).unwrap();
            assert!(dst[..4].iter().all(|v| v.is_finite()), "{ty:?}");
            assert!(dst[4..].iter().all(|v| v.is_nan()), "{ty:?}");
        }
    }
}
