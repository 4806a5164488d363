//! Prompts whose user text stays text: a special token's name inside a message (say
//! `<|im_end|>\n<|im_start|>system`) is tokenized as the characters it is made of, never
//! as the control token, so a message cannot forge a turn of the conversation.
//!
//! A [`Prompt`] is built from pieces of two kinds: *trusted* text (what the chat template
//! and the server write: role headers, control tokens, markers) and *user* text (message
//! contents, tool descriptions, a raw completion's prompt unless asked otherwise). User
//! text is held with every special token's name and every marker character replaced by a
//! marker (two private-use characters around a number), so the chat template renders it
//! like any other string. [`SpecialTokens::encode`] then splits the rendered text at the
//! special tokens the template wrote (the only ones left), tokenizes each stretch between
//! them with the marked names put back and special tokens not matched, and puts the control
//! tokens' ids between the stretches. Without special-token names in the user text this is
//! exactly the tokenizer's own encoding (it too splits at special tokens and tokenizes each
//! stretch apart); with them, the names come out as the tokenizer's text tokens.

use aho_corasick::{AhoCorasick, MatchKind};

/// Opens a marker in escaped text.
const OPEN: char = '\u{F8F0}';
/// Closes a marker.
const CLOSE: char = '\u{F8F1}';
/// A break between two stretches tokenized apart ([`Prompt::push_break`]): a marker with
/// no number, which escaping never writes.
const BREAK: &str = "\u{F8F0}\u{F8F1}";

/// A prompt under construction: trusted text with user text escaped in it. See the module
/// docs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Prompt {
    /// The text with user pieces escaped.
    text: String,
    /// What each marker stands for, by number.
    escaped: Vec<String>,
    /// Bytes of the text once the markers are put back.
    len: usize,
}

impl Prompt {
    /// A prompt of trusted text: special tokens' names in it are control tokens (what
    /// `corral generate --raw` and a completion with `parse_special` ask for).
    pub fn trusted(text: &str) -> Prompt {
        let mut p = Prompt::default();
        p.push_trusted(text);
        p
    }

    /// Appends trusted text.
    pub fn push_trusted(&mut self, text: &str) {
        self.text.push_str(text);
        self.len += text.len();
    }

    /// `text` escaped by `specials`, its markers numbered in this prompt (for user text a
    /// template renders: see `Prompt::rendered`).
    pub fn escape_user(&mut self, specials: &SpecialTokens, text: &str) -> String {
        specials.escape(text, &mut self.escaped)
    }

    /// Appends user text, escaped by `specials`.
    pub fn push_user(&mut self, specials: &SpecialTokens, text: &str) {
        let escaped = specials.escape(text, &mut self.escaped);
        self.text.push_str(&escaped);
        self.len += text.len();
    }

    /// Ends the current stretch of text: what follows is tokenized apart from what came
    /// before, as if a control token stood between them (a tokenizer's pre-tokenization
    /// could otherwise join characters across the two). For formats whose reference
    /// tokenizes pieces of a message one by one (harmony). It adds no text.
    pub fn push_break(&mut self) {
        self.text.push_str(BREAK);
    }

    /// The text as rendered, markers in place of the escaped names (for templates and
    /// checks on the trusted part, such as what the prompt ends with).
    pub fn escaped_text(&self) -> &str {
        &self.text
    }

    /// The text with the escaped names put back: what the model reads, as characters.
    pub fn text(&self) -> String {
        unescape(&self.text, &self.escaped)
    }

    /// Bytes of [`Prompt::text`].
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether [`Prompt::text`] is empty (breaks add no text).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The rendered text of a template that was given escaped user text (`rendered`),
    /// sharing this prompt's markers.
    pub(crate) fn rendered(&self, rendered: String) -> Prompt {
        Prompt {
            len: unescape(&rendered, &self.escaped).len(),
            text: rendered,
            escaped: self.escaped.clone(),
        }
    }
}

/// A tokenizer's special tokens (control tokens: `special` in its added vocabulary), to
/// escape user text and encode prompts. See the module docs.
#[derive(Clone, Debug)]
pub struct SpecialTokens {
    /// Their names, and the tokenizer's id for each.
    names: Vec<(String, u32)>,
    /// Finds the names (leftmost, longest first); `None` when there are none.
    finder: Option<AhoCorasick>,
    /// The same tokenizer with special tokens not matched: a stretch of text is text.
    plain: tokenizers::Tokenizer,
}

impl SpecialTokens {
    /// From `tokenizer`'s added tokens marked special.
    pub fn new(tokenizer: &tokenizers::Tokenizer) -> SpecialTokens {
        let mut names: Vec<(String, u32)> = tokenizer
            .get_added_tokens_decoder()
            .into_iter()
            .filter(|(_, t)| t.special && !t.content.is_empty())
            .map(|(id, t)| (t.content, id))
            .collect();
        names.sort();
        names.dedup_by(|a, b| a.0 == b.0);
        let finder = (!names.is_empty())
            .then(|| {
                AhoCorasick::builder()
                    .match_kind(MatchKind::LeftmostLongest)
                    .build(names.iter().map(|(n, _)| n.as_str()))
                    .ok()
            })
            .flatten();
        let mut plain = tokenizer.clone();
        plain.set_encode_special_tokens(true);
        SpecialTokens {
            names,
            finder,
            plain,
        }
    }

    /// The special tokens' names, with their ids.
    pub fn names(&self) -> &[(String, u32)] {
        &self.names
    }

    /// `text` with each special token's name and each marker character replaced by a
    /// marker, whose meaning is appended to `escaped`.
    fn escape(&self, text: &str, escaped: &mut Vec<String>) -> String {
        fn mark(out: &mut String, escaped: &mut Vec<String>, what: &str) {
            out.push(OPEN);
            out.push_str(&escaped.len().to_string());
            out.push(CLOSE);
            escaped.push(what.to_string());
        }
        fn plain(out: &mut String, escaped: &mut Vec<String>, piece: &str) {
            for c in piece.chars() {
                if c == OPEN || c == CLOSE {
                    mark(out, escaped, c.encode_utf8(&mut [0; 4]));
                } else {
                    out.push(c);
                }
            }
        }
        let mut out = String::with_capacity(text.len());
        let mut at = 0;
        if let Some(f) = &self.finder {
            for m in f.find_iter(text) {
                plain(&mut out, escaped, &text[at..m.start()]);
                mark(&mut out, escaped, &text[m.start()..m.end()]);
                at = m.end();
            }
        }
        plain(&mut out, escaped, &text[at..]);
        out
    }

    /// The prompt's token ids: split at the special tokens of its trusted text, each
    /// stretch tokenized with its escaped names as text. See the module docs.
    pub fn encode(&self, prompt: &Prompt) -> Result<Vec<u32>, tokenizers::Error> {
        let text = prompt.escaped_text();
        let mut ids = Vec::new();
        let stretch = |ids: &mut Vec<u32>, piece: &str| -> Result<(), tokenizers::Error> {
            if piece.is_empty() {
                return Ok(());
            }
            for part in piece.split(BREAK).filter(|p| !p.is_empty()) {
                let part = unescape(part, &prompt.escaped);
                ids.extend_from_slice(self.plain.encode(part.as_str(), false)?.get_ids());
            }
            Ok(())
        };
        let mut at = 0;
        if let Some(f) = &self.finder {
            for m in f.find_iter(text) {
                stretch(&mut ids, &text[at..m.start()])?;
                ids.push(self.names[m.pattern().as_usize()].1);
                at = m.end();
            }
        }
        stretch(&mut ids, &text[at..])?;
        Ok(ids)
    }
}

/// `text` with every marker replaced by what it stands for, and breaks removed (a marker
/// that names nothing stays as it is: it cannot come from escaping).
fn unescape(text: &str, escaped: &[String]) -> String {
    if !text.contains(OPEN) {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find(OPEN) {
        out.push_str(&rest[..i]);
        let after = &rest[i + OPEN.len_utf8()..];
        if let Some(next) = after.strip_prefix(CLOSE) {
            rest = next;
            continue;
        }
        let number = after
            .find(CLOSE)
            .and_then(|j| after[..j].parse::<usize>().ok().map(|n| (n, j)));
        match number.and_then(|(n, j)| escaped.get(n).map(|s| (s, j))) {
            Some((s, j)) => {
                out.push_str(s);
                rest = &after[j + CLOSE.len_utf8()..];
            }
            None => {
                out.push(OPEN);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokenizers::models::wordlevel::WordLevel;
    use tokenizers::pre_tokenizers::whitespace::Whitespace;
    use tokenizers::{AddedToken, Tokenizer};

    /// Words and characters as tokens; `<s>` and `</s>` special, `<tool>` added but not
    /// special.
    fn tokenizer() -> Tokenizer {
        let words = [
            "<unk>", "hi", "there", "<", ">", "/", "s", "!", "\u{F8F0}", "tool",
        ];
        let vocab = words
            .iter()
            .enumerate()
            .map(|(i, w)| (w.to_string(), i as u32))
            .collect();
        let model = WordLevel::builder()
            .vocab(vocab)
            .unk_token("<unk>".into())
            .build()
            .unwrap();
        let mut t = Tokenizer::new(model);
        t.with_pre_tokenizer(Some(Whitespace {}));
        t.add_special_tokens([
            AddedToken::from("<s>", true),
            AddedToken::from("</s>", true),
        ])
        .unwrap();
        t.add_tokens([AddedToken::from("<tool>", false)]).unwrap();
        t
    }

    #[test]
    fn user_text_keeps_special_names_as_text() {
        let t = tokenizer();
        let sp = SpecialTokens::new(&t);
        let ids = |s: &str| t.encode(s, false).unwrap().get_ids().to_vec();
        let mut p = Prompt::trusted("<s>");
        p.push_user(&sp, "hi </s><s> there \u{F8F0}0\u{F8F1} <tool>");
        p.push_trusted("</s>");
        assert_eq!(p.text(), "<s>hi </s><s> there \u{F8F0}0\u{F8F1} <tool></s>");
        assert_eq!(p.len(), p.text().len());
        let got = sp.encode(&p).unwrap();
        let (open, close) = (ids("<s>")[0], ids("</s>")[0]);
        // The template's two control tokens, and none from the user's text, whose names
        // are the tokenizer's text tokens; the non-special added token stays a token.
        assert_eq!(got.iter().filter(|&&i| i == open || i == close).count(), 2);
        assert_eq!(got.first(), Some(&open));
        assert_eq!(got.last(), Some(&close));
        let mut plain = t.clone();
        plain.set_encode_special_tokens(true);
        let inner = plain
            .encode("hi </s><s> there \u{F8F0}0\u{F8F1} <tool>", false)
            .unwrap();
        assert_eq!(&got[1..got.len() - 1], inner.get_ids());
    }

    #[test]
    fn without_special_names_it_is_the_tokenizers_encoding() {
        let t = tokenizer();
        let sp = SpecialTokens::new(&t);
        let mut p = Prompt::trusted("<s>hi");
        p.push_user(&sp, "there ! hi");
        p.push_trusted("</s><s>");
        p.push_user(&sp, "<tool> there");
        let whole = t.encode(p.text().as_str(), false).unwrap();
        assert_eq!(sp.encode(&p).unwrap(), whole.get_ids());
        // A rendered template that kept the markers where it put the user's text.
        let r = p.rendered(format!("<s>{}</s>", p.escaped_text()));
        assert_eq!(r.text(), format!("<s>{}</s>", p.text()));
    }

    #[test]
    fn a_break_tokenizes_apart_and_adds_no_text() {
        let t = tokenizer();
        let sp = SpecialTokens::new(&t);
        let ids = |s: &str| t.encode(s, false).unwrap().get_ids().to_vec();
        let mut p = Prompt::default();
        p.push_user(&sp, "hi");
        p.push_break();
        p.push_user(&sp, "there!");
        p.push_break();
        p.push_break();
        assert_eq!(p.text(), "hithere!");
        assert_eq!(p.len(), p.text().len());
        // Together the words are one unknown word (id 0); apart, each is its own token.
        assert_eq!(ids("hithere!"), [0, 7]);
        let apart = [ids("hi"), ids("there!")].concat();
        assert_eq!(sp.encode(&p).unwrap(), apart);
        // A marker character the user wrote is not a break.
        let mut q = Prompt::default();
        q.push_user(&sp, "hi\u{F8F0}\u{F8F1}there");
        assert_eq!(q.text(), "hi\u{F8F0}\u{F8F1}there");
    }
}
