//! Writes a deterministic pretty JSON document of about N bytes (inside json.gbnf):
//! `cargo run --release --example gen_json -- 8388608 > doc.json`.
#[path = "../tests/support/jsongen.rs"]
mod jsongen;

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1 << 20);
    print!("{}", jsongen::document(n, 42));
}
