//! The CLI's output and argument defects found by hostile use, one test each: writing to a
//! full disk or a closed pipe, sampling values out of range, long prompts from a file, and
//! grammar errors on long lines.

mod common;

use common::{corral_bin, run_corral, temp_file};
use std::io::Read;
use std::process::{Command, Stdio};

/// A schema whose GBNF runs to a few hundred kilobytes.
fn big_schema() -> String {
    let props: Vec<String> = (0..400)
        .map(|i| format!("\"property_{i}\": {{\"type\": \"string\", \"maxLength\": 20}}"))
        .collect();
    temp_file(
        "big.schema.json",
        &format!(
            "{{\"type\": \"object\", \"properties\": {{{}}}}}",
            props.join(", ")
        ),
    )
}

#[test]
fn writing_to_a_full_disk_is_an_error_not_a_panic() {
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .expect("/dev/full");
    let out = Command::new(corral_bin())
        .args(["schema", &big_schema()])
        .stdout(full)
        .stderr(Stdio::piped())
        .output()
        .expect("runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("cannot write the output"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn a_closed_pipe_exits_quietly_with_141() {
    let mut child = Command::new(corral_bin())
        .args(["schema", &big_schema()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("runs");
    // Read one line, then close the pipe (`corral schema s.json | head -1`).
    let mut stdout = child.stdout.take().expect("piped");
    let mut first = [0u8; 16];
    stdout.read_exact(&mut first).expect("some output");
    drop(stdout);
    let out = child.wait_with_output().expect("ends");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(141), "{err}");
    assert!(err.is_empty(), "{err}");
}

#[test]
fn sampling_values_out_of_range_fail_before_the_model_loads() {
    for (flag, value) in [
        ("--temperature", "NaN"),
        ("--temperature", "-1"),
        ("--top-p", "2"),
        ("--top-p", "NaN"),
        ("--min-p", "5"),
    ] {
        let arg = format!("{flag}={value}");
        let (code, _, err) = run_corral(
            &["generate", "--model", "/nonexistent.gguf", "-p", "hi", &arg],
            b"",
        );
        assert_eq!(code, 2, "{arg}: {err}");
        assert!(err.contains("sampling:"), "{arg}: {err}");
    }
}

#[test]
fn grammar_errors_on_long_lines_are_windowed_without_control_bytes() {
    let g = temp_file(
        "long.gbnf",
        &format!("root ::= \"a\" {} \u{1} ]\n", "x".repeat(5000)),
    );
    let (code, _, err) = run_corral(&["match", "--grammar", &g, "-"], b"a");
    assert_eq!(code, 2, "{err}");
    assert!(!err.contains('\u{1}'), "{err:?}");
    assert!(err.lines().all(|l| l.chars().count() <= 200), "{err}");
    assert!(err.contains("long.gbnf:1:"), "{err}");
}

#[test]
#[ignore = "needs scripts/fetch-assets"]
fn the_prompt_can_come_from_a_file_or_standard_input() {
    let model = common::require_input(
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("assets/models/SmolLM2-135M-Instruct.Q4_1.gguf"),
        "run scripts/fetch-assets model",
    );
    let model = model.display().to_string();
    // Longer than most systems take as one argument.
    let long = "Please answer yes or no. ".repeat(12_000);
    let file = temp_file("prompt.txt", &long);
    let base = [
        "generate",
        "--model",
        &model,
        "--raw",
        "--regex",
        "yes|no",
        "--temperature",
        "0",
    ];
    let (code, out, err) = run_corral(&[&base[..], &["--prompt-file", &file]].concat(), b"");
    // 12,000 sentences exceed SmolLM2's context: the error says so, after reading it all.
    assert_eq!(code, 2, "{out} {err}");
    assert!(err.contains("positions"), "{err}");
    let (code, out, err) = run_corral(
        &[&base[..], &["--prompt-file", "-"]].concat(),
        b"Is the sky blue? Answer yes or no.",
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.trim() == "yes" || out.trim() == "no", "{out}");
}

#[test]
#[ignore = "needs scripts/fetch-assets"]
fn replay_takes_eos_from_the_model_config_and_refuses_one_outside_the_vocabulary() {
    let tok = common::asset_tokenizer("qwen3");
    let dir = std::env::temp_dir().join(format!("corral-eos-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let copy = dir.join("tokenizer.json");
    std::fs::copy(&tok, &copy).unwrap();
    let text = temp_file("eos-doc.json", "{\"a\": 1}");
    let base = ["replay", "--grammar", "grammars/json.gbnf", "--text", &text];
    let tok_arg = copy.display().to_string();
    let (code, _, err) = run_corral(
        &[&base[..], &["--tokenizer", &tok_arg, "--eos", "99999999"]].concat(),
        b"",
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("outside the vocabulary"), "{err}");
    // generation_config.json names <|endoftext|> (151643): the end of the replay allows it.
    std::fs::write(
        dir.join("generation_config.json"),
        r#"{"eos_token_id": 151643}"#,
    )
    .unwrap();
    let (code, out, err) = run_corral(&[&base[..], &["--tokenizer", &tok_arg]].concat(), b"");
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).expect("JSON report");
    assert_eq!(v["eos_allowed_at_end"], true, "{v}");
}
