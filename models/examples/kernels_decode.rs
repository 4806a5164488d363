//! Decode speed of a GGUF llama under each of corral's kernel choices, in one process,
//! rounds interleaved so that the VM's drift falls on all alike: one sequence greedy, and
//! `B` sequences stepped as one batch (`Llama::forward_batch`).
//! cargo run --release -p corral-models --example kernels_decode -- MODEL.gguf [STEPS] [B] [ROUNDS]
use candle_core::quantized::gguf_file::Content;
use candle_core::{Device, Tensor};
use corral_models::llama::{Kernels, Llama};
use std::time::Instant;

fn argmax(v: &[f32]) -> u32 {
    let mut best = 0;
    for (i, x) in v.iter().enumerate() {
        if *x > v[best] {
            best = i;
        }
    }
    best as u32
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // SAFETY: first thing in main, before any thread starts.
    unsafe { corral_models::pin_thread_count() };
    let args: Vec<String> = std::env::args().collect();
    let path = args
        .get(1)
        .ok_or("usage: kernels_decode MODEL.gguf [STEPS] [B] [ROUNDS]")?;
    let arg = |i: usize, d: usize| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(d);
    let (steps, batch, rounds) = (arg(2, 64), arg(3, 8), arg(4, 3));
    let dev = Device::Cpu;
    let mut f = std::fs::File::open(path)?;
    let content = Content::read(&mut f)?;
    let kinds = [Kernels::Own, Kernels::Untiled, Kernels::Candle];
    let mut nets = Vec::new();
    for k in kinds {
        nets.push(Llama::from_gguf_with(&content, &mut f, &dev, k)?);
    }
    let prompt: Vec<u32> = (1..15).collect();
    let mut rates = vec![(Vec::new(), Vec::new()); kinds.len()];
    for _ in 0..rounds {
        for (k, net) in nets.iter_mut().enumerate() {
            // One sequence.
            net.clear_kv_cache();
            let input = Tensor::new(prompt.as_slice(), &dev)?.unsqueeze(0)?;
            let mut logits = net.forward(&input, 0)?;
            let t = Instant::now();
            for pos in prompt.len()..prompt.len() + steps {
                let next = argmax(&logits.flatten_all()?.to_vec1::<f32>()?);
                logits = net.forward(&Tensor::new(&[next], &dev)?.unsqueeze(0)?, pos)?;
            }
            rates[k].0.push(steps as f64 / t.elapsed().as_secs_f64());
            // `batch` sequences, one step each per pass.
            let mut seqs: Vec<Llama> = (0..batch).map(|_| net.clone()).collect();
            for s in &mut seqs {
                s.clear_kv_cache();
            }
            let mut last: Vec<u32> = (0..batch as u32).map(|i| 100 + i).collect();
            let t = Instant::now();
            for pos in 0..steps {
                let tokens: Vec<[u32; 1]> = last.iter().map(|&t| [t]).collect();
                let tokens: Vec<&[u32]> = tokens.iter().map(|t| t.as_slice()).collect();
                let mut refs: Vec<&mut Llama> = seqs.iter_mut().collect();
                let out = Llama::forward_batch(&mut refs, &tokens, &vec![pos; batch])?;
                let rows = out.to_vec2::<f32>()?;
                last = rows.iter().map(|r| argmax(r)).collect();
            }
            rates[k]
                .1
                .push((steps * batch) as f64 / t.elapsed().as_secs_f64());
        }
    }
    println!(
        "| kernels | 1 sequence, tok/s (rounds) | {batch} sequences batched, aggregate tok/s (rounds) |"
    );
    println!("|---|---|---|");
    let show = |v: &[f64]| {
        v.iter()
            .map(|r| format!("{r:.1}"))
            .collect::<Vec<_>>()
            .join(" / ")
    };
    for (k, (one, many)) in kinds.iter().zip(&rates) {
        println!("| {k:?} | {} | {} |", show(one), show(many));
    }
    Ok(())
}
