//! Why a model could not be loaded ([`LoadError`]).

use std::path::Path;

/// Why a model could not be loaded (or its prompt rendered). The causes are kept as
/// sources: print the chain (`{:#}` with anyhow) to see them.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// No model at the source: no such path, a folder without a required file, or a Hub file
    /// that is not cached while `HF_HUB_OFFLINE` is set.
    #[error("model not found: {0}")]
    NotFound(String),
    /// A file that cannot be opened or read.
    #[error("cannot read {path}")]
    Io {
        /// The file, as displayed.
        path: String,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// A JSON file (such as `config.json`) that does not parse, or does not describe the
    /// architecture it names.
    #[error("{what}")]
    Json {
        /// Which file, and what it should have been.
        what: String,
        /// serde_json's error.
        #[source]
        source: serde_json::Error,
    },
    /// candle fails to read a file's weights or metadata, build the network or open the device.
    #[error("{what}")]
    Candle {
        /// What failed, naming the file or step (such as loading the weights).
        what: String,
        /// candle's error, its backtraces removed.
        #[source]
        source: candle_core::Error,
    },
    /// A model file or folder that is readable but wrong: not GGUF, missing metadata, an
    /// architecture or setting corral does not support, a vocabulary it cannot use.
    #[error("bad model: {0}")]
    Format(String),
    /// A load option that cannot apply (such as a context cap on a model already shared).
    #[error("{0}")]
    Option(String),
    /// The Hugging Face Hub client cannot start, or a download fails.
    #[error("{what}")]
    Hub {
        /// What failed: starting the client, or downloading which file.
        what: String,
        /// The Hub client's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A device that cannot be used: an unknown `--device` value, or CUDA in a build without
    /// the `cuda` feature.
    #[error("device: {0}")]
    Device(String),
    /// A tokenizer that cannot be built, or that fails to encode or decode.
    #[error("tokenizer: {what}")]
    Tokenizer {
        /// What failed: the file, or the step (encoding the prompt, building the GGUF
        /// pre-tokenizer, ...).
        what: String,
        /// The tokenizers crate's error.
        #[source]
        source: tokenizers::Error,
    },
    /// A chat template that does not compile or fails to render (its `raise_exception`
    /// included).
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
