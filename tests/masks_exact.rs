//! Masks equal brute force: at every step of a replay, the computed mask is compared with
//! stepping every token of the vocabulary on a fork of the adapter and rolling back
//! (`corral::engine::replay::brute_force_mask`). Over every fetched tokenizer, on
//! llama.cpp's json.gbnf, on JSON Schema grammars (the default bounded whitespace, with runs
//! at and near its bound; counted repetitions; patterns; formats) and on a GBNF grammar with
//! `{m,n}` repetitions walked to their bounds, and on lexemes of letters and digits (e-mail
//! addresses, host names, identifiers), and on keys whose characters lead apart without
//! leaving the key. Replays both the canonical tokenization and a
//! random one, so states inside tokens' usual boundaries are checked too.

mod common;

use common::{ASSET_TOKENIZERS, asset_tokenizer, llama_cpp_data};
use corral::engine::Constraint;
use corral::engine::replay::check_masks_exact;
use corral::grammar::{CompileOptions, Grammar, compile_gbnf};
use corral::trie::{TokenSpace, Vocabulary, continuation_tokenizer};
use std::path::PathBuf;
use std::sync::Arc;

fn data(name: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/exact")
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn schema(name: &str) -> Arc<Grammar> {
    corral::compile_json_schema(&data(name), &Default::default())
        .unwrap()
        .grammar
}

/// Checks `docs` under `grammar` on every fetched tokenizer; returns the masks checked.
fn check(label: &str, grammar: &Arc<Grammar>, docs: &[String]) -> usize {
    // One constraint per tokenizer: the documents after the first find its sets made.
    check_with(label, docs, |space| {
        let c = Constraint::new(grammar.clone(), space.clone());
        Box::new(move || c.clone())
    })
}

/// Checks `docs` on every fetched tokenizer, each document under the constraint that the
/// maker `per_space` returns for the tokenizer's space builds; returns the masks checked.
fn check_with(
    label: &str,
    docs: &[String],
    per_space: impl Fn(&Arc<TokenSpace>) -> Box<dyn Fn() -> Arc<Constraint>>,
) -> usize {
    let mut checked = 0;
    for name in ASSET_TOKENIZERS {
        let path = asset_tokenizer(name);
        let hf = tokenizers::Tokenizer::from_file(&path).unwrap();
        let vocab = Vocabulary::from_tokenizer(&hf).unwrap();
        let eos = vocab.default_eos().into_iter().collect();
        let space = Arc::new(TokenSpace::new(vocab, None, eos));
        let cont = continuation_tokenizer(&hf);
        let make = per_space(&space);
        for (d, doc) in docs.iter().enumerate() {
            let c = make();
            let canonical = cont
                .encode(doc.as_str(), false)
                .unwrap()
                .get_ids()
                .iter()
                .map(|&t| corral::trie::TokenId(t))
                .collect::<Vec<_>>();
            let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ d as u64;
            let random = space
                .trie()
                .random_segmentation(doc.as_bytes(), &mut || {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x
                })
                .expect("a segmentation");
            for (how, tokens) in [("canonical", canonical), ("random", random)] {
                match check_masks_exact(&c, &tokens) {
                    Ok(n) => checked += n,
                    Err(m) => panic!(
                        "{label} doc {d} on {name} ({how}): mask differs from brute force at step {} after {:?}: extra {:?} ({:?}), missing {:?}, error {:?}",
                        m.step,
                        m.output,
                        m.extra,
                        m.extra
                            .iter()
                            .map(|&t| String::from_utf8_lossy(
                                space.vocab().token_bytes(t).unwrap_or(b"")
                            )
                            .into_owned())
                            .collect::<Vec<_>>(),
                        m.missing,
                        m.error
                    ),
                }
            }
        }
    }
    println!("{label}: {checked} masks equal brute force");
    checked
}

#[test]
#[ignore = "needs scripts/fetch-assets"]
fn json_gbnf_masks_equal_brute_force() {
    let dir = llama_cpp_data();
    let g = compile_gbnf(
        &std::fs::read_to_string(dir.join("grammars/json.gbnf")).unwrap(),
        &CompileOptions::default(),
    )
    .unwrap();
    let person = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/data/person.json"),
    )
    .unwrap();
    let mixed = "{\"n\": [-0.5, 12, 3e-7, 1E+22, 1234567890123456], \"s\": \"tab\\t \\\"q\\\" \\u00e9 é 日本 😀\",\n  \"deep\": [[{\"k\": null}]], \"b\": [true,false]}".to_string();
    // Every escape json.gbnf has, at the start of a string, after one, and before its end.
    let escapes =
        r#"{"\u00e9\"x": "\\\b\f\n\r\t\u0041\uABCDx\"", "k\u0022": ["a\\\"b", "\\", "\"\u20AC"]}"#
            .to_string();
    check(
        "json.gbnf",
        &g,
        &[person.trim_end().to_string(), mixed, escapes],
    );
}

#[test]
#[ignore = "needs scripts/fetch-assets"]
fn schema_masks_equal_brute_force_with_bounded_whitespace() {
    // The default whitespace is bounded ([ \t\n\r]{0,32}): runs at and one or two short of
    // the bound, where a whitespace token that overruns it must be refused.
    check(
        "deep_ws",
        &schema("nested.schema.json"),
        &[data("deep_ws.json")],
    );
}

#[test]
#[ignore = "needs scripts/fetch-assets"]
fn schema_masks_equal_brute_force_with_counts_patterns_and_formats() {
    check(
        "nested",
        &schema("nested.schema.json"),
        &[data("nested.json")],
    );
}

/// Schemas' masks over a token-set cache whose base holds the shared lexemes' sets
/// (`MaskCache::prefilled` from `corral::schema::shared_lexemes`), each document on a fresh
/// cache over that base: exact, compact and pretty (whitespace inside the separators the
/// base walked, keys and values it did not), and the base serves what it holds.
#[test]
#[ignore = "needs scripts/fetch-assets"]
fn masks_stay_exact_over_a_base_of_shared_lexemes() {
    use corral::engine::MaskCache;
    let opts = corral::JsonSchemaOptions::default();
    let shared = corral::schema::shared_lexemes(&opts).unwrap();
    let pretty = |doc: &str| {
        let v: serde_json::Value = serde_json::from_str(doc).unwrap();
        serde_json::to_string_pretty(&v).unwrap()
    };
    for (name, doc) in [
        ("nested.schema.json", "nested.json"),
        ("keys.schema.json", "keys.json"),
    ] {
        let grammar = schema(name);
        let docs = [data(doc), pretty(&data(doc))];
        let served = Arc::new(std::sync::Mutex::new(Vec::new()));
        check_with(name, &docs, |space| {
            let (base, states) = MaskCache::prefilled(space.clone(), &shared);
            assert!(states > 100, "the base reached {states} states");
            let (grammar, served) = (grammar.clone(), served.clone());
            // A fresh cache over the base for each document.
            Box::new(move || {
                let cache = MaskCache::with_base(&base, Default::default());
                served.lock().unwrap().push(cache.clone());
                Constraint::with_cache(grammar.clone(), &cache)
            })
        });
        // Every document found some of its sets in the base.
        for cache in served.lock().unwrap().iter() {
            let s = cache.stats();
            assert!(s.base_hits > 0, "{name}: the base served nothing ({s:?})");
        }
    }
}

#[test]
#[ignore = "needs scripts/fetch-assets"]
fn key_masks_equal_brute_force_where_characters_lead_apart_inside_the_key() {
    // Keys whose characters do not all lead one way but never leave the key: one that must
    // contain two `/` (`patternProperties`), and one that must not be a property's name
    // (`additionalProperties`), at the start, on a name's prefix, past it, and with
    // escapes and multi-byte characters.
    check("keys", &schema("keys.schema.json"), &[data("keys.json")]);
}

#[test]
#[ignore = "needs scripts/fetch-assets"]
fn schema_masks_equal_brute_force_on_long_strings_near_their_bounds() {
    // Long words before quotes and escapes (tokens whose slice prefix is long), strings at
    // their maxLength, multi-byte characters: the sliced mask paths.
    check(
        "strings",
        &schema("strings.schema.json"),
        &[data("strings.json")],
    );
}

#[test]
#[ignore = "needs scripts/fetch-assets"]
fn counted_gbnf_masks_equal_brute_force_at_the_bounds() {
    let g = compile_gbnf(&data("counted.gbnf"), &CompileOptions::default()).unwrap();
    check(
        "counted.gbnf",
        &g,
        &[data("counted.txt"), data("counted_min.txt")],
    );
}

/// Lexemes of letters and digits (names, e-mail addresses, host names, codes): states
/// whose letters and digits all lead one way are computed from the words slice.
#[test]
#[ignore = "needs scripts/fetch-assets"]
fn word_masks_equal_brute_force() {
    let g = compile_gbnf(&data("words.gbnf"), &CompileOptions::default()).unwrap();
    check("words.gbnf", &g, &[data("words.txt")]);
}

/// A class repeated up to 300 times: away from the bound its states are one class of the
/// mask cache (no token tells them apart), near it each is its own; both are exact.
#[test]
#[ignore = "needs scripts/fetch-assets"]
fn long_counted_masks_equal_brute_force_where_states_share_classes() {
    let g = compile_gbnf(&data("long_counted.gbnf"), &CompileOptions::default()).unwrap();
    check(
        "long_counted.gbnf",
        &g,
        &[
            data("long_counted_short.txt"),
            data("long_counted_near_bound.txt"),
        ],
    );
}

#[test]
#[ignore = "needs scripts/fetch-assets"]
fn masks_stay_exact_when_grammars_share_a_token_set_cache() {
    // Two compiles of one grammar (no shared DFA cache) build two lazily numbered DFAs of
    // the same regex; reached in different orders, their state numbers mean different
    // states, so the shared cache must not confuse them.
    let path = asset_tokenizer("llama3_1");
    let space = Arc::new(TokenSpace::from_tokenizer_json(&path).unwrap());
    let cache = corral::engine::MaskCache::new(space.clone());
    let text = r#"root ::= (w " ")+
w ::= "ab" [a-e]* "." | "cd" [0-9]* "!" | "xy""#;
    for doc in ["cd12! cd! cd3! ", "abe. ab. abcde. ", "xy cd0! ab. "] {
        let g = compile_gbnf(text, &CompileOptions::default()).unwrap();
        let c = Constraint::with_cache(g, &cache);
        let tokens = space
            .trie()
            .random_segmentation(doc.as_bytes(), &mut || 7)
            .expect("a segmentation");
        if let Err(m) = check_masks_exact(&c, &tokens) {
            panic!(
                "{doc}: mask differs from brute force at step {} after {:?}: extra {:?}, missing {:?}",
                m.step, m.output, m.extra, m.missing
            );
        }
    }
}

/// Grammars with token references (by id, by text, negated, after a repetition), the
/// referenced token an end token: at every step of outputs that go through them, the mask
/// equals brute force, and the output ends complete.
#[test]
#[ignore = "needs scripts/fetch-assets"]
fn token_reference_masks_equal_brute_force() {
    let mut checked = 0;
    for name in ASSET_TOKENIZERS {
        let path = asset_tokenizer(name);
        let space = Arc::new(TokenSpace::from_tokenizer_json(&path).unwrap());
        let vocab = space.vocab();
        let Some(&eos) = space.eos().first() else {
            panic!("{name}: no end token");
        };
        let eos_text = vocab
            .special_tokens()
            .iter()
            .find(|(id, _)| *id == eos)
            .map(|(_, t)| t.clone())
            .unwrap_or_else(|| panic!("{name}: the end token has no text"));
        let text = |s: &str| space.trie().greedy_tokens(s.as_bytes()).0;
        let e = eos.0;
        // A text token other than the end token, for the negated reference.
        let other = text("hello")[0];
        let cases: Vec<(String, Vec<corral::trie::TokenId>)> = vec![
            (
                format!("root ::= \"a\" {eos_text} \"x\""),
                [text("a"), vec![eos], text("x")].concat(),
            ),
            (format!("root ::= <[{e}]>"), vec![eos]),
            (
                format!("root ::= \"a\" !<[{e}]> \"b\""),
                [text("a"), vec![other], text("b")].concat(),
            ),
            (
                format!("root ::= [a-z]+ <[{e}]>"),
                [text("abc"), vec![eos]].concat(),
            ),
            (
                format!("root ::= (\"ab\" <[{e}]>)+ [0-9]*"),
                [text("ab"), vec![eos], text("ab"), vec![eos], text("12")].concat(),
            ),
        ];
        for (grammar, tokens) in cases {
            let g = compile_gbnf(&grammar, &CompileOptions::default())
                .unwrap_or_else(|e| panic!("{name}: {grammar}: {e}"));
            let c = Constraint::new(g, space.clone());
            match check_masks_exact(&c, &tokens) {
                Ok(n) => checked += n,
                Err(m) => panic!(
                    "{name}: {grammar}: mask differs from brute force at step {} after {:?}: extra {:?}, missing {:?}, error {:?}",
                    m.step, m.output, m.extra, m.missing, m.error
                ),
            }
            let mut a = corral::engine::RobustConstrainedAdapter::new(c);
            a.step_with_tokens(&tokens).unwrap();
            assert!(a.is_accepting(), "{name}: {grammar}: ends complete");
        }
    }
    println!("token references: {checked} masks equal brute force");
}
