//! Decode speed with and without a grammar, mask time as a share of a decode step, the
//! effect of computing the mask during the forward pass, and forward passes saved by
//! jump-forward. SmolLM2-135M Q4_1 on the CPU; each configuration 3 times, median shown.
//!
//! `cargo run --release --example generate_bench` (needs scripts/fetch-assets and
//! ../shared/conformance).

use corral::engine::{Constraint, SamplingOptions};
use corral::{DeviceSpec, GenerateOptions, Generation, Model, compile_gbnf, generate_with};
use std::path::Path;
use std::sync::Arc;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn run(
    model: &mut Model,
    c: Option<&Arc<Constraint>>,
    prompt: &str,
    opts: &GenerateOptions,
) -> Vec<Generation> {
    (0..3)
        .map(|_| generate_with(model, c, prompt, opts, &mut |_| {}).expect("generation"))
        .collect()
}

fn report(name: &str, runs: &[Generation]) {
    let tok_s = median(runs.iter().map(|g| g.stats.decode_tok_s).collect());
    let step_ms = 1e3 / tok_s;
    let mask_us = median(runs.iter().map(|g| g.stats.mask_us_mean).collect());
    let s = &runs[0].stats;
    println!(
        "{name:<34} {:>4} tokens {:>3} fwd  decode {tok_s:>6.1} tok/s  mask mean {mask_us:>7.1} us = {:>5.2}% of a {step_ms:.1} ms step  forced {}",
        s.generated_tokens,
        s.forward_passes,
        mask_us / 1e3 / step_ms * 100.0,
        s.forced_tokens
    );
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut model = Model::load(
        root.join("assets/models/SmolLM2-135M-Instruct.Q4_1.gguf")
            .to_str()
            .unwrap(),
        DeviceSpec::Cpu,
    )
    .expect("model");
    let grammars = root.join("tests/data/llama_cpp/grammars");
    let json_arr = compile_gbnf(
        &std::fs::read_to_string(grammars.join("json_arr.gbnf")).unwrap(),
        &Default::default(),
    )
    .unwrap();
    let c = Constraint::new(json_arr, model.space().clone());
    let prompt = "List people as a JSON array of objects with name, age and city.";
    let fixed = GenerateOptions {
        max_tokens: 64,
        sampling: SamplingOptions::greedy(),
        ignore_eos: true,
        ..GenerateOptions::default()
    };
    // Warm the constraint's caches once, so runs compare steady states.
    generate_with(&mut model, Some(&c), prompt, &fixed, &mut |_| {}).unwrap();
    println!("SmolLM2-135M-Instruct Q4_1, CPU, 64 tokens, greedy, same prompt");
    report("unconstrained", &run(&mut model, None, prompt, &fixed));
    report("json_arr.gbnf", &run(&mut model, Some(&c), prompt, &fixed));
    let overlap = GenerateOptions {
        overlap_mask: true,
        ..fixed.clone()
    };
    report(
        "json_arr.gbnf, mask during forward",
        &run(&mut model, Some(&c), prompt, &overlap),
    );

    let keys = compile_gbnf(
        r#"root ::= "[" item ("," item){4} "]"
item ::= "{\"name\": \"" [A-Za-z ]{1,16} "\", \"species\": \"" ("cat" | "dog" | "bird") "\", \"age_in_years\": " [0-9]{1,2} ", \"vaccinated\": " ("true" | "false") "}""#,
        &Default::default(),
    )
    .unwrap();
    let c = Constraint::new(keys, model.space().clone());
    let opts = GenerateOptions {
        max_tokens: 400,
        sampling: SamplingOptions::greedy(),
        ..GenerateOptions::default()
    };
    generate_with(
        &mut model,
        Some(&c),
        "Describe five pets.",
        &opts,
        &mut |_| {},
    )
    .unwrap();
    report(
        "fixed keys, jump-forward",
        &run(&mut model, Some(&c), "Describe five pets.", &opts),
    );
    let no_jump = GenerateOptions {
        jump_forward: false,
        ..opts
    };
    report(
        "fixed keys, every token sampled",
        &run(&mut model, Some(&c), "Describe five pets.", &no_jump),
    );
}
