//! openai-harmony's token ids for the conversations of `tests/data/harmony/conversations.json`,
//! the answers `tests/harmony_render.rs` checks corral's harmony prompts against.
//!
//! Run: `cargo run --release --manifest-path benches/harmony-compare/Cargo.toml --bin render [--write]`
//! Without `--write` it compares openai-harmony's ids with `expected.json` and fails on a
//! difference; with it, it writes the file.

#[path = "../encoding.rs"]
mod encoding;

use openai_harmony::chat::{Message, Role};
use serde_json::{Value, json};
use std::path::Path;

fn main() {
    let write = std::env::args().any(|a| a == "--write");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let tok_path = root.join("assets/tokenizers/gptoss/tokenizer.json");
    let tok = tokenizers::Tokenizer::from_file(&tok_path).expect("gpt-oss tokenizer.json (scripts/fetch-assets)");
    let enc = encoding::load(&corral_trie::Vocabulary::from_tokenizer(&tok).unwrap());
    let dir = root.join("tests/data/harmony");
    let input: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("conversations.json")).unwrap()).unwrap();
    let mut expected = serde_json::Map::new();
    for c in input["conversations"].as_array().unwrap() {
        let name = c["name"].as_str().unwrap();
        let messages: Vec<Message> = serde_json::from_value(c["messages"].clone()).unwrap_or_else(|e| panic!("{name}: {e}"));
        // The config type is not exported: its default (drop analysis) comes by inference,
        // and no config means no dropping.
        let drop = c["drop_analysis"].as_bool().unwrap();
        let ids = match (c["mode"].as_str().unwrap(), drop) {
            ("completion", true) => enc.render_conversation_for_completion(&messages, Role::Assistant, Some(&Default::default())),
            ("completion", false) => enc.render_conversation_for_completion(&messages, Role::Assistant, None),
            ("conversation", true) => enc.render_conversation(&messages, Some(&Default::default())),
            ("conversation", false) => enc.render_conversation(&messages, None),
            (other, _) => panic!("{name}: unknown mode {other}"),
        }
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        expected.insert(name.to_string(), json!(ids));
    }
    let out = serde_json::to_string(&json!({
        "about": "openai-harmony 0.0.8's token ids for conversations.json (benches/harmony-compare, --bin render --write)",
        "ids": expected,
    }))
    .unwrap();
    let path = dir.join("expected.json");
    if write {
        std::fs::write(&path, out + "\n").unwrap();
        println!("wrote {} ({} conversations)", path.display(), expected.len());
    } else {
        let on_file: Value = serde_json::from_str(&std::fs::read_to_string(&path).expect("expected.json (run with --write)")).unwrap();
        assert_eq!(on_file["ids"], Value::Object(expected.clone()), "{} differs from openai-harmony's rendering", path.display());
        println!("{}: openai-harmony renders the same ids for all {} conversations", path.display(), expected.len());
    }
}
