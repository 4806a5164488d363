//! openai-harmony's gpt-oss encoding, loaded offline: it needs `o200k_base.tiktoken`, which
//! is rebuilt here, exactly, from the gpt-oss `tokenizer.json` (one line per token: base64
//! of its bytes and its id), its sha256 checked against the one the crate expects.

use base64::Engine;
use corral_trie::Vocabulary;
use sha2::Digest;

const TIKTOKEN_SHA256: &str = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d";

/// The encoding. Call it before any other thread exists: it sets an environment variable.
pub fn load(vocab: &Vocabulary) -> openai_harmony::HarmonyEncoding {
    let dir = std::env::temp_dir().join("corral-tiktoken");
    std::fs::create_dir_all(&dir).unwrap();
    let mut file = String::new();
    for id in 0..199_998u32 {
        let b = vocab.token_bytes(corral_trie::TokenId(id)).expect("text token");
        file.push_str(&base64::engine::general_purpose::STANDARD.encode(b));
        file.push(' ');
        file.push_str(&id.to_string());
        file.push('\n');
    }
    let sha = format!("{:x}", sha2::Sha256::digest(file.as_bytes()));
    assert_eq!(sha, TIKTOKEN_SHA256, "rebuilt o200k_base.tiktoken differs");
    std::fs::write(dir.join("o200k_base.tiktoken"), &file).unwrap();
    // SAFETY: the caller has no other thread yet; openai-harmony reads it when loading.
    unsafe { std::env::set_var("TIKTOKEN_ENCODINGS_BASE", &dir) };
    openai_harmony::load_harmony_encoding(openai_harmony::HarmonyEncodingName::HarmonyGptOss)
        .expect("harmony encoding")
}
