//! Models from the Hugging Face Hub: `owner/name` (safetensors) or `owner/name:FILE.gguf`.
//! Files come from the local Hub cache when they are there (so offline use of the cache needs
//! no network; set `HF_HUB_OFFLINE=1` to never try), otherwise they are downloaded with a
//! progress bar (indicatif, through hf-hub) into the cache.

use crate::LoadError;
use hf_hub::api::sync::{ApiBuilder, ApiError};
use hf_hub::{Cache, Repo};
use std::path::PathBuf;

/// Whether `source` names a Hub repository rather than a local path.
pub fn is_repo_id(source: &str) -> bool {
    let repo = source.split(':').next().unwrap_or(source);
    repo.split('/').count() == 2
        && !std::path::Path::new(source).exists()
        && !repo.starts_with('.')
        && !repo.starts_with('/')
}

/// A file of a Hub model repository, from the cache or downloaded.
pub fn fetch(repo_id: &str, file: &str) -> Result<PathBuf, LoadError> {
    let repo = Repo::model(repo_id.to_string());
    if let Some(p) = Cache::from_env().repo(repo.clone()).get(file) {
        return Ok(p);
    }
    if std::env::var_os("HF_HUB_OFFLINE").is_some_and(|v| v != "0") {
        return Err(LoadError::NotFound(format!(
            "{repo_id}/{file} is not in the Hub cache and HF_HUB_OFFLINE is set"
        )));
    }
    let api = ApiBuilder::from_env()
        .with_progress(true)
        .build()
        .map_err(|e| LoadError::Hub {
            what: "cannot start the Hub client".into(),
            source: Box::new(e),
        })?;
    api.repo(repo).get(file).map_err(|e| {
        if is_missing(&e) {
            LoadError::NotFound(format!("{repo_id} has no {file}"))
        } else {
            LoadError::Hub {
                what: format!("cannot download {repo_id}/{file}"),
                source: Box::new(e),
            }
        }
    })
}

/// Whether the Hub answered that the file is not there (404), as opposed to a failure to
/// ask it (network, server, TLS): only the first may be taken as an optional file's absence.
fn is_missing(e: &ApiError) -> bool {
    match e {
        ApiError::RequestError(e) => matches!(**e, ureq::Error::Status(404, _)),
        ApiError::TooManyRetries(e) => is_missing(e),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_404_is_a_missing_file() {
        let status = |code| {
            let response = ureq::Response::new(code, "status", "").expect("a response");
            ApiError::RequestError(Box::new(ureq::Error::Status(code, response)))
        };
        assert!(is_missing(&status(404)));
        assert!(is_missing(&ApiError::TooManyRetries(Box::new(status(404)))));
        assert!(!is_missing(&status(500)));
        assert!(!is_missing(&status(401)));
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        assert!(!is_missing(&ApiError::IoError(io)));
    }
}
