//! Every weight type the tiled kernel reads, on a 1B-class model's shapes: candle's
//! quantized matmul, corral's AVX2 kernel (Q4_1, Q8_0) and the tiled kernel
//! (`corral_models::quant::Packed`), microseconds per call by rows of input. The weights
//! are random values quantized by candle.
//! cargo run --release -p corral-models --example qmatmul_types [-- ROWS...]
use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{Device, Module, Tensor};
use corral_models::quant::{Packed, TILED_TYPES, WeightType, matmul, tiled_kernel_is_fast};
use std::time::Instant;

/// Mean microseconds of `f` over enough calls to take about 0.2 s.
fn time(mut f: impl FnMut()) -> f64 {
    f();
    let t = Instant::now();
    let mut n = 0;
    while t.elapsed().as_secs_f64() < 0.2 {
        f();
        n += 1;
    }
    t.elapsed().as_secs_f64() * 1e6 / n as f64
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let rows: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse())
        .collect::<Result<_, _>>()?;
    let rows = if rows.is_empty() { vec![1, 4, 8] } else { rows };
    let dev = Device::Cpu;
    println!("tiled kernel with VNNI: {}", tiled_kernel_is_fast());
    println!("| shape | type | rows | candle us | corral AVX2 us | tiled us | candle / tiled |");
    println!("|---|---|---|---|---|---|---|");
    for (out, inp) in [(2048usize, 2048usize), (8192, 2048), (2048, 8192)] {
        let w = Tensor::randn(0f32, 0.02, (out, inp), &dev)?;
        for dtype in TILED_TYPES {
            let q = QTensor::quantize(&w, dtype)?;
            let bytes = q.data()?.into_owned();
            let packed = Packed::new(dtype, &bytes, out, inp)?.ok_or("unread type")?;
            let mm = QMatMul::from_arc(std::sync::Arc::new(q))?;
            let own = match dtype {
                GgmlDType::Q4_1 => Some(WeightType::Q4_1),
                GgmlDType::Q8_0 => Some(WeightType::Q8_0),
                _ => None,
            };
            for &n in &rows {
                let x = Tensor::randn(0f32, 1.0, (n, inp), &dev)?;
                let xs = x.flatten_all()?.to_vec1::<f32>()?;
                let mut dst = vec![0f32; n * out];
                let candle = time(|| {
                    mm.forward(&x).unwrap();
                });
                let avx2 =
                    own.map(|ty| time(|| matmul(ty, &bytes, out, inp, &xs, &mut dst).unwrap()));
                let tiled = time(|| packed.matmul(&xs, &mut dst).unwrap());
                println!(
                    "| {out}x{inp} | {dtype:?} | {n} | {candle:.0} | {} | {tiled:.0} | {:.2} |",
                    avx2.map_or("-".into(), |a| format!("{a:.0}")),
                    candle / tiled
                );
            }
        }
    }
    Ok(())
}
