//! corral's masks equal llguidance's at every step: llama.cpp's json.gbnf for corral, its
//! Lark transliteration for llguidance, on short and long documents, over the canonical
//! tokenization and a random segmentation, on every fetched tokenizer. Both engines see the
//! same token ids and the same EOS; the masks are compared over every id of the
//! vocabulary.

use corral_engine::RobustConstrainedAdapter;
use corral_llguidance_compare::{Engines, JSON_LARK, Source, llg_mask, root};
use corral_trie::{FixedBitSet, TokenId};

#[path = "../../../tests/support/require.rs"]
mod require;

/// The tokenizers `scripts/fetch-assets` fetches (128k, 151k, 201k, 32k and 262k ids).
const TOKENIZERS: [&str; 5] = ["llama3_1", "qwen3", "gptoss", "llama2", "gemma3"];

fn docs() -> Vec<(String, String)> {
    ["examples/data/person.json", "benches/data/pretty.json"]
        .iter()
        .map(|p| {
            let text = std::fs::read_to_string(root().join(p)).unwrap();
            (p.to_string(), text.trim_end().to_string())
        })
        .collect()
}

/// Steps both engines through `tokens`, comparing the masks before every token and after
/// the last; returns the number of masks compared.
fn compare(e: &Engines, ours: &Source, theirs: &Source, tokens: &[TokenId], label: &str) -> usize {
    let mut a = RobustConstrainedAdapter::new(e.cold_constraint(ours).unwrap());
    let mut m = e.matcher(theirs).unwrap();
    let mut mask = a.empty_mask();
    let width = mask.len();
    let bytes = |t: usize| {
        String::from_utf8_lossy(
            e.space
                .vocab()
                .token_bytes(TokenId(t as u32))
                .unwrap_or(b""),
        )
        .into_owned()
    };
    // Added tokens the tokenizer does not mark special (Qwen3's `<tool_call>`, ...) are
    // text to corral, as the tokenizer decodes them, and special to llguidance, which
    // marks every added token special: they are left out of the comparison.
    let trie = e.factory.tok_env().tok_trie();
    let mut text_added = FixedBitSet::with_capacity(width);
    for t in 0..width {
        let ours = e.space.vocab().token_bytes(TokenId(t as u32)).is_some();
        let special = t < trie.vocab_size() && trie.is_special_token(t as u32);
        if ours && special && t as u32 != trie.eos_token() {
            text_added.insert(t);
        }
    }
    for step in 0..=tokens.len() {
        a.compute_mask(&mut mask).unwrap();
        mask.difference_with(&text_added);
        let theirs = llg_mask(&mut m, width).unwrap();
        if mask != theirs {
            let extra: Vec<_> = mask
                .difference(&theirs)
                .take(8)
                .map(|t| (t, bytes(t)))
                .collect();
            let missing: Vec<_> = theirs
                .difference(&mask)
                .take(8)
                .map(|t| (t, bytes(t)))
                .collect();
            let prefix = e.space.vocab().decode_bytes(&tokens[..step]);
            panic!(
                "{label} on {}: masks differ at step {step} after {:?}: corral alone allows {extra:?}, llguidance alone {missing:?}",
                e.name,
                String::from_utf8_lossy(&prefix)
            );
        }
        if let Some(&t) = tokens.get(step) {
            a.step_with_token(t).unwrap();
            m.consume_token(t.get()).unwrap();
        }
    }
    tokens.len() + 1
}

#[test]
#[ignore = "needs scripts/fetch-assets"]
fn json_gbnf_masks_equal_llguidance() {
    let ours = Source::json().unwrap();
    // By default llguidance narrows the mask where the grammar forces bytes (after `t` in
    // a JSON value, `rue`) to the first token of their canonical tokenization; corral's
    // mask holds every token the grammar allows. `no_forcing` turns llguidance's narrowing
    // off, so both masks say what the grammar allows.
    let theirs = Source::Lark(format!("%llguidance {{\"no_forcing\": true}}\n{JSON_LARK}"));
    let mut compared = 0;
    for name in TOKENIZERS {
        let path = root()
            .join("assets/tokenizers")
            .join(name)
            .join("tokenizer.json");
        let path = require::require_input(path, "run scripts/fetch-assets");
        let e = Engines::load(name, &path).unwrap();
        for (d, (doc, text)) in docs().iter().enumerate() {
            let canonical = e.tokens(text).unwrap();
            let mut x = 0x2545_F491_4F6C_DD1Du64 ^ d as u64;
            let random = e
                .space
                .trie()
                .random_segmentation(text.as_bytes(), &mut || {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x
                })
                .expect("a segmentation");
            compared += compare(
                &e,
                &ours,
                &theirs,
                &canonical,
                &format!("{doc} (canonical)"),
            );
            compared += compare(&e, &ours, &theirs, &random, &format!("{doc} (random)"));
        }
    }
    println!("{compared} masks equal");
}
