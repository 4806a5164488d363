//! llama.cpp's GBNF conformance data (tests/data/llama_cpp): grammar cases,
//! example grammars, grammars that must parse and grammars that must be refused.
//!
//! One runner reads grammar_cases.json: text cases through the recognizer (and the CLI),
//! token-segment cases (`input_kind: "segments"`) through the adapter with a vocabulary of
//! their own. Each test prints its counts.

mod common;

use common::{llama_cpp_data, read_json, run_corral};
use corral::engine::{Constraint, RobustConstrainedAdapter};
use corral::grammar::{CompileOptions, ErrorKind, MatchOutcome, compile_gbnf, match_bytes};
use corral::trie::{TokenId, TokenSpace, Vocabulary};
use std::sync::Arc;

#[test]
fn grammar_cases_agree() {
    let dir = llama_cpp_data();
    let cases = read_json(&dir.join("grammar_cases.json"));
    let (mut pass_ok, mut fail_ok, mut segments) = (0, 0, 0);
    let mut failures = Vec::new();
    for case in cases.as_array().unwrap() {
        if case.get("input_kind").and_then(|k| k.as_str()) == Some("segments") {
            segments += segment_case(case);
            continue;
        }
        let name = case["name"].as_str().unwrap();
        let text = case["grammar"].as_str().unwrap();
        let g = match compile_gbnf(text, &CompileOptions::default()) {
            Ok(g) => g,
            Err(e) => {
                failures.push(format!("{name}: grammar refused: {e}"));
                continue;
            }
        };
        for (key, want) in [("pass", true), ("fail", false)] {
            for s in case[key].as_array().unwrap() {
                let s = s.as_str().unwrap();
                let got = match_bytes(&g, s.as_bytes()).unwrap() == MatchOutcome::Accepted;
                if got == want {
                    if want { pass_ok += 1 } else { fail_ok += 1 }
                } else {
                    failures.push(format!(
                        "{name}: {s:?} should {}",
                        if want { "pass" } else { "fail" }
                    ));
                }
            }
        }
    }
    eprintln!(
        "grammar_cases: {pass_ok} pass strings accepted, {fail_ok} fail strings rejected, {segments} token-segment inputs agreed"
    );
    assert!(segments > 0, "the token-segment cases ran");
    assert!(
        failures.is_empty(),
        "{} disagreements:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// A token-segment case: text is fed one code point at a time (each a token of its own,
/// ids from 1000), special tokens by id (0..=30); `!<[N]>` matches any token but N. At
/// every step the mask and a step agree. Returns the inputs checked.
fn segment_case(case: &serde_json::Value) -> usize {
    let grammar = case["grammar"].as_str().unwrap();
    let mut checked = 0;
    for (key, want) in [("pass", true), ("fail", false)] {
        for input in case[key].as_array().unwrap() {
            let mut chars: Vec<char> = Vec::new();
            let mut ids = Vec::new();
            for seg in input.as_array().unwrap() {
                match seg {
                    serde_json::Value::String(s) => {
                        for ch in s.chars() {
                            let i = chars.iter().position(|&c| c == ch).unwrap_or_else(|| {
                                chars.push(ch);
                                chars.len() - 1
                            });
                            ids.push(TokenId(1000 + i as u32));
                        }
                    }
                    other => ids.push(TokenId(other["token"].as_u64().unwrap() as u32)),
                }
            }
            let vocab = Vocabulary::from_parts(
                chars
                    .iter()
                    .enumerate()
                    .map(|(i, c)| (TokenId(1000 + i as u32), c.to_string().into_bytes())),
                (0..=30u32)
                    .map(|i| (TokenId(i), format!("<special_{i}>")))
                    .chain([(TokenId(2000), "</s>".to_string())]),
            );
            let space = Arc::new(TokenSpace::new(vocab, None, vec![TokenId(2000)]));
            let g = compile_gbnf(grammar, &CompileOptions::default()).unwrap();
            let mut a = RobustConstrainedAdapter::new(Constraint::new(g, space));
            let mut ok = true;
            for &t in &ids {
                let allowed = a
                    .allowed_token_ids()
                    .map(|m| m.contains(&t))
                    .unwrap_or(false);
                let stepped = a.step_with_token(t).is_ok();
                assert_eq!(allowed, stepped, "mask and step disagree on {t} in {input}");
                if !stepped {
                    ok = false;
                    break;
                }
            }
            assert_eq!(ok && a.is_accepting(), want, "{grammar} on {input}");
            checked += 1;
        }
    }
    checked
}

#[test]
fn grammar_cases_through_the_cli_exit_codes() {
    let dir = llama_cpp_data();
    let cases = read_json(&dir.join("grammar_cases.json"));
    let tmp = std::env::temp_dir().join(format!("corral-cli-cases-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let mut checked = 0;
    for (i, case) in cases.as_array().unwrap().iter().enumerate() {
        if case.get("input_kind").is_some() {
            continue;
        }
        let gpath = tmp.join(format!("case{i}.gbnf"));
        std::fs::write(&gpath, case["grammar"].as_str().unwrap()).unwrap();
        for (key, code) in [("pass", 0), ("fail", 1)] {
            for s in case[key].as_array().unwrap() {
                let (got, _, stderr) = run_corral(
                    &["match", "-q", "--grammar", gpath.to_str().unwrap(), "-"],
                    s.as_str().unwrap().as_bytes(),
                );
                assert_eq!(got, code, "{} {:?}: {stderr}", case["name"], s);
                checked += 1;
            }
        }
    }
    eprintln!("cli: {checked} strings checked by exit code");
    std::fs::remove_dir_all(&tmp).ok();
}

#[test]
fn example_grammars_and_valid_grammars_compile() {
    let dir = llama_cpp_data();
    let mut n = 0;
    for entry in std::fs::read_dir(dir.join("grammars")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "gbnf") {
            let text = std::fs::read_to_string(&path).unwrap();
            let opts = CompileOptions::default().origin(path.display().to_string());
            compile_gbnf(&text, &opts).unwrap_or_else(|e| panic!("{e}"));
            n += 1;
        }
    }
    let valid = read_json(&dir.join("parser_valid_grammars.json"));
    for case in valid.as_array().unwrap() {
        compile_gbnf(
            case["grammar"].as_str().unwrap(),
            &CompileOptions::default(),
        )
        .unwrap_or_else(|e| panic!("{}: {e}", case["name"]));
        n += 1;
    }
    eprintln!("{n} grammars compiled (grammars/*.gbnf and parser_valid_grammars.json)");
}

/// Invalid grammars are refused with exit code 2, except left recursion, which an Earley
/// parser handles (accepted by design), and the large repetition counts, which are
/// accepted and compiled to exact bounded repetitions (or refused by a size limit).
#[test]
fn invalid_grammars_are_refused() {
    let dir = llama_cpp_data();
    let cases = read_json(&dir.join("invalid_grammars.json"));
    let tmp = std::env::temp_dir().join(format!("corral-invalid-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let (mut refused, mut left_rec, mut repetition) = (0, 0, 0);
    for (i, case) in cases.as_array().unwrap().iter().enumerate() {
        let name = case["name"].as_str().unwrap();
        let text = case["grammar"].as_str().unwrap();
        let root = case["root"].as_str().unwrap();
        let result = compile_gbnf(text, &CompileOptions::default().start(root));
        if name.starts_with("left recursion") {
            let g =
                result.unwrap_or_else(|e| panic!("{name}: left recursion must be accepted: {e}"));
            // The language is what the rules say: e.g. root ::= "a" | root "a" is a+.
            if name == "left recursion (simple)" {
                assert_eq!(match_bytes(&g, b"aaaa").unwrap(), MatchOutcome::Accepted);
                assert_ne!(match_bytes(&g, b"").unwrap(), MatchOutcome::Accepted);
            }
            left_rec += 1;
            continue;
        }
        if matches!(
            name,
            "parser failure 4" | "parser failure 5" | "parser failure 6"
        ) {
            // "a"{5000}, "a"{5000,}, "a"{5000,6000}: exact repetition, compiled.
            let g = result.unwrap_or_else(|e| panic!("{name}: {e}"));
            let (min, max) = match name {
                "parser failure 4" => (5000, Some(5000)),
                "parser failure 5" => (5000, None),
                _ => (5000, Some(6000)),
            };
            assert_eq!(
                match_bytes(&g, "a".repeat(min).as_bytes()).unwrap(),
                MatchOutcome::Accepted
            );
            assert_ne!(
                match_bytes(&g, "a".repeat(min - 1).as_bytes()).unwrap(),
                MatchOutcome::Accepted
            );
            let over = max.map_or(7000, |m| m + 1);
            assert_eq!(
                match_bytes(&g, "a".repeat(over).as_bytes()).unwrap() == MatchOutcome::Accepted,
                max.is_none()
            );
            repetition += 1;
            continue;
        }
        let err = result.expect_err(name);
        if name == "parser failure 2" {
            assert!(matches!(err.kind, ErrorKind::Limit { .. }), "{name}: {err}");
        }
        let gpath = tmp.join(format!("invalid{i}.gbnf"));
        std::fs::write(&gpath, text).unwrap();
        let (code, _, stderr) = run_corral(
            &[
                "match",
                "--grammar",
                gpath.to_str().unwrap(),
                "--start",
                root,
                "-",
            ],
            b"x",
        );
        assert_eq!(code, 2, "{name}: {stderr}");
        assert!(
            stderr.contains(&format!("{}:", gpath.display())),
            "{name}: positioned error expected: {stderr}"
        );
        if let Some(valid_root) = case.get("valid_with_root").and_then(|v| v.as_str()) {
            compile_gbnf(text, &CompileOptions::default().start(valid_root)).unwrap();
        }
        refused += 1;
    }
    eprintln!(
        "invalid_grammars: {refused} refused with exit 2, {left_rec} left-recursive accepted by design, {repetition} large repetitions compiled exactly"
    );
    std::fs::remove_dir_all(&tmp).ok();
}
