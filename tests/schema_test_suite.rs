//! The official JSON Schema Test Suite (draft 2020-12; `scripts/fetch-assets suites`)
//! through the schema front end in strict mode: nothing invalid is ever accepted, and the
//! share of tests passed does not fall (see `tests/support/suite.rs`; the table beside
//! llguidance's baseline: `cargo run --release --example schema_test_suite`).

mod common;

#[path = "support/suite.rs"]
mod suite;

#[test]
#[ignore = "needs scripts/fetch-assets"]
fn json_schema_test_suite() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = root.join("assets/json-schema-test-suite/draft2020-12");
    let dir = common::require_input(dir, "run scripts/fetch-assets suites");
    let baseline = root.join(
        "../shared/conformance/llguidance/json_schema_test_suite/expected_json_schema_test_suite.json",
    );
    let r = suite::run(&dir, Some(&baseline));
    r.print();
    for f in &r.failures {
        eprintln!("{f}");
    }
    let t = r.total();
    assert_eq!(t.false_accepts, 0, "{}", r.failures.join("\n"));
    // Measured (docs/json-schema.md): the false rejections are by design (property order,
    // formats asserted, 1.0 is not written as an integer).
    assert!(t.pass >= 594, "passed {} of {}", t.pass, t.tests);
    assert!(t.false_rejects <= 16, "{}", r.failures.join("\n"));
}
