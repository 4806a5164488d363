//! # corral-trie
//!
//! Tokenizer vocabularies as byte strings, a flat depth-first token trie and token bitsets.
//! Knows nothing of grammars or models. (Being built: issue 3.)
