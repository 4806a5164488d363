//! MaskBench replayed beside llguidance and against brute force.
//!
//! ```text
//! cargo run --release -p corral-maskbench-replay -- [--tokenizer llama3_1] [--sample N] [--seed S]
//!     [--schema Collection/file.json] [--instances N] [--brute N] [--no-timing] [--warm N]
//!     [--json FILE] [--slowest N] [--reps N] [--no-shared-lexemes]
//! ```
//!
//! Cold means a schema compiled with no DFA cache, on a fresh token-set cache. That cache
//! reads, where it holds nothing, the token sets of the lexemes every schema compiled with
//! the default options shares (brackets and separators with their whitespace), made once
//! for the tokenizer before any schema and timed as its setup;
//! `--no-shared-lexemes` leaves them out.
//!
//! Timing runs first, on one thread, schema after schema: per document a cold compile and
//! first pass in each engine, then `--warm` corral passes (all of it `--reps` times). The
//! brute-force check runs after,
//! in parallel across schemas, on the first `--brute` instances of each (default 1), in the
//! forms `--brute-forms` names: `compact`, `pretty` or `both` (the default).
//! The summary goes to standard output, per-schema results to `--json` (default
//! `target/maskbench-replay-TOKENIZER.json`).

/// The allocator of corral's binaries, for both engines here.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use anyhow::{Result, anyhow};
use corral_llguidance_compare::{Engines, asset_tokenizers, root};
use corral_maskbench_replay::{
    BruteCheck, Entry, Form, SchemaTiming, bench_dir, brute_all, corpus, documents, sample,
    time_schema,
};
use serde::Serialize;
use std::time::Instant;

const USAGE: &str = "usage: corral-maskbench-replay [--tokenizer llama3_1|qwen3|gemma3] \
[--sample N] [--seed S] [--schema Collection/file.json] [--instances N] [--brute N] \
[--brute-forms compact|pretty|both] [--no-timing] [--warm N] [--json FILE] [--slowest N] [--reps N] \
[--no-shared-lexemes]";

struct Args {
    tokenizer: String,
    sample: Option<usize>,
    seed: u64,
    schema: Option<String>,
    instances: usize,
    brute: usize,
    brute_forms: Vec<Form>,
    timing: bool,
    warm: usize,
    json: Option<String>,
    slowest: usize,
    reps: usize,
    shared_lexemes: bool,
}

fn args() -> Result<Args> {
    let mut a = Args {
        tokenizer: "llama3_1".into(),
        sample: None,
        seed: 1,
        schema: None,
        instances: usize::MAX,
        brute: 1,
        brute_forms: vec![Form::Compact, Form::Pretty],
        timing: true,
        warm: 1,
        json: None,
        slowest: 20,
        reps: 1,
        shared_lexemes: true,
    };
    let mut it = std::env::args().skip(1);
    let num = |v: Option<String>, flag: &str| -> Result<usize> {
        v.and_then(|v| v.parse().ok())
            .ok_or_else(|| anyhow!("{flag} takes a number"))
    };
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--tokenizer" => a.tokenizer = it.next().ok_or_else(|| anyhow!("--tokenizer NAME"))?,
            "--sample" => a.sample = Some(num(it.next(), "--sample")?),
            "--seed" => a.seed = num(it.next(), "--seed")? as u64,
            "--schema" => a.schema = it.next(),
            "--instances" => a.instances = num(it.next(), "--instances")?,
            "--brute" => a.brute = num(it.next(), "--brute")?,
            "--brute-forms" => {
                a.brute_forms = match it.next().as_deref() {
                    Some("compact") => vec![Form::Compact],
                    Some("pretty") => vec![Form::Pretty],
                    Some("both") => vec![Form::Compact, Form::Pretty],
                    _ => return Err(anyhow!("--brute-forms compact|pretty|both")),
                }
            }
            "--no-timing" => a.timing = false,
            "--warm" => a.warm = num(it.next(), "--warm")?,
            "--json" => a.json = it.next(),
            "--slowest" => a.slowest = num(it.next(), "--slowest")?,
            "--reps" => a.reps = num(it.next(), "--reps")?.max(1),
            "--no-shared-lexemes" => a.shared_lexemes = false,
            "--help" | "-h" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => return Err(anyhow!("unknown argument {other}\n{USAGE}")),
        }
    }
    Ok(a)
}

/// One schema's line of the JSON output.
#[derive(Serialize)]
struct SchemaReport<'a> {
    schema: &'a str,
    instances: usize,
    /// Per-schema first-pass ratio (corral cold / llguidance), over the documents both
    /// engines took whole.
    cold_ratio: Option<f64>,
    timing: Option<&'a SchemaTiming>,
    brute: Option<&'a BruteCheck>,
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn ratio_of(t: &SchemaTiming) -> Option<f64> {
    let (c, l): (f64, f64) = t
        .docs
        .iter()
        .filter(|d| d.llg_us > 0.0)
        .fold((0.0, 0.0), |(c, l), d| (c + d.cold_us, l + d.llg_us));
    (l > 0.0).then(|| c / l)
}

fn report_timing(entries: &[Entry], timings: &[SchemaTiming], slowest: usize) {
    let docs: Vec<_> = timings.iter().flat_map(|t| &t.docs).collect();
    let both = |d: &&&corral_maskbench_replay::DocTiming| d.llg_us > 0.0;
    let mut cold: Vec<f64> = docs
        .iter()
        .filter(both)
        .flat_map(|d| d.cold.clone())
        .collect();
    let mut llg: Vec<f64> = docs
        .iter()
        .filter(both)
        .flat_map(|d| d.llg.clone())
        .collect();
    let mut warm: Vec<f64> = docs
        .iter()
        .filter(both)
        .flat_map(|d| d.warm.clone())
        .collect();
    let sum = |v: &[f64]| v.iter().sum::<f64>();
    let mean = |v: &[f64]| sum(v) / v.len().max(1) as f64;
    let (cm, lm, wm) = (mean(&cold), mean(&llg), mean(&warm));
    let mut ratios: Vec<(f64, &str)> = timings
        .iter()
        .zip(entries)
        .filter_map(|(t, e)| ratio_of(t).map(|r| (r, e.name.as_str())))
        .collect();
    let mut rs: Vec<f64> = ratios.iter().map(|r| r.0).collect();
    let compiled = |f: fn(&SchemaTiming) -> bool| timings.iter().filter(|t| f(t)).count();
    let corral_ok = compiled(|t| t.corral_error.is_none());
    let llg_ok = compiled(|t| t.llg_error.is_none());
    let refused =
        |f: fn(&corral_maskbench_replay::DocTiming) -> bool| docs.iter().filter(|d| f(d)).count();
    println!(
        "\n{} schemas; compiled by corral {corral_ok}, by llguidance {llg_ok}; {} documents replayed ({} compact, {} pretty), {} timed in both ({} masks)",
        entries.len(),
        docs.len(),
        docs.iter().filter(|d| d.form == Form::Compact).count(),
        docs.iter().filter(|d| d.form == Form::Pretty).count(),
        docs.iter().filter(both).count(),
        cold.len(),
    );
    println!(
        "documents refused: corral {}, llguidance {}",
        refused(|d| d.corral_refused_at.is_some()),
        refused(|d| d.llg_refused_at.is_some())
    );
    if cold.is_empty() {
        println!("no document was taken whole by both engines: nothing to compare");
        return;
    }
    println!("\n| masks, us | mean | p50 | p90 | p99 | max | vs llguidance (pooled mean) |");
    println!("|---|---|---|---|---|---|---|");
    let n = cold.len();
    for (name, v, m) in [
        ("corral cold (first pass)", &mut cold, cm),
        ("corral warm", &mut warm, wm),
        ("llguidance", &mut llg, lm),
    ] {
        println!(
            "| {name} | {m:.1} | {:.1} | {:.1} | {:.0} | {:.0} | {:.2}x |",
            pct(v, 0.5),
            pct(v, 0.9),
            pct(v, 0.99),
            pct(v, 1.0),
            m / lm
        );
    }
    println!(
        "\nper-schema cold / llguidance ratio over {} schemas: p50 {:.2}x, p90 {:.2}x, p99 {:.2}x, max {:.2}x ({n} masks pooled: {:.2}x)",
        rs.len(),
        pct(&mut rs, 0.5),
        pct(&mut rs, 0.9),
        pct(&mut rs, 0.99),
        pct(&mut rs, 1.0),
        cm / lm
    );
    let mut cc: Vec<f64> = docs
        .iter()
        .filter(both)
        .map(|d| d.corral_compile_ms)
        .collect();
    let mut lc: Vec<f64> = docs.iter().filter(both).map(|d| d.llg_compile_ms).collect();
    let (ccm, lcm) = (mean(&cc), mean(&lc));
    println!(
        "compile + setup, ms: corral mean {ccm:.2} p50 {:.2} p99 {:.2}; llguidance mean {lcm:.2} p50 {:.2} p99 {:.2}; ratio mean {:.2}x, p99 {:.2}x",
        pct(&mut cc, 0.5),
        pct(&mut cc, 0.99),
        pct(&mut lc, 0.5),
        pct(&mut lc, 0.99),
        ccm / lcm,
        pct(&mut cc, 0.99) / pct(&mut lc, 0.99)
    );
    if slowest > 0 {
        ratios.sort_by(|a, b| b.0.total_cmp(&a.0));
        println!("\nslowest {slowest} schemas by cold / llguidance:");
        println!(
            "| schema | ratio | corral cold us | llguidance us | masks |\n|---|---|---|---|---|"
        );
        for (r, name) in ratios.iter().take(slowest) {
            let i = entries
                .iter()
                .position(|e| e.name == *name)
                .expect("listed");
            let t = &timings[i];
            let (c, l, m) = t
                .docs
                .iter()
                .filter(|d| d.llg_us > 0.0)
                .fold((0.0, 0.0, 0), |(c, l, m), d| {
                    (c + d.cold_us, l + d.llg_us, m + d.cold.len())
                });
            println!("| {name} | {r:.2} | {c:.0} | {l:.0} | {m} |");
        }
    }
}

/// With `--schema`: the costliest cold masks of its first document, and where they fell.
fn costliest(e: &Engines, entry: &Entry, t: &SchemaTiming) {
    let (Some(d), Some(doc)) = (t.docs.first(), documents(entry, 1).first().cloned()) else {
        return;
    };
    let Ok(tokens) = e.tokens(&doc.text) else {
        return;
    };
    let mut order: Vec<usize> = (0..d.cold.len()).collect();
    order.sort_by(|&x, &y| d.cold[y].total_cmp(&d.cold[x]));
    println!(
        "\ncostliest cold masks of instance 0 ({:?}): position, corral us, llguidance us, after",
        d.form
    );
    for &i in order.iter().take(12) {
        let before = e.space.vocab().decode_bytes(&tokens[..i.min(tokens.len())]);
        let tail = String::from_utf8_lossy(&before[before.len().saturating_sub(50)..]).into_owned();
        println!(
            "{i:>5} {:>9.0} {:>9.0}  ...{tail:?}",
            d.cold[i],
            d.llg.get(i).copied().unwrap_or(f64::NAN)
        );
    }
}

fn report_brute(entries: &[Entry], checks: &[BruteCheck], seconds: f64) {
    let steps: usize = checks.iter().map(|c| c.steps).sum();
    let wrong: usize = checks.iter().map(|c| c.wrong.len()).sum();
    let false_rej: usize = checks.iter().map(|c| c.false_rejections()).sum();
    let explained = |kind: &str| -> usize {
        checks
            .iter()
            .flat_map(|c| &c.refused)
            .filter(|r| r.explained.as_deref().is_some_and(|x| x.starts_with(kind)))
            .count()
    };
    let refused = checks.iter().filter(|c| c.corral_error.is_some()).count();
    println!(
        "\nbrute force: {} schemas ({refused} refused by corral), {steps} masks compared in {seconds:.0} s; wrong masks: {wrong}; false rejections: {false_rej}; instances rightly refused: {} that break a format the benchmark does not assert, {} with properties out of the schema's order (kept by default)",
        entries.len(),
        explained("format"),
        explained("property order"),
    );
    for (e, c) in entries.iter().zip(checks) {
        for w in &c.wrong {
            println!(
                "  WRONG {} instance {} ({:?}) step {} after {:?}: corral alone allows {:?}, brute force alone {:?}",
                e.name, w.instance, w.form, w.step, w.output, w.extra, w.missing
            );
        }
        for u in &c.untokenized {
            println!("  UNTOKENIZED {} {u}", e.name);
        }
        for r in c.refused.iter().filter(|r| r.explained.is_none()) {
            println!(
                "  FALSE REJECTION {} instance {} ({:?}) step {} after {:?}",
                e.name, r.instance, r.form, r.step, r.output
            );
        }
    }
}

fn main() -> Result<()> {
    let a = args()?;
    let (all, missing) = corpus(&bench_dir())?;
    if !missing.is_empty() {
        eprintln!("not in the snapshot, left out: {}", missing.join(", "));
    }
    let entries: Vec<Entry> = match (&a.schema, a.sample) {
        (Some(name), _) => {
            let name = name.trim_start_matches(&format!("{}/", bench_dir().display()));
            vec![
                all.into_iter()
                    .find(|e| e.name == name || e.path.ends_with(name))
                    .ok_or_else(|| anyhow!("{name}: no such schema with valid instances"))?,
            ]
        }
        (None, Some(n)) => sample(&all, n, a.seed),
        (None, None) => all,
    };
    let (name, file) = asset_tokenizers(&[a.tokenizer.as_str()])
        .pop()
        .ok_or_else(|| {
            anyhow!(
                "tokenizer {} is not fetched (scripts/fetch-assets)",
                a.tokenizer
            )
        })?;
    let mut e = Engines::load(&name, &file)?;
    if a.shared_lexemes {
        let (secs, states) = e.with_shared_lexemes()?;
        let bytes = e.base.as_ref().map_or(0, |b| b.stats().bytes);
        eprintln!(
            "shared lexemes: token sets of {states} states ({:.1} MiB) made in {:.1} ms, once for the tokenizer",
            bytes as f64 / (1 << 20) as f64,
            secs * 1e3
        );
    }
    eprintln!(
        "{name}: {} ids; {} schemas, {} valid instances",
        e.space.vocab().len(),
        entries.len(),
        entries.iter().map(|e| e.instances.len()).sum::<usize>()
    );
    let mut timings = Vec::new();
    if a.timing {
        let t0 = Instant::now();
        for (i, entry) in entries.iter().enumerate() {
            let docs = documents(entry, a.instances);
            let mut t = time_schema(&e, &entry.path, &docs, a.warm);
            for _ in 1..a.reps {
                t.docs
                    .extend(time_schema(&e, &entry.path, &docs, a.warm).docs);
            }
            timings.push(t);
            if (i + 1) % 250 == 0 {
                eprintln!(
                    "timed {} schemas in {:.0} s",
                    i + 1,
                    t0.elapsed().as_secs_f64()
                );
            }
        }
        report_timing(&entries, &timings, a.slowest);
        if a.schema.is_some() {
            costliest(&e, &entries[0], &timings[0]);
        }
    }
    let mut checks = Vec::new();
    if a.brute > 0 {
        let t0 = Instant::now();
        checks = brute_all(&e, &entries, a.brute, &a.brute_forms);
        report_brute(&entries, &checks, t0.elapsed().as_secs_f64());
    }
    let json = a.json.unwrap_or_else(|| {
        root()
            .join(format!("target/maskbench-replay-{name}.json"))
            .display()
            .to_string()
    });
    let lines: Vec<SchemaReport> = entries
        .iter()
        .enumerate()
        .map(|(i, entry)| SchemaReport {
            schema: &entry.name,
            instances: entry.instances.len(),
            cold_ratio: timings.get(i).and_then(ratio_of),
            timing: timings.get(i),
            brute: checks.get(i),
        })
        .collect();
    std::fs::write(&json, serde_json::to_string_pretty(&lines)?)?;
    eprintln!("per-schema results: {json}");
    let bad: usize = checks.iter().map(BruteCheck::failures).sum();
    if bad > 0 {
        return Err(anyhow!(
            "{bad} wrong masks, false rejections or untokenized documents"
        ));
    }
    Ok(())
}
