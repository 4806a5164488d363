//! MXFP4 weight matrices, kept packed, and their multiplication on the CPU.
//!
//! MXFP4 (OCP microscaling) stores values in blocks of 32: one E8M0 scale byte (`2^(e -
//! 127)`) and 32 four-bit E2M1 values (sign, two exponent bits, one mantissa bit: 0, 0.5,
//! 1, 1.5, 2, 3, 4, 6 and their negatives). gpt-oss ships its experts this way. A matrix
//! here keeps the Hugging Face checkpoint's order: within a block, byte `j` holds value
//! `2j` in its low nibble and `2j + 1` in its high one; llama.cpp's GGUF order (value `j`
//! low, `j + 16` high, the scale first) is repacked into it on loading.
//!
//! A multiplication unpacks each block once (a 256-entry table turns a byte into its two
//! values) and multiplies it with the same 32 inputs of every row, in f32. Output rows are
//! split in chunks among candle's pool of threads (`super::dense::by_features`).

/// Values per block.
pub const BLOCK: usize = 32;

/// The 16 E2M1 values, by code.
const E2M1: [f32; 16] = [
    0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0,
];

/// `2^(e - 127)` (E8M0; 255 gives infinity, as `ldexp` does).
pub fn scale(e: u8) -> f32 {
    match e {
        0 => f32::from_bits(0x0040_0000),
        e => f32::from_bits(u32::from(e) << 23),
    }
}

/// A `rows x cols` matrix of MXFP4 values.
#[derive(Clone, Debug)]
pub struct Matrix {
    rows: usize,
    cols: usize,
    /// One per block, row after row.
    scales: Vec<u8>,
    /// 16 per block, row after row.
    codes: Vec<u8>,
}

impl Matrix {
    /// From the Hugging Face layout: `codes` holds `rows x cols/32` blocks of 16 bytes,
    /// `scales` one byte per block.
    pub fn from_hf(
        rows: usize,
        cols: usize,
        codes: Vec<u8>,
        scales: Vec<u8>,
    ) -> Result<Matrix, String> {
        if cols == 0 || !cols.is_multiple_of(BLOCK) {
            return Err(format!("{cols} columns is not a multiple of {BLOCK}"));
        }
        let blocks = rows * cols / BLOCK;
        if codes.len() != blocks * 16 || scales.len() != blocks {
            return Err(format!(
                "a {rows}x{cols} MXFP4 matrix has {blocks} blocks: {} code bytes and {} scales given",
                codes.len(),
                scales.len()
            ));
        }
        Ok(Matrix {
            rows,
            cols,
            scales,
            codes,
        })
    }

    /// From llama.cpp's `block_mxfp4` (17 bytes a block: the scale, then value `j` in the
    /// low nibble of byte `j` and value `j + 16` in its high one).
    pub fn from_ggml(rows: usize, cols: usize, raw: &[u8]) -> Result<Matrix, String> {
        if cols == 0 || !cols.is_multiple_of(BLOCK) {
            return Err(format!("{cols} columns is not a multiple of {BLOCK}"));
        }
        let blocks = rows * cols / BLOCK;
        if raw.len() != blocks * 17 {
            return Err(format!(
                "a {rows}x{cols} MXFP4 matrix takes {} bytes, not {}",
                blocks * 17,
                raw.len()
            ));
        }
        let mut scales = Vec::with_capacity(blocks);
        let mut codes = Vec::with_capacity(blocks * 16);
        for block in raw.chunks_exact(17) {
            scales.push(block[0]);
            let code = |i: usize| match i < 16 {
                true => block[1 + i] & 0x0F,
                false => block[1 + i - 16] >> 4,
            };
            codes.extend((0..16).map(|j| code(2 * j) | (code(2 * j + 1) << 4)));
        }
        Matrix::from_hf(rows, cols, codes, scales)
    }

    /// The rows of `a` and `b` (of one shape) taken in turn: `a`'s row `i` becomes row
    /// `2i`, `b`'s row `2i + 1`.
    pub fn interleave_rows(a: &Matrix, b: &Matrix) -> Result<Matrix, String> {
        if (a.rows, a.cols) != (b.rows, b.cols) {
            return Err(format!(
                "cannot interleave a {}x{} matrix with a {}x{} one",
                a.rows, a.cols, b.rows, b.cols
            ));
        }
        let per = a.cols / BLOCK;
        let mut scales = Vec::with_capacity(2 * a.scales.len());
        let mut codes = Vec::with_capacity(2 * a.codes.len());
        for r in 0..a.rows {
            for m in [a, b] {
                scales.extend_from_slice(&m.scales[r * per..(r + 1) * per]);
                codes.extend_from_slice(&m.codes[r * per * 16..(r + 1) * per * 16]);
            }
        }
        Matrix::from_hf(2 * a.rows, a.cols, codes, scales)
    }

    /// Output features.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Inputs.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Row `r`'s values.
    pub fn row(&self, r: usize) -> Vec<f32> {
        let per = self.cols / BLOCK;
        let mut out = Vec::with_capacity(self.cols);
        for b in r * per..(r + 1) * per {
            let d = scale(self.scales[b]);
            for &byte in &self.codes[b * 16..(b + 1) * 16] {
                out.push(E2M1[usize::from(byte & 0x0F)] * d);
                out.push(E2M1[usize::from(byte >> 4)] * d);
            }
        }
        out
    }

    /// The matrix unpacked to f32 on `device` (`rows x cols`).
    pub fn to_device(
        &self,
        device: &candle_core::Device,
    ) -> candle_core::Result<candle_core::Tensor> {
        let values: Vec<f32> = (0..self.rows).flat_map(|r| self.row(r)).collect();
        candle_core::Tensor::from_vec(values, (self.rows, self.cols), device)
    }

    /// `dst (n x rows) = x (n x cols) * self^T`. Sizes are checked: a mismatch is an
    /// error, not a panic.
    pub fn matmul(&self, x: &[f32], dst: &mut [f32]) -> Result<(), String> {
        if !x.len().is_multiple_of(self.cols) || dst.len() != x.len() / self.cols * self.rows {
            return Err(format!(
                "input of {} values and output of {} for a {}x{} matrix",
                x.len(),
                dst.len(),
                self.rows,
                self.cols
            ));
        }
        let n = x.len() / self.cols;
        let out = super::dense::by_features(self.rows, n, self.cols, |first, chunk| {
            self.features(first, x, n, chunk)
        });
        dst.copy_from_slice(&out);
        Ok(())
    }

    /// Output features `first..` (as many as `out` holds, `n` results each) for the `n`
    /// rows of `x`.
    fn features(&self, first: usize, x: &[f32], n: usize, out: &mut [f32]) {
        let per = self.cols / BLOCK;
        let table = pair_table();
        let simd = simd_available();
        let mut values = [0f32; BLOCK];
        // Per input row, 32 lanes of sums (independent multiply-adds).
        let mut lanes = vec![[0f32; BLOCK]; n];
        for (i, results) in out.chunks_exact_mut(n).enumerate() {
            let f = first + i;
            lanes.iter_mut().for_each(|l| *l = [0.0; BLOCK]);
            for b in 0..per {
                let block = f * per + b;
                let d = scale(self.scales[block]);
                let codes = &self.codes[block * 16..(block + 1) * 16];
                if simd {
                    #[cfg(target_arch = "x86_64")]
                    // SAFETY: `simd` says the CPU has AVX2; `codes` holds 16 bytes.
                    unsafe {
                        avx2::decode(codes, d, &mut values)
                    };
                } else {
                    for (pair, &byte) in values.chunks_exact_mut(2).zip(codes) {
                        let [lo, hi] = table[usize::from(byte)];
                        pair[0] = lo * d;
                        pair[1] = hi * d;
                    }
                }
                for (r, acc) in lanes.iter_mut().enumerate() {
                    let xs = &x[r * self.cols + b * BLOCK..r * self.cols + (b + 1) * BLOCK];
                    for j in 0..BLOCK {
                        acc[j] += values[j] * xs[j];
                    }
                }
            }
            for (result, acc) in results.iter_mut().zip(&lanes) {
                *result = acc.iter().sum();
            }
        }
    }
}

/// Whether [`avx2::decode`] can run here.
fn simd_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        is_x86_feature_detected!("avx2")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    /// A block's 16 code bytes times its scale `d`, as 32 values: the nibbles are split
    /// and put in order by byte shuffles, looked up in a table of twice the E2M1 values
    /// (small integers), widened to f32 and multiplied by `d / 2` (exact: a power of two).
    ///
    /// # Safety
    /// The CPU must have AVX2, and `codes` must hold 16 bytes.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn decode(codes: &[u8], d: f32, out: &mut [f32; super::BLOCK]) {
        debug_assert!(codes.len() >= 16);
        let table = _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
        let mask = _mm_set1_epi8(0x0F);
        // SAFETY: the caller guarantees 16 readable bytes; loadu has no alignment need.
        let b = unsafe { _mm_loadu_si128(codes.as_ptr().cast()) };
        let lo = _mm_and_si128(b, mask);
        let hi = _mm_and_si128(_mm_srli_epi16(b, 4), mask);
        let half = _mm256_set1_ps(d * 0.5);
        let halves = [
            _mm_shuffle_epi8(table, _mm_unpacklo_epi8(lo, hi)),
            _mm_shuffle_epi8(table, _mm_unpackhi_epi8(lo, hi)),
        ];
        for (k, v) in halves.into_iter().enumerate() {
            let a = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v));
            let b = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(v, 8)));
            // SAFETY: `out` holds 32 values; k is 0 or 1, so 16k + 16 <= 32.
            unsafe {
                _mm256_storeu_ps(out.as_mut_ptr().add(16 * k), _mm256_mul_ps(a, half));
                _mm256_storeu_ps(out.as_mut_ptr().add(16 * k + 8), _mm256_mul_ps(b, half));
            }
        }
    }
}

/// A byte's two values (low nibble first).
fn pair_table() -> &'static [[f32; 2]; 256] {
    static TABLE: std::sync::OnceLock<[[f32; 2]; 256]> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| std::array::from_fn(|b| [E2M1[b & 0x0F], E2M1[b >> 4]]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_rng::rng;

    /// A random matrix in llama.cpp's layout and its values.
    fn random(rows: usize, cols: usize, seed: u64) -> (Vec<u8>, Vec<f32>) {
        let mut next = rng(seed);
        let mut raw = Vec::new();
        let mut values = Vec::new();
        for _ in 0..rows * cols / BLOCK {
            let e = 120 + (next() % 14) as u8;
            let codes: Vec<u8> = (0..BLOCK).map(|_| (next() % 16) as u8).collect();
            raw.push(e);
            raw.extend((0..16).map(|j| codes[j] | (codes[j + 16] << 4)));
            values.extend(codes.iter().map(|&c| E2M1[usize::from(c)] * scale(e)));
        }
        (raw, values)
    }

    #[test]
    fn scales_are_powers_of_two() {
        assert_eq!(scale(127), 1.0);
        assert_eq!(scale(128), 2.0);
        assert_eq!(scale(120), 2f32.powi(-7));
        assert_eq!(scale(1), 2f32.powi(-126));
        assert_eq!(scale(0), 2f32.powi(-127));
        assert_eq!(scale(255), f32::INFINITY);
    }

    #[test]
    fn ggml_blocks_unpack_to_their_values() {
        let (raw, values) = random(5, 64, 7);
        let m = Matrix::from_ggml(5, 64, &raw).unwrap();
        let unpacked: Vec<f32> = (0..5).flat_map(|r| m.row(r)).collect();
        assert_eq!(unpacked, values);
    }

    #[test]
    fn products_match_the_unpacked_values() {
        // Large enough to run on the pool of threads, and small.
        for (rows, cols, n) in [(3, 32, 1), (70, 96, 3), (300, 512, 2)] {
            let (raw, values) = random(rows, cols, (rows * cols) as u64);
            let m = Matrix::from_ggml(rows, cols, &raw).unwrap();
            let mut next = rng(99);
            let x: Vec<f32> = (0..n * cols)
                .map(|_| (next() % 2001) as f32 / 1000.0 - 1.0)
                .collect();
            let mut dst = vec![0f32; n * rows];
            m.matmul(&x, &mut dst).unwrap();
            for r in 0..n {
                for f in 0..rows {
                    let want: f64 = (0..cols)
                        .map(|c| f64::from(values[f * cols + c]) * f64::from(x[r * cols + c]))
                        .sum();
                    let got = f64::from(dst[r * rows + f]);
                    assert!(
                        (got - want).abs() <= 1e-4 * (1.0 + want.abs()),
                        "{got} vs {want}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_simd_decoding_gives_the_table_values() {
        if !simd_available() {
            eprintln!("no AVX2 here: the SIMD decoding is not checked");
            return;
        }
        let codes: Vec<u8> = (0..=255u8).collect();
        for e in [0u8, 1, 120, 127, 130, 254] {
            for block in codes.chunks_exact(16) {
                let mut got = [0f32; BLOCK];
                #[cfg(target_arch = "x86_64")]
                // SAFETY: AVX2 was detected; the block holds 16 bytes.
                unsafe {
                    avx2::decode(block, scale(e), &mut got)
                };
                let want: Vec<f32> = block
                    .iter()
                    .flat_map(|&b| pair_table()[usize::from(b)].map(|v| v * scale(e)))
                    .collect();
                assert_eq!(got.to_vec(), want, "scale {e}");
            }
        }
    }

    #[test]
    fn mismatched_sizes_are_errors() {
        assert!(Matrix::from_hf(2, 30, vec![], vec![]).is_err());
        assert!(Matrix::from_hf(2, 32, vec![0; 31], vec![0; 2]).is_err());
        assert!(Matrix::from_ggml(2, 32, &[0; 33]).is_err());
        let m = Matrix::from_hf(2, 32, vec![0; 32], vec![127; 2]).unwrap();
        assert!(m.matmul(&[0.0; 31], &mut [0.0; 2]).is_err());
        assert!(m.matmul(&[0.0; 32], &mut [0.0; 3]).is_err());
    }
}
