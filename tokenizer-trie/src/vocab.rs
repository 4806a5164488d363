//! Vocabularies as byte strings.
//!
//! A model's tokens are stored in an alphabet of the tokenizer's own: GPT-2 byte-level BPE
//! maps every byte to a printable character (`Ġ` is a space), SentencePiece writes spaces as
//! `▁` and unknown bytes as `<0xHH>`. Grammars see bytes, so every token is turned back into
//! the bytes it stands for. Special tokens (`<|eot_id|>`, `<|im_end|>`, `<|channel|>`) are
//! not text: they are kept apart, reachable by id and by name.

use crate::TrieError;
use crate::token::TokenId;
use rustc_hash::FxHashMap;
use std::path::Path;

/// How a tokenizer writes bytes in its token strings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ByteEncoding {
    /// GPT-2 byte-level: each byte is one character of a fixed printable alphabet.
    ByteLevel,
    /// SentencePiece: `▁` is a space, `<0xHH>` is one raw byte, the rest is UTF-8.
    SentencePiece,
    /// Token strings are the text itself.
    Raw,
}

/// A vocabulary: each token id's bytes, or the special token it is.
#[derive(Clone, Debug)]
pub struct Vocabulary {
    /// `bytes[id]`: the token's bytes; `None` for special tokens and unused ids.
    bytes: Vec<Option<Box<[u8]>>>,
    special: Vec<(TokenId, String)>,
    by_text: FxHashMap<String, TokenId>,
    encoding: ByteEncoding,
}

/// The GPT-2 byte-level alphabet: byte -> char.
pub fn byte_level_char(b: u8) -> char {
    let printable = |b: u8| (b'!'..=b'~').contains(&b) || (0xA1..=0xAC).contains(&b) || b >= 0xAE;
    if printable(b) {
        return char::from(b);
    }
    let n = (0..b).filter(|&x| !printable(x)).count() as u32;
    char::from_u32(256 + n).expect("valid code point")
}

fn byte_level_table() -> FxHashMap<char, u8> {
    (0..=255u8).map(|b| (byte_level_char(b), b)).collect()
}

/// `<0xHH>` -> the byte.
fn sentencepiece_byte(s: &str) -> Option<u8> {
    let hex = s.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() == 2 {
        u8::from_str_radix(hex, 16).ok()
    } else {
        None
    }
}

impl Vocabulary {
    /// Builds a vocabulary from explicit parts: `(id, bytes)` for text tokens and
    /// `(id, name)` for special tokens. Ids need not be dense.
    pub fn from_parts(
        tokens: impl IntoIterator<Item = (TokenId, Vec<u8>)>,
        special: impl IntoIterator<Item = (TokenId, String)>,
    ) -> Vocabulary {
        let mut v = Vocabulary {
            bytes: Vec::new(),
            special: Vec::new(),
            by_text: FxHashMap::default(),
            encoding: ByteEncoding::Raw,
        };
        for (id, b) in tokens {
            v.set_bytes(id, b);
        }
        for (id, name) in special {
            v.add_special(id, name);
        }
        v
    }

    fn set_bytes(&mut self, id: TokenId, b: Vec<u8>) {
        let i = id.index();
        if self.bytes.len() <= i {
            self.bytes.resize(i + 1, None);
        }
        self.bytes[i] = Some(b.into_boxed_slice());
    }

    fn add_special(&mut self, id: TokenId, name: String) {
        let i = id.index();
        if self.bytes.len() <= i {
            self.bytes.resize(i + 1, None);
        }
        self.bytes[i] = None;
        self.by_text.insert(name.clone(), id);
        self.special.push((id, name));
    }

    /// Makes a text token special (named by its text): an end-of-generation or stop token
    /// is never text, so a mask allows it only where the grammar accepts.
    pub fn mark_special(&mut self, id: TokenId) {
        if let Some(b) = self.token_bytes(id) {
            let name = String::from_utf8_lossy(b).into_owned();
            self.add_special(id, name);
            self.special.sort_by_key(|&(t, _)| t);
        }
    }

    /// Loads a Hugging Face `tokenizer.json`.
    pub fn from_tokenizer_json(path: &Path) -> Result<Vocabulary, TrieError> {
        let tok = tokenizers::Tokenizer::from_file(path).map_err(|e| TrieError::Tokenizer {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        Vocabulary::from_tokenizer(&tok)
    }

    /// Reads the vocabulary of a loaded tokenizer.
    pub fn from_tokenizer(tok: &tokenizers::Tokenizer) -> Result<Vocabulary, TrieError> {
        let encoding = detect_encoding(tok);
        let table = byte_level_table();
        let added = tok.get_added_tokens_decoder();
        let mut v = Vocabulary {
            bytes: Vec::new(),
            special: Vec::new(),
            by_text: FxHashMap::default(),
            encoding,
        };
        for (text, id) in tok.get_vocab(false) {
            if added.contains_key(&id) {
                continue;
            }
            let id = TokenId(id);
            if is_control_name(&text) {
                // A base-vocabulary token spelled like a control token (InternLM2's `</s>`)
                // can be found by name: a model's configuration may name it as its end.
                v.by_text.insert(text.clone(), id);
            }
            let bytes = match encoding {
                // A token with a character outside the byte alphabet stands for its own
                // UTF-8 bytes, as the byte-level decoder reads it (Cohere's vocabularies hold
                // emoji and symbols written as themselves, which no merge produces).
                ByteEncoding::ByteLevel => text
                    .chars()
                    .map(|c| table.get(&c).copied())
                    .collect::<Option<Vec<u8>>>()
                    .unwrap_or_else(|| text.as_bytes().to_vec()),
                ByteEncoding::SentencePiece => match sentencepiece_byte(&text) {
                    Some(b) => vec![b],
                    None => text.replace('\u{2581}', " ").into_bytes(),
                },
                ByteEncoding::Raw => text.into_bytes(),
            };
            v.set_bytes(id, bytes);
        }
        let mut added: Vec<_> = added.into_iter().collect();
        added.sort_by_key(|(id, _)| *id);
        for (id, t) in added {
            let id = TokenId(id);
            if t.special {
                v.add_special(id, t.content);
            } else {
                // A non-special added token is text, written as itself; in a SentencePiece
                // vocabulary `▁` stands for a space there too (Gemma's added runs of spaces
                // are `▁▁`, which its decoder turns into spaces like any other token's).
                v.by_text.insert(t.content.clone(), id);
                let text = match encoding {
                    ByteEncoding::SentencePiece => t.content.replace('\u{2581}', " "),
                    _ => t.content,
                };
                v.set_bytes(id, text.into_bytes());
            }
        }
        Ok(v)
    }

    /// One past the largest token id.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Whether it has no token ids at all.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// How the tokenizer wrote bytes.
    pub fn encoding(&self) -> ByteEncoding {
        self.encoding
    }

    /// The bytes of a text token (`None` for special tokens and unused ids).
    pub fn token_bytes(&self, id: TokenId) -> Option<&[u8]> {
        self.bytes.get(id.index()).and_then(|b| b.as_deref())
    }

    /// Whether `id` is a special token.
    pub fn is_special(&self, id: TokenId) -> bool {
        self.special.iter().any(|&(s, _)| s == id)
    }

    /// Special tokens, `(id, name)`, by id.
    pub fn special_tokens(&self) -> &[(TokenId, String)] {
        &self.special
    }

    /// The id of a special or added token by its exact text (`<|im_end|>`, `<think>`), or of
    /// a vocabulary token spelled like a control token (`</s>`, `<unk>`).
    pub fn token_by_text(&self, text: &str) -> Option<TokenId> {
        self.by_text.get(text).copied()
    }

    /// Text tokens, `(id, bytes)`.
    pub fn text_tokens(&self) -> impl Iterator<Item = (TokenId, &[u8])> {
        self.bytes
            .iter()
            .enumerate()
            .filter_map(|(i, b)| b.as_deref().map(|b| (TokenId(i as u32), b)))
    }

    /// The usual end-of-generation special token, by the names tokenizers commonly give it
    /// (a text token of the same spelling, as Gemma's `</s>`, is not one):
    /// `<|eot_id|>`, `<|im_end|>`, `<|return|>`, `<｜end▁of▁sentence｜>`, `<|end|>`, `</s>`,
    /// `<|endoftext|>`, `<|end_of_text|>`, `<eos>`, `<EOT>`.
    pub fn default_eos(&self) -> Option<TokenId> {
        [
            "<|eot_id|>",
            "<|im_end|>",
            "<|return|>",
            "<｜end▁of▁sentence｜>",
            "<|end|>",
            "</s>",
            "<|endoftext|>",
            "<|end_of_text|>",
            "<eos>",
            "<EOT>",
        ]
        .iter()
        .filter_map(|name| self.token_by_text(name))
        .find(|&t| self.is_special(t))
    }

    /// The end tokens the model's own configuration names, from the files Hugging Face
    /// ships beside `tokenizer.json` in `dir`: `generation_config.json`'s `eos_token_id`
    /// (a number or a list), then `tokenizer_config.json`'s `eos_token` (a string or
    /// `{"content": ...}`). `None` if neither file names one that is in the vocabulary.
    pub fn configured_eos(&self, dir: &std::path::Path) -> Option<Vec<TokenId>> {
        let read = |name: &str| -> Option<serde_json::Value> {
            let text = std::fs::read_to_string(dir.join(name)).ok()?;
            serde_json::from_str(&text).ok()
        };
        let mut out: Vec<TokenId> = Vec::new();
        if let Some(g) = read("generation_config.json") {
            let ids: Vec<u64> = match &g["eos_token_id"] {
                serde_json::Value::Number(n) => n.as_u64().into_iter().collect(),
                serde_json::Value::Array(a) => a.iter().filter_map(|x| x.as_u64()).collect(),
                _ => Vec::new(),
            };
            out.extend(
                ids.into_iter()
                    .filter(|&i| (i as usize) < self.len())
                    .map(|i| TokenId(i as u32)),
            );
        }
        if let Some(c) = read("tokenizer_config.json") {
            let name = match &c["eos_token"] {
                serde_json::Value::String(s) => Some(s.as_str()),
                v => v["content"].as_str(),
            };
            if let Some(t) = name.and_then(|n| self.token_by_text(n))
                && !out.contains(&t)
            {
                out.push(t);
            }
        }
        (!out.is_empty()).then_some(out)
    }

    /// The bytes of a sequence of tokens (special tokens contribute nothing); `ids` may be
    /// [`TokenId`]s or raw ids.
    pub fn decode_bytes<T: Copy + Into<TokenId>>(&self, ids: &[T]) -> Vec<u8> {
        let mut out = Vec::new();
        for &id in ids {
            if let Some(b) = self.token_bytes(id.into()) {
                out.extend_from_slice(b);
            }
        }
        out
    }
}

/// Whether a token's text reads as a control token's name: `<...>` with no spaces
/// (`</s>`, `<unk>`, `<EOT>`, `<|im_end|>`).
fn is_control_name(text: &str) -> bool {
    text.len() > 2
        && text.len() <= 64
        && text.starts_with('<')
        && text.ends_with('>')
        && !text.contains([' ', '\u{2581}', '\u{120}'])
}

/// Decides the byte encoding from the tokenizer's decoder.
fn detect_encoding(tok: &tokenizers::Tokenizer) -> ByteEncoding {
    let Some(decoder) = tok.get_decoder() else {
        return ByteEncoding::Raw;
    };
    let json = serde_json::to_value(decoder).unwrap_or_default();
    let types: Vec<String> = match json.get("type").and_then(|t| t.as_str()) {
        Some("Sequence") => json["decoders"]
            .as_array()
            .map(|ds| {
                ds.iter()
                    .filter_map(|d| d["type"].as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default(),
        Some(t) => vec![t.to_string()],
        None => Vec::new(),
    };
    if types.iter().any(|t| t == "ByteLevel") {
        ByteEncoding::ByteLevel
    } else if types
        .iter()
        .any(|t| t == "ByteFallback" || t == "Metaspace")
    {
        ByteEncoding::SentencePiece
    } else {
        ByteEncoding::Raw
    }
}

/// A copy of `tok` that tokenizes a continuation of text: SentencePiece tokenizers prepend
/// `▁` (a space) to every input, which is right for a prompt's start but wrong for text that
/// continues an output; this copy does not.
pub fn continuation_tokenizer(tok: &tokenizers::Tokenizer) -> tokenizers::Tokenizer {
    let mut json = serde_json::to_value(tok).expect("a tokenizer serializes");
    let drop_prepend = |n: &mut serde_json::Value| {
        if let Some(list) = n.get_mut("normalizers").and_then(|l| l.as_array_mut()) {
            list.retain(|x| x["type"] != "Prepend");
        }
    };
    if let Some(n) = json.get_mut("normalizer") {
        if n["type"] == "Prepend" {
            *n = serde_json::Value::Null;
        } else {
            drop_prepend(n);
        }
    }
    if let Some(p) = json.get_mut("pre_tokenizer")
        && p["type"] == "Metaspace"
    {
        p["prepend_scheme"] = serde_json::Value::String("never".into());
    }
    serde_json::from_value(json).unwrap_or_else(|_| tok.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn end_tokens_come_from_the_model_config_files() {
        let v = Vocabulary::from_parts(
            [(TokenId(0), b"a".to_vec())],
            [
                (TokenId(1), "<|im_end|>".to_string()),
                (TokenId(2), "<|endoftext|>".to_string()),
                (TokenId(3), "<｜end▁of▁sentence｜>".to_string()),
            ],
        );
        // The family's usual token when nothing says otherwise: DeepSeek's is known too.
        let ds = Vocabulary::from_parts([], [(TokenId(0), "<｜end▁of▁sentence｜>".to_string())]);
        assert_eq!(ds.default_eos(), Some(TokenId(0)));
        let dir = std::env::temp_dir().join(format!("corral-vocab-eos-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(v.configured_eos(&dir), None);
        std::fs::write(
            dir.join("tokenizer_config.json"),
            r#"{"eos_token": {"content": "<|endoftext|>"}}"#,
        )
        .unwrap();
        assert_eq!(v.configured_eos(&dir), Some(vec![TokenId(2)]));
        // generation_config.json first; ids outside the vocabulary are ignored.
        std::fs::write(
            dir.join("generation_config.json"),
            r#"{"eos_token_id": [3, 1, 99]}"#,
        )
        .unwrap();
        assert_eq!(
            v.configured_eos(&dir),
            Some(vec![TokenId(3), TokenId(1), TokenId(2)])
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn byte_level_alphabet_is_a_bijection() {
        let t = byte_level_table();
        assert_eq!(t.len(), 256);
        assert_eq!(byte_level_char(b' '), 'Ġ');
        assert_eq!(byte_level_char(b'\n'), 'Ċ');
        assert_eq!(byte_level_char(b'a'), 'a');
        assert_eq!(t[&'Ġ'], b' ');
    }

    #[test]
    fn sentencepiece_bytes() {
        assert_eq!(sentencepiece_byte("<0x0A>"), Some(b'\n'));
        assert_eq!(sentencepiece_byte("<0xFF>"), Some(0xff));
        assert_eq!(sentencepiece_byte("<0x0>"), None);
        assert_eq!(sentencepiece_byte("hello"), None);
    }
}
