//! `corral-faithful`: how far each sampler's outputs are from the model's own distribution
//! restricted to the grammar, on small grammars whose outputs can all be walked.
//!
//! For each grammar (SmolLM2-135M-Instruct with its chat template, temperature 1): the
//! exact distribution ([`corral_faithful::exact`]), its noise floor at K samples, then K
//! outputs of plain masking, of SMC at each particle count and of CARS (one sampler kept
//! across the K outputs, so its trie serves them all), each one's total variation distance
//! from the exact answer, forward passes and wall time per output; then CARS again with a
//! new sampler for each of a few outputs, for what one output costs with nothing learned.
//! Prints a markdown table; writes every figure and distribution as JSON (`--out`).
//!
//! ```text
//! cargo run -p corral-faithful --release -- [--samples 1000] [--particles 2,4,8,16]
//!     [--grammars colours,answers,shirt,letters] [--bound 1e-5] [--model FILE.gguf]
//!     [--out target/faithful.json] [--cars-fresh 20]
//! ```

use anyhow::{Context, Result, bail};
use corral::engine::{
    Cars, CarsOptions, GenerateOptions, SamplerMethod, SamplingOptions, SmcOptions, generate,
};
use corral::{CompileOptions, DeviceSpec, Model, compile_gbnf};
use corral_faithful::{Exact, PromptCached, exact, greedy_mass, noise_floor, total_variation};
use serde_json::json;
use std::collections::BTreeMap;
use std::time::Instant;

/// A benchmark grammar: its name, the user's message and the grammar.
struct Case {
    name: &'static str,
    prompt: &'static str,
    gbnf: &'static str,
    what: &'static str,
}

const CASES: &[Case] = &[
    Case {
        name: "colours",
        prompt: "Name a colour.",
        gbnf: r#"root ::= "red" | "blue" | "green" | "turquoise" | "dark purple" | "light orange""#,
        what: "a prefix the model likes (dark, light) that mostly leads to unlikely completions",
    },
    Case {
        name: "answers",
        prompt: "Is the sky green?",
        gbnf: r#"root ::= "yes" | "no" | "maybe" | "never" | "definitely not" | "absolutely not""#,
        what: "phrases of one to three tokens",
    },
    Case {
        name: "shirt",
        prompt: "Describe a T-shirt in stock as JSON: its size and how many there are.",
        gbnf: r#"root ::= "{\"size\": \"" ("small" | "medium" | "large") "\", \"count\": " count "}"
count ::= [1-9] | "1" [0-9] | "20""#,
        what: "a small JSON object: an enum field and an integer in 1..20",
    },
    Case {
        name: "letters",
        prompt: "Write a short word.",
        gbnf: r#"root ::= [a-z] [a-z]? [a-z]?"#,
        what: "a short bounded string, [a-z]{1,3}",
    },
];

const USAGE: &str = "usage: corral-faithful [--samples K] [--particles 2,4,8,16] [--grammars a,b] [--bound P] [--model FILE.gguf] [--out FILE.json] [--max-nodes N] [--cars-fresh N]";

fn main() {
    if let Err(e) = run() {
        eprintln!("corral-faithful: {e:#}");
        std::process::exit(2);
    }
}

fn run() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut opt: BTreeMap<&str, &str> = BTreeMap::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let value = it
            .next()
            .with_context(|| format!("{a} needs a value\n{USAGE}"))?;
        match a.as_str() {
            "--samples" | "--particles" | "--grammars" | "--bound" | "--model" | "--out"
            | "--max-nodes" | "--cars-fresh" => opt.insert(&a[2..], value),
            _ => bail!("unknown argument {a}\n{USAGE}"),
        };
    }
    let k: usize = opt.get("samples").unwrap_or(&"1000").parse()?;
    let particles: Vec<usize> = opt
        .get("particles")
        .unwrap_or(&"2,4,8,16")
        .split(',')
        .map(str::parse)
        .collect::<Result<_, _>>()?;
    let bound: f64 = opt.get("bound").unwrap_or(&"1e-5").parse()?;
    let max_nodes: usize = opt.get("max-nodes").unwrap_or(&"200000").parse()?;
    let fresh_draws: usize = opt.get("cars-fresh").unwrap_or(&"20").parse()?;
    let names: Vec<&str> = match opt.get("grammars") {
        Some(g) => g.split(',').collect(),
        None => CASES.iter().map(|c| c.name).collect(),
    };
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let model_path = opt.get("model").map(|m| m.to_string()).unwrap_or(format!(
        "{root}/assets/models/SmolLM2-135M-Instruct.Q4_1.gguf"
    ));
    let out_path = opt
        .get("out")
        .map(|m| m.to_string())
        .unwrap_or(format!("{root}/target/faithful.json"));
    let mut model = Model::load(&model_path, DeviceSpec::Cpu)
        .with_context(|| format!("{model_path} (scripts/fetch-assets fetches it)"))?;
    let mut report = Vec::new();
    println!(
        "| grammar | sampler | TV | noise floor | forward passes / output | sequence steps / output | ms / output | forward ms / output |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for name in names {
        let case = CASES
            .iter()
            .find(|c| c.name == name)
            .with_context(|| format!("no grammar {name}"))?;
        report.push(run_case(
            &mut model,
            case,
            k,
            &particles,
            bound,
            max_nodes,
            fresh_draws,
        )?);
        std::fs::write(&out_path, serde_json::to_string_pretty(&report)?)?;
    }
    eprintln!("wrote {out_path}");
    Ok(())
}

/// One grammar: the exact answer, then each sampler's K outputs.
fn run_case(
    model: &mut Model,
    case: &Case,
    k: usize,
    particles: &[usize],
    bound: f64,
    max_nodes: usize,
    fresh_draws: usize,
) -> Result<serde_json::Value> {
    let grammar = compile_gbnf(case.gbnf, &CompileOptions::default())?;
    let constraint = model.constraints().for_grammar(&grammar);
    let text = model.prompt_text(None, case.prompt, false)?;
    let ids = model.encode_prompt(&text)?;
    let space = model.space().clone();
    let t = Instant::now();
    // The bound is relative to the greedy output's probability, a lower bound on the
    // grammar's mass.
    let greedy = greedy_mass(model.lm(), &constraint, &ids)?;
    let ex = exact(model.lm(), &constraint, &ids, bound * greedy, max_nodes)?;
    let exact_s = t.elapsed().as_secs_f64();
    let floor = noise_floor(&ex.dist, k, 100, 7);
    eprintln!(
        "{}: exact in {exact_s:.1} s, {} prefixes, {} sequences, {} outputs, pruned share {:.2e}",
        case.name,
        ex.nodes,
        ex.sequences,
        ex.dist.len(),
        ex.pruned_share()
    );
    let mut methods = vec![("plain".to_string(), Method::Generate(SamplerMethod::Plain))];
    for &n in particles {
        methods.push((
            format!("smc {n}"),
            Method::Generate(SamplerMethod::Smc(SmcOptions::new(n))),
        ));
    }
    methods.push(("cars".to_string(), Method::Cars));
    let mut rows = Vec::new();
    // The prompt runs once: the figures are of the output alone.
    let t = Instant::now();
    let mut lm = PromptCached::new(model.lm(), &ids)?;
    let prompt_ms = t.elapsed().as_secs_f64() * 1e3;
    // The samplers take turns, output by output, so that the machine's speed drifting
    // over a run weighs on each of them alike.
    let mut tallies: Vec<Tally> = methods.iter().map(|_| Tally::default()).collect();
    // One CARS sampler for all K outputs: its trie is what makes the later ones cheap.
    let mut cars = Cars::new(constraint.clone(), &ids, cars_options())?;
    for seed in 0..k as u64 {
        for ((_, method), tally) in methods.iter().zip(&mut tallies) {
            let method = match method {
                Method::Generate(m) => m,
                Method::Cars => {
                    let t = Instant::now();
                    let d = cars.draw(&mut lm, seed)?;
                    tally.ms += t.elapsed().as_secs_f64() * 1e3;
                    tally.passes += d.forward_passes;
                    tally.steps += d.tokens_run;
                    tally.forward_ms += d.forward_time.as_secs_f64() * 1e3;
                    tally.rejections += d.rejections;
                    tally.texts.push(d.text);
                    continue;
                }
            };
            let opts = GenerateOptions {
                max_tokens: 48,
                sampling: SamplingOptions {
                    temperature: 1.0,
                    top_p: None,
                    method: *method,
                    seed,
                    ..SamplingOptions::default()
                },
                ..GenerateOptions::default()
            };
            let t = Instant::now();
            let g = generate(&mut lm, &space, Some(&constraint), &ids, &opts, &mut |_| {})?;
            tally.ms += t.elapsed().as_secs_f64() * 1e3;
            tally.passes += g.stats.forward_passes;
            tally.forward_ms += g.stats.decode_forward_ms;
            tally.steps += g
                .stats
                .smc
                .as_ref()
                .map_or(g.stats.forward_passes, |s| s.sequence_steps + 1);
            if let Some(s) = &g.stats.smc {
                tally.resamples += s.resamples;
                tally.ess += s.ess_final;
            }
            tally.texts.push(g.text);
        }
    }
    let fresh = cars_fresh(&mut lm, &constraint, &ids, fresh_draws)?;
    let s = cars.stats();
    eprintln!(
        "{}: cars kept {} prefixes ({} bytes), {} rejections; live mass {:.4e} against the walk's {:.4e} found + {:.1e} pruned",
        case.name,
        s.prefixes,
        s.bytes,
        s.rejections,
        cars.live_mass().unwrap_or(0.0),
        ex.found,
        ex.pruned
    );
    for ((label, _), t) in methods.iter().zip(&tallies) {
        let per = |x: f64| x / k as f64;
        let tv = total_variation(&ex.dist, &t.texts);
        println!(
            "| {} | {label} | {tv:.3} | {floor:.3} | {:.1} | {:.1} | {:.0} | {:.0} |",
            case.name,
            per(t.passes as f64),
            per(t.steps as f64),
            per(t.ms),
            per(t.forward_ms)
        );
        rows.push(json!({
            "sampler": label,
            "tv": tv,
            "forward_passes_per_output": per(t.passes as f64),
            "sequence_steps_per_output": per(t.steps as f64),
            "ms_per_output": per(t.ms),
            "forward_ms_per_output": per(t.forward_ms),
            "resamples_per_output": per(t.resamples as f64),
            "rejections_per_output": per(t.rejections as f64),
            "final_ess_mean": per(t.ess),
            "empirical": empirical(&t.texts),
        }));
    }
    if fresh_draws > 0 {
        println!(
            "| {} | cars, fresh trie each output ({fresh_draws} outputs) | - | - | {:.1} | {:.1} | {:.0} | {:.0} |",
            case.name, fresh.passes, fresh.tokens, fresh.ms, fresh.forward_ms
        );
    }
    Ok(json!({
        "grammar": case.name,
        "what": case.what,
        "prompt": case.prompt,
        "gbnf": case.gbnf,
        "samples": k,
        "bound": bound,
        "greedy_mass": greedy,
        "exact": exact_json(&ex, exact_s),
        "noise_floor": floor,
        "prompt_tokens": ids.len(),
        "prompt_ms": prompt_ms,
        "samplers": rows,
        "cars": {
            "prefixes": s.prefixes,
            "bytes": s.bytes,
            "rejections": s.rejections,
            "live_mass": cars.live_mass(),
            "fresh": {
                "outputs": fresh_draws,
                "forward_passes_per_output": fresh.passes,
                "tokens_run_per_output": fresh.tokens,
                "rejections_per_output": fresh.rejections,
                "ms_per_output": fresh.ms,
                "forward_ms_per_output": fresh.forward_ms,
            },
        },
    }))
}

/// A sampler the bench runs.
enum Method {
    /// Through `generate`, one output a call.
    Generate(SamplerMethod),
    /// CARS, one sampler kept across the outputs.
    Cars,
}

/// The CARS target: the model at temperature 1 within the others' budget.
fn cars_options() -> CarsOptions {
    CarsOptions {
        temperature: 1.0,
        max_tokens: 48,
        ..CarsOptions::default()
    }
}

/// Means over CARS outputs drawn each with a new sampler (an empty trie).
struct Fresh {
    passes: f64,
    tokens: f64,
    rejections: f64,
    ms: f64,
    forward_ms: f64,
}

/// `n` CARS outputs, each from a new sampler: what one output costs with nothing learned.
fn cars_fresh(
    lm: &mut PromptCached<'_>,
    constraint: &std::sync::Arc<corral::engine::Constraint>,
    ids: &[corral::trie::TokenId],
    n: usize,
) -> Result<Fresh> {
    let mut f = Fresh {
        passes: 0.0,
        tokens: 0.0,
        rejections: 0.0,
        ms: 0.0,
        forward_ms: 0.0,
    };
    for seed in 0..n as u64 {
        let t = Instant::now();
        let d = Cars::new(constraint.clone(), ids, cars_options())?.draw(lm, 1_000_000 + seed)?;
        f.ms += t.elapsed().as_secs_f64() * 1e3;
        f.passes += d.forward_passes as f64;
        f.tokens += d.tokens_run as f64;
        f.rejections += d.rejections as f64;
        f.forward_ms += d.forward_time.as_secs_f64() * 1e3;
    }
    let n = n.max(1) as f64;
    Ok(Fresh {
        passes: f.passes / n,
        tokens: f.tokens / n,
        rejections: f.rejections / n,
        ms: f.ms / n,
        forward_ms: f.forward_ms / n,
    })
}

/// One sampler's outputs and what they cost, summed over the run.
#[derive(Default)]
struct Tally {
    texts: Vec<String>,
    passes: usize,
    steps: usize,
    resamples: usize,
    rejections: usize,
    ess: f64,
    ms: f64,
    forward_ms: f64,
}

fn exact_json(ex: &Exact, seconds: f64) -> serde_json::Value {
    json!({
        "seconds": seconds,
        "prefixes": ex.nodes,
        "sequences": ex.sequences,
        "found_mass": ex.found,
        "pruned_mass": ex.pruned,
        "pruned_share": ex.pruned_share(),
        "dist": ex.dist,
    })
}

fn empirical(texts: &[String]) -> BTreeMap<&str, usize> {
    let mut m = BTreeMap::new();
    for t in texts {
        *m.entry(t.as_str()).or_default() += 1;
    }
    m
}
