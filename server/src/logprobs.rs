//! Log-probabilities in OpenAI's shapes: a chat choice's `logprobs.content` (one object per
//! token, with its text, bytes and the likeliest tokens), a completion's `logprobs`
//! (parallel lists of tokens, their log-probabilities, the likeliest tokens and their
//! offsets in the text). Under a constraint they are those of the masked distribution
//! (see `corral_engine::TokenLogprob`).

use corral_engine::TokenLogprob;
use corral_trie::{TokenId, Vocabulary};
use serde_json::{Map, Value, json};
use std::sync::Arc;

/// Renders a response's log-probabilities, piece by piece as they stream.
#[derive(Debug)]
pub struct Logprobs {
    vocab: Arc<corral_trie::TokenSpace>,
    chat: bool,
    /// Recorded and not yet sent.
    pending: Vec<TokenLogprob>,
    /// Characters of the completion's text before the next token (completions'
    /// `text_offset`).
    offset: usize,
}

impl Logprobs {
    /// An empty renderer over the model's tokens, in the chat endpoint's shape when `chat`,
    /// the completions endpoint's otherwise.
    pub fn new(space: Arc<corral_trie::TokenSpace>, chat: bool) -> Logprobs {
        Logprobs {
            vocab: space,
            chat,
            pending: Vec::new(),
            offset: 0,
        }
    }

    /// Keeps `items` for the next piece sent.
    pub fn push(&mut self, items: Vec<TokenLogprob>) {
        self.pending.extend(items);
    }

    /// The choice's `logprobs` for what was kept since the last call (then forgotten);
    /// `null` when nothing was.
    pub fn take(&mut self) -> Value {
        if self.pending.is_empty() {
            return Value::Null;
        }
        let items = std::mem::take(&mut self.pending);
        let vocab = self.vocab.vocab();
        if self.chat {
            let entry = |t: TokenId, lp: f32| {
                let (text, bytes) = token_text(vocab, t);
                json!({"token": text, "logprob": finite(lp), "bytes": bytes})
            };
            let content: Vec<Value> = items
                .iter()
                .map(|it| {
                    let mut e = entry(it.token, it.logprob);
                    e["top_logprobs"] =
                        Value::Array(it.top.iter().map(|&(t, lp)| entry(t, lp)).collect());
                    e
                })
                .collect();
            return json!({"content": content, "refusal": null});
        }
        let mut tokens = Vec::new();
        let mut lps = Vec::new();
        let mut tops = Vec::new();
        let mut offsets = Vec::new();
        for it in &items {
            let (text, _) = token_text(vocab, it.token);
            offsets.push(self.offset);
            self.offset += text.chars().count();
            tokens.push(Value::String(text));
            lps.push(finite(it.logprob));
            let mut top = Map::new();
            for &(t, lp) in &it.top {
                top.insert(token_text(vocab, t).0, finite(lp));
            }
            tops.push(Value::Object(top));
        }
        json!({"tokens": tokens, "token_logprobs": lps, "top_logprobs": tops, "text_offset": offsets})
    }
}

/// A token's text (lossy UTF-8 for a token that splits a character; a special token's
/// name) and its bytes.
fn token_text(vocab: &Vocabulary, t: TokenId) -> (String, Vec<u8>) {
    match vocab.token_bytes(t) {
        Some(b) => (String::from_utf8_lossy(b).into_owned(), b.to_vec()),
        None => {
            let name = vocab
                .special_tokens()
                .iter()
                .find(|(id, _)| *id == t)
                .map(|(_, n)| n.clone())
                .unwrap_or_default();
            let bytes = name.as_bytes().to_vec();
            (name, bytes)
        }
    }
}

/// A log-probability as JSON: minus infinity (a token the mask ruled out, which is never
/// sampled nor listed) has no JSON number; OpenAI's floor stands for it.
fn finite(lp: f32) -> Value {
    json!(if lp.is_finite() { lp } else { -9999.0 })
}
