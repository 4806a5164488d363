//! The dense llama forward pass over GGUF weights, with one change from candle-transformers'
//! `quantized_llama`: a prompt chunk (many rows at once) multiplies by weights dequantized
//! for that call, through candle's f32 matrix multiply, while a single decoding row keeps
//! the quantized kernel. candle's quantized CPU kernel costs the same per row whether rows
//! come one at a time or batched, so prompts ran at about the decode speed; the f32 multiply
//! is blocked and reuses each weight across the chunk's rows. The dequantized copy lives for
//! one multiplication: memory stays that of the quantized model plus one matrix.
//!
//! Mixture-of-experts GGUFs keep candle-transformers' model ([`GgufNet::Experts`]).

use crate::candle_lm::CandleNet;
use crate::quant::WeightType;
use candle_core::quantized::gguf_file::Content;
use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{D, DType, Device, IndexOp, Module, Result, Tensor};
use candle_transformers::models::quantized_llama::{MAX_SEQ_LEN, ModelWeights};
use std::sync::Arc;

/// Rows from which a multiplication dequantizes its weight instead of running candle's
/// quantized kernel row by row. Measured on SmolLM2-135M Q4_1, 2 cores (`corral generate
/// --raw --prompt-file F --max-tokens 1 --stats`, prompts of N tokens, built with the
/// threshold at N or above it): 16 rows ran at 50 tok/s on f32 against 93 quantized, 24
/// rows at 140 against 89, 32 rows at 130-190 against 93.
pub const GEMM_MIN_ROWS: usize = 24;

/// The same for weights that corral's own kernel ([`crate::quant`]) multiplies: it reads
/// each weight block once for up to 8 rows, so it stays ahead of dequantizing for longer.
/// Measured as above: prompts of 100 tokens ran at 265-300 tok/s on the kernel against 218
/// dequantized, 200 tokens at 215-280 against 336.
pub const KERNEL_GEMM_MIN_ROWS: usize = 128;

/// A GGUF llama-family network.
#[derive(Clone)]
pub enum GgufNet {
    /// Dense models (Llama, SmolLM2, Mistral, ...): [`Llama`].
    Dense(Llama),
    /// Mixture-of-experts models: candle-transformers' `quantized_llama`.
    Experts(ModelWeights),
}

impl CandleNet for GgufNet {
    fn forward(&mut self, input: &Tensor, pos: usize) -> Result<Tensor> {
        match self {
            GgufNet::Dense(m) => m.forward(input, pos),
            GgufNet::Experts(m) => m.forward(input, pos),
        }
    }

    fn clear_kv_cache(&mut self) {
        match self {
            GgufNet::Dense(m) => m.clear_kv_cache(),
            GgufNet::Experts(m) => m.clear_kv_cache(),
        }
    }
}

/// Which kernels multiply a [`Llama`]'s quantized weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kernels {
    /// corral's own ([`crate::quant`]) for Q4_1 and Q8_0 weights on the CPU, candle's
    /// quantized kernel for others, and prompt chunks of many rows on dequantized weights.
    Own,
    /// candle's quantized kernel (as candle-transformers' `quantized_llama`), prompt
    /// chunks of many rows on dequantized weights.
    Candle,
    /// Every multiplication on dequantized f32 weights: the slowest, and the closest to
    /// the weights' values (activations are not rounded to 8 bits).
    Dequantized,
}

/// A weight matrix `(out, in)`, kept quantized.
#[derive(Clone)]
struct Linear {
    weight: Arc<QTensor>,
    quantized: QMatMul,
    /// Set where corral's own kernel multiplies this weight ([`crate::quant`]): Q4_1 and
    /// Q8_0 on the CPU.
    kernel: Option<WeightType>,
    kernels: Kernels,
}

impl Linear {
    fn new(weight: QTensor) -> Result<Linear> {
        let weight = Arc::new(weight);
        let kernel = match weight.dtype() {
            _ if !weight.device().is_cpu() => None,
            GgmlDType::Q4_1 => Some(WeightType::Q4_1),
            GgmlDType::Q8_0 => Some(WeightType::Q8_0),
            _ => None,
        };
        Ok(Linear {
            // Unquantized (f32, f16, bf16) weights become plain f32 tensors here.
            quantized: QMatMul::from_arc(weight.clone())?,
            weight,
            kernel,
            kernels: Kernels::Own,
        })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let rows = x.elem_count() / x.dim(D::Minus1)?;
        let (gemm_rows, kernel) = match (self.kernels, self.kernel) {
            (Kernels::Own, Some(ty)) => (KERNEL_GEMM_MIN_ROWS, Some(ty)),
            (Kernels::Dequantized, _) => (0, None),
            _ => (GEMM_MIN_ROWS, None),
        };
        match (&self.quantized, kernel) {
            (QMatMul::QTensor(_), _) if rows >= gemm_rows && x.device().is_cpu() => {
                QMatMul::Tensor(self.weight.dequantize(x.device())?).forward(x)
            }
            (QMatMul::QTensor(_), Some(ty)) if x.device().is_cpu() => self.kernel_forward(ty, x),
            (q, _) => q.forward(x),
        }
    }

    /// `x * weight^T` through [`crate::quant::matmul`].
    fn kernel_forward(&self, ty: WeightType, x: &Tensor) -> Result<Tensor> {
        let (out, inp) = self.weight.shape().dims2()?;
        let mut dims = x.dims().to_vec();
        let values = x.flatten_all()?.to_vec1::<f32>()?;
        let mut dst = vec![0f32; values.len() / inp * out];
        let data = self.weight.data()?;
        crate::quant::matmul(ty, &data, out, inp, &values, &mut dst)
            .map_err(candle_core::Error::Msg)?;
        if let Some(last) = dims.last_mut() {
            *last = out;
        }
        Tensor::from_vec(dst, dims, x.device())
    }
}

#[derive(Clone)]
struct RmsNorm {
    weight: Tensor,
    eps: f32,
}

impl RmsNorm {
    fn new(weight: QTensor, eps: f32) -> Result<RmsNorm> {
        Ok(RmsNorm {
            weight: weight.dequantize(&weight.device())?,
            eps,
        })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        candle_nn::ops::rms_norm(x, &self.weight, self.eps)
    }
}

#[derive(Clone)]
struct Layer {
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    gate: Linear,
    up: Linear,
    down: Linear,
    attn_norm: RmsNorm,
    ffn_norm: RmsNorm,
    /// Keys and values of the positions seen, `(1, kv_heads, positions, head_dim)`.
    cache: Option<(Tensor, Tensor)>,
}

/// The shape shared by every layer.
#[derive(Clone)]
struct Shape {
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    /// RoPE tables, `(MAX_SEQ_LEN, rope_dim / 2)`.
    cos: Tensor,
    sin: Tensor,
}

/// A dense llama network. Cloning shares the weights; the KV cache is copied on write
/// (each step concatenates into new tensors), so a clone is a cheap snapshot.
#[derive(Clone)]
pub struct Llama {
    embeddings: Tensor,
    layers: Vec<Layer>,
    norm: RmsNorm,
    output: Linear,
    shape: Shape,
}

impl Layer {
    fn attention(
        &mut self,
        x: &Tensor,
        pos: usize,
        blocked: Option<&Tensor>,
        shape: &Shape,
    ) -> Result<Tensor> {
        let (b, seq, _) = x.dims3()?;
        let heads = |t: Tensor, n: usize| -> Result<Tensor> {
            t.reshape((b, seq, n, shape.head_dim))?
                .transpose(1, 2)?
                .contiguous()
        };
        let rope = |t: &Tensor| -> Result<Tensor> {
            let cos = shape.cos.narrow(0, pos, seq)?;
            let sin = shape.sin.narrow(0, pos, seq)?;
            candle_nn::rotary_emb::rope_i(t, &cos, &sin)
        };
        let q = rope(&heads(self.q.forward(x)?, shape.heads)?)?;
        let k = rope(&heads(self.k.forward(x)?, shape.kv_heads)?)?;
        let v = heads(self.v.forward(x)?, shape.kv_heads)?;
        let (k, v) = match &self.cache {
            Some((ck, cv)) if pos > 0 => (Tensor::cat(&[ck, &k], 2)?, Tensor::cat(&[cv, &v], 2)?),
            _ => (k, v),
        };
        self.cache = Some((k.clone(), v.clone()));
        // Grouped-query attention without copying keys and values per query head: the
        // `groups` query heads sharing a key-value head are consecutive, so they stack as
        // rows of one multiplication with it.
        let groups = shape.heads / shape.kv_heads;
        let q = q.reshape((b, shape.kv_heads, groups * seq, shape.head_dim))?;
        let scores = (q.matmul(&k.t()?)? / (shape.head_dim as f64).sqrt())?;
        let kv = k.dim(2)?;
        if kv != pos + seq {
            return Err(candle_core::Error::Msg(format!(
                "the KV cache holds {} positions, not the {pos} before this input",
                kv - seq
            )));
        }
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

    fn forward(
        &mut self,
        x: &Tensor,
        pos: usize,
        blocked: Option<&Tensor>,
        shape: &Shape,
    ) -> Result<Tensor> {
        let a = self.attention(&self.attn_norm.forward(x)?, pos, blocked, shape)?;
        let x = (a + x)?;
        let h = self.ffn_norm.forward(&x)?;
        let gated = (candle_nn::ops::silu(&self.gate.forward(&h)?)? * self.up.forward(&h)?)?;
        self.down.forward(&gated)? + x
    }
}

impl Llama {
    /// The network in `content` (metadata already read), tensors from `file`.
    pub fn from_gguf<R: std::io::Read + std::io::Seek>(
        content: &Content,
        file: &mut R,
        device: &Device,
    ) -> Result<Llama> {
        let msg = |m: String| candle_core::Error::Msg(m);
        let num = |key: &str| crate::gguf_llama::usize_meta(content, key);
        let need = |key: &str| num(key).ok_or_else(|| msg(format!("GGUF metadata lacks {key}")));
        let heads = need("llama.attention.head_count")?;
        let kv_heads = num("llama.attention.head_count_kv").unwrap_or(heads);
        let blocks = need("llama.block_count")?;
        let width = need("llama.embedding_length")?;
        if heads == 0 || kv_heads == 0 || !heads.is_multiple_of(kv_heads) {
            return Err(msg(format!(
                "GGUF shape not supported: {heads} heads, {kv_heads} key-value heads"
            )));
        }
        let head_dim = num("llama.attention.key_length").unwrap_or(width / heads);
        let value_dim = num("llama.attention.value_length").unwrap_or(head_dim);
        let rope_dim = num("llama.rope.dimension_count").unwrap_or(head_dim);
        if head_dim == 0 || value_dim != head_dim || rope_dim != head_dim {
            return Err(msg(format!(
                "GGUF shape not supported: key length {head_dim}, value length {value_dim}, \
                 rotary dimensions {rope_dim} (all must be equal and non-zero)"
            )));
        }
        let eps_key = "llama.attention.layer_norm_rms_epsilon";
        let eps = content
            .metadata
            .get(eps_key)
            .ok_or_else(|| msg(format!("GGUF metadata lacks {eps_key}")))?
            .to_f32()?;
        let base = content
            .metadata
            .get("llama.rope.freq_base")
            .and_then(|v| v.to_f32().ok())
            .unwrap_or(10_000.0);
        let (cos, sin) = rope_tables(rope_dim, base, device)?;
        let mut tensor = |name: &str| content.tensor(file, name, device);
        let embedding = tensor("token_embd.weight")?;
        let embeddings = embedding.dequantize(device)?;
        let norm = RmsNorm::new(tensor("output_norm.weight")?, eps)?;
        let output = match tensor("output.weight") {
            Ok(w) => w,
            Err(_) => embedding,
        };
        let mut layers = Vec::with_capacity(blocks);
        for i in 0..blocks {
            let mut w = |name: &str| tensor(&format!("blk.{i}.{name}.weight"));
            layers.push(Layer {
                q: Linear::new(w("attn_q")?)?,
                k: Linear::new(w("attn_k")?)?,
                v: Linear::new(w("attn_v")?)?,
                o: Linear::new(w("attn_output")?)?,
                gate: Linear::new(w("ffn_gate")?)?,
                up: Linear::new(w("ffn_up")?)?,
                down: Linear::new(w("ffn_down")?)?,
                attn_norm: RmsNorm::new(w("attn_norm")?, eps)?,
                ffn_norm: RmsNorm::new(w("ffn_norm")?, eps)?,
                cache: None,
            });
        }
        Ok(Llama {
            embeddings,
            layers,
            norm,
            output: Linear::new(output)?,
            shape: Shape {
                heads,
                kv_heads,
                head_dim,
                cos,
                sin,
            },
        })
    }

    /// The logits of the last of `input`'s positions (shape `(1, seq)`), which sit at
    /// positions `pos..`; position 0 starts a new sequence.
    pub fn forward(&mut self, input: &Tensor, pos: usize) -> Result<Tensor> {
        let (_, seq) = input.dims2()?;
        if seq == 0 {
            return Err(candle_core::Error::Msg(
                "an empty input has no logits".into(),
            ));
        }
        let (_, width) = self.embeddings.dims2()?;
        let ids = input.flatten_all()?;
        let mut x = self
            .embeddings
            .index_select(&ids, 0)?
            .reshape((1, seq, width))?;
        // Which of the `pos + seq` keys each new position may not see (those after it).
        let blocked = if seq > 1 {
            let kv = pos + seq;
            let cells: Vec<u8> = (0..seq)
                .flat_map(|i| (0..kv).map(move |j| u8::from(j > pos + i)))
                .collect();
            Some(Tensor::from_vec(cells, (seq, kv), input.device())?)
        } else {
            None
        };
        for layer in &mut self.layers {
            x = layer.forward(&x, pos, blocked.as_ref(), &self.shape)?;
        }
        let last = self.norm.forward(&x)?.i((.., seq - 1, ..))?;
        self.output.forward(&last)
    }

    /// The same network with its multiplications done by `kernels` (to compare passes:
    /// the default, [`Kernels::Own`], is the fastest).
    pub fn with_kernels(mut self, kernels: Kernels) -> Llama {
        let layers = self.layers.iter_mut().flat_map(|l| {
            [
                &mut l.q,
                &mut l.k,
                &mut l.v,
                &mut l.o,
                &mut l.gate,
                &mut l.up,
                &mut l.down,
            ]
        });
        for linear in layers.chain([&mut self.output]) {
            linear.kernels = kernels;
        }
        self
    }

    /// Empties every layer's KV cache.
    pub fn clear_kv_cache(&mut self) {
        for layer in &mut self.layers {
            layer.cache = None;
        }
    }
}

/// RoPE's cosine and sine tables for `MAX_SEQ_LEN` positions.
fn rope_tables(dim: usize, base: f32, device: &Device) -> Result<(Tensor, Tensor)> {
    let inv: Vec<f32> = (0..dim)
        .step_by(2)
        .map(|i| 1.0 / base.powf(i as f32 / dim as f32))
        .collect();
    let n = inv.len();
    let inv = Tensor::from_vec(inv, (1, n), device)?;
    let at = Tensor::arange(0, MAX_SEQ_LEN as u32, device)?
        .to_dtype(DType::F32)?
        .reshape((MAX_SEQ_LEN, 1))?;
    let angles = at.matmul(&inv)?;
    Ok((angles.cos()?, angles.sin()?))
}
