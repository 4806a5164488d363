//! [`TokenSpace`]: everything about a model's tokens that constraining needs, built once per
//! tokenizer and shared (`Arc`) by every constraint that uses it.

use crate::TrieError;
use crate::slice::CharSlice;
use crate::token::TokenId;
use crate::trie::TokenTrie;
use crate::vocab::Vocabulary;
use std::path::Path;
use std::sync::OnceLock;

/// A vocabulary, its trie, the logit width, and the end-of-generation tokens.
#[derive(Clone, Debug)]
pub struct TokenSpace {
    vocab: Vocabulary,
    trie: TokenTrie,
    width: usize,
    eos: Vec<TokenId>,
    /// Text tokens made only of ASCII whitespace, by id (computed on first use).
    whitespace: OnceLock<Vec<TokenId>>,
    /// The vocabulary sliced by string characters (computed on first use).
    slice: OnceLock<CharSlice>,
}

impl TokenSpace {
    /// `width` is the model's logit count (at least the vocabulary size; padded embeddings
    /// make it larger, e.g. Qwen3's 151,936 logits for 151,669 tokens). `eos` are the tokens
    /// that end generation; they are allowed exactly when the grammar accepts.
    pub fn new(vocab: Vocabulary, width: Option<usize>, eos: Vec<TokenId>) -> TokenSpace {
        let trie = TokenTrie::new(&vocab);
        let width = width.unwrap_or(vocab.len()).max(vocab.len());
        TokenSpace {
            vocab,
            trie,
            width,
            eos,
            whitespace: OnceLock::new(),
            slice: OnceLock::new(),
        }
    }

    /// From a Hugging Face `tokenizer.json`, with the usual end-of-generation token.
    pub fn from_tokenizer_json(path: &Path) -> Result<TokenSpace, TrieError> {
        let vocab = Vocabulary::from_tokenizer_json(path)?;
        let eos = vocab.default_eos().into_iter().collect();
        Ok(TokenSpace::new(vocab, None, eos))
    }

    pub fn vocab(&self) -> &Vocabulary {
        &self.vocab
    }

    pub fn trie(&self) -> &TokenTrie {
        &self.trie
    }

    /// Width of masks (the model's logit count).
    pub fn width(&self) -> usize {
        self.width
    }

    /// End-of-generation and stop tokens.
    pub fn eos(&self) -> &[TokenId] {
        &self.eos
    }

    /// Text tokens made only of ASCII whitespace, sorted by id.
    pub fn whitespace_tokens(&self) -> &[TokenId] {
        self.whitespace.get_or_init(|| {
            self.vocab
                .text_tokens()
                .filter(|(_, b)| !b.is_empty() && b.iter().all(u8::is_ascii_whitespace))
                .map(|(id, _)| id)
                .collect()
        })
    }

    /// The vocabulary sliced by string characters ([`CharSlice`]): computed on first use,
    /// a few milliseconds for a large vocabulary; call it when the tokenizer is loaded to
    /// keep that off the first mask.
    pub fn slice(&self) -> &CharSlice {
        self.slice
            .get_or_init(|| CharSlice::new(&self.vocab, self.width))
    }

    /// Adds stop tokens (allowed, like EOS, exactly when the grammar accepts).
    pub fn with_stop_tokens(mut self, stops: impl IntoIterator<Item = TokenId>) -> TokenSpace {
        for s in stops {
            if !self.eos.contains(&s) {
                self.eos.push(s);
            }
        }
        self
    }

    /// Sets the logit width (never below the vocabulary size).
    pub fn with_width(mut self, width: usize) -> TokenSpace {
        self.width = width.max(self.vocab.len());
        self.slice = OnceLock::new();
        self
    }
}
