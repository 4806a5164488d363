//! Runs tests/cases/gbnf.toml: every GBNF syntax feature with strings that must pass or
//! fail, and every error kind with its exact rendered message.

use corral::grammar::{CompileOptions, MatchOutcome, compile_gbnf, match_bytes};
use serde::Deserialize;

#[derive(Deserialize)]
struct File {
    case: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    name: String,
    grammar: String,
    start: Option<String>,
    #[serde(default)]
    pass: Vec<String>,
    #[serde(default)]
    fail: Vec<String>,
    error: Option<String>,
    error_prefix: Option<String>,
}

#[test]
fn gbnf_case_file() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/cases/gbnf.toml");
    let file: File = toml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut problems = Vec::new();
    let (mut strings, mut errors) = (0, 0);
    for case in &file.case {
        let opts = CompileOptions::default()
            .origin("case.gbnf")
            .start(case.start.clone().unwrap_or_else(|| "root".into()));
        let result = compile_gbnf(&case.grammar, &opts);
        match (&case.error, &case.error_prefix, result) {
            (Some(want), _, Err(e)) => {
                errors += 1;
                if e.to_string() != want.trim_start_matches('\n') {
                    problems.push(format!(
                        "{}: error message differs:\n--- want\n{}\n--- got\n{}",
                        case.name,
                        want.trim_start_matches('\n'),
                        e
                    ));
                }
            }
            (None, Some(prefix), Err(e)) => {
                errors += 1;
                if !e.to_string().starts_with(prefix.as_str()) {
                    problems.push(format!(
                        "{}: error message differs:\n--- want prefix\n{prefix}\n--- got\n{e}",
                        case.name
                    ));
                }
            }
            (None, None, Ok(g)) => {
                for (s, want) in case
                    .pass
                    .iter()
                    .map(|s| (s, true))
                    .chain(case.fail.iter().map(|s| (s, false)))
                {
                    strings += 1;
                    let got = match_bytes(&g, s.as_bytes()).unwrap() == MatchOutcome::Accepted;
                    if got != want {
                        problems.push(format!(
                            "{}: {s:?} should {}",
                            case.name,
                            if want { "pass" } else { "fail" }
                        ));
                    }
                }
            }
            (_, _, Ok(_)) => problems.push(format!(
                "{}: expected an error, grammar compiled",
                case.name
            )),
            (None, None, Err(e)) => problems.push(format!("{}: unexpected error:\n{e}", case.name)),
        }
    }
    eprintln!(
        "{} cases: {strings} strings, {errors} error messages",
        file.case.len()
    );
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
}
