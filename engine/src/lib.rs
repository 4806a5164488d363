//! # corral-engine
//!
//! Joins a compiled grammar with a token trie: the `RobustConstrainedAdapter` (token masks),
//! sampling, the generation loop and the stream splitter. (Being built: issues 3-5.)
