//! corral vs llguidance 1.9: masks cold and warm, compile times, on MaskBench too.
//!
//! ```text
//! cargo run --release -p corral-llguidance-compare -- [--reps N] [--tokenizers a,b,c] [--maskbench N|all] [--slowest N] [--no-docs] [--compile SCHEMA] [--profile-cold CASE]
//! ```
//!
//! For each tokenizer (default: the fetched Llama-3.1, Qwen3 and Gemma-3 (262k) ones) and
//! each case (json.gbnf on a short and a long document, a ~25-property JSON Schema on a
//! short and a long one):
//!
//! - **cold**: `--reps` times, a fresh compile (no DFA cache) and a fresh constraint (an
//!   empty token-set cache), then the first pass over the document's canonical
//!   tokenization, one `compute_mask` timed per token; percentiles pooled over every token
//!   of every rep. The compile time includes the constraint's setup.
//! - **warm**: the last cold constraint again, `--reps` more passes (its caches filled).
//! - **llguidance**: `--reps` passes, each with a fresh parser from `create_parser` (its
//!   compile time), one `compute_mask` timed per token. It keeps no caches across parsers,
//!   so its passes are all alike.
//!
//! `--maskbench` compiles the JSONSchemaBench schemas of ../shared/conformance with both
//! (corral: no DFA cache, plus the constraint's setup; llguidance: `create_parser`) and
//! reports percentiles over the schemas both compile.

/// The allocator of corral's binaries, for both engines here.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use anyhow::{Result, anyhow};
use corral_engine::RobustConstrainedAdapter;
use corral_llguidance_compare::{Engines, Source, asset_tokenizers, root, stats};
use std::path::Path;
use std::time::Instant;

struct Case {
    name: &'static str,
    source: Source,
    doc: String,
}

fn cases() -> Result<Vec<Case>> {
    let read = |p: &str| -> Result<String> {
        Ok(std::fs::read_to_string(root().join(p))?
            .trim_end()
            .to_string())
    };
    let json = Source::json()?;
    let order = Source::schema(&root().join("benches/data/order.schema.json"))?;
    Ok(vec![
        Case {
            name: "json.gbnf, short (person.json)",
            source: json.clone(),
            doc: read("examples/data/person.json")?,
        },
        Case {
            name: "json.gbnf, long (pretty.json, 3.7 KB)",
            source: json,
            doc: read("benches/data/pretty.json")?,
        },
        Case {
            name: "order schema, short (compact order)",
            source: order.clone(),
            doc: read("benches/data/order-short.json")?,
        },
        Case {
            name: "order schema, long (pretty order.json)",
            source: order,
            doc: read("benches/data/order.json")?,
        },
    ])
}

/// Times one pass of corral over `tokens`: microseconds per mask.
fn corral_pass(a: &mut RobustConstrainedAdapter, tokens: &[corral_trie::TokenId]) -> Vec<f64> {
    let mut mask = a.empty_mask();
    let mut times = Vec::with_capacity(tokens.len());
    for &t in tokens {
        let s = Instant::now();
        a.compute_mask(&mut mask).expect("corral mask");
        times.push(s.elapsed().as_secs_f64() * 1e6);
        assert!(mask.contains(t.index()), "corral refused token {t}");
        a.step_with_token(t).expect("corral step");
    }
    times
}

fn llg_pass(m: &mut llguidance::Matcher, tokens: &[corral_trie::TokenId]) -> Result<Vec<f64>> {
    let mut times = Vec::with_capacity(tokens.len());
    for &t in tokens {
        let s = Instant::now();
        let mask = m.compute_mask().map_err(|e| anyhow!("{e}"))?;
        times.push(s.elapsed().as_secs_f64() * 1e6);
        assert!(mask.is_allowed(t.get()), "llguidance refused token {t}");
        m.consume_token(t.get()).map_err(|e| anyhow!("{e}"))?;
    }
    Ok(times)
}

fn run_case(e: &Engines, c: &Case, reps: usize) -> Result<()> {
    let tokens = e.tokens(&c.doc)?;
    let (mut cold, mut warm, mut llg) = (Vec::new(), Vec::new(), Vec::new());
    let (mut cc, mut lc) = (Vec::new(), Vec::new());
    let mut last = None;
    for _ in 0..reps {
        let t = Instant::now();
        let constraint = e.cold_constraint(&c.source)?;
        cc.push(t.elapsed().as_secs_f64() * 1e3);
        cold.extend(corral_pass(
            &mut RobustConstrainedAdapter::new(constraint.clone()),
            &tokens,
        ));
        last = Some(constraint);
        let t = Instant::now();
        let mut m = e.matcher(&c.source)?;
        lc.push(t.elapsed().as_secs_f64() * 1e3);
        llg.extend(llg_pass(&mut m, &tokens)?);
    }
    let constraint = last.expect("at least one rep");
    for _ in 0..reps {
        warm.extend(corral_pass(
            &mut RobustConstrainedAdapter::new(constraint.clone()),
            &tokens,
        ));
    }
    let (cm, c50, c99, cmax) = stats(&cold);
    let (wm, _, w99, _) = stats(&warm);
    let (lm, l50, l99, lmax) = stats(&llg);
    let (_, ccm, _, _) = stats(&cc);
    let (_, lcm, _, _) = stats(&lc);
    println!(
        "| {} | {} | {} | {cm:.1} / {c50:.1} / {c99:.0} / {cmax:.0} | {wm:.1} / {w99:.0} | {lm:.1} / {l50:.1} / {l99:.0} / {lmax:.0} | {:.2} | {:.2} | {ccm:.2} / {lcm:.2} |",
        e.name,
        c.name,
        tokens.len(),
        cm / lm,
        wm / lm,
    );
    Ok(())
}

/// corral alone, cold, on case `which` (for profiling): `reps` fresh compiles and first
/// passes, then the positions whose first masks cost the most (mean over the reps).
fn profile_cold(e: &Engines, c: &Case, reps: usize) -> Result<()> {
    let tokens = e.tokens(&c.doc)?;
    let mut at = vec![0.0; tokens.len()];
    for _ in 0..reps {
        let constraint = e.cold_constraint(&c.source)?;
        let times = corral_pass(&mut RobustConstrainedAdapter::new(constraint), &tokens);
        for (a, t) in at.iter_mut().zip(times) {
            *a += t / reps as f64;
        }
    }
    let total: f64 = at.iter().sum();
    println!(
        "{} on {}: {} tokens, cold pass {:.0} us in all ({:.1} us mean); costliest positions:",
        c.name,
        e.name,
        tokens.len(),
        total,
        total / tokens.len() as f64
    );
    let mut order: Vec<usize> = (0..tokens.len()).collect();
    order.sort_by(|&a, &b| at[b].total_cmp(&at[a]));
    for &i in order.iter().take(12) {
        let before: Vec<u8> = tokens[..i]
            .iter()
            .flat_map(|t| e.space.vocab().token_bytes(*t).unwrap_or_default().to_vec())
            .collect();
        let tail = String::from_utf8_lossy(&before[before.len().saturating_sub(40)..]);
        println!("  {:>3} {:>7.0} us  after ...{tail:?}", i, at[i]);
    }
    Ok(())
}

fn maskbench(e: &Engines, limit: usize, slowest: usize) -> Result<()> {
    let dir = corral_llguidance_compare::conformance().join("jsonschemabench");
    let mut files = Vec::new();
    for coll in std::fs::read_dir(&dir)? {
        let coll = coll?.path();
        let name = coll
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .to_string();
        if !coll.is_dir() || name.starts_with('_') {
            continue;
        }
        for f in std::fs::read_dir(&coll)? {
            files.push(f?.path());
        }
    }
    files.sort();
    files.truncate(limit);
    let (mut corral, mut llg) = (Vec::new(), Vec::new());
    let mut refused = (0, 0);
    let mut slow = Vec::new();
    for path in &files {
        let Ok(source) = Source::schema(path) else {
            continue;
        };
        let t = Instant::now();
        let c = e.cold_constraint(&source);
        let ct = t.elapsed().as_secs_f64() * 1e3;
        let t = Instant::now();
        let l = e.matcher(&source);
        let lt = t.elapsed().as_secs_f64() * 1e3;
        match (c.is_ok(), l.is_ok()) {
            (true, true) => {
                corral.push(ct);
                llg.push(lt);
                slow.push((ct, lt, path.display().to_string()));
            }
            (false, _) => refused.0 += 1,
            (_, false) => refused.1 += 1,
        }
    }
    slow.sort_by(|a: &(f64, f64, String), b| b.0.total_cmp(&a.0));
    if slowest > 0 {
        eprintln!("slowest corral compiles: corral ms, llguidance ms, schema");
        for s in slow.iter().take(slowest) {
            eprintln!("{:8.2} {:8.2} {}", s.0, s.1, s.2);
        }
    }
    let (cm, c50, c99, cmax) = stats(&corral);
    let (lm, l50, l99, lmax) = stats(&llg);
    let p90 = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        v.get((v.len() as f64 * 0.9) as usize)
            .copied()
            .unwrap_or(0.0)
    };
    println!(
        "\nMaskBench compile + setup, {} tokenizer, {} schemas both compile (of {}; refused: corral {}, llguidance {}), ms:",
        e.name,
        corral.len(),
        files.len(),
        refused.0,
        refused.1
    );
    println!("| engine | mean | p50 | p90 | p99 | max |\n|---|---|---|---|---|---|");
    println!(
        "| corral (cold: no DFA cache, fresh token-set cache) | {cm:.2} | {c50:.2} | {:.2} | {c99:.2} | {cmax:.1} |",
        p90(&corral)
    );
    println!(
        "| llguidance create_parser | {lm:.2} | {l50:.2} | {:.2} | {l99:.2} | {lmax:.1} |",
        p90(&llg)
    );
    println!(
        "| ratio | {:.2} | {:.2} | | {:.2} | |",
        cm / lm,
        c50 / l50,
        c99 / l99
    );
    Ok(())
}

/// `--compile FILE`: a cold compile plus constraint setup of one schema, `--reps` times, beside
/// llguidance's `create_parser` on the first tokenizer (to profile).
fn compile_only(path: &Path, reps: usize, tokenizer: &str) -> Result<()> {
    let source = Source::schema(path)?;
    let (name, file) = asset_tokenizers(&[tokenizer])
        .pop()
        .ok_or_else(|| anyhow!("tokenizer {tokenizer} is not fetched (scripts/fetch-assets)"))?;
    let e = Engines::load(&name, &file)?;
    let (mut corral, mut llg) = (Vec::new(), Vec::new());
    for _ in 0..reps {
        let t = Instant::now();
        e.cold_constraint(&source)?;
        corral.push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        e.matcher(&source)?;
        llg.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let (cm, c50, _, cmax) = stats(&corral);
    let (lm, l50, _, lmax) = stats(&llg);
    println!(
        "{} on {name}: compile + setup corral mean {cm:.2} ms, p50 {c50:.2}, max {cmax:.2}; llguidance mean {lm:.2}, p50 {l50:.2}, max {lmax:.2}",
        path.display()
    );
    Ok(())
}

fn main() -> Result<()> {
    let mut reps = 5usize;
    let mut names: Vec<String> = ["llama3_1", "qwen3", "gemma3"].map(String::from).to_vec();
    let mut bench: Option<usize> = None;
    let mut docs = true;
    let mut slowest = 0usize;
    let mut profile: Option<usize> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--reps" => reps = args.next().and_then(|r| r.parse().ok()).unwrap_or(reps),
            "--tokenizers" => {
                names = args
                    .next()
                    .unwrap_or_default()
                    .split(',')
                    .map(String::from)
                    .collect();
            }
            "--maskbench" => {
                bench = Some(match args.next().as_deref() {
                    Some("all") | None => usize::MAX,
                    Some(n) => n.parse()?,
                })
            }
            "--no-docs" => docs = false,
            "--profile-cold" => profile = args.next().and_then(|r| r.parse().ok()),
            "--slowest" => slowest = args.next().and_then(|r| r.parse().ok()).unwrap_or(20),
            "--compile" => {
                let path = args
                    .next()
                    .ok_or_else(|| anyhow!("--compile takes a schema file"))?;
                return compile_only(Path::new(&path), reps, &names[0]);
            }
            other => return Err(anyhow!("unknown argument {other}")),
        }
    }
    let cases = cases()?;
    println!(
        "| tokenizer | case | tokens | corral cold mean / p50 / p99 / max us | corral warm mean / p99 us | llguidance mean / p50 / p99 / max us | cold / llg | warm / llg | compile+setup ms corral / llg |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    let mut loaded = Vec::new();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    for (name, path) in asset_tokenizers(&names) {
        let e = Engines::load(&name, &path)?;
        eprintln!(
            "{name}: {} ids; one-time setup corral {:.2} s, llguidance {:.2} s",
            e.space.vocab().len(),
            e.setup.0,
            e.setup.1
        );
        if let Some(i) = profile {
            let c = cases.get(i).ok_or_else(|| {
                anyhow!("--profile-cold takes a case number below {}", cases.len())
            })?;
            profile_cold(&e, c, reps)?;
            continue;
        }
        if docs {
            for c in &cases {
                run_case(&e, c, reps)?;
            }
        }
        loaded.push(e);
    }
    if let (Some(n), Some(e)) = (bench, loaded.first()) {
        maskbench(e, n, slowest)?;
    }
    Ok(())
}
