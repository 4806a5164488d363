//! The Rust half of `scripts/gpu-check`.
//!
//! - `make-model --from SRC.gguf --out TINY.gguf`: a llama-family GGUF with random weights
//!   (2 layers, width 64, grouped-query attention, Q8_0 and Q4_1 matrices: the two types of
//!   corral's own CPU kernel) and the tokenizer of `SRC`, a few MB, so that it travels to a
//!   GPU machine with the binary.
//! - `run --model TINY.gguf --schema S.json`: loads the model on the CPU and on `cuda:0` and
//!   checks the device against the CPU: logits at every position one token at a time, a
//!   prompt's prefill, a batch of two sequences, masks applied on the device, and
//!   constrained generation on the device, valid under the schema. With `--gpt-oss DIR`
//!   (`tests/data/gpt-oss`), gpt-oss too: the device network against the CPU's, and both
//!   against transformers' logits. Prints a table; exits non-zero when a check fails.

use anyhow::{Context, Result, bail};
use candle_core::quantized::gguf_file::{self, Value};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use corral::engine::{
    BatchItem, CausalLm, FinishReason, GenerateOptions, Logits, RobustConstrainedAdapter,
    SamplingOptions, Sequence, apply_mask_in_place, generate,
};
use corral::models::llama::{Kernels, Llama};
use corral::trie::{FixedBitSet, TokenId};
use corral::{DeviceSpec, Model, StructuredOptions, schema_constraint};
use std::path::Path;
use std::time::Instant;

const USAGE: &str = "usage: corral-gpu-check make-model --from SRC.gguf --out TINY.gguf [--f16]
       corral-gpu-check run --model TINY.gguf [--f16-model TINY-F16.gguf] [--gpt-oss FIXTURE_DIR] --schema SCHEMA.json [--device cuda:0]";

/// The f16 model's logits on the device may differ from the CPU's by this normalized mean
/// squared error (sum of squared differences over sum of squares) at any position: the
/// weights are made f32 on both sides and no activation is rounded, so only the order of
/// f32 sums differs.
const EXACT_NMSE: f64 = 1e-8;
/// The quantized model's device logits may be this many times further (in NMSE) from the
/// exact function (the same weights dequantized to f32, on the CPU) than the worse of the
/// CPU's two quantized kernels (corral's and candle's) are: every quantized kernel rounds
/// the activations to 8 bits, each its own way, so the device is held to the CPU's own
/// distance from the exact answer rather than to the CPU's rounding.
const QUANTIZED_FACTOR: f64 = 2.0;

fn main() {
    if let Err(e) = run_cli() {
        eprintln!("corral-gpu-check: {e:#}");
        std::process::exit(2);
    }
}

fn run_cli() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .map(String::as_str)
    };
    let need = |name: &str| flag(name).with_context(|| format!("{name} is missing\n{USAGE}"));
    match args.first().map(String::as_str) {
        Some("make-model") => make_model(
            Path::new(need("--from")?),
            Path::new(need("--out")?),
            args.iter().any(|a| a == "--f16"),
        ),
        Some("run") => {
            let device = flag("--device").unwrap_or("cuda:0");
            let exact = flag("--f16-model");
            let passed = run(
                need("--model")?,
                exact,
                flag("--gpt-oss").map(Path::new),
                Path::new(need("--schema")?),
                device,
            )?;
            if !passed {
                bail!("a check failed (see the table)");
            }
            Ok(())
        }
        _ => bail!("{USAGE}"),
    }
}

/// The shape of the random model.
const WIDTH: usize = 64;
const HEADS: usize = 4;
const KV_HEADS: usize = 2;
const FFN: usize = 128;
const LAYERS: usize = 2;

/// splitmix64: reproducible weights with no dependency.
struct Rng(u64);

impl Rng {
    fn uniform(&mut self) -> f32 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        (z >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    }

    fn tensor(
        &mut self,
        shape: &[usize],
        scale: f32,
        offset: f32,
        ty: GgmlDType,
    ) -> Result<QTensor> {
        let n = shape.iter().product();
        let values: Vec<f32> = (0..n).map(|_| offset + scale * self.uniform()).collect();
        let t = Tensor::from_vec(values, shape, &Device::Cpu)?;
        Ok(QTensor::quantize(&t, ty)?)
    }
}

fn make_model(from: &Path, out: &Path, f16: bool) -> Result<()> {
    let mut file = std::fs::File::open(from).with_context(|| format!("{}", from.display()))?;
    let content = gguf_file::Content::read(&mut file)
        .with_context(|| format!("{}: not a GGUF file", from.display()))?;
    let vocab = match content.metadata.get("tokenizer.ggml.tokens") {
        Some(Value::Array(tokens)) => tokens.len(),
        _ => bail!("{}: no tokenizer.ggml.tokens", from.display()),
    };
    let mut metadata: Vec<(String, Value)> = content
        .metadata
        .iter()
        .filter(|(k, _)| k.starts_with("tokenizer."))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    metadata.sort_by(|a, b| a.0.cmp(&b.0));
    let u = |x: usize| Value::U32(x as u32);
    metadata.extend([
        ("general.architecture".into(), Value::String("llama".into())),
        (
            "general.name".into(),
            Value::String("corral gpu-check tiny llama (random weights)".into()),
        ),
        ("llama.block_count".into(), u(LAYERS)),
        ("llama.context_length".into(), u(2048)),
        ("llama.embedding_length".into(), u(WIDTH)),
        ("llama.feed_forward_length".into(), u(FFN)),
        ("llama.attention.head_count".into(), u(HEADS)),
        ("llama.attention.head_count_kv".into(), u(KV_HEADS)),
        ("llama.rope.dimension_count".into(), u(WIDTH / HEADS)),
        ("llama.rope.freq_base".into(), Value::F32(10_000.0)),
        (
            "llama.attention.layer_norm_rms_epsilon".into(),
            Value::F32(1e-5),
        ),
        ("llama.vocab_size".into(), u(vocab)),
    ]);
    let mut rng = Rng(7);
    let (q8, q41, f32) = if f16 {
        (GgmlDType::F16, GgmlDType::F16, GgmlDType::F32)
    } else {
        (GgmlDType::Q8_0, GgmlDType::Q4_1, GgmlDType::F32)
    };
    let kv = KV_HEADS * WIDTH / HEADS;
    let mut tensors: Vec<(String, QTensor)> = vec![
        (
            "token_embd.weight".into(),
            rng.tensor(&[vocab, WIDTH], 1.0, 0.0, q8)?,
        ),
        (
            "output_norm.weight".into(),
            rng.tensor(&[WIDTH], 0.1, 1.0, f32)?,
        ),
        (
            "output.weight".into(),
            rng.tensor(&[vocab, WIDTH], 0.5, 0.0, q41)?,
        ),
    ];
    for i in 0..LAYERS {
        let parts = [
            ("attn_q", vec![WIDTH, WIDTH], q8),
            ("attn_k", vec![kv, WIDTH], q8),
            ("attn_v", vec![kv, WIDTH], q8),
            ("attn_output", vec![WIDTH, WIDTH], q41),
            ("ffn_gate", vec![FFN, WIDTH], q41),
            ("ffn_up", vec![FFN, WIDTH], q8),
            ("ffn_down", vec![WIDTH, FFN], q41),
        ];
        for (name, shape, ty) in parts {
            tensors.push((
                format!("blk.{i}.{name}.weight"),
                rng.tensor(&shape, 0.25, 0.0, ty)?,
            ));
        }
        for name in ["attn_norm", "ffn_norm"] {
            tensors.push((
                format!("blk.{i}.{name}.weight"),
                rng.tensor(&[WIDTH], 0.1, 1.0, f32)?,
            ));
        }
    }
    let mut w = std::io::BufWriter::new(
        std::fs::File::create(out).with_context(|| format!("{}", out.display()))?,
    );
    let meta: Vec<(&str, &Value)> = metadata.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let tens: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, t)| (k.as_str(), t)).collect();
    gguf_file::write(&mut w, &meta, &tens)?;
    println!(
        "{}: {LAYERS} layers, width {WIDTH}, {HEADS} heads ({KV_HEADS} key-value), vocabulary {vocab}, random {} weights",
        out.display(),
        if f16 { "f16" } else { "Q8_0 and Q4_1" }
    );
    Ok(())
}

/// One line of the printed table.
struct Row {
    check: String,
    figure: String,
    bar: String,
    ok: bool,
}

/// How two logit vectors of one position differ.
struct Diff {
    positions: usize,
    max_abs: f32,
    max_rel: f32,
    max_nmse: f64,
    argmax_same: usize,
    /// The bar on `max_nmse`.
    bar: f64,
}

impl Diff {
    fn new(bar: f64) -> Diff {
        Diff {
            positions: 0,
            max_abs: 0.0,
            max_rel: 0.0,
            max_nmse: 0.0,
            argmax_same: 0,
            bar,
        }
    }

    fn add(&mut self, cpu: &[f32], dev: &[f32]) {
        let scale = cpu.iter().fold(0f32, |m, x| m.max(x.abs())).max(1e-6);
        let abs = cpu
            .iter()
            .zip(dev)
            .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        let (err, norm) = cpu.iter().zip(dev).fold((0f64, 0f64), |(e, n), (&a, &b)| {
            let (a, b) = (f64::from(a), f64::from(b));
            (e + (a - b) * (a - b), n + a * a)
        });
        self.max_nmse = self.max_nmse.max(err / norm.max(1e-30));
        self.positions += 1;
        self.max_abs = self.max_abs.max(abs);
        self.max_rel = self.max_rel.max(abs / scale);
        self.argmax_same += usize::from(argmax(cpu) == argmax(dev));
    }

    fn row(&self, check: &str) -> Row {
        Row {
            check: check.into(),
            figure: format!(
                "{} positions: NMSE at most {:.1e}, max abs diff {:.2e} ({:.1e} of the largest logit), argmax equal at {}",
                self.positions, self.max_nmse, self.max_abs, self.max_rel, self.argmax_same
            ),
            bar: if self.bar.is_finite() {
                format!("NMSE {:.0e}", self.bar)
            } else {
                "(reported: see the next row)".into()
            },
            ok: self.positions > 0 && self.max_nmse <= self.bar,
        }
    }
}

fn argmax(v: &[f32]) -> usize {
    v.iter()
        .enumerate()
        .fold(
            (0, f32::NEG_INFINITY),
            |b, (i, &x)| if x > b.1 { (i, x) } else { b },
        )
        .0
}

/// One `forward_batch` over two sequences.
fn batch2(
    lm: &mut dyn CausalLm,
    seqs: &mut [Sequence; 2],
    next: &[Vec<TokenId>],
    pos: &[usize; 2],
) -> Result<Vec<Box<dyn Logits>>> {
    let [s0, s1] = seqs;
    let mut items = [
        BatchItem {
            tokens: &next[0],
            pos: pos[0],
            sequence: s0,
        },
        BatchItem {
            tokens: &next[1],
            pos: pos[1],
            sequence: s1,
        },
    ];
    Ok(lm.forward_batch(&mut items)?)
}

fn host(l: Box<dyn Logits>) -> Result<Vec<f32>> {
    Ok(l.to_masked_vec(None)?)
}

/// The prompts the logits are compared on: a chat prompt, and the same with text after it
/// (longer than one prefill chunk of the tiny model).
struct Prompts {
    chat: Vec<TokenId>,
    filler: Vec<TokenId>,
    long: Vec<TokenId>,
}

/// Logits on the device against the CPU's for one model: every position one token at a
/// time, a prefill then decoding, and a batch of two sequences.
fn logit_rows(
    cpu: &mut Model,
    dev: &mut Model,
    p: &Prompts,
    bar: f64,
    what: &str,
) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    let mut d = Diff::new(bar);
    for (pos, &t) in p.long.iter().enumerate() {
        let a = host(cpu.lm().forward(&[t], pos)?)?;
        let b = host(dev.lm().forward(&[t], pos)?)?;
        d.add(&a, &b);
    }
    rows.push(d.row(&format!("{what}: logits, one token at a time")));

    let mut d = Diff::new(bar);
    d.add(
        &host(cpu.lm().forward(&p.long, 0)?)?,
        &host(dev.lm().forward(&p.long, 0)?)?,
    );
    for (i, &t) in p.filler.iter().take(8).enumerate() {
        let pos = p.long.len() + i;
        d.add(
            &host(cpu.lm().forward(&[t], pos)?)?,
            &host(dev.lm().forward(&[t], pos)?)?,
        );
    }
    rows.push(d.row(&format!("{what}: logits, prefill then decode")));

    // Two sequences of different lengths, prefilled and then decoded together.
    let mut d = Diff::new(bar);
    let mut cpu_seqs = [cpu.lm().new_sequence(), cpu.lm().new_sequence()];
    let mut dev_seqs = [dev.lm().new_sequence(), dev.lm().new_sequence()];
    let mut next = vec![p.long.clone(), p.chat.clone()];
    let mut pos = [0usize, 0];
    for _step in 0..6 {
        let a = batch2(cpu.lm(), &mut cpu_seqs, &next, &pos)?;
        let b = batch2(dev.lm(), &mut dev_seqs, &next, &pos)?;
        let mut chosen = Vec::new();
        for (a, b) in a.into_iter().zip(b) {
            let (a, b) = (host(a)?, host(b)?);
            d.add(&a, &b);
            chosen.push(TokenId(argmax(&a) as u32));
        }
        for i in 0..2 {
            pos[i] += next[i].len();
            next[i] = vec![chosen[i]];
        }
    }
    rows.push(d.row(&format!(
        "{what}: logits, batch of two (prefill, 5 decode steps)"
    )));
    Ok(rows)
}

/// Each quantized path's distance from the exact function, one token at a time: corral's
/// CPU kernel, candle's CPU kernel and the device, each against the CPU on dequantized
/// weights.
fn against_exact(
    model: &str,
    cpu: &mut Model,
    dev: &mut Model,
    tokens: &[TokenId],
    device: &str,
) -> Result<Row> {
    let load = |kernels: Kernels| -> Result<Llama> {
        let mut f = std::fs::File::open(model)?;
        let content = gguf_file::Content::read(&mut f)?;
        Ok(Llama::from_gguf_with(
            &content,
            &mut f,
            &Device::Cpu,
            kernels,
        )?)
    };
    let (mut exact, mut candle) = (load(Kernels::Dequantized)?, load(Kernels::Candle)?);
    let run = |l: &mut Llama, t: TokenId, pos: usize| -> Result<Vec<f32>> {
        let input = Tensor::new(&[t.0], &Device::Cpu)?.unsqueeze(0)?;
        Ok(l.forward(&input, pos)?.flatten_all()?.to_vec1::<f32>()?)
    };
    let (mut own, mut theirs, mut gpu) = (Diff::new(0.0), Diff::new(0.0), Diff::new(0.0));
    let mut references = Vec::with_capacity(tokens.len());
    for (pos, &t) in tokens.iter().enumerate() {
        let reference = run(&mut exact, t, pos)?;
        own.add(&reference, &host(cpu.lm().forward(&[t], pos)?)?);
        theirs.add(&reference, &run(&mut candle, t, pos)?);
        gpu.add(&reference, &host(dev.lm().forward(&[t], pos)?)?);
        references.push(reference);
    }
    // The same on the device through candle's fast quantized kernels (activations
    // rounded to 8 bits), which corral does not use: how far they are, for the record.
    #[cfg(feature = "cuda")]
    let dequantizing = {
        candle_core::quantized::cuda::set_force_dmmv(false);
        let mut d = Diff::new(0.0);
        for (pos, (&t, reference)) in tokens.iter().zip(&references).enumerate() {
            d.add(reference, &host(dev.lm().forward(&[t], pos)?)?);
        }
        candle_core::quantized::cuda::set_force_dmmv(true);
        format!(
            "; {device} through candle's fast quantized kernels (not used) {:.1e}",
            d.max_nmse
        )
    };
    #[cfg(not(feature = "cuda"))]
    let dequantizing = String::new();
    let bar = QUANTIZED_FACTOR * own.max_nmse.max(theirs.max_nmse);
    Ok(Row {
        check: "Q8_0/Q4_1: distance from the exact function (f32 weights), one token at a time"
            .into(),
        figure: format!(
            "{} positions, NMSE at most: corral's CPU kernel {:.1e}, candle's CPU kernel {:.1e}, {device} {:.1e}{dequantizing}",
            gpu.positions, own.max_nmse, theirs.max_nmse, gpu.max_nmse
        ),
        bar: format!("{device} at most {QUANTIZED_FACTOR}x the worse CPU kernel ({bar:.1e})"),
        ok: gpu.positions > 0 && gpu.max_nmse <= bar,
    })
}

fn load_both(model: &str, spec: DeviceSpec, device: &str) -> Result<(Model, Model)> {
    let t0 = Instant::now();
    let cpu = Model::load(model, DeviceSpec::Cpu)?;
    let dev = Model::load(model, spec).with_context(|| format!("loading on {device}"))?;
    println!("loaded {model} on cpu and {device} in {:.2?}", t0.elapsed());
    Ok((cpu, dev))
}

fn run(
    model: &str,
    f16_model: Option<&str>,
    gpt_oss: Option<&Path>,
    schema_path: &Path,
    device: &str,
) -> Result<bool> {
    let spec: DeviceSpec = device.parse().map_err(|e| anyhow::anyhow!("{e}"))?;
    let (mut cpu, mut dev) = load_both(model, spec, device)?;
    let schema: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(schema_path)
            .with_context(|| format!("{}", schema_path.display()))?,
    )?;
    let text = cpu.text().clone();
    let prompt = text.encode_prompt(&text.prompt_text(
        None,
        "Describe a person as JSON: name, age and whether they are a member.",
        false,
    )?)?;
    let filler = text.encode(&"The quick brown fox jumps over the lazy dog. ".repeat(8))?;
    let long = [prompt.clone(), filler.clone()].concat();
    let prompts = Prompts {
        chat: prompt.clone(),
        filler,
        long: long.clone(),
    };
    let mut rows = logit_rows(&mut cpu, &mut dev, &prompts, f64::INFINITY, "Q8_0/Q4_1")?;
    rows.push(against_exact(
        model,
        &mut cpu,
        &mut dev,
        &prompts.long,
        device,
    )?);
    if let Some(f16_model) = f16_model {
        let (mut cpu16, mut dev16) = load_both(f16_model, spec, device)?;
        rows.extend(logit_rows(
            &mut cpu16, &mut dev16, &prompts, EXACT_NMSE, "f16",
        )?);
    }

    if let Some(dir) = gpt_oss {
        rows.extend(gpt_oss_rows(dir, &spec.device()?, device)?);
    }

    // Constrained generation on the device, greedy and sampled, checked by a validator.
    let options = StructuredOptions::default();
    let constraint = schema_constraint(&dev, &schema, &options)?;
    let validator = jsonschema::validator_for(&schema).context("the check's schema")?;
    let space = dev.text().space().clone();
    let mut valid = 0;
    let runs = 6;
    let mut greedy_text = String::new();
    let mut greedy = Vec::new();
    let mut tokens_out = 0;
    let t0 = Instant::now();
    for seed in 0..runs {
        let opts = GenerateOptions {
            max_tokens: 200,
            sampling: SamplingOptions {
                temperature: if seed == 0 { 0.0 } else { 0.8 },
                seed,
                ..Default::default()
            },
            ..Default::default()
        };
        let out = generate(
            dev.lm(),
            &space,
            Some(&constraint),
            &prompt,
            &opts,
            &mut |_| {},
        )?;
        tokens_out += out.tokens.len();
        let ok = matches!(
            out.finish_reason,
            FinishReason::Stop | FinishReason::GrammarComplete
        ) && serde_json::from_str::<serde_json::Value>(&out.text)
            .is_ok_and(|v| validator.is_valid(&v));
        valid += usize::from(ok);
        if seed == 0 {
            greedy_text = out.text.clone();
            greedy = out.tokens.clone();
        }
        println!(
            "{device} seed {seed} ({:?}): {}",
            out.finish_reason, out.text
        );
    }
    let secs = t0.elapsed().as_secs_f64();
    rows.push(Row {
        check: format!("constrained generation on {device}, valid under the schema"),
        figure: format!(
            "{valid} of {runs} (1 greedy, {} sampled), {tokens_out} tokens in {secs:.2} s",
            runs - 1
        ),
        bar: format!("{runs} of {runs}"),
        ok: valid == runs as usize,
    });
    let cpu_constraint = schema_constraint(&cpu, &schema, &options)?;
    let opts = GenerateOptions {
        max_tokens: 200,
        sampling: SamplingOptions {
            temperature: 0.0,
            ..Default::default()
        },
        ..Default::default()
    };
    let cpu_greedy = generate(
        cpu.lm(),
        &space,
        Some(&cpu_constraint),
        &prompt,
        &opts,
        &mut |_| {},
    )?;
    rows.push(Row {
        check: "greedy output, device beside CPU".into(),
        figure: if cpu_greedy.text == greedy_text {
            "the same text".into()
        } else {
            format!("differs: cpu {:?}", cpu_greedy.text)
        },
        bar: "(reported, not a bar: near-ties may go either way)".into(),
        ok: true,
    });

    // Masks applied where the logits live, along the greedy output, against the host.
    let mut adapter = RobustConstrainedAdapter::new(constraint.clone());
    let mut mask = FixedBitSet::with_capacity(space.width());
    let (mut steps, mut equal) = (0, 0);
    let mut logits = dev.lm().forward(&prompt, 0)?;
    for (i, &t) in greedy.iter().enumerate() {
        if adapter.compute_mask(&mut mask).is_err() || adapter.step_with_token(t).is_err() {
            break;
        }
        let on_device = logits.to_masked_vec(Some(&mask))?;
        let mut on_host = logits.to_masked_vec(None)?;
        apply_mask_in_place(&mut on_host, &mask);
        steps += 1;
        equal += usize::from(
            on_device
                .iter()
                .zip(&on_host)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
        );
        logits = dev.lm().forward(&[t], prompt.len() + i)?;
    }
    rows.push(Row {
        check: "masks applied on the device, against the host".into(),
        figure: format!("{equal} of {steps} steps bit-identical"),
        bar: "all, and at least 5 steps".into(),
        ok: steps >= 5 && equal == steps,
    });

    // Decode speed of the tiny model (one sequence), device beside CPU.
    for (name, model) in [("cpu", &mut cpu), (device, &mut dev)] {
        let lm = model.lm();
        let _ = lm.forward(&prompt, 0)?;
        let t0 = Instant::now();
        let n = 64;
        for i in 0..n {
            let _ = host(lm.forward(&[long[i % long.len()]], prompt.len() + i)?)?;
        }
        rows.push(Row {
            check: format!("decode on {name}, tiny model, 1 sequence"),
            figure: format!("{:.0} tok/s", n as f64 / t0.elapsed().as_secs_f64()),
            bar: "(reported)".into(),
            ok: true,
        });
    }

    println!("\n| check | figure | bar | ok |\n|---|---|---|---|");
    for r in &rows {
        println!(
            "| {} | {} | {} | {} |",
            r.check,
            r.figure,
            r.bar,
            if r.ok { "yes" } else { "NO" }
        );
    }
    Ok(rows.iter().all(|r| r.ok))
}

/// Most a gpt-oss logit may differ from transformers' (f32 on both sides, summed in other
/// orders): the bar of `models/tests/gpt_oss_logits.rs`.
const GPT_OSS_TOLERANCE: f32 = 1e-4;

/// gpt-oss on the device: the fixture's network (`tests/data/gpt-oss`: 4 layers, sliding
/// window and full attention, sinks, YaRN, MXFP4 experts) from its GGUF, run by the device
/// network (`corral::models::gpt_oss::device`) against the CPU network, position by
/// position (prefill, then decoding token by token), and both against transformers'
/// logits.
fn gpt_oss_rows(dir: &Path, device: &Device, name: &str) -> Result<Vec<Row>> {
    use corral::models::gpt_oss::GptOss;
    use corral::models::gpt_oss::gguf::GgufFile;
    let path = dir.join("model.gguf");
    let mut f = std::fs::File::open(&path).with_context(|| format!("{}", path.display()))?;
    let header = GgufFile::read(&mut f).map_err(anyhow::Error::msg)?;
    let mut cpu = GptOss::from_gguf(&header, &mut f)?;
    let mut dev = cpu.to_device(device)?;
    let expected = candle_core::safetensors::load(dir.join("expected.safetensors"), &Device::Cpu)?;
    let (mut prefill, mut decode) = (Diff::new(EXACT_NMSE), Diff::new(EXACT_NMSE));
    let (mut worst_cpu, mut worst_dev) = (0f32, 0f32);
    let against = |got: &[f32], want: &[f32], worst: &mut f32| {
        let d = got
            .iter()
            .zip(want)
            .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        *worst = worst.max(d);
    };
    for p in ["a", "b"] {
        let tokens = expected[&format!("tokens_{p}")].to_vec1::<u32>()?;
        let want = expected[&format!("logits_{p}")].to_vec2::<f32>()?;
        let c = cpu.forward_all(&tokens, 0)?.to_vec2::<f32>()?;
        let d = dev.forward_all(&tokens, 0)?.to_vec2::<f32>()?;
        for ((c, d), w) in c.iter().zip(&d).zip(&want) {
            prefill.add(c, d);
            against(c, w, &mut worst_cpu);
            against(d, w, &mut worst_dev);
        }
        for (i, &t) in tokens.iter().enumerate() {
            let c = cpu.forward_all(&[t], i)?.to_vec2::<f32>()?;
            let d = dev.forward_all(&[t], i)?.to_vec2::<f32>()?;
            decode.add(&c[0], &d[0]);
            against(&d[0], &want[i], &mut worst_dev);
        }
    }
    Ok(vec![
        prefill.row(&format!(
            "gpt-oss: logits on {name} against the CPU, prefill"
        )),
        decode.row(&format!(
            "gpt-oss: logits on {name} against the CPU, one token at a time"
        )),
        Row {
            check: "gpt-oss: logits against transformers (f32, eager)".into(),
            figure: format!(
                "max abs diff: CPU network {worst_cpu:.2e}, {name} network {worst_dev:.2e}"
            ),
            bar: format!("{GPT_OSS_TOLERANCE:.0e}"),
            ok: worst_cpu <= GPT_OSS_TOLERANCE && worst_dev <= GPT_OSS_TOLERANCE,
        },
    ])
}
