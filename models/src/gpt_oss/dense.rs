//! gpt-oss's dense weights (attention, router, embeddings, output) and their
//! multiplication on the CPU, and the split of any multiplication's output features among
//! threads (`by_features`, which [`super::mxfp4`] uses too).
//!
//! The published checkpoints store these weights in bf16; they stay bf16 here (half the
//! memory of f32, and half the bytes a decoding step reads, which is what bounds it),
//! widened to f32 as they are read. Weights of other types (a GGUF file's Q8_0 or f32) are
//! kept in f32, so no value is rounded on loading.

use candle_core::{DType, Result, Tensor};

/// Multiply-adds below which a multiplication runs on the calling thread.
const PARALLEL_MIN_WORK: usize = 1 << 17;

/// Output features a thread takes at a time.
const PER_CHUNK: usize = 16;

/// A weight matrix's values.
#[derive(Clone, Debug)]
enum Values {
    Bf16(Vec<u16>),
    F32(Vec<f32>),
}

/// A `rows x cols` matrix, with an optional bias per row.
#[derive(Clone, Debug)]
pub struct Dense {
    rows: usize,
    cols: usize,
    values: Values,
    bias: Option<Vec<f32>>,
}

impl Dense {
    /// From a 2-D tensor (bf16 kept as is, any other type as f32) and a bias.
    pub fn new(weight: &Tensor, bias: Option<&Tensor>) -> Result<Dense> {
        let (rows, cols) = weight.dims2()?;
        let flat = weight.flatten_all()?;
        let values = match weight.dtype() {
            DType::BF16 => Values::Bf16(
                flat.to_vec1::<half::bf16>()?
                    .into_iter()
                    .map(half::bf16::to_bits)
                    .collect(),
            ),
            _ => Values::F32(flat.to_dtype(DType::F32)?.to_vec1::<f32>()?),
        };
        let bias = bias
            .map(|b| b.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>())
            .transpose()?;
        if bias.as_ref().is_some_and(|b| b.len() != rows) {
            return Err(candle_core::Error::Msg(format!(
                "a bias of {} values for a matrix of {rows} rows",
                bias.as_ref().map_or(0, Vec::len)
            )));
        }
        Ok(Dense {
            rows,
            cols,
            values,
            bias,
        })
    }

    /// `(rows, cols)`.
    pub fn shape(&self) -> (usize, usize) {
        (self.rows, self.cols)
    }

    /// The bias's length (0 without one).
    pub fn bias_len(&self) -> usize {
        self.bias.as_ref().map_or(0, Vec::len)
    }

    /// The matrix in f32 on `device` (`rows x cols`), and its bias.
    pub fn to_device(&self, device: &candle_core::Device) -> Result<(Tensor, Option<Tensor>)> {
        let mut values = vec![0f32; self.rows * self.cols];
        for (r, row) in values.chunks_exact_mut(self.cols).enumerate() {
            self.row_into(r, row);
        }
        let w = Tensor::from_vec(values, (self.rows, self.cols), device)?;
        let b = self
            .bias
            .as_ref()
            .map(|b| Tensor::new(b.as_slice(), device))
            .transpose()?;
        Ok((w, b))
    }

    /// Row `r` into `out` (`cols` values): an embedding.
    pub fn row_into(&self, r: usize, out: &mut [f32]) {
        let at = r * self.cols..(r + 1) * self.cols;
        match &self.values {
            Values::Bf16(v) => widen(&v[at], out),
            Values::F32(v) => out.copy_from_slice(&v[at]),
        }
    }

    /// `x (n x cols) * self^T + bias`, `(n x rows)`.
    pub fn forward(&self, x: &[f32]) -> Vec<f32> {
        let n = x.len() / self.cols;
        let cols = self.cols;
        let mut out = by_features(self.rows, n, cols, |first, chunk| {
            for (i, results) in chunk.chunks_exact_mut(n).enumerate() {
                let at = (first + i) * cols..(first + i + 1) * cols;
                for (r, acc) in results.iter_mut().enumerate() {
                    let x = &x[r * cols..(r + 1) * cols];
                    *acc = match &self.values {
                        Values::Bf16(v) => {
                            dot_by(&v[at.clone()], x, |w| f32::from_bits(u32::from(w) << 16))
                        }
                        Values::F32(v) => dot_by(&v[at.clone()], x, |w| w),
                    };
                }
            }
        });
        if let Some(bias) = &self.bias {
            for row in out.chunks_exact_mut(self.rows) {
                for (o, b) in row.iter_mut().zip(bias) {
                    *o += b;
                }
            }
        }
        out
    }
}

/// bf16 values widened to f32 (exact: bf16 is f32's upper half).
pub(super) fn widen(v: &[u16], out: &mut [f32]) {
    for (o, &b) in out.iter_mut().zip(v) {
        *o = f32::from_bits(u32::from(b) << 16);
    }
}

/// `sum(value(w[i]) * x[i])` in 32 lanes: four independent vectors of eight, so that the
/// multiply-adds vectorise and do not wait on each other.
pub(super) fn dot_by<W: Copy>(w: &[W], x: &[f32], value: impl Fn(W) -> f32) -> f32 {
    let mut acc = [0f32; 32];
    let (wc, xc) = (w.chunks_exact(32), x.chunks_exact(32));
    let tail: f32 = wc
        .remainder()
        .iter()
        .zip(xc.remainder())
        .map(|(&a, b)| value(a) * b)
        .sum();
    for (a, b) in wc.zip(xc) {
        for i in 0..32 {
            acc[i] += value(a[i]) * b[i];
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// The `n x features` result of a multiplication whose output features are computed by
/// `compute(first, chunk)`: `chunk` holds features `first..` (as many as fit), `n` results
/// each, feature after feature. Chunks of [`PER_CHUNK`] features are shared among
/// candle's pool of threads (spinning threads, which its own kernels use: a decoding step
/// makes hundreds of these calls) unless the work (`features x n x inner` multiply-adds)
/// is small.
pub(super) fn by_features(
    features: usize,
    n: usize,
    inner: usize,
    compute: impl Fn(usize, &mut [f32]) + Sync,
) -> Vec<f32> {
    let mut cols = vec![0f32; features * n];
    if features == 0 || n == 0 {
        return cols;
    }
    if features * n * inner < PARALLEL_MIN_WORK {
        compute(0, &mut cols);
    } else {
        let chunks = features.div_ceil(PER_CHUNK);
        let base = cols.as_mut_ptr() as usize;
        let len = cols.len();
        candle_core::utils::barrier_pool().execute_chunked(chunks, |range| {
            for c in range {
                let start = c * PER_CHUNK * n;
                let end = len.min(start + PER_CHUNK * n);
                // SAFETY: chunk c covers `cols[start..end]`, which no other chunk covers,
                // and `cols` outlives the call (execute_chunked returns when every chunk
                // is done).
                let chunk = unsafe {
                    std::slice::from_raw_parts_mut((base as *mut f32).add(start), end - start)
                };
                compute(c * PER_CHUNK, chunk);
            }
        });
    }
    let mut out = vec![0f32; features * n];
    for (f, results) in cols.chunks_exact(n).enumerate() {
        for (r, &v) in results.iter().enumerate() {
            out[r * features + f] = v;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn products_match_in_both_types() {
        for (rows, cols, n) in [(5, 40, 1), (300, 96, 3)] {
            let w: Vec<f32> = (0..rows * cols)
                .map(|i| ((i * 7919) % 201) as f32 / 100.0 - 1.0)
                .collect();
            let x: Vec<f32> = (0..n * cols)
                .map(|i| ((i * 104_729) % 199) as f32 / 100.0 - 1.0)
                .collect();
            let b: Vec<f32> = (0..rows).map(|i| i as f32 / 10.0).collect();
            let wt = Tensor::from_vec(w.clone(), (rows, cols), &Device::Cpu).unwrap();
            let bt = Tensor::from_vec(b.clone(), rows, &Device::Cpu).unwrap();
            for t in [wt.clone(), wt.to_dtype(DType::BF16).unwrap()] {
                let values = t
                    .to_dtype(DType::F32)
                    .unwrap()
                    .flatten_all()
                    .unwrap()
                    .to_vec1::<f32>()
                    .unwrap();
                let d = Dense::new(&t, Some(&bt)).unwrap();
                let got = d.forward(&x);
                for r in 0..n {
                    for f in 0..rows {
                        let want: f64 = (0..cols)
                            .map(|c| f64::from(values[f * cols + c]) * f64::from(x[r * cols + c]))
                            .sum::<f64>()
                            + f64::from(b[f]);
                        let g = f64::from(got[r * rows + f]);
                        assert!(
                            (g - want).abs() <= 1e-4 * (1.0 + want.abs()),
                            "{g} vs {want}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn a_bias_of_the_wrong_length_is_an_error() {
        let w = Tensor::zeros((3, 8), DType::F32, &Device::Cpu).unwrap();
        let b = Tensor::zeros(2, DType::F32, &Device::Cpu).unwrap();
        assert!(Dense::new(&w, Some(&b)).is_err());
    }
}
