//! Decode speed of corral's gpt-oss ([`corral::models::gpt_oss`]) beside its dense llama
//! path ([`corral::models::llama::Llama`]) at the same shape, on random weights:
//! `cargo bench --bench decode_gpt_oss`.
//!
//! Both networks share the width, layers, heads and vocabulary; gpt-oss has 4 experts of
//! half the dense model's feed-forward width and runs 2 of them, so each position runs the
//! same feed-forward width. What differs is the arithmetic: gpt-oss's experts are MXFP4
//! and its attention, router, embeddings and output bf16, as the published checkpoints
//! store them, each multiplied in f32 by corral's kernels; the llama's matrices are Q4_1
//! and Q8_0 (corral's integer kernel). Two shapes:
//! the gpt-oss test fixture's (width 64, 4 layers, vocabulary 512) and SmolLM2-135M's
//! (width 576, 30 layers, 9 heads of 64 with 3 key-value heads, vocabulary 49,152).
//!
//! Each figure is the median of 3 runs: a prompt of 16 tokens, then 64 decoding steps of
//! one sequence, or 32 steps of 8 sequences batched (tokens per second over all 8).

use candle_core::quantized::{GgmlDType, QTensor, gguf_file};
use candle_core::{Device, Tensor};
use corral::models::gpt_oss::GptOss;
use corral::models::llama::Llama;
use std::time::Instant;

#[path = "../tests/support/random_gpt_oss.rs"]
mod random_gpt_oss;
use random_gpt_oss::{GptOssShape, write_random_gpt_oss};

struct Shape {
    name: &'static str,
    width: usize,
    layers: usize,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    ffn: usize,
    vocab: usize,
}

const SHAPES: [Shape; 2] = [
    Shape {
        name: "tiny (fixture)",
        width: 64,
        layers: 4,
        heads: 4,
        kv_heads: 2,
        head_dim: 16,
        ffn: 128,
        vocab: 512,
    },
    Shape {
        name: "SmolLM2-135M",
        width: 576,
        layers: 30,
        heads: 9,
        kv_heads: 3,
        head_dim: 64,
        ffn: 1536,
        vocab: 49_152,
    },
];

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn values(&mut self, n: usize, scale: f32, offset: f32) -> Vec<f32> {
        (0..n)
            .map(|_| offset + scale * ((self.next() % 20_001) as f32 / 10_000.0 - 1.0))
            .collect()
    }

    fn tensor(&mut self, dims: &[usize], scale: f32, offset: f32) -> Tensor {
        let n = dims.iter().product();
        Tensor::from_vec(self.values(n, scale, offset), dims, &Device::Cpu).unwrap()
    }
}

fn llama(s: &Shape, rng: &mut Rng) -> Llama {
    let u = |x: usize| gguf_file::Value::U32(x as u32);
    let meta = vec![
        (
            "general.architecture",
            gguf_file::Value::String("llama".into()),
        ),
        ("llama.block_count", u(s.layers)),
        ("llama.context_length", u(4096)),
        ("llama.embedding_length", u(s.width)),
        ("llama.feed_forward_length", u(s.ffn)),
        ("llama.attention.head_count", u(s.heads)),
        ("llama.attention.head_count_kv", u(s.kv_heads)),
        ("llama.attention.key_length", u(s.head_dim)),
        ("llama.rope.dimension_count", u(s.head_dim)),
        (
            "llama.attention.layer_norm_rms_epsilon",
            gguf_file::Value::F32(1e-5),
        ),
    ];
    let mut q = |dims: &[usize], ty: GgmlDType, scale: f32, offset: f32| {
        QTensor::quantize(&rng.tensor(dims, scale, offset), ty).unwrap()
    };
    let (qn, kn) = (s.heads * s.head_dim, s.kv_heads * s.head_dim);
    let mut tensors = vec![
        (
            "token_embd.weight".to_string(),
            q(&[s.vocab, s.width], GgmlDType::Q8_0, 1.0, 0.0),
        ),
        (
            "output.weight".to_string(),
            q(&[s.vocab, s.width], GgmlDType::Q4_1, 0.1, 0.0),
        ),
        (
            "output_norm.weight".to_string(),
            q(&[s.width], GgmlDType::F32, 0.1, 1.0),
        ),
    ];
    for i in 0..s.layers {
        for (name, dims, ty) in [
            ("attn_q", [qn, s.width], GgmlDType::Q8_0),
            ("attn_k", [kn, s.width], GgmlDType::Q8_0),
            ("attn_v", [kn, s.width], GgmlDType::Q8_0),
            ("attn_output", [s.width, qn], GgmlDType::Q4_1),
            ("ffn_gate", [s.ffn, s.width], GgmlDType::Q4_1),
            ("ffn_up", [s.ffn, s.width], GgmlDType::Q8_0),
            ("ffn_down", [s.width, s.ffn], GgmlDType::Q4_1),
        ] {
            tensors.push((format!("blk.{i}.{name}.weight"), q(&dims, ty, 0.1, 0.0)));
        }
        for name in ["attn_norm", "ffn_norm"] {
            tensors.push((
                format!("blk.{i}.{name}.weight"),
                q(&[s.width], GgmlDType::F32, 0.1, 1.0),
            ));
        }
    }
    let mut buf = std::io::Cursor::new(Vec::new());
    let meta_refs: Vec<(&str, &gguf_file::Value)> = meta.iter().map(|(k, v)| (*k, v)).collect();
    let tensor_refs: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, t)| (k.as_str(), t)).collect();
    gguf_file::write(&mut buf, &meta_refs, &tensor_refs).unwrap();
    buf.set_position(0);
    let content = gguf_file::Content::read(&mut buf).unwrap();
    Llama::from_gguf(&content, &mut buf, &Device::Cpu).unwrap()
}

fn gpt_oss(s: &Shape, dir: &std::path::Path) -> GptOss {
    let shape = GptOssShape {
        width: s.width,
        layers: s.layers,
        heads: s.heads,
        kv_heads: s.kv_heads,
        head_dim: s.head_dim,
        experts: 4,
        top_k: 2,
        expert_width: s.ffn / 2,
        vocab: s.vocab,
        sliding_window: 128,
    };
    let dir = dir.join(format!("gpt-oss-{}", s.width));
    let config = write_random_gpt_oss(&dir, &shape, None, 11);
    let net = GptOss::from_hf(&config, &[dir.join("model.safetensors")]).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    net
}

/// One pass of a batch: the networks, each one's new tokens and first position.
type Pass<'a, N> = &'a dyn Fn(&mut [&mut N], &[&[u32]], &[usize]);

/// Tokens per second decoding `batch` sequences for `steps` steps after a prompt of 16.
fn decode<N: Clone>(net: &N, batch: usize, steps: usize, vocab: usize, run: Pass<N>) -> f64 {
    let mut nets: Vec<N> = (0..batch).map(|_| net.clone()).collect();
    let prompt: Vec<u32> = (0..16).map(|i| (i * 37 % vocab) as u32).collect();
    for n in nets.iter_mut() {
        run(&mut [n], &[&prompt], &[0]);
    }
    let start = Instant::now();
    for step in 0..steps {
        let tokens: Vec<[u32; 1]> = (0..batch)
            .map(|b| [((step * 13 + b * 7) % vocab) as u32])
            .collect();
        let inputs: Vec<&[u32]> = tokens.iter().map(|t| t.as_slice()).collect();
        let mut refs: Vec<&mut N> = nets.iter_mut().collect();
        run(&mut refs, &inputs, &vec![16 + step; batch]);
    }
    (batch * steps) as f64 / start.elapsed().as_secs_f64()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let dir = std::env::temp_dir().join(format!("corral-decode-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    println!("| shape | network | 1 sequence | 8 sequences batched |");
    println!("|---|---|---|---|");
    for s in &SHAPES {
        let mut rng = Rng(11);
        let dense = llama(s, &mut rng);
        let moe = gpt_oss(s, &dir);
        let run_dense = |n: &mut [&mut Llama], t: &[&[u32]], p: &[usize]| {
            Llama::forward_batch(n, t, p).unwrap();
        };
        let run_moe = |n: &mut [&mut GptOss], t: &[&[u32]], p: &[usize]| {
            GptOss::forward_batch(n, t, p).unwrap();
        };
        let rows = [
            (
                "dense llama (Q4_1/Q8_0)",
                (0..3)
                    .map(|_| decode(&dense, 1, 64, s.vocab, &run_dense))
                    .collect::<Vec<_>>(),
                (0..3)
                    .map(|_| decode(&dense, 8, 32, s.vocab, &run_dense))
                    .collect::<Vec<_>>(),
            ),
            (
                "gpt-oss (MXFP4 experts, bf16 rest)",
                (0..3)
                    .map(|_| decode(&moe, 1, 64, s.vocab, &run_moe))
                    .collect(),
                (0..3)
                    .map(|_| decode(&moe, 8, 32, s.vocab, &run_moe))
                    .collect(),
            ),
        ];
        for (name, one, eight) in rows {
            println!(
                "| {} | {name} | {:.1} tok/s | {:.1} tok/s |",
                s.name,
                median(one),
                median(eight)
            );
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}
