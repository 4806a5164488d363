//! The dense llama forward pass over GGUF weights, with one change from candle-transformers'
//! `quantized_llama`: a prompt chunk (many rows at once) multiplies by weights dequantized
//! for that call, through candle's f32 matrix multiply, while a single decoding row keeps
//! the quantized kernel. candle's quantized CPU kernel costs the same per row whether rows
//! come one at a time or batched, so prompts ran at about the decode speed; the f32 multiply
//! is blocked and reuses each weight across the chunk's rows. The dequantized copy lives for
//! one multiplication: memory stays that of the quantized model plus one matrix.
//!
//! Decoding steps run on corral's own kernels ([`crate::quant`]): a tiled one for
//! Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/Q4_K/Q5_K/Q6_K where the CPU has AVX-512 VNNI (prompt chunks
//! too: it reads each weight once for 8 rows, and its form is slow to dequantize), else an
//! AVX2 one for Q4_1 and Q8_0; and attention by hand over KV caches appended in place
//! (`crate::attention`; a prompt chunk's rows in blocks that share each key,
//! `crate::chunk_attention`). The steps of several sequences run as one pass
//! ([`Llama::forward_batch`]): their rows go through each weight matrix together, each
//! attends to its own cache. The weight matrices and their kernels are in `linear.rs`.
//!
//! Mixture-of-experts GGUFs keep candle-transformers' model ([`GgufNet::Experts`]).

mod gguf_net;
mod layer;
mod linear;

pub use gguf_net::GgufNet;
pub use linear::Kernels;

use crate::attention::{Heads, KvCache, Rope, Span, attend_steps, push_step};
pub use crate::kv_store::KvType;
use crate::rope::RopeAngles;
use candle_core::quantized::gguf_file::Content;
use candle_core::{Device, IndexOp, Result, Tensor};
use linear::{Embeddings, Linear, RmsNorm};
use std::sync::Arc;

/// Rows from which a multiplication dequantizes its weight instead of running candle's
/// quantized kernel row by row. Measured on SmolLM2-135M Q4_1, 2 cores (`corral generate
/// --raw --prompt-file F --max-tokens 1 --stats`, prompts of N tokens, built with the
/// threshold at N or above it): 16 rows ran at 50 tok/s on f32 against 93 quantized, 24
/// rows at 140 against 89, 32 rows at 130-190 against 93.
pub const GEMM_MIN_ROWS: usize = 24;

/// Most new positions of one sequence that run as a step pass (by hand, on the quantized
/// kernel, each row alone: [`Llama::forward_batch`]) rather than as a chunk through
/// candle's matrix multiply: short prompts, and pieces of long ones run beside other
/// sequences' steps, round the same way however they are batched.
pub const STEP_MAX_POSITIONS: usize = 128;

/// The same for weights that corral's own kernel ([`crate::quant`]) multiplies: it reads
/// each weight block once for up to 8 rows, so it stays ahead of dequantizing for longer.
/// Measured as above: prompts of 100 tokens ran at 265-300 tok/s on the kernel against 218
/// dequantized, 200 tokens at 215-280 against 336.
pub const KERNEL_GEMM_MIN_ROWS: usize = 128;

/// How a [`Llama`] computes a decoding step's attention on the CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attention {
    /// By hand over the KV cache (`crate::attention`); the default.
    ByHand,
    /// Through candle's tensor operations, as candle-transformers' `quantized_llama` does
    /// (prompt chunks too).
    Candle,
}

/// One layer's weights.
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
    /// The feed-forward's gate by [`layer::silu_mul`] (corral's kernels) rather than
    /// candle's silu (candle's kernels, as candle-transformers computes it).
    own_silu: bool,
}

/// The weights, shared by every sequence.
#[derive(Clone)]
struct Weights {
    embeddings: Embeddings,
    layers: Vec<Layer>,
    norm: RmsNorm,
    output: Linear,
    heads: Heads,
    /// RoPE's frequencies, and the positions the model takes.
    rope: RopeAngles,
    attention: Attention,
    /// The type host KV caches store.
    kv: KvType,
}

/// A dense llama network: the weights (shared: [`Llama::fresh`] makes another sequence
/// over them) and one sequence's KV cache per layer. Cloning copies the cache.
#[derive(Clone)]
pub struct Llama {
    weights: Arc<Weights>,
    caches: Vec<KvCache>,
}

impl std::fmt::Debug for Llama {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let w = &self.weights;
        f.debug_struct("Llama")
            .field("layers", &w.layers.len())
            .field("heads", &w.heads)
            .field("max_positions", &self.max_positions())
            .field("attention", &w.attention)
            .field("kv", &w.kv)
            .field("kv_cache_bytes", &self.kv_cache_bytes())
            .finish_non_exhaustive()
    }
}

impl Llama {
    /// The network in `content` (metadata already read), tensors from `file`.
    pub fn from_gguf<R: std::io::Read + std::io::Seek>(
        content: &Content,
        file: &mut R,
        device: &Device,
    ) -> Result<Llama> {
        Llama::from_gguf_with(content, file, device, Kernels::Own)
    }

    /// The same with its multiplications done by `kernels` (to compare passes: the
    /// default, [`Kernels::Own`], is the fastest).
    pub fn from_gguf_with<R: std::io::Read + std::io::Seek>(
        content: &Content,
        file: &mut R,
        device: &Device,
        kernels: Kernels,
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
        if head_dim == 0 || value_dim != head_dim || rope_dim != head_dim || head_dim % 2 != 0 {
            return Err(msg(format!(
                "GGUF shape not supported: key length {head_dim}, value length {value_dim}, \
                 rotary dimensions {rope_dim} (all must be equal, even and non-zero)"
            )));
        }
        let eps_key = "llama.attention.layer_norm_rms_epsilon";
        let eps = content
            .metadata
            .get(eps_key)
            .ok_or_else(|| msg(format!("GGUF metadata lacks {eps_key}")))?
            .to_f32()?;
        let mut tensor = |name: &str| content.tensor(file, name, device);
        let factors = match content.tensor_infos.contains_key("rope_freqs.weight") {
            true => Some(
                tensor("rope_freqs.weight")?
                    .dequantize(&Device::Cpu)?
                    .flatten_all()?
                    .to_vec1::<f32>()?,
            ),
            false => None,
        };
        let rope = RopeAngles::from_gguf(content, rope_dim, factors)?;
        let embedding = tensor("token_embd.weight")?;
        let norm = RmsNorm::new(tensor("output_norm.weight")?, eps)?;
        let (output, embeddings) = match tensor("output.weight") {
            Ok(w) => (
                Linear::new(w, kernels)?,
                Embeddings::new(embedding, kernels)?,
            ),
            Err(_) => {
                let output = Linear::new(embedding, kernels)?;
                let embeddings = Embeddings::tied(&output, kernels, device)?;
                (output, embeddings)
            }
        };
        let mut layers = Vec::with_capacity(blocks);
        for i in 0..blocks {
            let mut w = |name: &str| tensor(&format!("blk.{i}.{name}.weight"));
            layers.push(Layer {
                q: Linear::new(w("attn_q")?, kernels)?,
                k: Linear::new(w("attn_k")?, kernels)?,
                v: Linear::new(w("attn_v")?, kernels)?,
                o: Linear::new(w("attn_output")?, kernels)?,
                gate: Linear::new(w("ffn_gate")?, kernels)?,
                up: Linear::new(w("ffn_up")?, kernels)?,
                down: Linear::new(w("ffn_down")?, kernels)?,
                attn_norm: RmsNorm::new(w("attn_norm")?, eps)?,
                ffn_norm: RmsNorm::new(w("ffn_norm")?, eps)?,
                own_silu: kernels != Kernels::Candle,
            });
        }
        let weights = Weights {
            embeddings,
            layers,
            norm,
            output,
            heads: Heads {
                heads,
                kv_heads,
                head_dim,
                rope: Rope::Interleaved,
            },
            rope,
            attention: Attention::ByHand,
            kv: KvType::default(),
        };
        Ok(Llama {
            caches: vec![KvCache::new(device.is_cpu(), KvType::default()); blocks],
            weights: Arc::new(weights),
        })
    }

    /// Positions the model takes (the file's context length).
    pub fn max_positions(&self) -> usize {
        self.weights.rope.positions()
    }

    /// Bytes this sequence's KV caches hold on the host.
    pub fn kv_bytes(&self) -> usize {
        self.caches.iter().map(KvCache::host_bytes).sum()
    }

    /// Another sequence over the same weights whose caches hold a copy of this one's first
    /// `positions` positions (at most those it holds), sized to them.
    pub fn copy_prefix(&self, positions: usize) -> Result<Llama> {
        let heads = &self.weights.heads;
        Ok(Llama {
            weights: self.weights.clone(),
            caches: self
                .caches
                .iter()
                .map(|c| c.copy_prefix(positions, heads))
                .collect::<Result<_>>()?,
        })
    }

    /// Bytes this sequence's KV caches hold, on the host or on a device.
    pub fn kv_cache_bytes(&self) -> usize {
        self.caches.iter().map(KvCache::bytes).sum()
    }

    /// Another sequence over the same weights, its cache empty.
    pub fn fresh(&self) -> Llama {
        let on_cpu = self.weights.embeddings.device().is_cpu();
        Llama {
            weights: self.weights.clone(),
            caches: vec![KvCache::new(on_cpu, self.weights.kv); self.caches.len()],
        }
    }

    /// The logits of the last of `input`'s positions (shape `(1, seq)`), which sit at
    /// positions `pos..`; position 0 starts a new sequence. Up to
    /// [`STEP_MAX_POSITIONS`] positions run as a step pass ([`Llama::forward_batch`]), more
    /// as a chunk through candle's matrix multiply.
    pub fn forward(&mut self, input: &Tensor, pos: usize) -> Result<Tensor> {
        let (_, seq) = input.dims2()?;
        if seq == 0 {
            return Err(candle_core::Error::Msg(
                "an empty input has no logits".into(),
            ));
        }
        if pos.saturating_add(seq) > self.max_positions() {
            return Err(candle_core::Error::Msg(format!(
                "positions {pos}..{}: the model's positions end at {}",
                pos.saturating_add(seq),
                self.max_positions()
            )));
        }
        if seq <= STEP_MAX_POSITIONS
            && input.device().is_cpu()
            && self.weights.attention == Attention::ByHand
        {
            let tokens = input.flatten_all()?.to_vec1::<u32>()?;
            return Llama::forward_batch(&mut [self], &[&tokens], &[pos]);
        }
        self.forward_chunk(input, pos)
    }

    /// [`Llama::forward`] through candle's tensor operations (attention included).
    fn forward_chunk(&mut self, input: &Tensor, pos: usize) -> Result<Tensor> {
        let (_, seq) = input.dims2()?;
        if pos == 0 {
            self.clear_kv_cache();
        }
        let w = self.weights.clone();
        let width = w.embeddings.width()?;
        let ids = input.flatten_all()?;
        let mut x = w
            .embeddings
            .lookup(&ids)?
            .to_device(input.device())?
            .reshape((1, seq, width))?;
        // Which of the `pos + seq` keys each new position may not see (those after it),
        // where candle attends (by hand, each row sees its own positions).
        let by_hand = w.attention == Attention::ByHand
            && input.device().is_cpu()
            && crate::chunk_attention::takes(w.heads.head_dim);
        let blocked = if seq > 1 && !by_hand {
            let kv = pos + seq;
            let cells: Vec<u8> = (0..seq)
                .flat_map(|i| (0..kv).map(move |j| u8::from(j > pos + i)))
                .collect();
            Some(Tensor::from_vec(cells, (seq, kv), input.device())?)
        } else {
            None
        };
        for (layer, cache) in w.layers.iter().zip(&mut self.caches) {
            let a = layer.attention(
                cache,
                &layer.attn_norm.forward(&x)?,
                pos,
                blocked.as_ref(),
                &w,
            )?;
            x = layer.feed_forward(&x, a, false)?;
        }
        let last = w.norm.forward(&x)?.i((.., seq - 1, ..))?;
        w.output.forward(&last)
    }

    /// Several sequences' new positions over the same weights, as one pass: sequence i
    /// (`nets[i]`, its cache) runs `tokens[i]` (a decoding step, or a few positions of a
    /// prompt) from position `pos[i]`. All their rows go through each weight matrix
    /// together, on the quantized kernel a decoding step uses, and each row attends to its
    /// own sequence's cache up to its own position, so a position's result is the same
    /// however it is batched. The logits of each sequence's last position, `(sequences,
    /// vocabulary)`.
    pub fn forward_batch(
        nets: &mut [&mut Llama],
        tokens: &[&[u32]],
        pos: &[usize],
    ) -> Result<Tensor> {
        Llama::forward_batch_tails(nets, tokens, pos, &vec![1; nets.len()])
    }

    /// [`Llama::forward_batch`], with the logits of each sequence's last `tails[i]`
    /// positions (from 1 to its tokens), `(sum of tails, vocabulary)`: sequence 0's first
    /// to last, then sequence 1's. They come from the same pass.
    pub fn forward_batch_tails(
        nets: &mut [&mut Llama],
        tokens: &[&[u32]],
        pos: &[usize],
        tails: &[usize],
    ) -> Result<Tensor> {
        let n = nets.len();
        if tails.len() != n
            || tokens
                .iter()
                .zip(tails)
                .any(|(t, &k)| k == 0 || k > t.len())
        {
            return Err(candle_core::Error::Msg(
                "a tail per sequence, from 1 to its tokens".into(),
            ));
        }
        let w = crate::attention::batch_weights(nets.iter().map(|m| &m.weights), tokens, pos)?;
        let dev = &w.embeddings.device();
        if !dev.is_cpu() || w.attention == Attention::Candle {
            // The step by hand needs the caches on the host: one sequence at a time,
            // through candle.
            let mut rows = Vec::with_capacity(tails.iter().sum());
            for (((m, &t), &p), &k) in nets.iter_mut().zip(tokens).zip(pos).zip(tails) {
                let head = t.len() + 1 - k;
                let input = Tensor::new(&t[..head], dev)?.unsqueeze(0)?;
                rows.push(m.forward_chunk(&input, p)?.flatten_all()?);
                for j in head..t.len() {
                    let input = Tensor::new(&t[j..j + 1], dev)?.unsqueeze(0)?;
                    rows.push(m.forward_chunk(&input, p + j)?.flatten_all()?);
                }
            }
            return Tensor::stack(&rows, 0);
        }
        // Every position is checked before any cache changes, so that a refused batch leaves
        // each sequence as it was.
        for ((m, &p), t) in nets.iter().zip(pos).zip(tokens) {
            if p + t.len() > w.rope.positions() {
                return Err(candle_core::Error::Msg(format!(
                    "positions {p}..{}: the model's positions end at {}",
                    p + t.len(),
                    w.rope.positions()
                )));
            }
            let held = m.caches.first().map_or(Ok(0), |c| c.len(&w.heads))?;
            if p != 0 && held != p {
                return Err(candle_core::Error::Msg(format!(
                    "the KV cache holds {held} positions, not the {p} before this input"
                )));
            }
        }
        for (m, &p) in nets.iter_mut().zip(pos) {
            if p == 0 {
                m.clear_kv_cache();
            }
        }
        let width = w.embeddings.width()?;
        let ids: Vec<u32> = tokens.iter().flat_map(|t| t.iter().copied()).collect();
        let rows = ids.len();
        let seqs: Vec<(usize, usize)> =
            pos.iter().zip(tokens).map(|(&p, t)| (p, t.len())).collect();
        let ids = Tensor::new(ids, dev)?;
        let mut x = w.embeddings.lookup(&ids)?.reshape((rows, 1, width))?;
        for (l, layer) in w.layers.iter().enumerate() {
            let mut caches: Vec<&mut KvCache> = nets.iter_mut().map(|m| &mut m.caches[l]).collect();
            let a = layer.attention_steps(&mut caches, &layer.attn_norm.forward(&x)?, &seqs, &w)?;
            x = layer.feed_forward(&x, a, true)?;
        }
        // Each sequence's last rows.
        let mut last = Vec::with_capacity(tails.iter().sum());
        let mut end = 0u32;
        for (t, &k) in tokens.iter().zip(tails) {
            end += t.len() as u32;
            last.extend(end - k as u32..end);
        }
        let x = x.reshape((rows, width))?;
        let x = x.index_select(&Tensor::new(last, dev)?, 0)?;
        let last = w.norm.forward(&x)?;
        w.output.forward_rows(&last)
    }

    /// The same network with decoding steps' attention computed by `attention` (to compare
    /// passes). The weights are no longer shared with other sequences.
    pub fn with_attention(mut self, attention: Attention) -> Llama {
        Arc::make_mut(&mut self.weights).attention = attention;
        self
    }

    /// The same network with host KV caches of type `kv` (f16 by default), emptied. The
    /// weights are no longer shared with other sequences.
    pub fn with_kv_type(mut self, kv: KvType) -> Llama {
        Arc::make_mut(&mut self.weights).kv = kv;
        let on_cpu = self.weights.embeddings.device().is_cpu();
        self.caches = vec![KvCache::new(on_cpu, kv); self.caches.len()];
        self
    }

    /// Empties every layer's KV cache.
    pub fn clear_kv_cache(&mut self) {
        for cache in &mut self.caches {
            cache.clear();
        }
    }
}
