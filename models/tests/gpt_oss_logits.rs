//! corral's gpt-oss against transformers' `GptOssForCausalLM`, on the tiny random model of
//! `tests/data/gpt-oss` (4 layers alternating a sliding window of 8 and full attention, 4
//! experts of which 2 run, grouped-query attention, attention sinks, YaRN RoPE, experts in
//! MXFP4; written by `scripts/make-gpt-oss-fixture`). Prompts of 24 and 17 tokens, longer
//! than the window; transformers' logits at every position (f32, eager attention) are in
//! `expected.safetensors`.
//!
//! Both layouts are loaded: the Hugging Face checkpoint (`hf/`) and llama.cpp's GGUF
//! (`model.gguf`). Each is checked in a prefill of the whole prompt, a prefill in two
//! chunks, token-by-token decoding, and a batch of the two prompts decoded together.

use candle_core::{Device, Tensor};
use corral_models::gpt_oss::GptOss;
use corral_models::gpt_oss::gguf::GgufFile;
use std::collections::HashMap;
use std::path::PathBuf;

/// Largest difference allowed between a corral logit and transformers' (logits have a
/// standard deviation of about 1; both sides compute in f32, in different orders).
const TOLERANCE: f32 = 1e-4;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/data/gpt-oss")
        .join(name)
}

/// transformers' tokens and logits for prompts `a` and `b`.
fn expected() -> HashMap<String, Tensor> {
    candle_core::safetensors::load(fixture("expected.safetensors"), &Device::Cpu).unwrap()
}

fn prompt(e: &HashMap<String, Tensor>, name: &str) -> (Vec<u32>, Vec<Vec<f32>>) {
    let tokens = e[&format!("tokens_{name}")].to_vec1::<u32>().unwrap();
    let logits = e[&format!("logits_{name}")].to_vec2::<f32>().unwrap();
    assert_eq!(tokens.len(), logits.len());
    (tokens, logits)
}

fn from_hf() -> GptOss {
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("hf/config.json")).unwrap()).unwrap();
    GptOss::from_hf(&config, &[fixture("hf/model.safetensors")]).unwrap()
}

fn from_gguf() -> GptOss {
    let mut f = std::fs::File::open(fixture("model.gguf")).unwrap();
    let file = GgufFile::read(&mut f).unwrap();
    GptOss::from_gguf(&file, &mut f).unwrap()
}

fn layouts() -> [(&'static str, GptOss); 2] {
    [("hf", from_hf()), ("gguf", from_gguf())]
}

/// The largest difference between `got` (rows of logits) and `want`.
fn max_diff(got: &Tensor, want: &[Vec<f32>]) -> f32 {
    let got = got.to_vec2::<f32>().unwrap();
    assert_eq!(got.len(), want.len());
    got.iter()
        .zip(want)
        .flat_map(|(g, w)| {
            assert_eq!(g.len(), w.len());
            g.iter().zip(w).map(|(a, b)| (a - b).abs())
        })
        .fold(0.0, f32::max)
}

#[test]
fn prefill_matches_transformers_at_every_position() {
    let e = expected();
    for (layout, mut net) in layouts() {
        for name in ["a", "b"] {
            let (tokens, want) = prompt(&e, name);
            let whole = net.forward_all(&tokens, 0).unwrap();
            let d = max_diff(&whole, &want);
            eprintln!(
                "{layout} prefill {name} ({} positions): max |diff| {d:.2e}",
                tokens.len()
            );
            assert!(d <= TOLERANCE, "{layout} {name}: {d}");
            // In two chunks: the second attends to the first's cache.
            let first = net.forward_all(&tokens[..10], 0).unwrap();
            let rest = net.forward_all(&tokens[10..], 10).unwrap();
            let both = Tensor::cat(&[first, rest], 0).unwrap();
            let d = max_diff(&both, &want);
            eprintln!("{layout} chunked prefill {name}: max |diff| {d:.2e}");
            assert!(d <= TOLERANCE, "{layout} chunked {name}: {d}");
        }
    }
}

#[test]
fn decoding_token_by_token_matches_transformers() {
    let e = expected();
    for (layout, mut net) in layouts() {
        for name in ["a", "b"] {
            let (tokens, want) = prompt(&e, name);
            let mut worst = 0f32;
            for (i, &t) in tokens.iter().enumerate() {
                let row = net.forward_all(&[t], i).unwrap();
                worst = worst.max(max_diff(&row, &want[i..=i]));
            }
            eprintln!(
                "{layout} decode {name} ({} steps): max |diff| {worst:.2e}",
                tokens.len()
            );
            assert!(worst <= TOLERANCE, "{layout} decode {name}: {worst}");
        }
    }
}

#[test]
fn a_batch_of_two_sequences_matches_transformers() {
    let e = expected();
    let (ta, wa) = prompt(&e, "a");
    let (tb, wb) = prompt(&e, "b");
    for (layout, net) in layouts() {
        let (mut a, mut b) = (net.clone(), net.clone());
        a.clear_kv_cache();
        b.clear_kv_cache();
        // A prompt piece of each, then one token each per pass until b ends, then a alone.
        let mut worst = 0f32;
        let out =
            GptOss::forward_batch(&mut [&mut a, &mut b], &[&ta[..5], &tb[..3]], &[0, 0]).unwrap();
        worst = worst.max(max_diff(&out, &[wa[4].clone(), wb[2].clone()]));
        let (mut pa, mut pb) = (5, 3);
        while pa < ta.len() {
            let out = if pb < tb.len() {
                let out = GptOss::forward_batch(
                    &mut [&mut a, &mut b],
                    &[&ta[pa..=pa], &tb[pb..=pb]],
                    &[pa, pb],
                )
                .unwrap();
                let d = max_diff(&out, &[wa[pa].clone(), wb[pb].clone()]);
                pb += 1;
                (out, d)
            } else {
                let out = GptOss::forward_batch(&mut [&mut a], &[&ta[pa..=pa]], &[pa]).unwrap();
                let d = max_diff(&out, &wa[pa..=pa]);
                (out, d)
            };
            worst = worst.max(out.1);
            pa += 1;
        }
        eprintln!("{layout} batch of two: max |diff| {worst:.2e}");
        assert!(worst <= TOLERANCE, "{layout} batch: {worst}");
    }
}

/// The network in candle's tensor ops (what runs on a GPU), here on the CPU device:
/// prefill, a prefill in two pieces, and decoding, against transformers.
#[test]
fn the_device_network_matches_transformers_on_the_cpu_device() {
    let e = expected();
    for (layout, net) in layouts() {
        let mut dev = net.to_device(&Device::Cpu).unwrap();
        for name in ["a", "b"] {
            let (tokens, want) = prompt(&e, name);
            let whole = max_diff(&dev.forward_all(&tokens, 0).unwrap(), &want);
            let cut = 10;
            let first = dev.forward_all(&tokens[..cut], 0).unwrap();
            let rest = dev.forward_all(&tokens[cut..], cut).unwrap();
            let pieces = max_diff(&Tensor::cat(&[first, rest], 0).unwrap(), &want);
            let mut decode = 0f32;
            for (i, &t) in tokens.iter().enumerate() {
                let row = dev.forward_all(&[t], i).unwrap();
                decode = decode.max(max_diff(&row, &want[i..=i]));
            }
            eprintln!(
                "{layout} on the device network, {name}: max |diff| prefill {whole:.2e}, two pieces {pieces:.2e}, decode {decode:.2e}"
            );
            for d in [whole, pieces, decode] {
                assert!(d <= TOLERANCE, "{layout} device {name}: {d}");
            }
        }
        // Its errors are errors: a position the cache does not hold, a token out of range.
        assert!(dev.forward_all(&[1], 99).is_err());
        assert!(dev.forward_all(&[u32::MAX], 0).is_err());
    }
}

#[test]
fn both_layouts_hold_the_same_network() {
    let e = expected();
    let (tokens, _) = prompt(&e, "a");
    let [(_, mut hf), (_, mut gguf)] = layouts();
    let h = hf
        .forward_all(&tokens, 0)
        .unwrap()
        .to_vec2::<f32>()
        .unwrap();
    let g = gguf
        .forward_all(&tokens, 0)
        .unwrap()
        .to_vec2::<f32>()
        .unwrap();
    assert_eq!(h, g);
}

#[test]
fn bad_inputs_are_errors() {
    let mut net = from_hf();
    // Outside the vocabulary of 512.
    assert!(net.forward_all(&[512], 0).is_err());
    // The cache holds no position 5.
    assert!(net.forward_all(&[1], 5).is_err());
    assert!(net.forward_all(&[], 0).is_err());
    // A batch whose sequences do not share weights.
    let mut other = from_hf();
    assert!(GptOss::forward_batch(&mut [&mut net, &mut other], &[&[1], &[2]], &[0, 0]).is_err());
}

/// Loads a GGUF file from bytes: header, then weights.
fn load_gguf_bytes(bytes: &[u8]) -> Result<GptOss, String> {
    let mut r = std::io::Cursor::new(bytes);
    let file = GgufFile::read(&mut r)?;
    GptOss::from_gguf(&file, &mut r).map_err(|e| e.to_string())
}

#[test]
fn truncated_or_corrupted_gguf_files_are_errors() {
    let bytes = std::fs::read(fixture("model.gguf")).unwrap();
    assert!(load_gguf_bytes(&bytes).is_ok());
    // Cut anywhere: always an error, never a panic or an allocation of a corrupt size.
    for end in (0..bytes.len()).step_by(509) {
        assert!(load_gguf_bytes(&bytes[..end]).is_err(), "cut at {end}");
    }
    // Bytes of the header changed, one at a time: an error or a network, never a panic.
    let header = 4096.min(bytes.len());
    let mut refused = 0;
    for at in (0..header).step_by(7) {
        for value in [0x00, 0xFF, 0x7F] {
            let mut b = bytes.clone();
            b[at] = value;
            refused += usize::from(load_gguf_bytes(&b).is_err());
        }
    }
    assert!(refused > 0);
}

#[test]
fn bad_configs_are_errors() {
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("hf/config.json")).unwrap()).unwrap();
    let weights = [fixture("hf/model.safetensors")];
    for (key, value) in [
        ("num_hidden_layers", serde_json::json!(1u64 << 60)),
        ("num_hidden_layers", serde_json::json!(0)),
        ("sliding_window", serde_json::json!(0)),
        ("num_experts_per_tok", serde_json::json!(9)),
        ("hidden_size", serde_json::json!(65)),
    ] {
        let mut c = config.clone();
        c[key] = value.clone();
        if key == "num_hidden_layers" {
            c.as_object_mut().unwrap().remove("layer_types");
        }
        let err = GptOss::from_hf(&c, &weights).err();
        assert!(err.is_some(), "{key} = {value} was accepted");
    }
}
