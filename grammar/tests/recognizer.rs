//! Recognizer behaviour: rollback, byte-at-a-time UTF-8, deep input, right recursion
//! staying linear (Leo items), limits as typed errors.

use corral_grammar::{
    CompileOptions, Limits, MatchOutcome, RecognizeError, Recognizer, compile_gbnf, match_bytes,
};

fn grammar(text: &str) -> std::sync::Arc<corral_grammar::Grammar> {
    compile_gbnf(text, &CompileOptions::default()).unwrap()
}

const JSON: &str = r#"
root   ::= value
value  ::= object | array | string | number | ("true" | "false" | "null") ws
object ::= "{" ws ( string ":" ws value ("," ws string ":" ws value)* )? "}" ws
array  ::= "[" ws ( value ("," ws value)* )? "]" ws
string ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4}) )* "\"" ws
number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9]+)? ws
ws ::= | " " | "\n" [ \t]{0,20}
"#;

#[test]
fn rejected_byte_changes_nothing_and_pop_rolls_back() {
    let g = grammar(JSON);
    let mut r = Recognizer::new(g);
    for &b in br#"{"a": [1, 2"# {
        assert!(r.push_byte(b).unwrap());
    }
    let pos = r.position();
    assert!(
        !r.push_byte(b'}').unwrap(),
        "a closing brace cannot close an array"
    );
    assert_eq!(r.position(), pos);
    assert!(r.push_byte(b']').unwrap());
    assert!(r.push_byte(b'}').unwrap());
    assert!(r.is_accepting());
    // Roll back to before "2" and take another path.
    assert_eq!(r.pop(3), 3);
    assert!(!r.is_accepting());
    for &b in br#""x"]}"# {
        assert!(r.push_byte(b).unwrap());
    }
    assert!(r.is_accepting());
}

#[test]
fn multibyte_utf8_one_byte_at_a_time_and_invalid_utf8_rejected() {
    let g = grammar(r#"root ::= "é" [一-鿿]+ [^a]"#);
    let mut r = Recognizer::new(g.clone());
    for &b in "é日本😀".as_bytes() {
        assert!(r.push_byte(b).unwrap());
    }
    assert!(r.is_accepting());
    assert!(matches!(
        match_bytes(&g, b"\xc3\xa9\xe6\x97"),
        Ok(MatchOutcome::Incomplete { .. })
    ));
    assert!(matches!(
        match_bytes(&g, b"\xc3\xa9\xe6\x97\xa5\xff"),
        Ok(MatchOutcome::Rejected { offset: 5, .. })
    ));
    // A lone continuation byte or an overlong encoding is never valid.
    assert!(matches!(
        match_bytes(&g, b"\xc3\xa9\xe6\x97\xa5\x80"),
        Ok(MatchOutcome::Rejected { offset: 5, .. })
    ));
    assert!(matches!(
        match_bytes(&g, b"\xc3\xa9\xe6\x97\xa5\xc0\x80"),
        Ok(MatchOutcome::Rejected { offset: 5, .. })
    ));
}

#[test]
fn deep_nesting_does_not_overflow() {
    let g = grammar(JSON);
    let depth = 100_000;
    let doc = format!("{}1{}", "[".repeat(depth), "]".repeat(depth));
    assert_eq!(
        match_bytes(&g, doc.as_bytes()).unwrap(),
        MatchOutcome::Accepted
    );
    let doc = format!("{}1{}", "[".repeat(depth), "]".repeat(depth - 1));
    assert!(matches!(
        match_bytes(&g, doc.as_bytes()).unwrap(),
        MatchOutcome::Incomplete { .. }
    ));
}

/// Leo items keep a right-recursive list linear: the Earley items the recognizer holds grow
/// by a constant per element, so 2x the elements is 2x the items (quadratic growth would
/// show up as 4x). (Time per step is measured in the benches.)
#[test]
fn right_recursion_stays_linear() {
    let g = grammar("root ::= item root | item\nitem ::= [a-z]+ \";\"\n");
    let items_for = |n: usize| {
        let mut r = Recognizer::new(g.clone());
        for _ in 0..n {
            for &b in b"ab;" {
                assert!(r.push_byte(b).unwrap());
            }
        }
        assert!(r.is_accepting());
        r.item_count()
    };
    let (a, b) = (items_for(50_000), items_for(100_000));
    let ratio = b as f64 / a as f64;
    assert!(
        (1.9..2.1).contains(&ratio),
        "items {a} -> {b}: ratio {ratio}"
    );
}

#[test]
fn left_recursion_is_linear_too() {
    let g = grammar("root ::= root \",\" item | item\nitem ::= [0-9]+\n");
    let doc: String = (0..100_000)
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(",");
    assert_eq!(
        match_bytes(&g, doc.as_bytes()).unwrap(),
        MatchOutcome::Accepted
    );
}

#[test]
fn limits_are_typed_errors() {
    let limits = Limits {
        max_items_per_set: 4,
        ..Limits::default()
    };
    let g = compile_gbnf(JSON, &CompileOptions::default().limits(limits)).unwrap();
    let mut r = Recognizer::new(g);
    let err = br#"{"a": [1]}"#
        .iter()
        .map(|&b| r.push_byte(b))
        .find_map(Result::err)
        .expect("the item limit is hit");
    let RecognizeError::Limit(hit) = &err;
    assert_eq!(hit.limit_name, "max_items_per_set");
    assert!(err.to_string().contains("max_items_per_set = 4"), "{err}");

    // Many lexer runs alive at once: every position may start a new word.
    let limits = Limits {
        max_lexer_runs: 8,
        ..Limits::default()
    };
    let g = compile_gbnf(
        "root ::= w root | \"\"\nw ::= [a]+ | [a]+ \"b\"\n",
        &CompileOptions::default().limits(limits),
    )
    .unwrap();
    let result = match_bytes(&g, "a".repeat(64).as_bytes());
    assert!(
        matches!(result, Err(RecognizeError::Limit(ref h)) if h.limit_name == "max_lexer_runs"),
        "{result:?}"
    );
}

#[test]
fn an_intersection_past_its_size_limit_is_a_limit_error_not_a_rejection() {
    // Built on demand, the product outgrows max_lexeme_bytes only as the input reaches its
    // states; the match then fails with the limit, never with a wrong answer.
    let src = "root ::= [a-z]{0,200} & ([a-y]* \"z\" [a-z]* | [a-z]{0,3})\n";
    let limits = Limits {
        max_lexeme_bytes: 8192,
        ..Limits::default()
    };
    let g = compile_gbnf(src, &CompileOptions::default().limits(limits)).unwrap();
    let input = format!("{}z", "a".repeat(190));
    let result = match_bytes(&g, input.as_bytes());
    assert!(
        matches!(result, Err(RecognizeError::Limit(ref h)) if h.limit_name == "max_lexeme_bytes"),
        "{result:?}"
    );
    // The default limit holds it: the same input is in the language.
    let g = compile_gbnf(src, &CompileOptions::default()).unwrap();
    assert_eq!(
        match_bytes(&g, input.as_bytes()).unwrap(),
        MatchOutcome::Accepted
    );
    assert_eq!(match_bytes(&g, b"abc").unwrap(), MatchOutcome::Accepted);
    // Four letters without a z: only a prefix of the intersection.
    assert!(matches!(
        match_bytes(&g, b"abcd"),
        Ok(MatchOutcome::Incomplete { .. })
    ));
}

#[test]
fn nullable_lexemes_and_empty_start() {
    let g = grammar("root ::= ws\nws ::= [ ]*\n");
    assert_eq!(match_bytes(&g, b"").unwrap(), MatchOutcome::Accepted);
    assert_eq!(match_bytes(&g, b"   ").unwrap(), MatchOutcome::Accepted);
    let g = grammar("root ::= a b\na ::= [x]*\nb ::= \"\" | \"y\"\n");
    for (s, ok) in [
        ("", true),
        ("xx", true),
        ("y", true),
        ("xxy", true),
        ("yx", false),
    ] {
        assert_eq!(
            match_bytes(&g, s.as_bytes()).unwrap() == MatchOutcome::Accepted,
            ok,
            "{s:?}"
        );
    }
}

#[test]
fn ambiguous_grammar_with_shared_prefixes() {
    // Both "ab" "c" and "a" "bc" parse; the recognizer must keep both lexeme splits alive.
    let g = grammar("root ::= x y\nx ::= \"a\" | \"ab\"\ny ::= \"bc\" | \"c\" | \"bcd\"\n");
    for (s, ok) in [
        ("abc", true),
        ("abcd", true),
        ("ac", true),
        ("abbc", true),
        ("abbcd", true),
        ("ab", false),
    ] {
        assert_eq!(
            match_bytes(&g, s.as_bytes()).unwrap() == MatchOutcome::Accepted,
            ok,
            "{s:?}"
        );
    }
}

/// The verdict of a recognizer that keeps its history (no set is ever collected).
fn with_history(g: &std::sync::Arc<corral_grammar::Grammar>, input: &[u8]) -> MatchOutcome {
    let mut r = Recognizer::new(g.clone());
    for (i, &b) in input.iter().enumerate() {
        if !r.push_byte(b).unwrap() {
            return MatchOutcome::Rejected {
                offset: i as u64,
                expected: corral_grammar::describe_expected(&r),
            };
        }
    }
    if r.is_accepting() {
        MatchOutcome::Accepted
    } else {
        MatchOutcome::Incomplete {
            expected: corral_grammar::describe_expected(&r),
        }
    }
}

#[test]
fn one_pass_matching_collects_sets_without_changing_verdicts() {
    // Long inputs (tens of thousands of Earley sets, so unreachable sets are collected many
    // times) with deep open structure kept across collections, right-recursive and
    // left-recursive lists, and errors planted late: one-pass matching agrees with a
    // recognizer that keeps everything.
    let json = grammar(JSON);
    let mut doc = String::new();
    for i in 0..300 {
        doc.push_str(&format!("{{\"k{i}\": ["));
    }
    for i in 0..3000 {
        doc.push_str(&format!("{{\"a\": {i}, \"b\": [true, null, \"s{i}\"]}}, "));
    }
    doc.push('0');
    for _ in 0..300 {
        doc.push_str("]}");
    }
    let right = grammar("root ::= item\nitem ::= [a-z]+ \";\" item | \".\"");
    let left = grammar("root ::= list \".\"\nlist ::= list \",\" [0-9]+ | [0-9]+");
    let long_right = "ab;".repeat(20_000) + ".";
    let long_left = (0..20_000)
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(",")
        + ".";
    let cases = [
        (&json, doc.clone()),
        (&json, doc.replacen("\"s2999\"", "s2999", 1)),
        (&json, doc[..doc.len() - 7].to_string()),
        (&right, long_right.clone()),
        (&right, long_right.replacen("ab;", "a;b", 19_000)),
        (&left, long_left.clone()),
        (&left, long_left.replace("19999.", "19999,.")),
    ];
    for (g, input) in cases {
        let ours = match_bytes(g, input.as_bytes()).unwrap();
        assert_eq!(
            ours,
            with_history(g, input.as_bytes()),
            "{} bytes",
            input.len()
        );
    }
    assert_eq!(
        match_bytes(&json, doc.as_bytes()).unwrap(),
        MatchOutcome::Accepted
    );
}

/// A repetition too big for one automaton is cut into chunks; a lower bound that is not a
/// multiple of the chunk goes into the last lexeme. Counts below, at and past both bounds,
/// and across chunk boundaries.
#[test]
fn chunked_repetition_keeps_both_bounds() {
    let g = grammar(r#"root ::= ("a" | "ab"){22,6000} ".""#);
    let doc = |n: usize| format!("{}.", "a".repeat(n));
    for (n, ok) in [
        (0, false),
        (21, false),
        (22, true),
        (23, true),
        (700, true),
        (1500, true),
        (6000, true),
        (6001, false),
    ] {
        assert_eq!(
            match_bytes(&g, doc(n).as_bytes()).unwrap() == MatchOutcome::Accepted,
            ok,
            "{n} copies"
        );
    }
    assert_eq!(
        match_bytes(&g, format!("{}.", "ab".repeat(22)).as_bytes()).unwrap(),
        MatchOutcome::Accepted
    );
    let g = grammar(r#"root ::= ("a" | "ab"){7000,} ".""#);
    for (n, ok) in [(6999, false), (7000, true), (9000, true)] {
        assert_eq!(
            match_bytes(&g, doc(n).as_bytes()).unwrap() == MatchOutcome::Accepted,
            ok,
            "{n} copies"
        );
    }
}
