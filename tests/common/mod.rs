//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::PathBuf;

/// `../shared/conformance` beside the checkout (or `$CORRAL_CONFORMANCE`), required as
/// [`require_input`] says.
pub fn conformance_dir() -> PathBuf {
    let dir = std::env::var_os("CORRAL_CONFORMANCE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/conformance"));
    require_input(
        dir,
        "the peer conformance data sits in ../shared/conformance beside the checkout, or set CORRAL_CONFORMANCE",
    )
}

/// llama.cpp's grammars and conformance cases, kept in `tests/data/llama_cpp`.
pub fn llama_cpp_data() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/llama_cpp")
}

/// Reads a JSON file.
pub fn read_json(path: &std::path::Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The `corral` binary built for this test run.
pub fn corral_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_corral"))
}

/// Runs `corral` with `args` and `stdin`; returns (exit code, stdout, stderr).
pub fn run_corral(args: &[&str], stdin: &[u8]) -> (i32, String, String) {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = Command::new(corral_bin())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn corral");
    // Written from a thread of its own: a child that answers while it reads would otherwise
    // fill its output pipe while this side still writes, and both would wait forever. The
    // child may exit before reading (e.g. on a bad grammar): a broken pipe is fine.
    let mut input = child.stdin.take().unwrap();
    let stdin = stdin.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = input.write_all(&stdin);
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Writes `text` to `name` in a folder of this test process's own; returns the path.
pub fn temp_file(name: &str, text: &str) -> String {
    let dir = std::env::temp_dir().join(format!("corral-tests-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

#[path = "../support/require.rs"]
mod require;
pub use require::require_input;

/// The tokenizers `scripts/fetch-assets` fetches, by folder name under assets/tokenizers.
pub const ASSET_TOKENIZERS: [&str; 5] = ["llama3_1", "qwen3", "gptoss", "llama2", "gemma3"];

/// `assets/tokenizers/NAME/tokenizer.json`, required as [`require_input`] says.
pub fn asset_tokenizer(name: &str) -> PathBuf {
    require_input(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("assets/tokenizers")
            .join(name)
            .join("tokenizer.json"),
        "run scripts/fetch-assets",
    )
}
