//! A test input that may be missing, shared by the test crates of the workspace (included
//! with `#[path]`). Tests that read one are `#[ignore]`d with what they need, so a plain
//! `cargo test` lists them as ignored; `scripts/test` runs them with `--include-ignored`.

use std::path::PathBuf;

/// `path`, which must exist: a test that reads it fails, saying how to get it (`how`).
pub fn require_input(path: PathBuf, how: &str) -> PathBuf {
    assert!(path.exists(), "{} is missing ({how})", path.display());
    path
}
