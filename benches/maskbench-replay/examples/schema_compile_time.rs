//! Cold compiles alone, corral beside llguidance, on the schemas a replay found slowest to
//! compile:
//!
//! ```text
//! cargo run --release -p corral-maskbench-replay --example schema_compile_time -- REPLAY.json [N] [REPS]
//! ```
//!
//! `REPLAY.json` is a replay's per-schema output (`--json`); the `N` schemas (default 150)
//! with the longest corral compile there are compiled `REPS` times each (default 5), the two
//! engines alternating, as the replay compiles them (corral: no DFA cache, a fresh token-set
//! cache; llguidance: a fresh parser). Per schema the median of each engine counts; a schema
//! either engine refuses is left out and counted. It prints the sums, their ratio, the
//! per-schema ratio at p50 and p90, and the eight worst.

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use anyhow::{Context, Result, anyhow};
use corral_llguidance_compare::{Engines, Source, asset_tokenizers};
use corral_maskbench_replay::bench_dir;
use std::time::Instant;

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let replay = args
        .next()
        .ok_or_else(|| anyhow!("usage: schema_compile_time REPLAY.json [N] [REPS]"))?;
    let n: usize = args.next().map_or(Ok(150), |s| s.parse())?;
    let reps: usize = args.next().map_or(Ok(5), |s| s.parse())?.max(1);
    let text = std::fs::read_to_string(&replay).with_context(|| replay.clone())?;
    let rows: Vec<serde_json::Value> = serde_json::from_str(&text)?;
    let mut slowest: Vec<(f64, String)> = rows
        .iter()
        .filter_map(|r| {
            let docs = r.pointer("/timing/docs")?.as_array()?;
            let ms = docs
                .iter()
                .filter_map(|d| d["corral_compile_ms"].as_f64())
                .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))))?;
            Some((ms, r["schema"].as_str()?.to_string()))
        })
        .collect();
    slowest.sort_by(|a, b| b.0.total_cmp(&a.0));
    slowest.truncate(n);
    let (name, file) = asset_tokenizers(&["llama3_1"])
        .into_iter()
        .next()
        .ok_or_else(|| anyhow!("the Llama-3.1 tokenizer is missing: run scripts/fetch-assets"))?;
    let e = Engines::load(&name, &file)?;
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (mut total_c, mut total_l) = (0.0, 0.0);
    let mut ratios = Vec::new();
    let mut refused = 0;
    'schemas: for (_, schema) in &slowest {
        let src = Source::schema(&bench_dir().join(schema))?;
        let (mut cs, mut ls) = (Vec::new(), Vec::new());
        for _ in 0..reps {
            let t = Instant::now();
            let c = e.cold_constraint(&src);
            cs.push(t.elapsed().as_secs_f64() * 1e3);
            let corral_ok = c.is_ok();
            drop(c);
            let t = Instant::now();
            let m = e.matcher(&src);
            ls.push(t.elapsed().as_secs_f64() * 1e3);
            let llg_ok = m.is_ok();
            drop(m);
            if !corral_ok || !llg_ok {
                refused += 1;
                continue 'schemas;
            }
        }
        let (c, l) = (median(cs), median(ls));
        total_c += c;
        total_l += l;
        ratios.push((c / l, schema.as_str(), c, l));
    }
    ratios.sort_by(|a, b| a.0.total_cmp(&b.0));
    let k = ratios.len();
    if k == 0 {
        return Err(anyhow!("no timed schema in {replay}"));
    }
    println!(
        "{k} schemas ({refused} refused by an engine, left out), median of {reps}: corral \
         {total_c:.1} ms, llguidance {total_l:.1} ms, ratio {:.3}x; per schema p50 {:.3}x, \
         p90 {:.3}x",
        total_c / total_l,
        ratios[k / 2].0,
        ratios[(k - 1) * 9 / 10].0
    );
    for (r, schema, c, l) in ratios.iter().rev().take(8) {
        println!("{r:.2}x {schema}: corral {c:.2} ms, llguidance {l:.2} ms");
    }
    Ok(())
}
