//! MaskBench conformance report (the numbers in docs/json-schema.md):
//!
//! ```text
//! cargo run --release --example maskbench -- [DIR] [--filter S] [--verbose] [--cold]
//! ```
//!
//! DIR defaults to `../shared/conformance/jsonschemabench`. `--cold` also times every
//! compile with the process-wide lexeme cache cleared.

#[path = "../tests/support/maskbench.rs"]
mod maskbench;

fn main() {
    let mut dir = std::path::PathBuf::from("../shared/conformance/jsonschemabench");
    let mut o = maskbench::Options::default();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--filter" => o.filter = args.next().unwrap_or_default(),
            "--verbose" => o.verbose = true,
            "--cold" => o.cold_timings = true,
            _ => dir = a.into(),
        }
    }
    maskbench::run(&dir, &o).print();
}
