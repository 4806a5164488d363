//! The command line against input without end or shape: files read whole are capped
//! (`--max-input-bytes`), `match` streams deep input within `max_open_sets`, and bad
//! values get clear errors (a zero budget, a negative temperature, a truncated GGUF), never
//! a backtrace, a hang or memory without bound.

mod common;

use common::{run_corral, temp_file};
use std::path::PathBuf;

fn model_path() -> PathBuf {
    common::require_input(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("assets/models/SmolLM2-135M-Instruct.Q4_1.gguf"),
        "run scripts/fetch-assets model",
    )
}

/// `/dev/zero` as a schema, a grammar or a prompt file stops at the cap (it grew to 21 GB).
#[test]
fn inputs_read_whole_stop_at_the_cap() {
    let g = temp_file("limits-kv.gbnf", "root ::= [a-z]+\n");
    for args in [
        vec![
            "match",
            "--json-schema",
            "/dev/zero",
            "--max-input-bytes",
            "100000",
        ],
        vec![
            "match",
            "--grammar",
            "/dev/zero",
            "--max-input-bytes",
            "100000",
        ],
        vec!["schema", "/dev/zero", "--max-input-bytes", "100000"],
        vec![
            "replay",
            "--tokenizer",
            "/dev/null",
            "--grammar",
            g.as_str(),
            "--text",
            "/dev/zero",
            "--max-input-bytes",
            "100000",
        ],
    ] {
        let (code, _, err) = run_corral(&args, b"");
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(
            err.contains("larger than 100000 bytes (--max-input-bytes)")
                || err.contains("cannot load tokenizer"),
            "{args:?}: {err}"
        );
    }
    // The default cap is documented in the help.
    let (_, out, _) = run_corral(&["match", "--help"], b"");
    assert!(out.contains("--max-input-bytes"), "{out}");
}

/// Deep input to `match` is refused at the documented nesting limit, in bounded memory
/// (300 MB of `[` grew to 21 GB).
#[test]
fn deep_input_to_match_stops_at_max_open_sets() {
    let g = temp_file(
        "limits-nest.gbnf",
        "root ::= value\nvalue ::= \"[\" (value (\",\" value)*)? \"]\" | [0-9]+\n",
    );
    let deep = vec![b'['; 2_000_000];
    let (code, out, err) = run_corral(&["match", "--grammar", &g], &deep);
    assert_eq!(code, 2, "{out} {err}");
    assert!(err.contains("max_open_sets"), "{err}");
}

/// Bad values on the command line get clear errors.
#[test]
#[ignore = "needs scripts/fetch-assets"]
fn bad_values_get_clear_errors() {
    let model = model_path();
    let model = model.to_str().unwrap();
    let (code, _, err) = run_corral(
        &[
            "generate",
            "--model",
            model,
            "--prompt",
            "x",
            "--max-tokens",
            "0",
        ],
        b"",
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--max-tokens must be at least 1"), "{err}");
    let (code, _, err) = run_corral(
        &[
            "generate",
            "--model",
            model,
            "--prompt",
            "x",
            "--temperature",
            "-1",
        ],
        b"",
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("temperature is -1"), "{err}");
    // A GGUF cut short: what is missing, without a stack trace, whatever RUST_BACKTRACE.
    let bytes = std::fs::read(model).unwrap();
    for keep in [1000, 50_000_000] {
        let cut = temp_file(&format!("limits-cut-{keep}.gguf"), "");
        std::fs::write(&cut, &bytes[..keep]).unwrap();
        let out = std::process::Command::new(common::corral_bin())
            .args([
                "generate",
                "--model",
                &cut,
                "--prompt",
                "x",
                "--max-tokens",
                "2",
            ])
            .env("RUST_BACKTRACE", "1")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains("remaining"), "{err}");
        assert!(
            !err.contains("rust_begin_unwind") && !err.contains(" at /"),
            "{err}"
        );
        assert_eq!(err.lines().count(), 1, "{err}");
    }
    // `replay --text` names a file.
    let (_, out, _) = run_corral(&["replay", "--help"], b"");
    assert!(out.contains("--text <FILE>"), "{out}");
}

/// A tool call that never closes is content once past `--max-call-bytes`, so `split`
/// holds no more than that of it (a 50 MB call took 450 MB).
#[test]
fn an_unclosed_tool_call_past_the_bound_is_content() {
    let body = "x".repeat(3_000_000);
    let input = format!("<tool_call>{{\"name\": \"f\", \"arguments\": {{\"a\": \"{body}");
    let (code, out, err) = run_corral(
        &[
            "split",
            "--format",
            "generic",
            "--max-call-bytes",
            "1000000",
        ],
        input.as_bytes(),
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        !out.contains("\"tool_call\""),
        "no call: {}",
        &out[..200.min(out.len())]
    );
    let content: usize = out
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["type"] == "delta")
        .map(|v| v["text"].as_str().unwrap_or("").len())
        .sum();
    assert_eq!(content, input.len(), "all of it is content");
}
