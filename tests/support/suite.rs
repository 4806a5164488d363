//! The official JSON Schema Test Suite (draft 2020-12, fetched by `scripts/fetch-assets
//! suites` into `assets/json-schema-test-suite/`), run through corral's schema front end in
//! strict mode, beside llguidance's published baseline for the same suite
//! (`../shared/conformance/llguidance/json_schema_test_suite/`). Used by
//! `tests/schema_test_suite.rs` and printed by `examples/schema_test_suite.rs`.
#![allow(dead_code)]

use corral::grammar::{MatchOutcome, match_bytes};
use corral::schema::{JsonSchemaOptions, compile_json_schema_value};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// Per keyword file: corral's counts, and llguidance's for the same tests.
#[derive(Clone, Debug, Default)]
pub struct Row {
    pub tests: usize,
    /// Compiled, and the verdict agrees with the suite.
    pub pass: usize,
    /// The schema was refused (a keyword the grammar cannot express, a remote `$ref`).
    pub refused: usize,
    pub false_accepts: usize,
    pub false_rejects: usize,
    /// llguidance's baseline: tests labelled `pass`, and tests present in the baseline.
    pub llg_pass: usize,
    pub llg_known: usize,
}

#[derive(Clone, Debug, Default)]
pub struct Report {
    pub rows: BTreeMap<String, Row>,
    /// `keyword / group / test` of each false accept and false reject.
    pub failures: Vec<String>,
}

impl Report {
    pub fn total(&self) -> Row {
        let mut t = Row::default();
        for r in self.rows.values() {
            t.tests += r.tests;
            t.pass += r.pass;
            t.refused += r.refused;
            t.false_accepts += r.false_accepts;
            t.false_rejects += r.false_rejects;
            t.llg_pass += r.llg_pass;
            t.llg_known += r.llg_known;
        }
        t
    }

    pub fn print(&self) {
        println!(
            "{:<24} {:>5} {:>6} {:>7} {:>6} {:>6} {:>9}",
            "keyword file", "tests", "pass", "refused", "f.acc", "f.rej", "llg pass"
        );
        for (k, r) in self.rows.iter().chain(
            [("TOTAL".to_string(), self.total())]
                .iter()
                .map(|(a, b)| (a, b)),
        ) {
            println!(
                "{:<24} {:>5} {:>6} {:>7} {:>6} {:>6} {:>4}/{:<4}",
                k,
                r.tests,
                r.pass,
                r.refused,
                r.false_accepts,
                r.false_rejects,
                r.llg_pass,
                r.llg_known
            );
        }
    }
}

/// Runs every test of `suite_dir` (the `draft2020-12` folder); `baseline` is llguidance's
/// `expected_json_schema_test_suite.json` if present.
pub fn run(suite_dir: &Path, baseline: Option<&Path>) -> Report {
    let llg: Value = baseline
        .and_then(|p| std::fs::read_to_string(p).ok())
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(Value::Null);
    let mut files: Vec<_> = std::fs::read_dir(suite_dir)
        .expect("suite folder")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    let mut report = Report::default();
    for path in files {
        let keyword = path.file_stem().unwrap().to_string_lossy().to_string();
        let groups: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let row = report.rows.entry(keyword.clone()).or_default();
        for group in groups.as_array().unwrap() {
            let gname = group["description"].as_str().unwrap_or("");
            let compiled =
                compile_json_schema_value(&group["schema"], &JsonSchemaOptions::default());
            for test in group["tests"].as_array().unwrap() {
                let tname = test["description"].as_str().unwrap_or("");
                row.tests += 1;
                if let Some(label) = llg["draft2020-12"][&keyword][gname][tname].as_str() {
                    row.llg_known += 1;
                    row.llg_pass += (label == "pass") as usize;
                }
                let Ok(c) = &compiled else {
                    row.refused += 1;
                    continue;
                };
                let valid = test["valid"].as_bool().unwrap();
                let text = serde_json::to_string(&test["data"]).unwrap();
                let accepted = matches!(
                    match_bytes(&c.grammar, text.as_bytes()),
                    Ok(MatchOutcome::Accepted)
                );
                match (valid, accepted) {
                    (true, true) | (false, false) => row.pass += 1,
                    (false, true) => {
                        row.false_accepts += 1;
                        report.failures.push(format!(
                            "false accept: {keyword} / {gname} / {tname}: {text}"
                        ));
                    }
                    (true, false) => {
                        row.false_rejects += 1;
                        report.failures.push(format!(
                            "false reject: {keyword} / {gname} / {tname}: {text}"
                        ));
                    }
                }
            }
        }
    }
    report
}
