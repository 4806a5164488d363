//! gpt-oss, OpenAI's open-weight mixture-of-experts model, on the CPU (and, in candle's
//! tensor ops, on other devices: [`device`]).
//!
//! Each layer is attention then a mixture of experts, each behind an RMS norm and a
//! residual:
//! - **attention**: grouped-query, with biases on every projection, RoPE on halves with
//!   YaRN's frequencies and scale ([`config::Config::rope_frequencies`]), and a learned
//!   *sink* logit per head in the softmax's denominator; even layers see only their last
//!   `sliding_window` positions (128 in the published models), odd layers everything;
//! - **experts**: a router (linear, with bias) picks the `top_k` highest-scoring experts of
//!   a position and weighs them by a softmax over those scores; an expert is a clamped
//!   SwiGLU, `(clamp(up, ±limit) + 1) * g * sigmoid(alpha * g)` with `g = min(gate,
//!   limit)`, between two MXFP4 matrices with biases, kept packed ([`mxfp4`]).
//!
//! Every pass runs row by row: a prompt's positions, a decoding step, or the steps of
//! several sequences together ([`GptOss::forward_batch`]); each row attends to its own
//! sequence's KV cache up to its own position (`crate::attention`), so a position's
//! result is the same however it is batched. Dense weights (attention, router, embeddings,
//! output) are f32 and multiply through candle.
//!
//! Loads the Hugging Face layout (`config.json`, safetensors with `*_blocks` / `*_scales`)
//! and llama.cpp's GGUF layout ([`gguf`]).

pub mod config;
pub mod dense;
pub mod device;
pub mod gguf;
pub mod mxfp4;

use crate::LoadError;
use crate::attention::{Heads, KvCache, Rope, Span, attend_steps, push_step};
use crate::candle_lm::CandleNet;
use crate::kv_store::KvType;
use candle_core::safetensors::MmapedSafetensors;
use candle_core::{DType, Device, Result, Tensor};
use config::Config;
use dense::Dense;
use mxfp4::Matrix;
use std::path::Path;
use std::sync::Arc;

/// One layer's weights.
#[derive(Clone)]
struct Layer {
    attn_norm: Vec<f32>,
    ffn_norm: Vec<f32>,
    q: Dense,
    k: Dense,
    v: Dense,
    o: Dense,
    sinks: Vec<f32>,
    window: Option<usize>,
    router: Dense,
    /// Per expert, `2 * intermediate` rows: gate and up interleaved (row `2j` is gate
    /// `j`, row `2j + 1` up `j`), as the Hugging Face checkpoint stores them.
    gate_up: Vec<Matrix>,
    gate_up_bias: Vec<f32>,
    /// Per expert, `hidden` rows of `intermediate` values.
    down: Vec<Matrix>,
    down_bias: Vec<f32>,
}

/// The weights, shared by every sequence.
struct Weights {
    config: Config,
    embeddings: Dense,
    layers: Vec<Layer>,
    norm: Vec<f32>,
    output: Dense,
    heads: Heads,
    inv_freq: Vec<f32>,
    rope_scale: f32,
}

/// A gpt-oss network: the weights (shared: [`CandleNet::fresh`] makes another sequence
/// over them) and one sequence's KV cache per layer.
#[derive(Clone)]
pub struct GptOss {
    weights: Arc<Weights>,
    caches: Vec<KvCache>,
}

impl std::fmt::Debug for GptOss {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kv_cache_bytes: usize = self.caches.iter().map(KvCache::bytes).sum();
        f.debug_struct("GptOss")
            .field("config", &self.weights.config)
            .field("kv_cache_bytes", &kv_cache_bytes)
            .finish_non_exhaustive()
    }
}

impl GptOss {
    /// From a Hugging Face folder's `config.json` and safetensors files.
    pub fn from_hf(config: &serde_json::Value, files: &[impl AsRef<Path>]) -> Result<GptOss> {
        let config_json = config;
        let config = Config::from_hf(config).map_err(candle_core::Error::Msg)?;
        // SAFETY: the files are mapped read-only and must not change while they are read
        // here (every tensor is copied out before this returns).
        let st = unsafe { MmapedSafetensors::multi(files)? };
        let cpu = Device::Cpu;
        let host = |name: &str| {
            st.load(name, &cpu)?
                .to_dtype(DType::F32)?
                .flatten_all()?
                .to_vec1::<f32>()
        };
        let bytes = |name: &str| st.load(name, &cpu)?.flatten_all()?.to_vec1::<u8>();
        let linear = |name: &str| -> Result<Dense> {
            let bias = st.load(&format!("{name}.bias"), &cpu)?;
            Dense::new(&st.load(&format!("{name}.weight"), &cpu)?, Some(&bias))
        };
        let (e, inter, hidden) = (config.experts, config.intermediate, config.hidden);
        let experts = |name: &str, rows: usize, cols: usize| -> Result<Vec<Matrix>> {
            let codes = bytes(&format!("{name}_blocks"))?;
            let scales = bytes(&format!("{name}_scales"))?;
            let (cn, sn) = (codes.len() / e.max(1), scales.len() / e.max(1));
            (0..e)
                .map(|x| {
                    Matrix::from_hf(
                        rows,
                        cols,
                        codes[x * cn..(x + 1) * cn].to_vec(),
                        scales[x * sn..(x + 1) * sn].to_vec(),
                    )
                    .map_err(|m| candle_core::Error::Msg(format!("{name}: {m}")))
                })
                .collect()
        };
        let mut layers = Vec::with_capacity(config.windows.len());
        for (i, &window) in config.windows.iter().enumerate() {
            let p = format!("model.layers.{i}");
            let x = format!("{p}.mlp.experts");
            layers.push(Layer {
                attn_norm: host(&format!("{p}.input_layernorm.weight"))?,
                ffn_norm: host(&format!("{p}.post_attention_layernorm.weight"))?,
                q: linear(&format!("{p}.self_attn.q_proj"))?,
                k: linear(&format!("{p}.self_attn.k_proj"))?,
                v: linear(&format!("{p}.self_attn.v_proj"))?,
                o: linear(&format!("{p}.self_attn.o_proj"))?,
                sinks: host(&format!("{p}.self_attn.sinks"))?,
                window,
                router: linear(&format!("{p}.mlp.router"))?,
                gate_up: experts(&format!("{x}.gate_up_proj"), 2 * inter, hidden)?,
                gate_up_bias: host(&format!("{x}.gate_up_proj_bias"))?,
                down: experts(&format!("{x}.down_proj"), hidden, inter)?,
                down_bias: host(&format!("{x}.down_proj_bias"))?,
            });
        }
        let embeddings = Dense::new(&st.load("model.embed_tokens.weight", &cpu)?, None)?;
        // Tied only where the config says so (gpt-oss's is not).
        let tied = config_json["tie_word_embeddings"].as_bool() == Some(true);
        let output = match (st.get("lm_head.weight"), tied) {
            (Ok(_), _) => Dense::new(&st.load("lm_head.weight", &cpu)?, None)?,
            (Err(_), true) => embeddings.clone(),
            (Err(e), false) => return Err(e),
        };
        GptOss::assemble(
            config,
            embeddings,
            layers,
            host("model.norm.weight")?,
            output,
        )
    }

    /// Checks every tensor's shape against `config` and builds the network.
    fn assemble(
        config: Config,
        embeddings: Dense,
        layers: Vec<Layer>,
        norm: Vec<f32>,
        output: Dense,
    ) -> Result<GptOss> {
        let c = &config;
        let (qn, kn) = (c.heads * c.head_dim, c.kv_heads * c.head_dim);
        let shape = |d: &Dense| {
            let (r, c) = d.shape();
            vec![r, c]
        };
        let mut want: Vec<(String, Vec<usize>, Vec<usize>)> = vec![
            (
                "embeddings".into(),
                shape(&embeddings),
                vec![c.vocab, c.hidden],
            ),
            ("output".into(), shape(&output), vec![c.vocab, c.hidden]),
            ("norm".into(), vec![norm.len()], vec![c.hidden]),
        ];
        for (i, l) in layers.iter().enumerate() {
            let mut add = |what: &str, got: Vec<usize>, expected: Vec<usize>| {
                want.push((format!("layer {i} {what}"), got, expected))
            };
            add("attention norm", vec![l.attn_norm.len()], vec![c.hidden]);
            add("experts norm", vec![l.ffn_norm.len()], vec![c.hidden]);
            for (what, lin, out, inp) in [
                ("q", &l.q, qn, c.hidden),
                ("k", &l.k, kn, c.hidden),
                ("v", &l.v, kn, c.hidden),
                ("o", &l.o, c.hidden, qn),
                ("router", &l.router, c.experts, c.hidden),
            ] {
                add(what, shape(lin), vec![out, inp]);
                add(&format!("{what} bias"), vec![lin.bias_len()], vec![out]);
            }
            add("sinks", vec![l.sinks.len()], vec![c.heads]);
            add("gate/up experts", vec![l.gate_up.len()], vec![c.experts]);
            add("down experts", vec![l.down.len()], vec![c.experts]);
            for m in &l.gate_up {
                add(
                    "gate/up expert",
                    vec![m.rows(), m.cols()],
                    vec![2 * c.intermediate, c.hidden],
                );
            }
            for m in &l.down {
                add(
                    "down expert",
                    vec![m.rows(), m.cols()],
                    vec![c.hidden, c.intermediate],
                );
            }
            add(
                "gate/up bias",
                vec![l.gate_up_bias.len()],
                vec![c.experts * 2 * c.intermediate],
            );
            add(
                "down bias",
                vec![l.down_bias.len()],
                vec![c.experts * c.hidden],
            );
        }
        for (what, got, expected) in want {
            if got != expected {
                return Err(candle_core::Error::Msg(format!(
                    "gpt-oss weights: {what} has shape {got:?}, the config says {expected:?}"
                )));
            }
        }
        let (inv_freq, rope_scale) = config.rope_frequencies();
        let heads = Heads {
            heads: config.heads,
            kv_heads: config.kv_heads,
            head_dim: config.head_dim,
            rope: Rope::Halves,
        };
        let caches = vec![KvCache::new(true, KvType::F32); layers.len()];
        Ok(GptOss {
            weights: Arc::new(Weights {
                config,
                embeddings,
                layers,
                norm,
                output,
                heads,
                inv_freq,
                rope_scale,
            }),
            caches,
        })
    }

    /// The network's shape.
    pub fn config(&self) -> &Config {
        &self.weights.config
    }

    /// The logits of every one of `tokens`' positions (`(tokens, vocabulary)`), which sit
    /// at positions `pos..` of this sequence; position 0 starts a new sequence.
    pub fn forward_all(&mut self, tokens: &[u32], pos: usize) -> Result<Tensor> {
        GptOss::run(&mut [self], &[tokens], &[pos], true)
    }

    /// Several sequences' new positions as one pass: sequence i (`nets[i]`) runs
    /// `tokens[i]` from position `pos[i]` on its own cache. The logits of each one's last
    /// position, `(sequences, vocabulary)`.
    pub fn forward_batch(
        nets: &mut [&mut GptOss],
        tokens: &[&[u32]],
        pos: &[usize],
    ) -> Result<Tensor> {
        GptOss::run(nets, tokens, pos, false)
    }

    /// The pass behind both: the logits of every row (`every`) or of each sequence's last.
    fn run(
        nets: &mut [&mut GptOss],
        tokens: &[&[u32]],
        pos: &[usize],
        every: bool,
    ) -> Result<Tensor> {
        let n = nets.len();
        let w = crate::attention::batch_weights(nets.iter().map(|m| &m.weights), tokens, pos)?;
        let c = &w.config;
        // Every input is checked before any cache changes, so that a refused batch leaves
        // each sequence as it was.
        for ((m, &p), t) in nets.iter().zip(pos).zip(tokens) {
            c.check_input(t, p)?;
            let held = m.caches.first().map_or(Ok(0), |k| k.len(&w.heads))?;
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
        let ids: Vec<u32> = tokens.iter().flat_map(|t| t.iter().copied()).collect();
        let rows = ids.len();
        let positions: Vec<usize> = pos
            .iter()
            .zip(tokens)
            .flat_map(|(&p, t)| p..p + t.len())
            .collect();
        let (cos, sin) = w.rope_rows(&positions);
        let (hidden, half) = (c.hidden, c.head_dim / 2);
        let mut x = vec![0f32; rows * hidden];
        for (row, &id) in x.chunks_exact_mut(hidden).zip(&ids) {
            w.embeddings.row_into(id as usize, row);
        }
        let (qn, kn) = (c.heads * c.head_dim, c.kv_heads * c.head_dim);
        for (l, layer) in w.layers.iter().enumerate() {
            let h = rms_norm(&x, &layer.attn_norm, c.eps);
            let (mut q, mut k, v) = (
                layer.q.forward(&h),
                layer.k.forward(&h),
                layer.v.forward(&h),
            );
            let mut r = 0;
            for (net, t) in nets.iter_mut().zip(tokens) {
                for _ in 0..t.len() {
                    push_step(
                        &mut net.caches[l],
                        &w.heads,
                        (
                            &cos[r * half..(r + 1) * half],
                            &sin[r * half..(r + 1) * half],
                        ),
                        &mut q[r * qn..(r + 1) * qn],
                        &mut k[r * kn..(r + 1) * kn],
                        &v[r * kn..(r + 1) * kn],
                    )?;
                    r += 1;
                }
            }
            let views: Vec<(&KvCache, usize)> = nets
                .iter()
                .zip(pos.iter().zip(tokens))
                .flat_map(|(net, (&p, t))| (p..p + t.len()).map(move |at| (&net.caches[l], at + 1)))
                .collect();
            let mut y = vec![0f32; q.len()];
            let span = Span {
                window: layer.window,
                sinks: Some(&layer.sinks),
            };
            attend_steps(&views, &w.heads, span, &q, &mut y)?;
            add(&mut x, &layer.o.forward(&y));
            let h = rms_norm(&x, &layer.ffn_norm, c.eps);
            add(&mut x, &layer.experts(&h, c)?);
        }
        let x = match every {
            true => x,
            false => {
                let mut last = Vec::with_capacity(n * hidden);
                let mut end = 0;
                for t in tokens {
                    end += t.len();
                    last.extend_from_slice(&x[(end - 1) * hidden..end * hidden]);
                }
                last
            }
        };
        let logits = w.output.forward(&rms_norm(&x, &w.norm, c.eps));
        let m = logits.len() / c.vocab;
        Tensor::from_vec(logits, (m, c.vocab), &Device::Cpu)
    }

    /// Empties every layer's KV cache.
    pub fn clear_kv_cache(&mut self) {
        for cache in &mut self.caches {
            cache.clear();
        }
    }
}

impl Weights {
    /// RoPE's cosines and sines (`head_dim / 2` each) for each position, row after row,
    /// in f32 as transformers computes them (angle `position * inv_freq`, then the YaRN
    /// scale).
    fn rope_rows(&self, positions: &[usize]) -> (Vec<f32>, Vec<f32>) {
        let mut cos = Vec::with_capacity(positions.len() * self.inv_freq.len());
        let mut sin = Vec::with_capacity(cos.capacity());
        for &p in positions {
            for &f in &self.inv_freq {
                let angle = p as f32 * f;
                cos.push(angle.cos() * self.rope_scale);
                sin.push(angle.sin() * self.rope_scale);
            }
        }
        (cos, sin)
    }
}

impl Layer {
    /// The mixture of experts for rows `hv` (`rows x hidden`).
    fn experts(&self, hv: &[f32], c: &Config) -> Result<Vec<f32>> {
        let rows = hv.len() / c.hidden;
        let scores = self.router.forward(hv);
        // Per expert, the rows routed to it and their weights.
        let mut routed: Vec<Vec<(usize, f32)>> = vec![Vec::new(); c.experts];
        for (r, s) in scores.chunks_exact(c.experts).enumerate() {
            for (e, weight) in route(s, c.top_k) {
                routed[e].push((r, weight));
            }
        }
        let (hidden, inter) = (c.hidden, c.intermediate);
        let mut out = vec![0f32; rows * hidden];
        for (e, list) in routed.iter().enumerate() {
            if list.is_empty() {
                continue;
            }
            let m = list.len();
            let xs: Vec<f32> = list
                .iter()
                .flat_map(|&(r, _)| hv[r * hidden..(r + 1) * hidden].iter().copied())
                .collect();
            let mut gu = vec![0f32; m * 2 * inter];
            self.gate_up[e]
                .matmul(&xs, &mut gu)
                .map_err(candle_core::Error::Msg)?;
            let bias = &self.gate_up_bias[e * 2 * inter..(e + 1) * 2 * inter];
            let act: Vec<f32> = gu
                .chunks_exact(2 * inter)
                .flat_map(|row| {
                    row.chunks_exact(2)
                        .zip(bias.chunks_exact(2))
                        .map(|(gu, b)| {
                            let gate = (gu[0] + b[0]).min(c.swiglu_limit);
                            let up = (gu[1] + b[1]).clamp(-c.swiglu_limit, c.swiglu_limit);
                            let glu = gate / (1.0 + (-gate * c.swiglu_alpha).exp());
                            (up + 1.0) * glu
                        })
                })
                .collect();
            let mut down = vec![0f32; m * hidden];
            self.down[e]
                .matmul(&act, &mut down)
                .map_err(candle_core::Error::Msg)?;
            let bias = &self.down_bias[e * hidden..(e + 1) * hidden];
            for (&(r, weight), y) in list.iter().zip(down.chunks_exact(hidden)) {
                for ((o, &y), &b) in out[r * hidden..(r + 1) * hidden]
                    .iter_mut()
                    .zip(y)
                    .zip(bias)
                {
                    *o += (y + b) * weight;
                }
            }
        }
        Ok(out)
    }
}

/// A row's routing from its router scores: the `top_k` highest-scoring experts (the lower
/// index first among equals), each weighed by a softmax over the chosen scores.
fn route(scores: &[f32], top_k: usize) -> Vec<(usize, f32)> {
    let mut order: Vec<usize> = (0..scores.len()).collect();
    order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
    order.truncate(top_k);
    let Some(&best) = order.first() else {
        return Vec::new();
    };
    let max = scores[best];
    let exps: Vec<f32> = order.iter().map(|&e| (scores[e] - max).exp()).collect();
    let total: f32 = exps.iter().sum();
    order
        .into_iter()
        .zip(exps)
        .map(|(e, x)| (e, x / total))
        .collect()
}

/// RMS norm of each row of `x` (`weight.len()` values each), in f32 as transformers
/// computes it: `x / sqrt(mean(x^2) + eps) * weight`.
fn rms_norm(x: &[f32], weight: &[f32], eps: f32) -> Vec<f32> {
    let mut out = Vec::with_capacity(x.len());
    for row in x.chunks_exact(weight.len()) {
        let mean = row.iter().map(|v| v * v).sum::<f32>() / weight.len() as f32;
        let scale = 1.0 / (mean + eps).sqrt();
        out.extend(row.iter().zip(weight).map(|(v, w)| v * scale * w));
    }
    out
}

/// `x += y`, element by element.
fn add(x: &mut [f32], y: &[f32]) {
    for (a, b) in x.iter_mut().zip(y) {
        *a += b;
    }
}

impl CandleNet for GptOss {
    fn forward(&mut self, input: &Tensor, pos: usize) -> Result<Tensor> {
        let tokens = input.flatten_all()?.to_vec1::<u32>()?;
        GptOss::run(&mut [self], &[&tokens], &[pos], false)
    }

    fn clear_kv_cache(&mut self) {
        GptOss::clear_kv_cache(self)
    }

    fn forward_batch(
        nets: &mut [&mut GptOss],
        tokens: &[&[u32]],
        pos: &[usize],
        _device: &Device,
    ) -> Result<Tensor> {
        GptOss::run(nets, tokens, pos, false)
    }
}

/// A gpt-oss Hugging Face folder's network, as a [`corral_engine::CausalLm`]: on the CPU
/// as loaded (its passes run by hand on host memory), elsewhere unpacked to f32 on the
/// device ([`device`]).
pub fn load_hf(
    folder: &crate::hf_folder::HfFolder,
    device: &Device,
) -> std::result::Result<Box<dyn corral_engine::CausalLm>, LoadError> {
    let net = GptOss::from_hf(&folder.config, &folder.weights).map_err(|e| {
        LoadError::candle(
            format!("{}: cannot build the gpt-oss network", folder.name),
            e,
        )
    })?;
    let c = net.config().clone();
    if device.is_cpu() {
        return Ok(Box::new(crate::candle_lm::CandleLm::new(
            net,
            Device::Cpu,
            c.vocab,
            c.max_positions,
        )));
    }
    let net = net.to_device(device).map_err(|e| {
        LoadError::candle(
            format!("{}: cannot put the weights on the device", folder.name),
            e,
        )
    })?;
    Ok(Box::new(crate::candle_lm::CandleLm::new(
        net,
        device.clone(),
        c.vocab,
        c.max_positions,
    )))
}
