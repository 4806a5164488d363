//! On every asset tokenizer (scripts/fetch-assets): the bytes of `encode(text)` concatenate
//! back to `text`, special tokens stay out of the trie, and the trie holds every text token.
//! Ignored unless asked for (`--include-ignored`, as `scripts/test` runs them); then a
//! missing asset fails the test.

use corral_trie::{ByteEncoding, TokenTrie, Vocabulary, continuation_tokenizer, new_mask};
use std::path::PathBuf;

#[path = "../../tests/support/require.rs"]
mod require;

fn asset(name: &str) -> PathBuf {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../assets/tokenizers")
        .join(name)
        .join("tokenizer.json");
    require::require_input(p, "run scripts/fetch-assets")
}

const CORPUS: &[&str] = &[
    "Hello, world! The quick brown fox jumps over the lazy dog.",
    "{\"name\": \"Zoë\", \"age\": 42, \"tags\": [\"a\", \"b\"], \"ok\": true}",
    "Café crème brûlée, naïve façade, Ångström, Øresund, Straße",
    "日本語のテキストと中文文本，还有한국어 텍스트。",
    "Emoji: 😀🎉👩‍👩‍👧 🇫🇷 ✔️ and symbols ∑∫√≠ ⟨x⟩",
    "    indented\n\n\n\ttabs\t\tand   runs     of      spaces  \r\n",
    "fn main() {\n    println!(\"{}\", 1 + 2 * 3);\n}\n",
    "x",
    " leading space and trailing space ",
    "\u{00a0}non-breaking\u{2009}thin\u{200b}zero-width",
    "1234567890 3.14159 -2.5e-10 0x1F",
];

fn check(name: &str, encoding: ByteEncoding, specials: &[&str]) {
    check_on(name, encoding, specials, CORPUS);
}

/// [`check`] on the lines of `corpus` (a normalizing tokenizer changes some of CORPUS).
fn check_on(name: &str, encoding: ByteEncoding, specials: &[&str], corpus: &[&str]) {
    let path = asset(name);
    let tok = tokenizers::Tokenizer::from_file(&path).unwrap();
    let t0 = std::time::Instant::now();
    let vocab = Vocabulary::from_tokenizer(&tok).unwrap();
    let t1 = std::time::Instant::now();
    let trie = TokenTrie::new(&vocab);
    let t2 = std::time::Instant::now();
    eprintln!(
        "{name}: {} ids, {} special, vocabulary {:?}, trie {:?} ({} nodes, {:.1} MiB)",
        vocab.len(),
        vocab.special_tokens().len(),
        t1 - t0,
        t2 - t1,
        trie.nodes().len(),
        trie.memory_usage() as f64 / (1 << 20) as f64
    );
    assert_eq!(vocab.encoding(), encoding);
    for s in specials {
        let id = vocab
            .token_by_text(s)
            .unwrap_or_else(|| panic!("{name}: no {s}"));
        assert!(vocab.is_special(id), "{name}: {s} should be special");
        assert!(vocab.token_bytes(id).is_none());
    }
    // Every text token is in the trie: walking with an accept-all recognizer marks them all.
    struct All;
    impl corral_trie::ByteRecognizer for All {
        fn push(&mut self, _: u8) -> bool {
            true
        }
        fn pop(&mut self, _: usize) {}
    }
    let mut mask = new_mask(vocab.len() + 7);
    trie.walk(&mut All, &mut mask);
    assert_eq!(
        mask.count_ones(..),
        vocab.text_tokens().count(),
        "{name}: trie holds every text token"
    );
    let cont = continuation_tokenizer(&tok);
    for text in corpus {
        let enc = cont.encode(*text, false).unwrap();
        let bytes = vocab.decode_bytes(enc.get_ids());
        assert_eq!(
            String::from_utf8_lossy(&bytes),
            *text,
            "{name}: round trip of {text:?}"
        );
    }
}

#[test]
#[ignore = "needs scripts/fetch-assets"]
fn llama3_1() {
    check(
        "llama3_1",
        ByteEncoding::ByteLevel,
        &["<|eot_id|>", "<|begin_of_text|>", "<|start_header_id|>"],
    );
}

#[test]
#[ignore = "needs scripts/fetch-assets"]
fn qwen3() {
    check(
        "qwen3",
        ByteEncoding::ByteLevel,
        &["<|im_end|>", "<|endoftext|>"],
    );
    // Qwen3's <think> is an added token but not special: it is text, in the trie.
    let path = asset("qwen3");
    let vocab = Vocabulary::from_tokenizer_json(&path).unwrap();
    let id = vocab.token_by_text("<think>").unwrap();
    assert_eq!(vocab.token_bytes(id), Some(&b"<think>"[..]));
}

#[test]
#[ignore = "needs scripts/fetch-assets"]
fn gptoss() {
    check(
        "gptoss",
        ByteEncoding::ByteLevel,
        &[
            "<|channel|>",
            "<|message|>",
            "<|return|>",
            "<|start|>",
            "<|end|>",
        ],
    );
}

#[test]
#[ignore = "needs scripts/fetch-assets"]
fn deepseek_v3() {
    check(
        "deepseek_v3",
        ByteEncoding::ByteLevel,
        &["<｜end▁of▁sentence｜>", "<｜begin▁of▁sentence｜>"],
    );
    let path = asset("deepseek_v3");
    let vocab = Vocabulary::from_tokenizer_json(&path).unwrap();
    assert_eq!(
        vocab.default_eos(),
        vocab.token_by_text("<｜end▁of▁sentence｜>")
    );
}

#[test]
#[ignore = "needs scripts/fetch-assets"]
fn gpt4o() {
    check("gpt4o", ByteEncoding::ByteLevel, &["<|endoftext|>"]);
}

#[test]
#[ignore = "needs scripts/fetch-assets"]
fn mistral_nemo() {
    check(
        "mistral_nemo",
        ByteEncoding::ByteLevel,
        &["</s>", "<s>", "[INST]", "[TOOL_CALLS]"],
    );
    let path = asset("mistral_nemo");
    let vocab = Vocabulary::from_tokenizer_json(&path).unwrap();
    assert_eq!(vocab.default_eos(), vocab.token_by_text("</s>"));
}

/// The end token named by the model's own configuration beside `tokenizer.json`.
fn configured_eos(name: &str) -> Option<String> {
    let path = asset(name);
    let vocab = Vocabulary::from_tokenizer_json(&path).unwrap();
    let eos = vocab.configured_eos(path.parent().unwrap())?;
    let names: Vec<String> = eos
        .iter()
        .map(|&t| match vocab.token_bytes(t) {
            Some(b) => String::from_utf8_lossy(b).into_owned(),
            None => vocab
                .special_tokens()
                .iter()
                .find(|s| s.0 == t)
                .map(|s| s.1.clone())
                .unwrap_or_default(),
        })
        .collect();
    Some(names.join(","))
}

#[test]
#[ignore = "needs scripts/fetch-assets"]
fn gpt4_cl100k() {
    check(
        "gpt4",
        ByteEncoding::ByteLevel,
        &["<|endoftext|>", "<|im_start|>"],
    );
}

#[test]
#[ignore = "needs scripts/fetch-assets"]
fn gpt2() {
    check("gpt2", ByteEncoding::ByteLevel, &["<|endoftext|>"]);
}

#[test]
#[ignore = "needs scripts/fetch-assets"]
fn gemma() {
    check("gemma", ByteEncoding::SentencePiece, &["<eos>", "<bos>"]);
}

#[test]
#[ignore = "needs scripts/fetch-assets"]
fn chatglm3_baichuan2_yi() {
    check("chatglm3", ByteEncoding::SentencePiece, &["</s>", "<s>"]);
    check("baichuan2", ByteEncoding::SentencePiece, &["</s>", "<s>"]);
    check("yi", ByteEncoding::SentencePiece, &["<|endoftext|>"]);
}

/// Claude's tokenizer normalizes with NFKC (fullwidth punctuation and non-breaking spaces
/// change), so the round trip is checked on the lines it keeps; its end token is `<EOT>`.
#[test]
#[ignore = "needs scripts/fetch-assets"]
fn claude() {
    let kept: Vec<&str> = CORPUS
        .iter()
        .copied()
        .filter(|t| !t.contains(['\u{00a0}', '\u{2009}', '，']))
        .collect();
    check_on("claude", ByteEncoding::ByteLevel, &["<EOT>"], &kept);
    let path = asset("claude");
    let vocab = Vocabulary::from_tokenizer_json(&path).unwrap();
    assert_eq!(vocab.default_eos(), vocab.token_by_text("<EOT>"));
    assert_eq!(configured_eos("claude").as_deref(), Some("<EOT>"));
}

/// InternLM2's `</s>` is an ordinary vocabulary entry; its configuration names it.
#[test]
#[ignore = "needs scripts/fetch-assets"]
fn internlm2() {
    check("internlm2", ByteEncoding::SentencePiece, &[]);
    assert_eq!(configured_eos("internlm2").as_deref(), Some("</s>"));
}

/// Command R+'s vocabulary holds emoji and symbols written as themselves (no merge makes
/// them): they stand for their own UTF-8 bytes. Its end of turn is a non-special added
/// token that its configuration names.
#[test]
#[ignore = "needs scripts/fetch-assets"]
fn command_r_plus() {
    check("command_r_plus", ByteEncoding::ByteLevel, &["<BOS_TOKEN>"]);
    let path = asset("command_r_plus");
    let tok = tokenizers::Tokenizer::from_file(&path).unwrap();
    let vocab = Vocabulary::from_tokenizer(&tok).unwrap();
    let id = tok
        .token_to_id("⌚")
        .expect("Command R+ has a token written ⌚");
    assert_eq!(vocab.token_bytes(id.into()), Some("⌚".as_bytes()));
    assert_eq!(
        configured_eos("command_r_plus").as_deref(),
        Some("<|END_OF_TURN_TOKEN|>")
    );
}

/// The package named llama2 holds Mistral-7B's vocabulary, a Llama-2-style SentencePiece
/// one of 32,000 tokens with byte fallback.
#[test]
#[ignore = "needs scripts/fetch-assets"]
fn llama2() {
    check("llama2", ByteEncoding::SentencePiece, &["</s>", "<s>"]);
    let path = asset("llama2");
    // The plain tokenizer prepends a space (SentencePiece's dummy prefix); byte fallback
    // tokens are single raw bytes.
    let tok = tokenizers::Tokenizer::from_file(&path).unwrap();
    let vocab = Vocabulary::from_tokenizer(&tok).unwrap();
    let enc = tok.encode("x", false).unwrap();
    assert_eq!(vocab.decode_bytes(enc.get_ids()), b" x");
    let id = tok.token_to_id("<0x0A>").unwrap();
    assert_eq!(vocab.token_bytes(id.into()), Some(&b"\n"[..]));
}

#[test]
#[ignore = "needs scripts/fetch-assets"]
fn gemma3() {
    check(
        "gemma3",
        ByteEncoding::SentencePiece,
        &["<eos>", "<bos>", "<end_of_turn>"],
    );
    let path = asset("gemma3");
    // Gemma's `</s>` is an ordinary text token: the end of generation is `<eos>`.
    let vocab = Vocabulary::from_tokenizer_json(&path).unwrap();
    assert_eq!(vocab.default_eos(), vocab.token_by_text("<eos>"));
    let id = vocab.token_by_text("</s>").unwrap();
    assert!(!vocab.is_special(id));
}
