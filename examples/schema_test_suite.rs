//! The JSON Schema Test Suite through corral, per keyword, beside llguidance's baseline:
//! `cargo run --release --example schema_test_suite` (after `scripts/fetch-assets suites`).

#[path = "../tests/support/suite.rs"]
mod suite;

fn main() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let r = suite::run(
        &root.join("assets/json-schema-test-suite/draft2020-12"),
        Some(&root.join("../shared/conformance/llguidance/json_schema_test_suite/expected_json_schema_test_suite.json")),
    );
    r.print();
    if std::env::args().any(|a| a == "--verbose") {
        for f in &r.failures {
            println!("{f}");
        }
    }
}
