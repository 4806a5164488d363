//! A test input that may be missing, shared by the test crates of the workspace (included
//! with `#[path]`).

use std::path::PathBuf;

/// `Some(path)` if it exists. Missing, it fails the test when `CORRAL_REQUIRE_ASSETS=1`
/// (what `scripts/test` sets), saying how to get it (`how`); otherwise the skip is printed
/// on standard output.
pub fn require_input(path: PathBuf, how: &str) -> Option<PathBuf> {
    if path.exists() {
        return Some(path);
    }
    let message = format!("{} is missing ({how})", path.display());
    if std::env::var_os("CORRAL_REQUIRE_ASSETS").is_some_and(|v| v != "0") {
        panic!("{message}");
    }
    println!("skipped: {message}");
    None
}
