//! Why a model could not be loaded ([`LoadError`]).

use std::path::Path;

/// Why a model could not be loaded (or its prompt rendered). The causes are kept as
/// sources: print the chain (`{:#}` with anyhow) to see them.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("model not found: {0}")]
    NotFound(String),
    #[error("cannot read {path}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{what}")]
    Json {
        what: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("{what}")]
    Candle {
        what: String,
        #[source]
        source: candle_core::Error,
    },
    #[error("bad model: {0}")]
    Format(String),
    /// A load option that cannot apply (such as a context cap on a model already shared).
    #[error("{0}")]
    Option(String),
    #[error("{what}")]
    Hub {
        what: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("device: {0}")]
    Device(String),
    #[error("tokenizer: {what}")]
    Tokenizer {
        what: String,
        #[source]
        source: tokenizers::Error,
    },
    #[error("chat template")]
    Template(#[source] minijinja::Error),
}

impl LoadError {
    pub(crate) fn io(path: &Path, source: std::io::Error) -> LoadError {
        LoadError::Io {
            path: path.display().to_string(),
            source,
        }
    }

    pub(crate) fn candle(what: impl Into<String>, source: candle_core::Error) -> LoadError {
        LoadError::Candle {
            what: what.into(),
            source: without_backtrace(source),
        }
    }

    pub(crate) fn tokenizer(what: impl Into<String>, source: tokenizers::Error) -> LoadError {
        LoadError::Tokenizer {
            what: what.into(),
            source,
        }
    }
}

/// `e` without the backtraces candle attaches (with `RUST_BACKTRACE` set, its errors
/// print one in their message): a user reads what went wrong, not a stack.
pub(crate) fn without_backtrace(e: candle_core::Error) -> candle_core::Error {
    use candle_core::Error;
    match e {
        Error::WithBacktrace { inner, .. } => without_backtrace(*inner),
        Error::Context { inner, context } => Error::Context {
            inner: Box::new(without_backtrace(*inner)),
            context,
        },
        Error::WithPath { inner, path } => Error::WithPath {
            inner: Box::new(without_backtrace(*inner)),
            path,
        },
        e => e,
    }
}
