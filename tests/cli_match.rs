//! `corral match`: the exit-code contract (0 in the language, 1 not, 2 error) and the
//! messages, golden.

mod common;

use common::run_corral;

fn write_grammar(name: &str, text: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("corral-cli-match-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

const KV: &str = "root ::= pair (\",\" \"\\n\"? pair)*\npair ::= [a-z]+ \"=\" [0-9]+\n";

#[test]
fn accepted_input_exits_0() {
    let g = write_grammar("kv.gbnf", KV);
    let (code, out, err) = run_corral(&["match", "--grammar", g.to_str().unwrap()], b"a=1,bc=23");
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "match: 9 bytes accepted\n");
    assert_eq!(err, "");
}

#[test]
fn rejected_byte_exits_1_with_offset_line_col_and_caret() {
    let g = write_grammar("kv2.gbnf", KV);
    let (code, out, err) = run_corral(
        &["match", "--grammar", g.to_str().unwrap(), "-"],
        b"a=1,\nbc=2x3",
    );
    assert_eq!(code, 1);
    assert_eq!(
        out,
        "no match: rejected at byte offset 9 (line 2, column 5)\n"
    );
    assert_eq!(
        err,
        "<stdin>:2:5: byte offset 9: 'x' (byte 0x78) cannot come here: expected one of: [,0-9] (in pair (\",\" \"\\n\"? pair)*)\nbc=2x3\n    ^\n"
    );
}

#[test]
fn early_end_exits_1_with_expected() {
    let g = write_grammar("kv3.gbnf", KV);
    let (code, out, err) = run_corral(&["match", "-q", "--grammar", g.to_str().unwrap()], b"a=1,b");
    assert_eq!(code, 1);
    assert_eq!(out, "");
    assert_eq!(
        err,
        "<stdin>:1:6: byte offset 5: input ends early: expected one of: [=a-z] (in pair (\",\" \"\\n\"? pair)*)\n"
    );
}

#[test]
fn input_from_a_file() {
    let g = write_grammar("kv4.gbnf", KV);
    let input = write_grammar("input.txt", "a=1");
    let (code, _, _) = run_corral(
        &[
            "match",
            "--grammar",
            g.to_str().unwrap(),
            input.to_str().unwrap(),
        ],
        b"",
    );
    assert_eq!(code, 0);
}

#[test]
fn invalid_grammar_exits_2_with_positioned_error() {
    let g = write_grammar("bad.gbnf", "root ::= pair\npair ::= [a-z]+ \"=\" valeu\n");
    let (code, out, err) = run_corral(&["match", "--grammar", g.to_str().unwrap()], b"a=1");
    assert_eq!(code, 2);
    assert_eq!(out, "");
    assert_eq!(
        err,
        format!(
            "error: {}:2:21: undefined rule 'valeu'\npair ::= [a-z]+ \"=\" valeu\n                    ^\n",
            g.display()
        )
    );
}

#[test]
fn missing_files_and_bad_arguments_exit_2() {
    let (code, _, err) = run_corral(&["match", "--grammar", "/nonexistent/g.gbnf"], b"");
    assert_eq!(code, 2);
    assert!(
        err.contains("cannot read grammar /nonexistent/g.gbnf"),
        "{err}"
    );
    let g = write_grammar("kv5.gbnf", KV);
    let (code, _, err) = run_corral(
        &[
            "match",
            "--grammar",
            g.to_str().unwrap(),
            "/nonexistent/input",
        ],
        b"",
    );
    assert_eq!(code, 2);
    assert!(
        err.contains("cannot read input /nonexistent/input"),
        "{err}"
    );
    let (code, _, _) = run_corral(&["match"], b"");
    assert_eq!(code, 2, "missing --grammar is a usage error");
}

#[test]
fn start_rule_option() {
    let g = write_grammar("kv6.gbnf", KV);
    let (code, _, _) = run_corral(
        &["match", "--grammar", g.to_str().unwrap(), "--start", "pair"],
        b"a=1",
    );
    assert_eq!(code, 0);
    let (code, _, _) = run_corral(
        &["match", "--grammar", g.to_str().unwrap(), "--start", "pair"],
        b"a=1,b=2",
    );
    assert_eq!(code, 1);
    let (code, _, err) = run_corral(
        &["match", "--grammar", g.to_str().unwrap(), "--start", "nope"],
        b"a=1",
    );
    assert_eq!(code, 2);
    assert!(
        err.contains("grammar has no start rule 'nope' (defined rules: root, pair)"),
        "{err}"
    );
}
