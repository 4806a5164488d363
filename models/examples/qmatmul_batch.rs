//! How a quantized matmul's time grows with the rows of its input (decode steps of several
//! sequences batched): cargo run --release -p corral-models --example qmatmul_batch -- MODEL.gguf
use candle_core::quantized::{QMatMul, gguf_file::Content};
use candle_core::{Device, Module, Tensor};
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args()
        .nth(1)
        .ok_or("usage: qmatmul_batch MODEL.gguf")?;
    let mut f = std::fs::File::open(&path)?;
    let content = Content::read(&mut f)?;
    let dev = Device::Cpu;
    for name in [
        "blk.0.ffn_up.weight",
        "blk.0.attn_q.weight",
        "output.weight",
        "token_embd.weight",
    ] {
        let Ok(q) = content.tensor(&mut f, name, &dev) else {
            continue;
        };
        let (out, inp) = q.shape().dims2()?;
        let mm = QMatMul::from_qtensor(q)?;
        for rows in [1usize, 2, 4, 8] {
            let x = Tensor::randn(0f32, 1.0, (rows, inp), &dev)?;
            mm.forward(&x)?;
            let n = 50;
            let t = Instant::now();
            for _ in 0..n {
                mm.forward(&x)?;
            }
            let us = t.elapsed().as_secs_f64() * 1e6 / n as f64;
            println!(
                "{name} {out}x{inp}: {rows} rows {us:.0} us ({:.0} us per row)",
                us / rows as f64
            );
        }
    }
    Ok(())
}
