//! Models from the Hugging Face Hub: `owner/name` (safetensors) or `owner/name:FILE.gguf`.
//! Files come from the local Hub cache when they are there (so offline use of the cache needs
//! no network; set `HF_HUB_OFFLINE=1` to never try), otherwise they are downloaded with a
//! progress bar (indicatif, through hf-hub) into the cache.

use crate::LoadError;
use hf_hub::api::sync::ApiBuilder;
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
    api.repo(repo).get(file).map_err(|e| LoadError::Hub {
        what: format!("cannot download {repo_id}/{file}"),
        source: Box::new(e),
    })
}
