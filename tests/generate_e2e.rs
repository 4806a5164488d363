//! End to end on the real SmolLM2-135M-Instruct Q4_1 model (scripts/fetch-assets model):
//! generated outputs are in the grammar's language; the same seed gives the same output;
//! jump-forward saves forward passes on a grammar that forces most of the output; the
//! GGUF tokenizer round-trips; the CLI's errors are clear. Skipped, with a note, when the
//! model has not been fetched.

mod common;

use common::{llama_cpp_data, run_corral, temp_file};
use corral::engine::SamplingOptions;
use corral::{
    DeviceSpec, FinishReason, GenerateOptions, MatchOutcome, Model, compile_gbnf,
    generate_constrained, match_bytes,
};
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

fn model_path() -> PathBuf {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("assets/models/SmolLM2-135M-Instruct.Q4_1.gguf");
    common::require_input(p, "run scripts/fetch-assets model")
}

/// One model for the whole test binary (tests take turns).
fn model() -> &'static Mutex<Model> {
    static MODEL: OnceLock<Mutex<Model>> = OnceLock::new();
    MODEL.get_or_init(|| {
        Mutex::new(Model::load(model_path().to_str().unwrap(), DeviceSpec::Cpu).unwrap())
    })
}

fn greedy(max_tokens: usize) -> GenerateOptions {
    GenerateOptions {
        max_tokens,
        sampling: SamplingOptions::greedy(),
        ..GenerateOptions::default()
    }
}

/// Generated text is in the language when generation ended on its own, and a valid prefix
/// when it ran out of tokens.
fn check_in_language(g: &std::sync::Arc<corral::Grammar>, out: &corral::Generation, what: &str) {
    let verdict = match_bytes(g, out.text.as_bytes()).unwrap();
    match out.finish_reason {
        FinishReason::Length => assert!(
            !matches!(verdict, MatchOutcome::Rejected { .. }),
            "{what}: {:?} {verdict:?}",
            out.text
        ),
        _ => assert_eq!(verdict, MatchOutcome::Accepted, "{what}: {:?}", out.text),
    }
    eprintln!(
        "{what}: {:?} ({}, {} tokens, {} forward passes)",
        out.text,
        out.finish_reason.as_str(),
        out.stats.generated_tokens,
        out.stats.forward_passes
    );
}

#[test]
#[ignore = "needs scripts/fetch-assets"]
fn json_gbnf_output_is_valid_json() {
    let (m, dir) = (model(), llama_cpp_data());
    let mut m = m.lock().unwrap();
    let g = compile_gbnf(
        &std::fs::read_to_string(dir.join("grammars/json.gbnf")).unwrap(),
        &Default::default(),
    )
    .unwrap();
    for (i, prompt) in [
        "Describe a cat as a JSON object with name, age and color.",
        "Give me a JSON object listing three fruits and their prices.",
    ]
    .iter()
    .enumerate()
    {
        let opts = GenerateOptions {
            max_tokens: 120,
            sampling: SamplingOptions {
                seed: i as u64,
                ..SamplingOptions::default()
            },
            ..GenerateOptions::default()
        };
        let (hits, _) = m.constraints().stats();
        let out = generate_constrained(&mut m, &g, *prompt, &opts).unwrap();
        // The second call finds the first call's constraint (its mask caches warm).
        assert_eq!(m.constraints().stats().0, hits + u64::from(i > 0));
        check_in_language(&g, &out, "json.gbnf");
        if out.finish_reason != FinishReason::Length {
            let v: serde_json::Value = serde_json::from_str(&out.text).unwrap();
            assert!(v.is_object());
        }
    }
}

#[test]
#[ignore = "needs scripts/fetch-assets"]
fn small_closed_grammar() {
    let m = model();
    let mut m = m.lock().unwrap();
    let g = compile_gbnf(
        r#"root ::= "The answer is " ("yes" | "no") "." "#,
        &Default::default(),
    )
    .unwrap();
    let out = generate_constrained(
        &mut m,
        &g,
        "Is the sky blue? Answer with yes or no.",
        &greedy(20),
    )
    .unwrap();
    assert!(
        out.text == "The answer is yes." || out.text == "The answer is no.",
        "{:?}",
        out.text
    );
    assert_eq!(out.finish_reason, FinishReason::GrammarComplete);
    // "The answer is " and the final "." are forced: fewer forward passes than tokens.
    assert!(
        out.stats.forward_passes < out.stats.generated_tokens + 1,
        "{:?}",
        out.stats
    );
}

#[test]
#[ignore = "needs scripts/fetch-assets"]
fn shipped_grammars() {
    let (m, dir) = (model(), llama_cpp_data());
    let mut m = m.lock().unwrap();
    let cases = [
        (
            "arithmetic.gbnf",
            "Write one simple equation, like 1+2=3, on one line.",
        ),
        (
            "chess.gbnf",
            "Write the first two moves of a chess game in algebraic notation.",
        ),
        ("list.gbnf", "List three colors as a dashed list."),
        ("json_arr.gbnf", "Give a JSON array of two numbers."),
    ];
    for (file, prompt) in cases {
        let g = compile_gbnf(
            &std::fs::read_to_string(dir.join("grammars").join(file)).unwrap(),
            &Default::default(),
        )
        .unwrap();
        let out = generate_constrained(&mut m, &g, prompt, &greedy(60)).unwrap();
        check_in_language(&g, &out, file);
    }
}

#[test]
#[ignore = "needs scripts/fetch-assets"]
fn same_seed_same_output() {
    let (m, dir) = (model(), llama_cpp_data());
    let mut m = m.lock().unwrap();
    let g = compile_gbnf(
        &std::fs::read_to_string(dir.join("grammars/json.gbnf")).unwrap(),
        &Default::default(),
    )
    .unwrap();
    let run = |m: &mut Model, seed| {
        let opts = GenerateOptions {
            max_tokens: 40,
            sampling: SamplingOptions {
                temperature: 1.0,
                top_p: None,
                seed,
                ..SamplingOptions::default()
            },
            ..GenerateOptions::default()
        };
        generate_constrained(m, &g, "Describe a dog as JSON.", &opts).unwrap()
    };
    let a = run(&mut m, 7);
    let b = run(&mut m, 7);
    assert_eq!(a.tokens, b.tokens);
    assert_eq!(a.text, b.text);
    let c = run(&mut m, 8);
    assert_ne!(
        a.tokens, c.tokens,
        "another seed should (almost surely) differ"
    );
}

#[test]
#[ignore = "needs scripts/fetch-assets"]
fn forced_output_uses_fewer_forward_passes_than_tokens() {
    let m = model();
    let mut m = m.lock().unwrap();
    let g = compile_gbnf(
        r#"root ::= "{\"name\": \"" [A-Za-z ]{1,16} "\", \"species\": \"" ("cat" | "dog" | "bird") "\", \"age_in_years\": " [0-9]{1,2} ", \"vaccinated\": " ("true" | "false") "}""#,
        &Default::default(),
    )
    .unwrap();
    let out = generate_constrained(&mut m, &g, "Describe a pet.", &greedy(80)).unwrap();
    check_in_language(&g, &out, "fixed keys");
    assert_eq!(out.finish_reason, FinishReason::GrammarComplete);
    let s = &out.stats;
    // Forward passes after the prompt < generated tokens: the keys came without one.
    assert!(s.forward_passes - 1 < s.generated_tokens, "{s:?}");
    assert!(s.forced_tokens > 10, "{s:?}");
    // Without jump-forward every token costs a forward pass.
    let no_jump = GenerateOptions {
        jump_forward: false,
        ..greedy(80)
    };
    let out2 = generate_constrained(&mut m, &g, "Describe a pet.", &no_jump).unwrap();
    assert_eq!(out2.stats.forced_tokens, 0);
    assert!(
        out2.stats.forward_passes > s.forward_passes,
        "{:?} vs {s:?}",
        out2.stats
    );
}

#[test]
#[ignore = "needs scripts/fetch-assets"]
fn gguf_tokenizer_round_trips_without_a_prefix_space() {
    let m = model();
    let m = m.lock().unwrap();
    let tok = m.tokenizer();
    for text in [
        "Hello world",
        "x = 12345;",
        "  leading spaces",
        "Zoë naïve café 日本 😀",
        "<|im_start|>user\nHi<|im_end|>",
    ] {
        let ids = tok.encode(text, false).unwrap().get_ids().to_vec();
        assert_eq!(tok.decode(&ids, false).unwrap(), text, "{ids:?}");
    }
    // Digits are split one by one (SmolLM2's "smollm" pre-tokenizer).
    let ids = tok.encode("2024", false).unwrap().get_ids().to_vec();
    assert_eq!(ids.len(), 4, "{ids:?}");
    // Special tokens are single ids; no space is invented after them.
    let ids = tok
        .encode("<|im_start|>assistant", false)
        .unwrap()
        .get_ids()
        .to_vec();
    assert_eq!(ids[0], 1);
    assert_eq!(tok.decode(&ids[1..], false).unwrap(), "assistant");
    // The first word has no leading-space token (the trap of candle's fallback).
    let ids = tok.encode("Hello", false).unwrap().get_ids().to_vec();
    assert!(
        !tok.id_to_token(ids[0]).unwrap().starts_with('Ġ'),
        "{:?}",
        tok.id_to_token(ids[0])
    );
}

#[test]
#[ignore = "needs scripts/fetch-assets"]
fn cli_generate_streams_and_reports_stats() {
    model_path();
    let dir = llama_cpp_data();
    let g = dir.join("grammars/json.gbnf");
    let (code, out, err) = run_corral(
        &[
            "generate",
            "--grammar",
            g.to_str().unwrap(),
            "--prompt",
            "A JSON object about Paris.",
            "--max-tokens",
            "48",
            "--temperature",
            "0",
            "--stats",
        ],
        b"",
    );
    assert_eq!(code, 0, "{err}");
    let stats: serde_json::Value = serde_json::from_str(err.lines().last().unwrap()).unwrap();
    for k in [
        "prompt_tokens",
        "generated_tokens",
        "forward_passes",
        "decode_tok_s",
        "mask_us_mean",
        "finish_reason",
    ] {
        assert!(stats.get(k).is_some(), "missing {k}: {stats}");
    }
    let text = out.trim_end_matches('\n');
    let grammar = compile_gbnf(&std::fs::read_to_string(&g).unwrap(), &Default::default()).unwrap();
    let verdict = match_bytes(&grammar, text.as_bytes()).unwrap();
    if stats["finish_reason"] == "length" {
        assert!(!matches!(verdict, MatchOutcome::Rejected { .. }));
    } else {
        assert_eq!(verdict, MatchOutcome::Accepted, "{text:?}");
    }
    // --regex
    let (code, out, err) = run_corral(
        &[
            "generate",
            "--regex",
            "(yes|no)",
            "--prompt",
            "Is fire hot?",
            "--temperature",
            "0",
        ],
        b"",
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.trim() == "yes" || out.trim() == "no", "{out:?}");
}

#[test]
#[ignore = "needs scripts/fetch-assets"]
fn cli_generate_errors_are_clear() {
    let _ = model_path();
    let (code, _, err) = run_corral(
        &[
            "generate",
            "--model",
            "/nonexistent/model.gguf",
            "--prompt",
            "x",
        ],
        b"",
    );
    assert_eq!(code, 2);
    assert!(
        err.contains("model not found: /nonexistent/model.gguf"),
        "{err}"
    );
    let bad = std::env::temp_dir().join(format!("corral-corrupt-{}.gguf", std::process::id()));
    std::fs::write(&bad, b"this is not a gguf file at all").unwrap();
    let (code, _, err) = run_corral(
        &[
            "generate",
            "--model",
            bad.to_str().unwrap(),
            "--prompt",
            "x",
        ],
        b"",
    );
    assert_eq!(code, 2);
    assert!(err.contains("not a readable GGUF file"), "{err}");
    std::fs::remove_file(&bad).ok();
    let (code, _, err) = run_corral(&["generate", "--device", "tpu:0", "--prompt", "x"], b"");
    assert_eq!(code, 2);
    assert!(err.contains("unknown device \"tpu:0\""), "{err}");
    let long = "word ".repeat(9000);
    let (code, _, err) = run_corral(&["generate", "--prompt", &long, "--raw"], b"");
    assert_eq!(code, 2);
    assert!(
        err.contains("the prompt") && err.contains("the model supports 8192"),
        "{err}"
    );
}

/// `--sampler cars`: one exact output, in the grammar, with its cost in `--stats`; settings
/// it cannot honour are refused, not ignored.
#[test]
#[ignore = "needs scripts/fetch-assets"]
fn cli_generate_cars_draws_an_output_and_refuses_what_it_cannot_honour() {
    model_path();
    let (code, out, err) = run_corral(
        &[
            "generate",
            "--regex",
            "(yes|no|maybe)",
            "--prompt",
            "Is the sky green?",
            "--sampler",
            "cars",
            "--temperature",
            "1",
            "--seed",
            "3",
            "--stats",
        ],
        b"",
    );
    assert_eq!(code, 0, "{err}");
    assert!(["yes", "no", "maybe"].contains(&out.trim()), "{out:?}");
    let stats: serde_json::Value = serde_json::from_str(err.lines().last().unwrap()).unwrap();
    assert_eq!(stats["sampler"]["method"], "cars", "{stats}");
    assert!(stats["forward_passes"].as_u64().unwrap() >= 2, "{stats}");
    let z = stats["sampler"]["live_mass"].as_f64().unwrap();
    assert!(z > 0.0 && z < 1.0, "{stats}");
    for (extra, says) in [
        (&[][..], "needs a grammar"),
        (
            &["--regex", "yes", "--top-p", "0.9"][..],
            "--top-p does not go",
        ),
        (
            &["--regex", "yes", "--particles", "4"][..],
            "--particles does not go",
        ),
        (
            &["--regex", "yes", "--temperature", "0"][..],
            "temperature is 0",
        ),
        (
            &["--regex", "(yes|no)", "--max-prefixes", "1"][..],
            "raise --max-prefixes",
        ),
        (
            &["--regex", "yes", "--scope", "tool-calls"][..],
            "--scope does not go",
        ),
        (
            &["--regex", "x{300}", "--max-tokens", "3"][..],
            "no output of the grammar fits",
        ),
    ] {
        let mut a = vec!["generate", "--prompt", "x", "--sampler", "cars"];
        a.extend_from_slice(extra);
        let (code, _, err) = run_corral(&a, b"");
        assert_eq!(code, 2, "{extra:?}: {err}");
        assert!(err.contains(says), "{extra:?}: {err}");
    }
    let a = [
        "generate",
        "--prompt",
        "x",
        "--regex",
        "yes",
        "--max-prefixes",
        "9",
    ];
    let (code, _, err) = run_corral(&a, b"");
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--max-prefixes needs --sampler cars"), "{err}");
}

/// `--format generic --think-prefilled --reasoning-budget`: the reasoning is free text (on
/// standard error), the end of reasoning is forced after the budget, and the grammar applies
/// to the answer only (on standard output, valid for the schema).
#[test]
#[ignore = "needs scripts/fetch-assets"]
fn cli_generate_grammar_applies_to_the_answer_after_reasoning() {
    let _ = model_path();
    let schema = temp_file(
        "person.schema.json",
        r#"{"type":"object","properties":{"name":{"type":"string","maxLength":30},
            "age":{"type":"integer","minimum":0,"maximum":130}},
            "required":["name","age"],"additionalProperties":false}"#,
    );
    let (code, out, err) = run_corral(
        &[
            "generate",
            "--raw",
            "--prompt",
            "<|im_start|>user\nDescribe a person as JSON.<|im_end|>\n<|im_start|>assistant\n<think>",
            "--format",
            "generic",
            "--think-prefilled",
            "--reasoning-budget",
            "12",
            "--json-schema",
            &schema,
            "--temperature",
            "0",
            "--max-tokens",
            "80",
            "--stats",
        ],
        b"",
    );
    assert_eq!(code, 0, "{err}");
    let stats: serde_json::Value = serde_json::from_str(err.lines().last().unwrap()).unwrap();
    assert_eq!(stats["finish_reason"], "grammar_complete", "{stats}");
    assert_eq!(stats["schema_valid"], true, "{stats}");
    // The reasoning went to standard error, not into the answer.
    let reasoning = &err[..err.rfind('\n').unwrap_or(0)];
    assert!(!reasoning.trim().is_empty(), "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert!(v["name"].is_string() && v["age"].is_u64(), "{out}");
    assert!(!out.contains("</think>"), "{out}");
}

/// Grammars with token references (the end token `<|im_end|>` by text and by id, negated,
/// after a repetition) generate outputs of the grammar: the tokens replay through the
/// constraint and end complete, with jump-forward on and off, greedy and sampled, with
/// room to spare and with a budget that forces the completion.
#[test]
#[ignore = "needs scripts/fetch-assets"]
fn token_reference_grammars_generate_outputs_of_the_grammar() {
    let m = model();
    let mut m = m.lock().unwrap();
    let grammars = [
        r#"root ::= "a" <|im_end|> "x""#,
        "root ::= <[2]>",
        r#"root ::= "a" !<[2]> "b""#,
        "root ::= [a-z]+ <[2]>",
    ];
    for text in grammars {
        let g = compile_gbnf(text, &Default::default()).unwrap();
        let c = m.constraints().for_grammar(&g);
        for (max_tokens, jump_forward, seed) in [
            (20, true, None),
            (20, false, None),
            (4, true, Some(7)),
            (3, false, Some(11)),
        ] {
            let mut opts = greedy(max_tokens);
            opts.jump_forward = jump_forward;
            if let Some(seed) = seed {
                opts.sampling = SamplingOptions {
                    temperature: 1.0,
                    seed,
                    ..SamplingOptions::default()
                };
            }
            let what = format!("{text} (max {max_tokens}, jump-forward {jump_forward})");
            let out = generate_constrained(&mut m, &g, "Write one word.", &opts)
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_ne!(out.finish_reason, FinishReason::Length, "{what}");
            assert!(!out.tokens.is_empty(), "{what}: an empty output");
            let mut a = corral::engine::RobustConstrainedAdapter::new(c.clone());
            a.step_with_tokens(&out.tokens)
                .unwrap_or_else(|e| panic!("{what}: {:?} replays: {e}", out.tokens));
            assert!(a.is_accepting(), "{what}: {:?} is complete", out.text);
            eprintln!("{what}: {:?} ({})", out.text, out.finish_reason.as_str());
        }
    }
    // A reference to a token the vocabulary lacks can never be completed: refused up front.
    let g = compile_gbnf(r#"root ::= "a" <|no such token|>"#, &Default::default()).unwrap();
    let e = generate_constrained(&mut m, &g, "Hi", &greedy(20)).unwrap_err();
    assert!(e.to_string().contains("token reference"), "{e}");
}
