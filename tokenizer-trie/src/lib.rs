//! # corral-trie
//!
//! Tokenizer vocabularies as byte strings, a flat depth-first token trie, and token masks.
//! Knows nothing of grammars or models: the engine joins the trie with a grammar through the
//! one-method-each [`ByteRecognizer`] seam.
//!
//! - [`Vocabulary`]: every token id's bytes (GPT-2 byte-level and SentencePiece alphabets
//!   undone), special tokens apart, by id and by name.
//! - [`TokenTrie`]: all text tokens in one array in depth-first order, with subtree sizes;
//!   [`TokenTrie::walk`] visits it with a recognizer, skipping rejected subtrees.
//! - Masks are [`FixedBitSet`]s as wide as the model's logits ([`new_mask`]): that width can
//!   exceed the vocabulary (padded embeddings), so it is always a parameter.
//!
//! ```
//! use corral_trie::{ByteRecognizer, TokenId, TokenTrie, new_mask};
//!
//! // Accept any prefix of "hello".
//! struct Hello(usize);
//! impl ByteRecognizer for Hello {
//!     fn push(&mut self, b: u8) -> bool {
//!         let ok = b"hello".get(self.0) == Some(&b);
//!         if ok { self.0 += 1 }
//!         ok
//!     }
//!     fn pop(&mut self, n: usize) { self.0 -= n }
//! }
//! let trie = TokenTrie::from_entries([
//!     (b"he".to_vec(), TokenId(0)),
//!     (b"hello".to_vec(), TokenId(1)),
//!     (b"hi".to_vec(), TokenId(2)),
//! ]);
//! let mut mask = new_mask(8); // logits wider than the vocabulary
//! trie.walk(&mut Hello(0), &mut mask);
//! assert_eq!(mask.ones().collect::<Vec<_>>(), vec![0, 1]);
//! ```

pub mod slice;
pub mod space;
pub mod token;
pub mod trie;
pub mod vocab;

pub use fixedbitset::FixedBitSet;
pub use slice::{Alphabet, CharSlice, Prefix, SuffixId, Tail, is_slice_char};
pub use space::{SortedTokens, TokenSpace};
pub use token::TokenId;
pub use trie::{ByteRecognizer, Node, NodeId, TokenTrie};
pub use vocab::{ByteEncoding, Vocabulary, continuation_tokenizer};

/// An empty token mask `width` bits wide (the model's logit count, not the vocab size).
pub fn new_mask(width: usize) -> FixedBitSet {
    FixedBitSet::with_capacity(width)
}

/// Errors loading a vocabulary.
#[derive(Debug, thiserror::Error)]
pub enum TrieError {
    /// A `tokenizer.json` that the `tokenizers` crate cannot load (missing, unreadable or
    /// malformed).
    #[error("cannot load tokenizer {path}: {message}")]
    Tokenizer {
        /// The file's path, as given.
        path: String,
        /// The `tokenizers` crate's error message.
        message: String,
    },
}
