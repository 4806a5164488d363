//! Positions past 4,096, up to the GGUF file's own context length: a tiny llama with
//! random weights (quantized as Q5_1, Q4_0 and Q8_0), a 32,768-position context and
//! Llama 3.1's per-frequency RoPE factors, written as a GGUF file, run to 16,000
//! positions. Its decoding steps (the tiled or AVX2 kernels, attention by hand) match
//! the reference pass (dequantized f32 weights, attention through candle's operations),
//! and its KV memory grows linearly.
use candle_core::quantized::gguf_file::{self, Content, Value};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use corral_models::llama::{Attention, Kernels, KvType, Llama};
use std::io::Cursor;

const WIDTH: usize = 64;
const HEADS: usize = 2;
const FFN: usize = 128;
const VOCAB: usize = 300;
const CONTEXT: u32 = 32_768;

/// The tiny model's GGUF bytes (fixed seed).
fn tiny_gguf() -> Vec<u8> {
    let dev = Device::Cpu;
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % 20_001) as f32 / 10_000.0 - 1.0
    };
    let mut tensor = |shape: (usize, usize), scale: f32, dtype: GgmlDType| {
        let v: Vec<f32> = (0..shape.0 * shape.1).map(|_| next() * scale).collect();
        let t = Tensor::from_vec(v, shape, &dev).unwrap();
        QTensor::quantize(&t, dtype).unwrap()
    };
    let ones = |n: usize| {
        QTensor::quantize(
            &Tensor::ones(n, candle_core::DType::F32, &dev).unwrap(),
            GgmlDType::F32,
        )
        .unwrap()
    };
    let mut tensors: Vec<(String, QTensor)> = vec![
        (
            "token_embd.weight".into(),
            tensor((VOCAB, WIDTH), 1.0, GgmlDType::Q8_0),
        ),
        ("output_norm.weight".into(), ones(WIDTH)),
        (
            "output.weight".into(),
            tensor((VOCAB, WIDTH), 0.3, GgmlDType::Q8_0),
        ),
    ];
    let head_dim = WIDTH / HEADS;
    let factors: Vec<f32> = (0..head_dim / 2)
        .map(|i| 1.0 + (i % 4) as f32 * 2.0)
        .collect();
    tensors.push((
        "rope_freqs.weight".into(),
        QTensor::quantize(
            &Tensor::new(factors.as_slice(), &dev).unwrap(),
            GgmlDType::F32,
        )
        .unwrap(),
    ));
    let kv = WIDTH / HEADS; // one key-value head
    for (name, shape, dtype) in [
        ("attn_q", (WIDTH, WIDTH), GgmlDType::Q5_1),
        ("attn_k", (kv, WIDTH), GgmlDType::Q5_1),
        ("attn_v", (kv, WIDTH), GgmlDType::Q5_1),
        ("attn_output", (WIDTH, WIDTH), GgmlDType::Q4_0),
        ("ffn_gate", (FFN, WIDTH), GgmlDType::Q4_0),
        ("ffn_up", (FFN, WIDTH), GgmlDType::Q4_0),
        ("ffn_down", (WIDTH, FFN), GgmlDType::Q8_0),
    ] {
        tensors.push((format!("blk.0.{name}.weight"), tensor(shape, 0.3, dtype)));
    }
    tensors.push(("blk.0.attn_norm.weight".into(), ones(WIDTH)));
    tensors.push(("blk.0.ffn_norm.weight".into(), ones(WIDTH)));
    let metadata = [
        ("general.architecture", Value::String("llama".into())),
        ("llama.context_length", Value::U32(CONTEXT)),
        ("llama.embedding_length", Value::U32(WIDTH as u32)),
        ("llama.block_count", Value::U32(1)),
        ("llama.attention.head_count", Value::U32(HEADS as u32)),
        ("llama.attention.head_count_kv", Value::U32(1)),
        ("llama.attention.layer_norm_rms_epsilon", Value::F32(1e-5)),
        ("llama.rope.freq_base", Value::F32(500_000.0)),
    ];
    let meta: Vec<(&str, &Value)> = metadata.iter().map(|(k, v)| (*k, v)).collect();
    let refs: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let mut out = Cursor::new(Vec::new());
    gguf_file::write(&mut out, &meta, &refs).unwrap();
    out.into_inner()
}

fn logits(net: &mut Llama, tokens: &[u32], pos: usize) -> Vec<f32> {
    let input = Tensor::new(tokens, &Device::Cpu)
        .unwrap()
        .unsqueeze(0)
        .unwrap();
    net.forward(&input, pos)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1::<f32>()
        .unwrap()
}

#[test]
fn sixteen_thousand_positions_match_the_reference_in_linear_memory() {
    let bytes = tiny_gguf();
    let mut file = Cursor::new(bytes);
    let content = Content::read(&mut file).unwrap();
    let dev = Device::Cpu;
    let mut ours = Llama::from_gguf(&content, &mut file, &dev).unwrap();
    // The reference keeps its cache in f32; `ours` keeps the default f16 cache.
    let mut exact = Llama::from_gguf_with(&content, &mut file, &dev, Kernels::Dequantized)
        .unwrap()
        .with_attention(Attention::Candle)
        .with_kv_type(KvType::F32);
    assert_eq!(ours.max_positions(), CONTEXT as usize);
    let prompt: Vec<u32> = (0..16_000u32)
        .map(|i| (i * 7 + i / 13) % VOCAB as u32)
        .collect();
    let mut memory = Vec::new();
    for (i, chunk) in prompt.chunks(4_000).enumerate() {
        logits(&mut ours, chunk, i * 4_000);
        memory.push(ours.kv_bytes());
        logits(&mut exact, chunk, i * 4_000);
    }
    // One key-value head of 32 values in f16, keys and values: 128 bytes a position, with
    // at most an eighth's growth on top.
    let per_position = 2 * (WIDTH / HEADS) * 2;
    for (i, &m) in memory.iter().enumerate() {
        let held = (i + 1) * 4_000 * per_position;
        assert!(
            m >= held && m <= held + held / 8,
            "{m} bytes for {held} bytes of positions"
        );
    }
    let mut worst = 0f32;
    let mut next = 5u32;
    for pos in 16_000..16_008 {
        let (a, b) = (
            logits(&mut ours, &[next], pos),
            logits(&mut exact, &[next], pos),
        );
        let scale = b.iter().fold(0f32, |m, v| m.max(v.abs()));
        for (x, y) in a.iter().zip(&b) {
            worst = worst.max((x - y).abs() / scale);
        }
        next = (next * 31 + 7) % VOCAB as u32;
    }
    // The steps round activations to 8 bits; the reference does not.
    eprintln!("largest difference at 16,000 positions: {worst} of the logits' scale");
    assert!(
        worst < 0.05,
        "largest difference {worst} of the logits' scale"
    );
    // A sequence refuses a position past the file's context.
    let mut fresh = ours.fresh();
    let past: Vec<u32> = vec![1; CONTEXT as usize + 1];
    let past = Tensor::new(past.as_slice(), &dev)
        .unwrap()
        .unsqueeze(0)
        .unwrap();
    let e = fresh.forward(&past, 0).unwrap_err().to_string();
    assert!(e.contains("32768"), "{e}");
}
