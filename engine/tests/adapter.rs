//! The adapter on tiny hand-written vocabularies: multi-byte tokens, tokens spanning
//! lexemes, partial UTF-8 tokens, a padded logit width, token references, rollback, forced
//! continuations, and the mask agreeing with brute force (a token is in the mask iff
//! stepping with it succeeds) over random documents and random tokenizations.

use corral_engine::{AdapterError, Constraint, RobustConstrainedAdapter};
use corral_grammar::{CompileOptions, compile_gbnf};
use corral_trie::{TokenSpace, Vocabulary};
use proptest::prelude::*;
use std::sync::Arc;

const EOS: u32 = 100;

/// Text tokens (ids 0..) plus EOS = 100; logits 128 wide (padded).
fn space(words: &[&[u8]]) -> Arc<TokenSpace> {
    let vocab = Vocabulary::from_parts(
        words
            .iter()
            .enumerate()
            .map(|(i, w)| (i as u32, w.to_vec())),
        [(EOS, "</s>".to_string())],
    );
    Arc::new(TokenSpace::new(vocab, Some(128), vec![EOS]))
}

fn adapter(grammar: &str, words: &[&[u8]]) -> RobustConstrainedAdapter {
    let g = compile_gbnf(grammar, &CompileOptions::default()).unwrap();
    RobustConstrainedAdapter::new(Constraint::new(g, space(words)))
}

/// Tokens whose step succeeds, by trying each one on a fork.
fn brute_force(a: &RobustConstrainedAdapter) -> Vec<u32> {
    (0..128u32)
        .filter(|&t| a.fork().step_with_token(t).is_ok())
        .collect()
}

fn mask(a: &mut RobustConstrainedAdapter) -> Vec<u32> {
    a.allowed_token_ids().unwrap()
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
        a.step_with_token(t).unwrap();
    }
    assert!(a.is_accepting());
    assert_eq!(
        a.output(),
        "{\"é\": \"ab\", \"x\\n\":[1.5, true]}".as_bytes()
    );
    assert!(mask(&mut a).contains(&EOS));
    a.step_with_token(EOS).unwrap();
    assert!(a.is_finished());
}

#[test]
fn partial_utf8_token_carries_the_dfa_state() {
    let mut a = adapter(
        r#"root ::= "\"" [é]+ "\"""#,
        &[b"\"", b"\xc3", b"\xa9", b"\xc3\xa9", b"\xa9\"", b"e"],
    );
    a.step_with_token(0).unwrap();
    assert_eq!(mask(&mut a), vec![1, 3]); // only the lead byte, or the whole é
    a.step_with_token(1).unwrap();
    assert_eq!(mask(&mut a), vec![2, 4]); // the continuation byte, alone or with the quote
    a.step_with_token(4).unwrap();
    assert_eq!(mask(&mut a), vec![EOS]);
}

#[test]
fn padded_width_and_eos_only_when_accepting() {
    let mut a = adapter(r#"root ::= "ab" "c"?"#, &[b"a", b"b", b"c", b"ab", b"abc"]);
    let mut m = a.new_mask();
    assert_eq!(m.len(), 128);
    a.compute_mask(&mut m).unwrap();
    assert_eq!(m.ones().collect::<Vec<_>>(), vec![0, 3, 4]);
    assert!(!m.contains(EOS as usize));
    a.step_with_token(3).unwrap();
    assert_eq!(mask(&mut a), vec![2, EOS]);
    // A mask narrower than the width is grown; ids past the vocabulary are refused.
    let mut small = corral_trie::new_mask(4);
    a.compute_mask(&mut small).unwrap();
    assert_eq!(small.len(), 128);
    assert_eq!(
        a.step_with_token(500),
        Err(AdapterError::UnknownToken {
            token: 500,
            width: 128
        })
    );
}

#[test]
fn rejected_token_changes_nothing_and_rollback_undoes() {
    let mut a = adapter(JSON, JSON_WORDS);
    let before = mask(&mut a);
    assert_eq!(
        a.step_with_token(9),
        Err(AdapterError::TokenNotAllowed {
            token: 9,
            position: 0
        })
    );
    assert_eq!(mask(&mut a), before);
    a.step_with_token(26).unwrap(); // {"
    a.step_with_token(9).unwrap(); // a
    let after_a = mask(&mut a);
    a.step_with_token(27).unwrap(); // ":
    a.step_with_token(11).unwrap(); // 1
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
    assert_eq!(a.forced_tokens().unwrap(), vec![6]);
    a.step_with_token(6).unwrap();
    assert_eq!(a.forced_bytes().unwrap(), b"");
    a.step_with_token(3).unwrap();
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
    a.step_with_token(0).unwrap();
    let mut m = a.new_mask();
    assert_eq!(
        a.compute_mask(&mut m),
        Err(AdapterError::NoContinuation { position: 1 })
    );
    // Sticky.
    assert_eq!(
        a.step_with_token(1),
        Err(AdapterError::NoContinuation { position: 1 })
    );
}

#[test]
fn state_info_shows_partial_lexemes() {
    let mut a = adapter(JSON, JSON_WORDS);
    a.step_with_tokens(&[26, 9]).unwrap(); // {"a
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

/// The two token-segment cases of llama.cpp's grammar_cases.json: text is fed one code point
/// at a time (each a token), special tokens by id; `!<[N]>` matches any token but N.
#[test]
fn token_reference_cases_from_llama_cpp() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/conformance/llama_cpp/grammar_cases.json"
    );
    let Ok(text) = std::fs::read_to_string(path) else {
        eprintln!("{path} missing: skipping");
        return;
    };
    let cases: Vec<Value> = parse_json(&text);
    let mut checked = 0;
    for case in cases
        .iter()
        .filter(|c| get(c, "input_kind").and_then(as_str) == Some("segments"))
    {
        let grammar = get(case, "grammar").and_then(as_str).unwrap();
        for (key, want) in [("pass", true), ("fail", false)] {
            for input in as_array(get(case, key).unwrap()) {
                // Vocabulary: special tokens 0..=30 by id; characters from 1000 up.
                let mut chars: Vec<char> = Vec::new();
                let mut ids = Vec::new();
                for seg in as_array(input) {
                    match seg {
                        Value::Str(s) => {
                            for ch in s.chars() {
                                let i = chars.iter().position(|&c| c == ch).unwrap_or_else(|| {
                                    chars.push(ch);
                                    chars.len() - 1
                                });
                                ids.push(1000 + i as u32);
                            }
                        }
                        Value::Obj(_) => ids.push(as_num(get(seg, "token").unwrap()) as u32),
                        _ => unreachable!(),
                    }
                }
                let vocab = Vocabulary::from_parts(
                    chars
                        .iter()
                        .enumerate()
                        .map(|(i, c)| (1000 + i as u32, c.to_string().into_bytes())),
                    (0..=30u32)
                        .map(|i| (i, format!("<special_{i}>")))
                        .chain([(2000, "</s>".to_string())]),
                );
                let space = Arc::new(TokenSpace::new(vocab, None, vec![2000]));
                let g = compile_gbnf(grammar, &CompileOptions::default()).unwrap();
                let mut a = RobustConstrainedAdapter::new(Constraint::new(g, space));
                let mut ok = true;
                for &t in &ids {
                    let allowed = a
                        .allowed_token_ids()
                        .map(|m| m.contains(&t))
                        .unwrap_or(false);
                    let stepped = a.step_with_token(t).is_ok();
                    assert_eq!(
                        allowed, stepped,
                        "mask and step disagree on {t} in {input:?}"
                    );
                    if !stepped {
                        ok = false;
                        break;
                    }
                }
                let got = ok && a.is_accepting();
                assert_eq!(got, want, "{grammar} on {input:?}");
                checked += 1;
            }
        }
    }
    eprintln!("token-segment cases: {checked} inputs agree");
    assert_eq!(checked, 20);
}

// A minimal JSON reader for the case file (the engine has no serde dependency).
#[derive(Debug, Clone)]
enum Value {
    Str(String),
    Num(f64),
    Arr(Vec<Value>),
    Obj(Vec<(String, Value)>),
    Other,
}

fn get<'a>(v: &'a Value, k: &str) -> Option<&'a Value> {
    match v {
        Value::Obj(kv) => kv.iter().find(|(key, _)| key == k).map(|(_, v)| v),
        _ => None,
    }
}
fn as_str(v: &Value) -> Option<&str> {
    match v {
        Value::Str(s) => Some(s),
        _ => None,
    }
}
fn as_array(v: &Value) -> &[Value] {
    match v {
        Value::Arr(a) => a,
        _ => &[],
    }
}
fn as_num(v: &Value) -> f64 {
    match v {
        Value::Num(n) => *n,
        _ => f64::NAN,
    }
}
fn parse_json(s: &str) -> Vec<Value> {
    let mut p = s.chars().peekable();
    fn ws(p: &mut std::iter::Peekable<std::str::Chars>) {
        while p.peek().is_some_and(|c| c.is_whitespace()) {
            p.next();
        }
    }
    fn val(p: &mut std::iter::Peekable<std::str::Chars>) -> Value {
        ws(p);
        match p.peek().copied() {
            Some('"') => {
                p.next();
                let mut s = String::new();
                while let Some(c) = p.next() {
                    match c {
                        '"' => break,
                        '\\' => match p.next().unwrap() {
                            'n' => s.push('\n'),
                            't' => s.push('\t'),
                            'r' => s.push('\r'),
                            'u' => {
                                let h: String = (0..4).map(|_| p.next().unwrap()).collect();
                                s.push(
                                    char::from_u32(u32::from_str_radix(&h, 16).unwrap())
                                        .unwrap_or('?'),
                                );
                            }
                            c => s.push(c),
                        },
                        c => s.push(c),
                    }
                }
                Value::Str(s)
            }
            Some('[') => {
                p.next();
                let mut a = Vec::new();
                loop {
                    ws(p);
                    if p.peek() == Some(&']') {
                        p.next();
                        break;
                    }
                    a.push(val(p));
                    ws(p);
                    if p.peek() == Some(&',') {
                        p.next();
                    }
                }
                Value::Arr(a)
            }
            Some('{') => {
                p.next();
                let mut kv = Vec::new();
                loop {
                    ws(p);
                    if p.peek() == Some(&'}') {
                        p.next();
                        break;
                    }
                    let Value::Str(k) = val(p) else { panic!("key") };
                    ws(p);
                    p.next(); // :
                    kv.push((k, val(p)));
                    ws(p);
                    if p.peek() == Some(&',') {
                        p.next();
                    }
                }
                Value::Obj(kv)
            }
            Some(c) if c == '-' || c.is_ascii_digit() => {
                let mut n = String::new();
                while p.peek().is_some_and(|c| "-+.eE0123456789".contains(*c)) {
                    n.push(p.next().unwrap());
                }
                Value::Num(n.parse().unwrap())
            }
            _ => {
                while p.peek().is_some_and(|c| c.is_alphabetic()) {
                    p.next();
                }
                Value::Other
            }
        }
    }
    match val(&mut p) {
        Value::Arr(a) => a,
        _ => panic!("array expected"),
    }
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

proptest! {
    #![proptest_config(ProptestConfig { cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(64), ..ProptestConfig::default() })]

    #[test]
    fn mask_agrees_with_brute_force_on_random_tokenizations(doc_seed in any::<u64>(), tok_seed in any::<u64>()) {
        let doc = random_doc(doc_seed);
        let tokens = random_tokens(doc.as_bytes(), tok_seed);
        let mut a = adapter(JSON, JSON_WORDS);
        for &t in &tokens {
            let m = mask(&mut a);
            prop_assert_eq!(&m, &brute_force(&a), "doc {:?} at {:?}", doc, String::from_utf8_lossy(a.output()));
            prop_assert!(m.contains(&t), "token {} refused in {:?} at {:?}", t, doc, String::from_utf8_lossy(a.output()));
            a.step_with_token(t).unwrap();
        }
        prop_assert!(mask(&mut a).contains(&EOS));
    }
}
