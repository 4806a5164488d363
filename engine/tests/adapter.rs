//! The adapter on tiny hand-written vocabularies: multi-byte tokens, tokens spanning
//! lexemes, partial UTF-8 tokens, a padded logit width, token references, rollback, forced
//! continuations, and the mask agreeing with brute force (a token is in the mask iff
//! stepping with it succeeds) over random documents and random tokenizations. (llama.cpp's
//! token-segment grammar cases run with the other grammar cases, in the root crate's
//! tests/llama_cpp_conformance.rs.)

use corral_engine::replay::brute_force_mask;
use corral_engine::{AdapterError, Constraint, MaskCache, RobustConstrainedAdapter};
use corral_grammar::{CompileOptions, compile_gbnf};
use corral_trie::{TokenId, TokenSpace, Vocabulary};
use proptest::prelude::*;
use std::sync::Arc;

const EOS: u32 = 100;

/// Text tokens (ids 0..) plus EOS = 100; logits 128 wide (padded).
fn space(words: &[&[u8]]) -> Arc<TokenSpace> {
    space_of(words.iter().map(|w| w.to_vec()), EOS, 128)
}

/// Text tokens (ids 0..) plus the end token `eos`; logits `width` wide.
fn space_of(words: impl Iterator<Item = Vec<u8>>, eos: u32, width: usize) -> Arc<TokenSpace> {
    let vocab = Vocabulary::from_parts(
        words.enumerate().map(|(i, w)| (TokenId(i as u32), w)),
        [(TokenId(eos), "</s>".to_string())],
    );
    Arc::new(TokenSpace::new(vocab, Some(width), vec![TokenId(eos)]))
}

fn adapter(grammar: &str, words: &[&[u8]]) -> RobustConstrainedAdapter {
    let g = compile_gbnf(grammar, &CompileOptions::default()).unwrap();
    RobustConstrainedAdapter::new(Constraint::new(g, space(words)))
}

/// Tokens whose step succeeds, by trying each one on a fork.
fn brute_force(a: &RobustConstrainedAdapter) -> Vec<u32> {
    (0..128u32)
        .filter(|&t| a.fork().step_with_token(TokenId(t)).is_ok())
        .collect()
}

fn ids(mask: &corral_trie::FixedBitSet) -> Vec<u32> {
    mask.ones().map(|t| t as u32).collect()
}

/// `replay::brute_force_mask` (bytes pushed in prefix order, whole ids where a token
/// reference is expected) equals stepping every id whole, before, at and after references.
#[test]
fn prefix_order_brute_force_equals_stepping_every_token() {
    let words: &[&[u8]] = &[b"a", b"ab", b"abc", b"b", b"ba", b"", b"c", b"cb", b"x"];
    for grammar in [
        r#"root ::= "a" !<[2]> "b""#,
        r#"root ::= [a-c]+ <[3]> "x""#,
        r#"root ::= ("ab" | "ba")* "c""#,
    ] {
        let mut a = adapter(grammar, words);
        let mut steps = 0;
        loop {
            assert_eq!(
                ids(&brute_force_mask(&a)),
                brute_force(&a),
                "{grammar} after {:?}",
                String::from_utf8_lossy(a.output())
            );
            let Some(&t) = brute_force(&a).iter().find(|&&t| t != EOS) else {
                break;
            };
            a.step_with_token(TokenId(t)).unwrap();
            steps += 1;
            if steps == 6 {
                break;
            }
        }
        assert!(steps > 0, "{grammar}: no token allowed at the start");
    }
}

fn mask(a: &mut RobustConstrainedAdapter) -> Vec<u32> {
    a.allowed_token_ids()
        .unwrap()
        .into_iter()
        .map(TokenId::get)
        .collect()
}

const JSON: &str = r#"
root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws
object ::= "{" ws ( string ":" ws value ("," ws string ":" ws value)* )? "}" ws
array  ::= "[" ws ( value ("," ws value)* )? "]" ws
string ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4}) )* "\"" ws
number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9]+)? ws
ws ::= | " " | "\n" [ \t]{0,20}
"#;

/// A vocabulary with single bytes (so every string has a tokenization), multi-byte
/// tokens, tokens spanning lexemes, and the two halves of `é` as separate tokens.
const JSON_WORDS: &[&[u8]] = &[
    b"{",
    b"}",
    b"[",
    b"]",
    b"\"",
    b":",
    b",",
    b" ",
    b"\n",
    b"a",
    b"b",
    b"1",
    b"2",
    b"0",
    b".",
    b"e",
    b"-",
    b"t",
    b"r",
    b"u",
    b"f",
    b"l",
    b"s",
    b"n",
    b"\\",
    b"x", // single bytes 0..=25
    b"{\"",
    b"\":",
    b"\": ",
    b"\", \"",
    b"},",
    b"\"}",
    b"true",
    b"false",
    b"null",
    b"12",
    b"\n  ",
    b"ab",
    b"\"ab\"",
    b"1.5",
    b"\xc3",
    b"\xa9",
    b"\xc3\xa9",
    b"\"\xc3\xa9",
    b"\\n",
    b"\\u00e9",
    b"]}",
    b"[1",
    b", ",
    b"  ",
    b"5",
    b"9",
];

#[test]
fn tokens_spanning_lexemes_and_partial_utf8() {
    let mut a = adapter(JSON, JSON_WORDS);
    let ids = |ws: &[&[u8]]| -> Vec<u32> {
        ws.iter()
            .map(|w| JSON_WORDS.iter().position(|x| x == w).unwrap() as u32)
            .collect()
    };
    // {"é": "ab", "x\n": [1.5, true]} through tokens that cross lexeme boundaries and split é.
    let doc: &[&[u8]] = &[
        b"{\"", b"\xc3", b"\xa9", b"\": ", b"\"ab\"", b", ", b"\"", b"x", b"\\n", b"\":", b"[1",
        b".", b"5", b", ", b"true", b"]}",
    ];
    for t in ids(doc) {
        assert_eq!(mask(&mut a), brute_force(&a), "before token {t}");
        assert!(mask(&mut a).contains(&t), "token {t} should be allowed");
        a.step_with_token(TokenId(t)).unwrap();
    }
    assert!(a.is_accepting());
    assert_eq!(
        a.output(),
        "{\"é\": \"ab\", \"x\\n\":[1.5, true]}".as_bytes()
    );
    assert!(mask(&mut a).contains(&EOS));
    a.step_with_token(TokenId(EOS)).unwrap();
    assert!(a.is_finished());
}

#[test]
fn partial_utf8_token_carries_the_dfa_state() {
    let mut a = adapter(
        r#"root ::= "\"" [é]+ "\"""#,
        &[b"\"", b"\xc3", b"\xa9", b"\xc3\xa9", b"\xa9\"", b"e"],
    );
    a.step_with_token(TokenId(0)).unwrap();
    assert_eq!(mask(&mut a), vec![1, 3]); // only the lead byte, or the whole é
    a.step_with_token(TokenId(1)).unwrap();
    assert_eq!(mask(&mut a), vec![2, 4]); // the continuation byte, alone or with the quote
    a.step_with_token(TokenId(4)).unwrap();
    assert_eq!(mask(&mut a), vec![EOS]);
}

#[test]
fn padded_width_and_eos_only_when_accepting() {
    let mut a = adapter(r#"root ::= "ab" "c"?"#, &[b"a", b"b", b"c", b"ab", b"abc"]);
    let mut m = a.empty_mask();
    assert_eq!(m.len(), 128);
    a.compute_mask(&mut m).unwrap();
    assert_eq!(m.ones().collect::<Vec<_>>(), vec![0, 3, 4]);
    assert!(!m.contains(EOS as usize));
    a.step_with_token(TokenId(3)).unwrap();
    assert_eq!(mask(&mut a), vec![2, EOS]);
    // A mask narrower than the width is grown; ids past the vocabulary are refused.
    let mut small = corral_trie::new_mask(4);
    a.compute_mask(&mut small).unwrap();
    assert_eq!(small.len(), 128);
    assert_eq!(
        a.step_with_token(TokenId(500)),
        Err(AdapterError::UnknownToken {
            token: TokenId(500),
            width: 128
        })
    );
}

#[test]
fn rejected_token_changes_nothing_and_rollback_undoes() {
    let mut a = adapter(JSON, JSON_WORDS);
    let before = mask(&mut a);
    assert_eq!(
        a.step_with_token(TokenId(9)),
        Err(AdapterError::TokenNotAllowed {
            token: TokenId(9),
            position: 0
        })
    );
    assert_eq!(mask(&mut a), before);
    a.step_with_token(TokenId(26)).unwrap(); // {"
    a.step_with_token(TokenId(9)).unwrap(); // a
    let after_a = mask(&mut a);
    a.step_with_token(TokenId(27)).unwrap(); // ":
    a.step_with_token(TokenId(11)).unwrap(); // 1
    assert_eq!(a.output(), b"{\"a\":1");
    a.rollback(2).unwrap();
    assert_eq!(a.output(), b"{\"a");
    assert_eq!(mask(&mut a), after_a);
    assert_eq!(a.tokens_consumed(), 2);
}

#[test]
fn forced_continuations() {
    let mut a = adapter(
        r#"root ::= "{\"name\": \"" [a-z]+ "\", \"age\": " [0-9]+ "}""#,
        &[
            b"{",
            b"\"",
            b"name",
            b"a",
            b"b",
            b"\": \"",
            b"{\"name\": \"",
        ],
    );
    assert_eq!(a.forced_bytes().unwrap(), b"{\"name\": \"");
    assert_eq!(a.forced_tokens().unwrap(), vec![TokenId(6)]);
    a.step_with_token(TokenId(6)).unwrap();
    assert_eq!(a.forced_bytes().unwrap(), b"");
    a.step_with_token(TokenId(3)).unwrap();
    assert_eq!(
        a.forced_bytes().unwrap(),
        b"",
        "a letter or the quote can follow"
    );
    assert_eq!(a.output(), b"{\"name\": \"a");
}

#[test]
fn no_continuation_is_a_typed_error() {
    // The grammar needs a 'z' and no token has one.
    let mut a = adapter(r#"root ::= "a" "z""#, &[b"a", b"b"]);
    a.step_with_token(TokenId(0)).unwrap();
    let mut m = a.empty_mask();
    assert_eq!(
        a.compute_mask(&mut m),
        Err(AdapterError::NoContinuation { position: 1 })
    );
    // Sticky.
    assert_eq!(
        a.step_with_token(TokenId(1)),
        Err(AdapterError::NoContinuation { position: 1 })
    );
}

#[test]
fn state_info_shows_partial_lexemes() {
    let mut a = adapter(JSON, JSON_WORDS);
    a.step_with_tokens(&[TokenId(26), TokenId(9)]).unwrap(); // {"a
    let info = a.state_info();
    assert_eq!(info.position, 3);
    assert_eq!(info.tokens, 2);
    assert!(!info.accepting);
    assert!(
        info.partial_lexemes
            .iter()
            .any(|p| p.matched == b"\"a" && !p.can_end),
        "{info:?}"
    );
}

/// Random documents in the JSON grammar, from a seed.
fn random_doc(seed: u64) -> String {
    let mut x = seed | 1;
    let mut rnd = move |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    };
    fn value(rnd: &mut dyn FnMut(u64) -> u64, depth: u32) -> String {
        let k = if depth > 2 { 2 + rnd(4) } else { rnd(6) };
        match k {
            0 => {
                let n = rnd(3);
                let members: Vec<String> = (0..n)
                    .map(|_| {
                        format!(
                            "{}:{}{}",
                            string(rnd),
                            ["", " "][rnd(2) as usize],
                            value(rnd, depth + 1)
                        )
                    })
                    .collect();
                format!("{{{}}}", members.join(", "))
            }
            1 => {
                let n = rnd(3);
                let items: Vec<String> = (0..n).map(|_| value(rnd, depth + 1)).collect();
                format!("[{}]", items.join(","))
            }
            2 => string(rnd),
            3 => ["0", "12", "-1.5", "2e-1", "105"][rnd(5) as usize].to_string(),
            4 => ["true", "false", "null"][rnd(3) as usize].to_string(),
            _ => format!("[{}]", string(rnd)),
        }
    }
    fn string(rnd: &mut dyn FnMut(u64) -> u64) -> String {
        let parts = ["a", "b", "é", "\\n", "\\u00e9", "x", "ab", " "];
        let n = rnd(4);
        let body: String = (0..n)
            .map(|_| parts[rnd(parts.len() as u64) as usize])
            .collect();
        format!("\"{body}\"")
    }
    let n = rnd(3) + 1;
    let members: Vec<String> = (0..n)
        .map(|_| format!("{}: {}", string(&mut rnd), value(&mut rnd, 0)))
        .collect();
    format!("{{{}}}", members.join(",\n  "))
}

/// A random segmentation of `text` into vocabulary tokens (always possible: every byte used
/// here is a single-byte token, and é's bytes are tokens too).
fn random_tokens(text: &[u8], seed: u64) -> Vec<u32> {
    let mut x = seed | 1;
    let mut out = Vec::new();
    let mut at = 0;
    while at < text.len() {
        let options: Vec<(usize, usize)> = JSON_WORDS
            .iter()
            .enumerate()
            .filter(|(_, w)| text[at..].starts_with(w))
            .map(|(i, w)| (i, w.len()))
            .collect();
        assert!(
            !options.is_empty(),
            "no token for {:?}",
            String::from_utf8_lossy(&text[at..])
        );
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let (id, len) = options[(x % options.len() as u64) as usize];
        out.push(id as u32);
        at += len;
    }
    out
}

/// The property tests' seed: fixed, so that every run checks the same cases and a failure
/// repeats; `PROPTEST_RNG_SEED` picks another.
fn seed() -> proptest::test_runner::RngSeed {
    match std::env::var_os("PROPTEST_RNG_SEED") {
        Some(_) => ProptestConfig::default().rng_seed,
        None => proptest::test_runner::RngSeed::Fixed(0x636f_7272_616c),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(64), rng_seed: seed(), ..ProptestConfig::default() })]

    #[test]
    fn mask_agrees_with_brute_force_on_random_tokenizations(doc_seed in any::<u64>(), tok_seed in any::<u64>()) {
        let doc = random_doc(doc_seed);
        let tokens = random_tokens(doc.as_bytes(), tok_seed);
        let mut a = adapter(JSON, JSON_WORDS);
        for &t in &tokens {
            let m = mask(&mut a);
            let brute = brute_force(&a);
            prop_assert_eq!(&m, &brute, "doc {:?} at {:?}", doc, String::from_utf8_lossy(a.output()));
            prop_assert_eq!(&ids(&brute_force_mask(&a)), &brute, "replay's brute force (bytes in prefix order) at {:?}", String::from_utf8_lossy(a.output()));
            prop_assert!(m.contains(&t), "token {} refused in {:?} at {:?}", t, doc, String::from_utf8_lossy(a.output()));
            a.step_with_token(TokenId(t)).unwrap();
        }
        prop_assert!(mask(&mut a).contains(&EOS));
    }
}

/// A completion far longer than the budget is measured, not written out: the 50 million
/// bytes of `("ab"{5000}){5000}` need at least 25 million two-byte tokens.
#[test]
fn a_completion_far_past_the_budget_is_measured_not_spelled() {
    use corral_engine::Completion;
    let mut a = adapter(r#"root ::= ("ab"{5000}){5000}"#, &[b"a", b"b", b"ab"]);
    assert_eq!(
        a.completion_tokens_within(5).unwrap(),
        Completion::TooLong {
            at_least: 25_000_000
        }
    );
    let mut a = adapter(r#"root ::= "ab" "c""#, &[b"a", b"b", b"ab", b"c"]);
    assert_eq!(
        a.completion_tokens_within(5).unwrap(),
        Completion::Tokens(vec![TokenId(2), TokenId(3)])
    );
    let mut a = adapter(r#"root ::= "a" <|none|>"#, &[b"a"]);
    assert_eq!(
        a.completion_tokens_within(5).unwrap(),
        Completion::Impossible
    );
}

/// Steps `path` (tokens of `words`, with an end token after them) through `grammar`,
/// comparing every mask on the way with brute force; the grammar must accept the path.
fn masks_along(grammar: &str, words: &[Vec<u8>], path: &[&str]) {
    let eos = words.len() as u32;
    let space = space_of(words.iter().cloned(), eos, words.len() + 1);
    let g = compile_gbnf(grammar, &CompileOptions::default()).unwrap();
    let mut a = RobustConstrainedAdapter::new(Constraint::new(g, space));
    let id = |w: &str| TokenId(words.iter().position(|x| x == w.as_bytes()).unwrap() as u32);
    for (i, w) in path.iter().enumerate() {
        let brute: Vec<u32> = brute_force_mask(&a).ones().map(|t| t as u32).collect();
        assert_eq!(mask(&mut a), brute, "after {:?}", &path[..i]);
        a.step_with_token(id(w)).unwrap();
    }
    assert!(a.is_accepting());
}

/// A lexeme that can go on (a number) ending at a node with a large subtree below it (every
/// token of up to four digits starting with `1`), and tokens that go past a longer end of it
/// (`10,`, `123,4`, `15],`): the mask equals brute force at every step. The walk hands the
/// subtree below `1` to the parser with the number closed there, and must take the longer
/// ends from the nodes below.
#[test]
fn tokens_past_a_longer_end_below_a_large_subtree() {
    let grammar = r#"
root ::= list
list ::= "[" item ("," item)* "]"
item ::= [0-9]+ | list
"#;
    let mut words: Vec<Vec<u8>> = ["[", "]", ","]
        .iter()
        .map(|w| w.as_bytes().to_vec())
        .collect();
    words.extend((0..10).map(|d| d.to_string().into_bytes()));
    for n in (10..20).chain(100..200).chain(1000..2000) {
        words.push(n.to_string().into_bytes());
    }
    for w in [
        "1,", "10,", "123,4", "1]", "15],", "1,[", "19,1", "2,", "1999]",
    ] {
        words.push(w.as_bytes().to_vec());
    }
    let path = [
        "[", "10,", "1", "123,4", ",", "1,[", "1999", ",", "15],", "2", "]",
    ];
    masks_along(grammar, &words, &path);
}

/// A counted run of letters, digits and hyphens (an e-mail address's local part): below a
/// hyphen, tokens whose rest is letters stay alive only while the count has room for them,
/// and tokens that run from letters into a hyphen or `@` come from the walks for a prefix.
/// Every mask on the way to the bound is checked against brute force.
#[test]
fn counted_runs_take_rests_only_within_their_room() {
    let grammar = r#"root ::= [A-Za-z0-9-]{1,20} "@" [a-z]+ "." [a-z]{2,4}"#;
    let mut words: Vec<Vec<u8>> = (b'a'..=b'z').map(|b| vec![b]).collect();
    words.extend((b'0'..=b'9').map(|b| vec![b]));
    for w in [
        "-",
        "@",
        ".",
        "com",
        "ex",
        "ab",
        "abcd",
        "abcdefgh",
        "abcdefghijklmnop",
        "-ab",
        "-abcde",
        "-abcdefghij",
        "-abcdefghijklmno",
        "--------",
        "ab-cd",
        "abc@ex",
        "x@y.com",
        "b-",
        "ab@",
        "a.com",
    ] {
        words.push(w.as_bytes().to_vec());
    }
    let path = [
        "abcd", "-ab", "abcdefgh", "-ab", "b-", "@", "ex", ".", "com",
    ];
    masks_along(grammar, &words, &path);
}

/// A token-set cache over a base made from another grammar (`MaskCache::prefilled`): the
/// states whose residuals the base walked (`ws ":" ws` after another key, `ws "}"`) come
/// from it, with their end states mapped, and every mask still equals brute force.
#[test]
fn a_base_from_another_grammar_serves_shared_states_exactly() {
    let base_grammar = r#"
root ::= "{" ws "\"ab\"" ws ":" ws [0-9]+ ws "}"
ws ::= [ \n]{0,3}
"#;
    let grammar = r#"
root ::= obj
obj ::= "{" ws "\"cd\"" ws ":" ws val ws "}"
val ::= [0-9]+ | obj
ws ::= [ \n]{0,3}
"#;
    let words: &[&[u8]] = &[
        b"{", b"}", b"\"", b"c", b"d", b":", b" ", b"\n", b"1", b"2", b"\": ", b"\":", b":\n",
        b": ", b"  ", b"   ", b"\n ", b" \n", b"\"cd", b"1}", b" 1", b" {", b"}\n", b"} ", b"12",
        b" }", b"\n\n\n", b" \"", b": {",
    ];
    let docs = [
        "{\"cd\":1}",
        "{ \"cd\" : 12 }",
        "{\n  \"cd\": {\"cd\":12\n}\n}",
        "{\"cd\":   {\n \"cd\" :\n1 }  }",
    ];
    let space = space(words);
    let compile = |g: &str| compile_gbnf(g, &CompileOptions::default()).unwrap();
    let (base, walked) = MaskCache::prefilled(space.clone(), &compile(base_grammar));
    assert!(walked > 0, "the base walked no state");
    for doc in docs {
        let cache = MaskCache::with_base(&base, Default::default());
        let mut a = RobustConstrainedAdapter::new(Constraint::with_cache(compile(grammar), &cache));
        let mut rest = doc.as_bytes();
        while !rest.is_empty() {
            let m = mask(&mut a);
            let out = String::from_utf8_lossy(a.output()).into_owned();
            assert_eq!(m, brute_force(&a), "{doc:?} at {out:?}");
            let (t, w) = words
                .iter()
                .enumerate()
                .filter(|(_, w)| rest.starts_with(w))
                .max_by_key(|(_, w)| w.len())
                .expect("single bytes cover the document");
            a.step_with_token(TokenId(t as u32)).unwrap();
            rest = &rest[w.len()..];
        }
        assert!(mask(&mut a).contains(&EOS), "{doc:?} complete");
        let stats = cache.stats();
        assert!(
            stats.base_hits > 0,
            "{doc:?}: nothing from the base ({stats:?})"
        );
    }
}

/// A counted run of spaces (up to 40) whose states all come from a base made from the same
/// grammar, reached one or ten at a time in another order than the base walked them:
/// exact at, near and away from the bound.
#[test]
fn a_base_serves_a_counted_run_exactly_near_its_bound() {
    let grammar = "root ::= \"{\" [ ]{0,40} \"}\"";
    let ten = [b' '; 10];
    let words: &[&[u8]] = &[b"{", b"}", b" ", &ten, b" }", b"{ "];
    let space = space(words);
    let compile = || compile_gbnf(grammar, &CompileOptions::default()).unwrap();
    let (base, _) = MaskCache::prefilled(space.clone(), &compile());
    for spaces in [0, 9, 10, 11, 29, 30, 31, 39, 40] {
        for first in [1, 10] {
            let cache = MaskCache::with_base(&base, Default::default());
            let mut a = RobustConstrainedAdapter::new(Constraint::with_cache(compile(), &cache));
            a.step_with_token(TokenId(0)).unwrap();
            let mut left = spaces;
            let mut step = first;
            loop {
                let m = mask(&mut a);
                let out = String::from_utf8_lossy(a.output()).into_owned();
                assert_eq!(m, brute_force(&a), "{spaces} spaces at {out:?}");
                if left == 0 {
                    break;
                }
                let n = if step == 10 && left >= 10 { 10 } else { 1 };
                a.step_with_token(TokenId(if n == 10 { 3 } else { 2 }))
                    .unwrap();
                left -= n;
                step = 11 - step;
            }
            a.step_with_token(TokenId(1)).unwrap();
            assert!(mask(&mut a).contains(&EOS));
            assert!(
                cache.stats().base_hits > 0,
                "{spaces}: nothing from the base"
            );
        }
    }
}

/// Separators of two keys end alike (`":" ws`), and `"}"`'s run starts as their last run
/// does: the token sets of such states are walked once and serve the others with their end
/// states mapped. Every mask along documents with whitespace of every width equals brute
/// force.
#[test]
fn states_that_end_alike_across_lexemes_share_exact_sets() {
    let grammar = r#"
root ::= obj
obj ::= "{" ws "\"ab\"" ws ":" ws val ws "," ws "\"cd\"" ws ":" ws val ws "}"
val ::= [0-9]+ | obj
ws ::= [ \n]{0,3}
"#;
    let words: &[&[u8]] = &[
        b"{", b"}", b"\"", b"a", b"b", b"c", b"d", b":", b",", b" ", b"\n", b"1", b"2", b"\": ",
        b"\":", b":\n", b": ", b"  ", b"   ", b"\n ", b" \n", b", \"", b",\n", b"\"cd", b"\"ab\"",
        b"1,", b" 1", b" {", b"}\n", b"} ", b"12", b" }", b"\n\n\n", b" \"", b": {",
    ];
    let docs = [
        "{\"ab\":1,\"cd\":2}",
        "{ \"ab\" : 1 , \"cd\" : 2 }",
        "{\n  \"ab\": {\"ab\":12,\n\"cd\":1},\n  \"cd\": 2\n}",
        "{\"ab\":   {\n \"ab\" :\n1 ,\"cd\":{\"ab\":1,\"cd\":2}  },\"cd\":\n\n\n1\n}",
    ];
    let space = space(words);
    for doc in docs {
        let mut a = RobustConstrainedAdapter::new(Constraint::new(
            compile_gbnf(grammar, &CompileOptions::default()).unwrap(),
            space.clone(),
        ));
        let mut rest = doc.as_bytes();
        while !rest.is_empty() {
            let m = mask(&mut a);
            let brute = brute_force(&a);
            assert_eq!(
                m,
                brute,
                "{doc:?} at {:?}",
                String::from_utf8_lossy(a.output())
            );
            // The longest token that begins the rest, as a tokenizer would take it.
            let (t, w) = words
                .iter()
                .enumerate()
                .filter(|(_, w)| !w.is_empty() && rest.starts_with(w))
                .max_by_key(|(_, w)| w.len())
                .expect("single bytes cover the document");
            assert!(
                m.contains(&(t as u32)),
                "{doc:?}: {:?} refused",
                String::from_utf8_lossy(w)
            );
            a.step_with_token(TokenId(t as u32)).unwrap();
            rest = &rest[w.len()..];
        }
        assert!(mask(&mut a).contains(&EOS), "{doc:?} complete");
    }
}
