//! How a quantized matmul's time grows with the rows of its input (decode steps of several
//! sequences batched), candle's kernel beside corral's own (`corral_models::quant`):
//! cargo run --release -p corral-models --example qmatmul_batch -- MODEL.gguf
use candle_core::quantized::{GgmlDType, QMatMul, gguf_file::Content};
use candle_core::{Device, Module, Tensor};
use corral_models::quant::{Packed, WeightType, matmul};
use std::time::Instant;

/// Mean microseconds of `f` over enough calls to take about 0.3 s.
fn time(mut f: impl FnMut()) -> f64 {
    f();
    let t = Instant::now();
    let mut n = 0;
    while t.elapsed().as_secs_f64() < 0.3 {
        f();
        n += 1;
    }
    t.elapsed().as_secs_f64() * 1e6 / n as f64
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args()
        .nth(1)
        .ok_or("usage: qmatmul_batch MODEL.gguf")?;
    let mut f = std::fs::File::open(&path)?;
    let content = Content::read(&mut f)?;
    let dev = Device::Cpu;
    println!(
        "| weight | rows | candle us | dequantized f32 us | corral us | candle / corral | tiled us |"
    );
    println!("|---|---|---|---|---|---|---|");
    for name in [
        "blk.0.ffn_up.weight",
        "blk.0.attn_q.weight",
        "blk.0.attn_k.weight",
        "output.weight",
        "token_embd.weight",
    ] {
        let Ok(q) = content.tensor(&mut f, name, &dev) else {
            continue;
        };
        let (out, inp) = q.shape().dims2()?;
        let ty = match q.dtype() {
            GgmlDType::Q4_1 => Some(WeightType::Q4_1),
            GgmlDType::Q8_0 => Some(WeightType::Q8_0),
            _ => None,
        };
        let bytes = q.data()?.into_owned();
        let dtype = q.dtype();
        let packed = Packed::new(dtype, &bytes, out, inp)?;
        let qt = std::sync::Arc::new(q);
        let mm = QMatMul::from_arc(qt.clone())?;
        for rows in [1usize, 2, 4, 8, 16, 24, 32, 48, 64] {
            let x = Tensor::randn(0f32, 1.0, (rows, inp), &dev)?;
            let xs = x.flatten_all()?.to_vec1::<f32>()?;
            let candle = time(|| {
                mm.forward(&x).unwrap();
            });
            // What a prompt chunk does (models/src/llama.rs): dequantize, then f32 multiply.
            let dequantized = time(|| {
                QMatMul::Tensor(qt.dequantize(&dev).unwrap())
                    .forward(&x)
                    .unwrap();
            });
            let corral = ty.map(|ty| {
                let mut dst = vec![0f32; rows * out];
                time(|| matmul(ty, &bytes, out, inp, &xs, &mut dst).unwrap())
            });
            let tiled = packed.as_ref().map_or("-".to_string(), |p| {
                let mut dst = vec![0f32; rows * out];
                format!("{:.0}", time(|| p.matmul(&xs, &mut dst).unwrap()))
            });
            match corral {
                Some(c) => println!(
                    "| `{name}` {out}x{inp} {dtype:?} | {rows} | {candle:.0} | {dequantized:.0} | {c:.0} | {:.1} | {tiled} |",
                    candle / c
                ),
                None => println!(
                    "| `{name}` {out}x{inp} {dtype:?} | {rows} | {candle:.0} | {dequantized:.0} | - | - | {tiled} |"
                ),
            }
        }
    }
    Ok(())
}
