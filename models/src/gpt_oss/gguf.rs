//! llama.cpp's gpt-oss GGUF files.
//!
//! candle 0.11's GGUF reader stops at the first tensor of a type it does not know, and it
//! knows no MXFP4 (GGML type 39), which is how these files store the experts. So the
//! header is read here: its metadata and the tensors of types candle knows become a
//! candle [`Content`] (the tokenizer and the dense weights are read through it as for any
//! GGUF), and MXFP4 tensors are listed apart and read into [`Matrix`]es.
//!
//! The layout (llama.cpp's converter): `token_embd`, `output_norm`, `output`; per layer
//! `blk.N.` `attn_norm`, `post_attention_norm`, `attn_q`/`attn_k`/`attn_v`/`attn_output`
//! with biases, `attn_sinks`, `ffn_gate_inp` (the router, with bias), and the experts as
//! `ffn_gate_exps`, `ffn_up_exps`, `ffn_down_exps` (MXFP4, gate and up apart), each with a
//! bias. Metadata under `gpt-oss.`.

use super::config::{Config, RopeConfig};
use super::dense::Dense;
use super::mxfp4::Matrix;
use super::{GptOss, Layer};
use candle_core::quantized::GgmlDType;
use candle_core::quantized::gguf_file::{Content, TensorInfo, Value, VersionedMagic};
use candle_core::{DType, Device, Tensor};
use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom};

/// GGML's type number for MXFP4.
const MXFP4: u32 = 39;
/// Deepest nesting of metadata arrays read.
const MAX_DEPTH: usize = 4;

/// A GGUF file's header.
pub struct GgufFile {
    /// Metadata, and the tensors candle can read.
    pub content: Content,
    /// MXFP4 tensors: dimensions (outermost first) and offset from the data start.
    pub mxfp4: HashMap<String, (Vec<usize>, u64)>,
}

/// Counts rather than contents: the metadata holds the whole vocabulary and merge list.
impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("magic", &self.content.magic)
            .field("metadata_keys", &self.content.metadata.len())
            .field("tensors", &self.content.tensor_infos.len())
            .field("mxfp4_tensors", &self.mxfp4.len())
            .finish_non_exhaustive()
    }
}

/// Reads a stream with the bytes left bounded, so that a corrupt length is an error and
/// not an allocation of that size.
struct Header<'a, R> {
    r: &'a mut R,
    left: u64,
}

impl<R: Read> Header<'_, R> {
    fn bytes<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let mut b = [0u8; N];
        self.take(N as u64)?;
        self.r
            .read_exact(&mut b)
            .map_err(|e| format!("GGUF header: {e}"))?;
        Ok(b)
    }

    fn take(&mut self, n: u64) -> Result<(), String> {
        self.left = self.left.checked_sub(n).ok_or_else(|| {
            format!(
                "GGUF header: {n} more bytes needed, {} remaining in the file",
                self.left
            )
        })?;
        Ok(())
    }

    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.bytes()?))
    }

    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.bytes()?))
    }

    fn string(&mut self) -> Result<String, String> {
        let n = self.u64()?;
        self.take(n)?;
        let mut b = vec![0u8; n as usize];
        self.r
            .read_exact(&mut b)
            .map_err(|e| format!("GGUF header: {e}"))?;
        String::from_utf8(b).map_err(|_| "GGUF header: a string is not UTF-8".to_string())
    }

    fn value(&mut self, ty: u32, depth: usize) -> Result<Value, String> {
        Ok(match ty {
            0 => Value::U8(self.bytes::<1>()?[0]),
            1 => Value::I8(self.bytes::<1>()?[0] as i8),
            2 => Value::U16(u16::from_le_bytes(self.bytes()?)),
            3 => Value::I16(i16::from_le_bytes(self.bytes()?)),
            4 => Value::U32(self.u32()?),
            5 => Value::I32(i32::from_le_bytes(self.bytes()?)),
            6 => Value::F32(f32::from_le_bytes(self.bytes()?)),
            7 => Value::Bool(self.bytes::<1>()?[0] != 0),
            8 => Value::String(self.string()?),
            9 if depth < MAX_DEPTH => {
                let item = self.u32()?;
                let n = self.u64()?;
                // Every item takes at least one byte.
                if n > self.left {
                    return Err("GGUF header: an array runs past the end of the file".into());
                }
                let items = (0..n)
                    .map(|_| self.value(item, depth + 1))
                    .collect::<Result<Vec<_>, _>>()?;
                Value::Array(items)
            }
            10 => Value::U64(self.u64()?),
            11 => Value::I64(i64::from_le_bytes(self.bytes()?)),
            12 => Value::F64(f64::from_le_bytes(self.bytes()?)),
            9 => return Err("GGUF header: metadata arrays nested too deep".into()),
            other => return Err(format!("GGUF header: unknown metadata type {other}")),
        })
    }
}

/// candle's type for a GGML type number (candle's own mapping is private).
fn ggml_type(ty: u32) -> Option<GgmlDType> {
    use GgmlDType::*;
    Some(match ty {
        0 => F32,
        1 => F16,
        2 => Q4_0,
        3 => Q4_1,
        6 => Q5_0,
        7 => Q5_1,
        8 => Q8_0,
        9 => Q8_1,
        10 => Q2K,
        11 => Q3K,
        12 => Q4K,
        13 => Q5K,
        14 => Q6K,
        15 => Q8K,
        30 => BF16,
        _ => return None,
    })
}

impl GgufFile {
    /// Reads the header of the GGUF file `r`.
    pub fn read<R: Read + Seek>(r: &mut R) -> Result<GgufFile, String> {
        let size = r.seek(SeekFrom::End(0)).map_err(|e| e.to_string())?;
        r.seek(SeekFrom::Start(0)).map_err(|e| e.to_string())?;
        let mut h = Header { r, left: size };
        if h.bytes::<4>()? != *b"GGUF" {
            return Err("not a GGUF file".into());
        }
        let magic = match h.u32()? {
            2 => VersionedMagic::GgufV2,
            3 => VersionedMagic::GgufV3,
            v => return Err(format!("GGUF version {v} is not supported (2 or 3)")),
        };
        let (tensors, entries) = (h.u64()?, h.u64()?);
        if tensors.saturating_add(entries) > h.left {
            return Err("GGUF header: more entries than the file has bytes".into());
        }
        let mut metadata = HashMap::new();
        for _ in 0..entries {
            let key = h.string()?;
            let ty = h.u32()?;
            metadata.insert(key, h.value(ty, 0)?);
        }
        let mut tensor_infos = HashMap::new();
        let mut mxfp4 = HashMap::new();
        // Each tensor's end, from the data start (`None`: it overflows).
        let mut extents: Vec<(String, Option<u64>)> = Vec::new();
        for _ in 0..tensors {
            let name = h.string()?;
            let n = h.u32()?;
            if n > 4 {
                return Err(format!("GGUF tensor {name}: {n} dimensions"));
            }
            let mut dims = (0..n)
                .map(|_| h.u64().map(|d| d as usize))
                .collect::<Result<Vec<_>, _>>()?;
            dims.reverse();
            let ty = h.u32()?;
            let offset = h.u64()?;
            let elements = dims
                .iter()
                .try_fold(1usize, |n, &d| n.checked_mul(d))
                .ok_or_else(|| format!("GGUF tensor {name}: its dimensions overflow"))?;
            // Bytes of the tensor, checked against the file once the data start is known.
            let (block, block_bytes) = match ty {
                MXFP4 => (super::mxfp4::BLOCK, 17),
                _ => {
                    let t = ggml_type(ty)
                        .ok_or_else(|| format!("GGUF tensor {name}: type {ty} is not supported"))?;
                    (t.block_size(), t.type_size())
                }
            };
            if !elements.is_multiple_of(block) {
                return Err(format!(
                    "GGUF tensor {name}: {elements} values is not a whole number of blocks"
                ));
            }
            let bytes = ((elements / block) as u64).checked_mul(block_bytes as u64);
            extents.push((name.clone(), bytes.and_then(|b| offset.checked_add(b))));
            if ty == MXFP4 {
                mxfp4.insert(name, (dims, offset));
                continue;
            }
            let ggml_dtype = ggml_type(ty)
                .ok_or_else(|| format!("GGUF tensor {name}: type {ty} is not supported"))?;
            tensor_infos.insert(
                name,
                TensorInfo {
                    ggml_dtype,
                    shape: dims.into(),
                    offset,
                },
            );
        }
        let position = size - h.left;
        let alignment = match metadata.get("general.alignment") {
            Some(Value::U32(a)) if *a > 0 => u64::from(*a),
            _ => 32,
        };
        let data = position.div_ceil(alignment) * alignment;
        let remaining = size.saturating_sub(data);
        for (name, end) in extents {
            if end.is_none_or(|e| e > remaining) {
                return Err(format!(
                    "GGUF tensor {name} runs past the end of the file: it ends at byte {} of the tensor data, {remaining} bytes remaining",
                    end.map_or("beyond 2^64".to_string(), |e| e.to_string())
                ));
            }
        }
        Ok(GgufFile {
            content: Content {
                magic,
                metadata,
                tensor_infos,
                tensor_data_offset: data,
            },
            mxfp4,
        })
    }

    fn meta(&self, key: &str) -> Option<&Value> {
        self.content.metadata.get(&format!("gpt-oss.{key}"))
    }

    fn usize(&self, key: &str) -> Result<usize, String> {
        match self.meta(key) {
            Some(Value::U32(x)) => Ok(*x as usize),
            Some(Value::U64(x)) => Ok(*x as usize),
            Some(Value::I32(x)) if *x >= 0 => Ok(*x as usize),
            _ => Err(format!("GGUF metadata lacks gpt-oss.{key}")),
        }
    }

    fn f64(&self, key: &str) -> Option<f64> {
        match self.meta(key)? {
            Value::F32(x) => Some(f64::from(*x)),
            Value::F64(x) => Some(*x),
            _ => None,
        }
    }

    /// The network's shape from the metadata.
    fn config(&self) -> Result<Config, String> {
        let layers = self.usize("block_count")?;
        if layers == 0 || layers > super::config::MAX_LAYERS {
            return Err(format!(
                "gpt-oss shape not supported: {layers} layers (1 to {})",
                super::config::MAX_LAYERS
            ));
        }
        let window = self.usize("attention.sliding_window")?;
        let embeddings = self
            .content
            .tensor_infos
            .get("token_embd.weight")
            .ok_or("GGUF file lacks token_embd.weight")?;
        let yarn = match self.meta("rope.scaling.type") {
            Some(Value::String(t)) => t == "yarn",
            _ => false,
        };
        let heads = self.usize("attention.head_count")?;
        let hidden = self.usize("embedding_length")?;
        let config = Config {
            vocab: *embeddings
                .shape
                .dims()
                .first()
                .ok_or("GGUF token_embd.weight has no dimensions")?,
            hidden,
            intermediate: self
                .usize("expert_feed_forward_length")
                .or_else(|_| self.usize("feed_forward_length"))?,
            heads,
            kv_heads: self.usize("attention.head_count_kv")?,
            head_dim: self
                .usize("attention.key_length")
                .unwrap_or(hidden / heads.max(1)),
            experts: self.usize("expert_count")?,
            top_k: self.usize("expert_used_count")?,
            // llama.cpp's gpt-oss: even layers slide, as in transformers.
            windows: (0..layers)
                .map(|i| (i % 2 == 0).then_some(window))
                .collect(),
            max_positions: self.usize("context_length")?,
            eps: self
                .f64("attention.layer_norm_rms_epsilon")
                .ok_or("GGUF metadata lacks gpt-oss.attention.layer_norm_rms_epsilon")?
                as f32,
            rope: RopeConfig {
                rope_theta: self.f64("rope.freq_base").unwrap_or(150_000.0),
                rope_type: Some(if yarn { "yarn" } else { "default" }.into()),
                factor: self.f64("rope.scaling.factor"),
                beta_fast: self.f64("rope.scaling.yarn_beta_fast"),
                beta_slow: self.f64("rope.scaling.yarn_beta_slow"),
                // gpt-oss's reference (and transformers' config) does not round YaRN's
                // correction range.
                truncate: Some(false),
                original_max_position_embeddings: self
                    .usize("rope.scaling.original_context_length")
                    .ok(),
            },
            swiglu_alpha: 1.702,
            swiglu_limit: 7.0,
        };
        config.check(layers)?;
        Ok(config)
    }
}

impl GptOss {
    /// From a gpt-oss GGUF file (header already read into `file`, data in `r`).
    pub fn from_gguf<R: Read + Seek>(file: &GgufFile, r: &mut R) -> candle_core::Result<GptOss> {
        let msg = candle_core::Error::Msg;
        let config = file.config().map_err(msg)?;
        let embeddings = Dense::new(&file.dense(r, "token_embd.weight")?, None)?;
        let norm = file
            .dense(r, "output_norm.weight")?
            .to_dtype(DType::F32)?
            .to_vec1::<f32>()?;
        // gpt-oss does not tie its output to its embeddings: llama.cpp requires `output`.
        let output = Dense::new(&file.dense(r, "output.weight")?, None)?;
        let mut layers = Vec::with_capacity(config.windows.len());
        let (e, inter, hidden) = (config.experts, config.intermediate, config.hidden);
        for (i, &window) in config.windows.iter().enumerate() {
            let p = format!("blk.{i}");
            let mut dense = |name: &str| file.dense(r, &format!("{p}.{name}"));
            let mut linear = |name: &str| -> candle_core::Result<Dense> {
                let bias = dense(&format!("{name}.bias"))?;
                Dense::new(&dense(&format!("{name}.weight"))?, Some(&bias))
            };
            let (q, k, v, o) = (
                linear("attn_q")?,
                linear("attn_k")?,
                linear("attn_v")?,
                linear("attn_output")?,
            );
            let router = linear("ffn_gate_inp")?;
            let mut host = |name: &str| {
                file.dense(r, &format!("{p}.{name}"))?
                    .to_dtype(DType::F32)?
                    .flatten_all()?
                    .to_vec1::<f32>()
            };
            let sinks = host("attn_sinks.weight")?;
            let (gate_bias, up_bias) = (host("ffn_gate_exps.bias")?, host("ffn_up_exps.bias")?);
            let down_bias = host("ffn_down_exps.bias")?;
            let attn_norm = host("attn_norm.weight")?;
            let ffn_norm = host("post_attention_norm.weight")?;
            let gate = file.experts(r, &format!("{p}.ffn_gate_exps.weight"), e, inter, hidden)?;
            let up = file.experts(r, &format!("{p}.ffn_up_exps.weight"), e, inter, hidden)?;
            let down = file.experts(r, &format!("{p}.ffn_down_exps.weight"), e, hidden, inter)?;
            if gate_bias.len() != e * inter || up_bias.len() != e * inter {
                return Err(msg(format!("{p}: expert biases do not match the config")));
            }
            // Gate and up rows interleaved, as the Hugging Face layout has them.
            let gate_up = gate
                .iter()
                .zip(&up)
                .map(|(g, u)| Matrix::interleave_rows(g, u))
                .collect::<Result<Vec<_>, _>>()
                .map_err(msg)?;
            let gate_up_bias = gate_bias
                .chunks_exact(inter)
                .zip(up_bias.chunks_exact(inter))
                .flat_map(|(g, u)| g.iter().zip(u).flat_map(|(&g, &u)| [g, u]))
                .collect();
            layers.push(Layer {
                attn_norm,
                ffn_norm,
                q,
                k,
                v,
                o,
                sinks,
                window,
                router,
                gate_up,
                gate_up_bias,
                down,
                down_bias,
            });
        }
        GptOss::assemble(config, embeddings, layers, norm, output)
    }
}

impl GgufFile {
    /// The tensor `name` (of a type candle reads): bf16 if the file's is, else f32.
    fn dense<R: Read + Seek>(&self, r: &mut R, name: &str) -> candle_core::Result<Tensor> {
        let cpu = Device::Cpu;
        let t = self.content.tensor(r, name, &cpu)?;
        let bf16 = t.dtype() == GgmlDType::BF16;
        let values = t.dequantize(&cpu)?;
        // Exact: the values came from bf16.
        match bf16 {
            true => values.to_dtype(DType::BF16),
            false => Ok(values),
        }
    }

    /// The MXFP4 tensor `name`, `(experts, rows, cols)`, as one matrix per expert.
    fn experts<R: Read + Seek>(
        &self,
        r: &mut R,
        name: &str,
        experts: usize,
        rows: usize,
        cols: usize,
    ) -> candle_core::Result<Vec<Matrix>> {
        let msg = candle_core::Error::Msg;
        let (dims, offset) = self
            .mxfp4
            .get(name)
            .ok_or_else(|| msg(format!("GGUF file lacks the MXFP4 tensor {name}")))?;
        if dims != &[experts, rows, cols] {
            return Err(msg(format!(
                "{name} has shape {dims:?}, the config says {:?}",
                [experts, rows, cols]
            )));
        }
        let per = rows * cols / super::mxfp4::BLOCK * 17;
        r.seek(SeekFrom::Start(self.content.tensor_data_offset + offset))?;
        let mut raw = vec![0u8; per];
        (0..experts)
            .map(|_| {
                r.read_exact(&mut raw)?;
                Matrix::from_ggml(rows, cols, &raw).map_err(|m| msg(format!("{name}: {m}")))
            })
            .collect()
    }
}
