//! The weight matrices of a [`super::Llama`] and the kernels that multiply them.

use super::{GEMM_MIN_ROWS, KERNEL_GEMM_MIN_ROWS};
use crate::quant::{Packed, WeightType};
use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{D, Device, Module, Result, Tensor};
use std::sync::Arc;

/// Which kernels multiply a [`super::Llama`]'s quantized weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kernels {
    /// corral's own ([`crate::quant`]) on the CPU: the tiled kernel for every layout it
    /// reads where the CPU has AVX-512 VNNI, else the AVX2 kernel for Q4_1 and Q8_0;
    /// candle's quantized kernel for others, and prompt chunks of many rows on dequantized
    /// weights.
    Own,
    /// The same without the tiled kernel (to measure what it gives): the AVX2 kernel for
    /// Q4_1 and Q8_0, candle's for the others.
    Untiled,
    /// candle's quantized kernel (as candle-transformers' `quantized_llama`), prompt
    /// chunks of many rows on dequantized weights.
    Candle,
    /// Every multiplication on f32 weights, dequantized once when chosen (memory: the
    /// model in f32): the closest to the weights' values (activations are not rounded to
    /// 8 bits).
    Dequantized,
}

/// A weight matrix `(out, in)`, kept quantized.
#[derive(Clone)]
pub(super) struct Linear {
    weight: Weight,
    /// The weight dequantized once, under [`Kernels::Dequantized`].
    dequantized: Option<Tensor>,
}

/// Where a [`Linear`]'s weight is held, which decides the kernel that multiplies it.
#[derive(Clone)]
enum Weight {
    /// As candle holds it: candle's kernel, or corral's AVX2 one ([`crate::quant::matmul`])
    /// for Q4_1 and Q8_0 on the CPU.
    Candle {
        weight: Arc<QTensor>,
        quantized: QMatMul,
        kernel: Option<WeightType>,
    },
    /// Repacked for corral's tiled kernel ([`crate::quant::Packed`]), on CPUs with
    /// AVX-512 VNNI, for every block layout it reads; the file's bytes are not kept.
    Tiled(Arc<Packed>),
}

impl Linear {
    pub(super) fn new(weight: QTensor, kernels: Kernels) -> Result<Linear> {
        let msg = candle_core::Error::Msg;
        let tiled = match (kernels, weight.device().is_cpu()) {
            (Kernels::Own, true) if crate::quant::tiled_kernel_is_fast() => {
                let (out, inp) = weight.shape().dims2()?;
                // A type it does not read stays with candle.
                Packed::new(weight.dtype(), &weight.data()?, out, inp)
                    .map_err(candle_core::Error::wrap)?
            }
            _ => None,
        };
        let weight = match tiled {
            Some(p) => Weight::Tiled(Arc::new(p)),
            None => {
                let weight = Arc::new(weight);
                let kernel = match (kernels, weight.dtype()) {
                    _ if !weight.device().is_cpu() => None,
                    (Kernels::Own | Kernels::Untiled, GgmlDType::Q4_1) => Some(WeightType::Q4_1),
                    (Kernels::Own | Kernels::Untiled, GgmlDType::Q8_0) => Some(WeightType::Q8_0),
                    _ => None,
                };
                Weight::Candle {
                    // Unquantized (f32, f16, bf16) weights become plain f32 tensors here.
                    quantized: QMatMul::from_arc(weight.clone())?,
                    weight,
                    kernel,
                }
            }
        };
        let mut linear = Linear {
            weight,
            dequantized: None,
        };
        if kernels == Kernels::Dequantized {
            linear.dequantized = Some(
                linear
                    .dequantize(&Device::Cpu)
                    .map_err(|e| msg(e.to_string()))?,
            );
        }
        Ok(linear)
    }

    /// The weight in f32.
    pub(super) fn dequantize(&self, device: &Device) -> Result<Tensor> {
        match &self.weight {
            Weight::Candle { weight, .. } => weight.dequantize(device),
            Weight::Tiled(p) => Tensor::from_vec(p.dequantize(), p.dims(), device),
        }
    }

    pub(super) fn forward(&self, x: &Tensor) -> Result<Tensor> {
        if let Some(w) = &self.dequantized {
            return QMatMul::Tensor(w.clone()).forward(x);
        }
        let rows = x.elem_count() / x.dim(D::Minus1)?;
        match &self.weight {
            // Every row count: dequantizing the tiled form per call costs more than the
            // f32 multiply saves (654-token prompts ran at 79 tok/s that way).
            Weight::Tiled(p) => tiled_forward(p, x),
            Weight::Candle {
                weight,
                quantized,
                kernel,
            } => {
                let gemm_rows = match kernel {
                    Some(_) => KERNEL_GEMM_MIN_ROWS,
                    None => GEMM_MIN_ROWS,
                };
                match (quantized, kernel) {
                    (QMatMul::QTensor(_), _) if rows >= gemm_rows && x.device().is_cpu() => {
                        QMatMul::Tensor(weight.dequantize(x.device())?).forward(x)
                    }
                    (QMatMul::QTensor(_), Some(ty)) if x.device().is_cpu() => {
                        kernel_forward(weight, *ty, x)
                    }
                    (q, _) => q.forward(x),
                }
            }
        }
    }

    /// The same for the rows of a step pass ([`Llama::forward_batch`]): always the
    /// quantized kernel a decoding step uses, however many rows, so each row's result is
    /// the same whatever it is batched with (the dequantized path rounds differently).
    pub(super) fn forward_rows(&self, x: &Tensor) -> Result<Tensor> {
        if self.dequantized.is_some() {
            return self.forward(x);
        }
        match &self.weight {
            Weight::Tiled(p) => tiled_forward(p, x),
            Weight::Candle {
                weight,
                quantized: QMatMul::QTensor(_),
                kernel: Some(ty),
            } if x.device().is_cpu() => kernel_forward(weight, *ty, x),
            Weight::Candle { quantized, .. } => quantized.forward(x),
        }
    }
}

/// `x * weight^T` through [`crate::quant::matmul`].
fn kernel_forward(weight: &QTensor, ty: WeightType, x: &Tensor) -> Result<Tensor> {
    let (out, inp) = weight.shape().dims2()?;
    let values = x.flatten_all()?.to_vec1::<f32>()?;
    let mut dst = vec![0f32; values.len() / inp * out];
    let data = weight.data()?;
    crate::quant::matmul(ty, &data, out, inp, &values, &mut dst)
        .map_err(candle_core::Error::wrap)?;
    output(dst, x, out)
}

/// `x * weight^T` through the tiled kernel.
fn tiled_forward(p: &Packed, x: &Tensor) -> Result<Tensor> {
    let out = p.dims().0;
    let values = x.flatten_all()?.to_vec1::<f32>()?;
    let mut dst = vec![0f32; values.len() / p.dims().1 * out];
    p.matmul(&values, &mut dst)
        .map_err(candle_core::Error::wrap)?;
    output(dst, x, out)
}

/// `dst` shaped as `x` with its last dimension `out`.
fn output(dst: Vec<f32>, x: &Tensor, out: usize) -> Result<Tensor> {
    let mut dims = x.dims().to_vec();
    if let Some(last) = dims.last_mut() {
        *last = out;
    }
    Tensor::from_vec(dst, dims, x.device())
}

/// The token embedding table.
#[derive(Clone)]
pub(super) enum Embeddings {
    /// In f32 (on a device, or beside candle's kernels).
    Dense(Tensor),
    /// Kept quantized in the tiled form on the CPU, each looked-up row dequantized: the
    /// output matrix's own when the two are tied (as SmolLM2's are), so the table costs no
    /// memory of its own (in f32 it was 113 MB for SmolLM2).
    Packed(Arc<Packed>),
}

impl Embeddings {
    /// The table `token_embd.weight`, when the file has an output matrix of its own.
    pub(super) fn new(table: QTensor, kernels: Kernels) -> Result<Embeddings> {
        let device = table.device();
        Embeddings::of_table(&table, kernels, &device)
    }

    /// The table tied to the output matrix `output` (built from the same tensor).
    pub(super) fn tied(output: &Linear, kernels: Kernels, device: &Device) -> Result<Embeddings> {
        match &output.weight {
            Weight::Tiled(p) => Ok(Embeddings::Packed(p.clone())),
            Weight::Candle { weight, .. } => Embeddings::of_table(weight, kernels, device),
        }
    }

    /// `table` packed for corral's kernels (read a row at a time) where they apply and
    /// support its type, else dequantized on `device`.
    fn of_table(table: &QTensor, kernels: Kernels, device: &Device) -> Result<Embeddings> {
        if kernels == Kernels::Own && device.is_cpu() {
            let (vocab, width) = table.shape().dims2()?;
            if let Some(p) = Packed::new(table.dtype(), &table.data()?, vocab, width)
                .map_err(candle_core::Error::wrap)?
            {
                return Ok(Embeddings::Packed(Arc::new(p)));
            }
        }
        Ok(Embeddings::Dense(table.dequantize(device)?))
    }

    /// Values per token.
    pub(super) fn width(&self) -> Result<usize> {
        match self {
            Embeddings::Dense(t) => Ok(t.dims2()?.1),
            Embeddings::Packed(p) => Ok(p.dims().1),
        }
    }

    pub(super) fn device(&self) -> Device {
        match self {
            Embeddings::Dense(t) => t.device().clone(),
            Embeddings::Packed(_) => Device::Cpu,
        }
    }

    /// The rows of `ids` (a vector of token ids), `(ids, width)`; an error for an id past
    /// the vocabulary.
    pub(super) fn lookup(&self, ids: &Tensor) -> Result<Tensor> {
        let p = match self {
            Embeddings::Dense(t) => return t.index_select(ids, 0),
            Embeddings::Packed(p) => p,
        };
        let (vocab, width) = p.dims();
        let ids = ids.to_vec1::<u32>()?;
        let mut rows = vec![0f32; ids.len() * width];
        for (&id, row) in ids.iter().zip(rows.chunks_exact_mut(width)) {
            if id as usize >= vocab {
                return Err(candle_core::Error::Msg(format!(
                    "token id {id} is past the vocabulary ({vocab} tokens)"
                )));
            }
            p.dequantize_row(id as usize, row);
        }
        Tensor::from_vec(rows, (ids.len(), width), &Device::Cpu)
    }
}

#[derive(Clone)]
pub(super) struct RmsNorm {
    weight: Tensor,
    eps: f32,
}

impl RmsNorm {
    pub(super) fn new(weight: QTensor, eps: f32) -> Result<RmsNorm> {
        Ok(RmsNorm {
            weight: weight.dequantize(&weight.device())?,
            eps,
        })
    }

    pub(super) fn forward(&self, x: &Tensor) -> Result<Tensor> {
        candle_nn::ops::rms_norm(x, &self.weight, self.eps)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A table kept packed reads back the rows candle dequantizes (up to the rounding of
    /// `u * d + m` against `(u - z) * d`), and refuses an id past its end.
    #[test]
    fn packed_embeddings_read_the_dequantized_rows() {
        let (vocab, width) = (40, 256);
        let values: Vec<f32> = (0..vocab * width)
            .map(|i| (i as f32 * 0.37).sin())
            .collect();
        let table = Tensor::from_vec(values, (vocab, width), &Device::Cpu).unwrap();
        for dtype in [
            GgmlDType::Q4_1,
            GgmlDType::Q8_0,
            GgmlDType::Q4K,
            GgmlDType::Q6K,
        ] {
            let q = QTensor::quantize(&table, dtype).unwrap();
            let expect = q.dequantize(&Device::Cpu).unwrap();
            let e = Embeddings::new(q, Kernels::Own).unwrap();
            assert!(matches!(e, Embeddings::Packed(_)), "{dtype:?}");
            let ids = Tensor::new(&[3u32, 0, 39, 3], &Device::Cpu).unwrap();
            let got = e.lookup(&ids).unwrap();
            let want = expect.index_select(&ids, 0).unwrap();
            let (got, want) = (
                got.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
                want.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
            );
            assert_eq!(got.len(), want.len());
            for (g, w) in got.iter().zip(&want) {
                assert!(
                    (g - w).abs() <= 1e-6 * w.abs().max(1e-2),
                    "{dtype:?}: {g} vs {w}"
                );
            }
            let past = Tensor::new(&[40u32], &Device::Cpu).unwrap();
            let err = e.lookup(&past).unwrap_err().to_string();
            assert!(err.contains("past the vocabulary"), "{err}");
        }
    }
}
