//! Token ids.

use std::fmt;

/// A token id: a position in the model's logits, and an id of the tokenizer's vocabulary
/// (the logits may be wider than the vocabulary: padded embeddings).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(transparent)]
pub struct TokenId(pub u32);

impl TokenId {
    /// Its position in a mask or in the logits.
    #[inline]
    pub fn index(self) -> usize {
        self.0 as usize
    }

    /// The raw id (what tokenizers and models take).
    #[inline]
    pub fn get(self) -> u32 {
        self.0
    }

    /// Raw ids (a tokenizer's output) as token ids.
    pub fn all(raw: &[u32]) -> Vec<TokenId> {
        raw.iter().map(|&t| TokenId(t)).collect()
    }

    /// Token ids as raw ids (what a model's input takes).
    pub fn raw(ids: &[TokenId]) -> Vec<u32> {
        ids.iter().map(|t| t.0).collect()
    }
}

impl From<u32> for TokenId {
    fn from(id: u32) -> TokenId {
        TokenId(id)
    }
}

impl From<TokenId> for u32 {
    fn from(id: TokenId) -> u32 {
        id.0
    }
}

impl fmt::Display for TokenId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}
