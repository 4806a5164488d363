//! Files and standard input read whole (grammars, schemas, prompts, texts to replay), each
//! at most `--max-input-bytes`: a larger one (or `/dev/zero`) is a clear error before
//! memory runs out, never a read without end.

use anyhow::{Context, Result, anyhow};
use std::io::Read;
use std::path::Path;
use std::sync::OnceLock;

/// The default of `--max-input-bytes`: 64 MiB.
pub const DEFAULT_MAX_INPUT_BYTES: u64 = 64 << 20;

static MAX: OnceLock<u64> = OnceLock::new();

/// Sets the bound (once, from the command line).
pub fn set_max(bytes: u64) {
    let _ = MAX.set(bytes);
}

/// The bound.
pub fn max() -> u64 {
    *MAX.get().unwrap_or(&DEFAULT_MAX_INPUT_BYTES)
}

/// The bytes of `path` (`-`: standard input), `what` naming it in errors.
pub fn read(path: &Path, what: &str) -> Result<Vec<u8>> {
    let name = path.display();
    if path.as_os_str() == "-" {
        return read_from(&mut std::io::stdin().lock(), what, "standard input");
    }
    let mut f = std::fs::File::open(path).with_context(|| format!("cannot read {what} {name}"))?;
    read_from(&mut f, what, &name.to_string())
}

/// The text of `path` (UTF-8).
pub fn read_text(path: &Path, what: &str) -> Result<String> {
    String::from_utf8(read(path, what)?)
        .map_err(|e| anyhow!("{what} {}: not UTF-8 ({e})", path.display()))
}

/// At most [`max`] bytes of `r`; more is an error.
pub fn read_from(r: &mut dyn Read, what: &str, name: &str) -> Result<Vec<u8>> {
    let limit = max();
    let mut buf = Vec::new();
    r.take(limit.saturating_add(1))
        .read_to_end(&mut buf)
        .with_context(|| format!("cannot read {what} {name}"))?;
    if buf.len() as u64 > limit {
        return Err(too_large(what, name));
    }
    Ok(buf)
}

/// The error for input past the bound.
pub fn too_large(what: &str, name: &str) -> anyhow::Error {
    anyhow!(
        "{what} {name} is larger than {} bytes (--max-input-bytes)",
        max()
    )
}
