//! [`TokenSpace`]: everything about a model's tokens that constraining needs, built once per
//! tokenizer and shared (`Arc`) by every constraint that uses it.

use crate::TrieError;
use crate::slice::{Alphabet, CharSlice};
use crate::token::TokenId;
use crate::trie::TokenTrie;
use crate::vocab::Vocabulary;
use std::path::Path;
use std::sync::OnceLock;

/// A vocabulary, its trie, the logit width, and the end-of-generation tokens.
#[derive(Clone)]
pub struct TokenSpace {
    vocab: Vocabulary,
    trie: TokenTrie,
    width: usize,
    eos: Vec<TokenId>,
    /// Text tokens made only of ASCII whitespace, by id (computed on first use).
    whitespace: OnceLock<Vec<TokenId>>,
    /// The vocabulary sliced by each [`Alphabet`] (computed on first use).
    slices: [OnceLock<CharSlice>; 2],
    /// The most bytes of a text token (computed on first use).
    longest: OnceLock<usize>,
    /// Text tokens sorted by their bytes (computed on first use).
    by_bytes: OnceLock<SortedTokens>,
}

/// A summary: the vocabulary and trie themselves would print every token (a `Decoder` or a
/// `Constraint` holds a space, so their `Debug` would too).
impl std::fmt::Debug for TokenSpace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenSpace")
            .field("tokens", &self.vocab.len())
            .field("width", &self.width)
            .field("eos", &self.eos)
            .finish_non_exhaustive()
    }
}

impl TokenSpace {
    /// `width` is the model's logit count (at least the vocabulary size; padded embeddings
    /// make it larger, e.g. Qwen3's 151,936 logits for 151,669 tokens). `eos` are the tokens
    /// that end generation; they are allowed exactly when the grammar accepts.
    /// An `eos` token that is also text (has bytes) is made special: it ends generation,
    /// so it is never allowed inside text.
    pub fn new(mut vocab: Vocabulary, width: Option<usize>, eos: Vec<TokenId>) -> TokenSpace {
        for &t in &eos {
            vocab.mark_special(t);
        }
        let trie = TokenTrie::new(&vocab);
        let width = width.unwrap_or(vocab.len()).max(vocab.len());
        TokenSpace {
            vocab,
            trie,
            width,
            eos,
            whitespace: OnceLock::new(),
            slices: [OnceLock::new(), OnceLock::new()],
            longest: OnceLock::new(),
            by_bytes: OnceLock::new(),
        }
    }

    /// From a Hugging Face `tokenizer.json`, with the usual end-of-generation token.
    pub fn from_tokenizer_json(path: &Path) -> Result<TokenSpace, TrieError> {
        let vocab = Vocabulary::from_tokenizer_json(path)?;
        let eos = vocab.default_eos().into_iter().collect();
        Ok(TokenSpace::new(vocab, None, eos))
    }

    /// The vocabulary, with the EOS and stop tokens marked special.
    pub fn vocab(&self) -> &Vocabulary {
        &self.vocab
    }

    /// The trie of the text tokens (special tokens, EOS included, are not in it).
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
        self.slice_of(Alphabet::Strings)
    }

    /// The vocabulary sliced by `alphabet` (computed on first use, like [`Self::slice`]).
    pub fn slice_of(&self, alphabet: Alphabet) -> &CharSlice {
        self.slices[alphabet.index()].get_or_init(|| {
            let mut slice = CharSlice::with_alphabet(&self.vocab, self.width, alphabet);
            if alphabet == Alphabet::Strings {
                slice.index_trie(&self.trie, &self.vocab);
            }
            slice
        })
    }

    /// Every slice, computed now (when the tokenizer is loaded, to keep that off the first
    /// masks).
    pub fn prepare_slices(&self) {
        for a in Alphabet::ALL {
            self.slice_of(a);
        }
    }

    /// The most bytes a text token has.
    pub fn longest_token(&self) -> usize {
        *self.longest.get_or_init(|| {
            self.vocab
                .text_tokens()
                .map(|(_, b)| b.len())
                .max()
                .unwrap_or(0)
        })
    }

    /// The text tokens sorted by their bytes, so that tokens sharing a prefix are
    /// neighbours: for checks that walk the vocabulary without the trie.
    pub fn text_tokens_by_bytes(&self) -> &SortedTokens {
        self.by_bytes.get_or_init(|| {
            let mut v: Vec<(TokenId, &[u8])> = self.vocab.text_tokens().collect();
            v.sort_by(|a, b| a.1.cmp(b.1).then(a.0.cmp(&b.0)));
            let mut sorted = SortedTokens {
                ids: Vec::with_capacity(v.len()),
                ends: Vec::with_capacity(v.len()),
                bytes: Vec::new(),
            };
            for (t, b) in v {
                sorted.ids.push(t);
                sorted.bytes.extend_from_slice(b);
                sorted.ends.push(sorted.bytes.len());
            }
            sorted
        })
    }

    /// Adds stop tokens (allowed, like EOS, exactly when the grammar accepts).
    pub fn with_stop_tokens(mut self, stops: impl IntoIterator<Item = TokenId>) -> TokenSpace {
        let before = self.eos.len();
        for s in stops {
            if !self.eos.contains(&s) {
                self.eos.push(s);
            }
        }
        if self.eos[before..]
            .iter()
            .any(|&t| self.vocab.token_bytes(t).is_some())
        {
            // A stop token that was text leaves the trie.
            return TokenSpace::new(self.vocab, Some(self.width), self.eos);
        }
        self
    }

    /// Sets the logit width (never below the vocabulary size).
    pub fn with_width(mut self, width: usize) -> TokenSpace {
        self.width = width.max(self.vocab.len());
        self.slices = [OnceLock::new(), OnceLock::new()];
        self
    }
}

/// Text tokens in byte order, their bytes laid out one after another (a scan reads memory
/// in order).
#[derive(Clone, Debug, Default)]
pub struct SortedTokens {
    ids: Vec<TokenId>,
    /// Where each token's bytes end in `bytes`.
    ends: Vec<usize>,
    bytes: Vec<u8>,
}

impl SortedTokens {
    /// The number of text tokens.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Whether there are no text tokens.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// The `i`th token in byte order.
    pub fn id(&self, i: usize) -> TokenId {
        self.ids[i]
    }

    /// The bytes of the `i`th token in byte order.
    pub fn bytes(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.bytes[start..self.ends[i]]
    }

    /// The end of the run of tokens from `i` (below `end`) that start with `prefix`, which
    /// the `i`th does (they are neighbours in byte order).
    pub fn run_end(&self, i: usize, end: usize, prefix: &[u8]) -> usize {
        let (mut lo, mut hi) = (i, end);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.bytes(mid).starts_with(prefix) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A text token chosen as EOS (Gemma's `</s>` is text) leaves the trie: it ends
    /// generation, so no mask may offer it as text.
    #[test]
    fn eos_that_is_text_is_never_text() {
        let vocab = Vocabulary::from_parts(
            [(TokenId(0), b"a".to_vec()), (TokenId(1), b"</s>".to_vec())],
            [(TokenId(2), "<eos>".to_string())],
        );
        assert_eq!(
            vocab.default_eos(),
            Some(TokenId(2)),
            "a text `</s>` is not the EOS"
        );
        let space = TokenSpace::new(vocab.clone(), None, vec![TokenId(1)]);
        assert_eq!(space.vocab().token_bytes(TokenId(1)), None);
        assert!(space.vocab().is_special(TokenId(1)));
        let text: Vec<_> = space.vocab().text_tokens().map(|(t, _)| t).collect();
        assert_eq!(text, vec![TokenId(0)]);
        let stop = TokenSpace::new(vocab, None, vec![TokenId(2)]).with_stop_tokens([TokenId(0)]);
        assert_eq!(stop.eos(), &[TokenId(2), TokenId(0)]);
        let text: Vec<_> = stop.vocab().text_tokens().map(|(t, _)| t).collect();
        assert_eq!(
            text,
            vec![TokenId(1)],
            "the stop token `a` left the text tokens"
        );
    }

    /// `Debug` summarizes: a 128k-token space would print every token's bytes.
    #[test]
    fn debug_is_a_summary() {
        let vocab = Vocabulary::from_parts(
            (0..1000u32).map(|i| (TokenId(i), format!("token{i}").into_bytes())),
            [],
        );
        let text = format!("{:?}", TokenSpace::new(vocab, Some(1024), vec![TokenId(7)]));
        assert_eq!(
            text,
            "TokenSpace { tokens: 1000, width: 1024, eos: [TokenId(7)], .. }"
        );
    }
}
