//! # corral-models
//!
//! The only crate that links candle: model loading, chat templates, applying masks to
//! logits. (Being built: issue 4.)
