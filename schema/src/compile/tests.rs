//! Schema -> grammar, checked by matching instances.
use crate::{CompiledSchema, JsonSchemaOptions, PropertyOrder, compile_json_schema};
use corral_grammar::{MatchOutcome, match_bytes};

fn compile(schema: &str) -> CompiledSchema {
    compile_json_schema(schema, &JsonSchemaOptions::default()).unwrap_or_else(|e| panic!("{e}"))
}

fn check(schema: &str, pass: &[&str], fail: &[&str]) {
    let c = compile(schema);
    for p in pass {
        assert_eq!(
            match_bytes(&c.grammar, p.as_bytes()).unwrap(),
            MatchOutcome::Accepted,
            "{schema}\nshould accept {p}\n{}",
            c.gbnf()
        );
    }
    for f in fail {
        assert_ne!(
            match_bytes(&c.grammar, f.as_bytes()).unwrap(),
            MatchOutcome::Accepted,
            "{schema}\nshould refuse {f}\n{}",
            c.gbnf()
        );
    }
}

#[test]
fn objects_in_schema_order() {
    check(
        r#"{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"},"c":{"type":"boolean"}},"required":["b"],"additionalProperties":false}"#,
        &[
            r#"{"b":"x"}"#,
            r#"{"a":1,"b":"x"}"#,
            r#"{"a": 1, "b": "x", "c": true}"#,
            r#"{"b":"x","c":false}"#,
        ],
        &[
            r#"{}"#,
            r#"{"a":1}"#,
            r#"{"b":"x","a":1}"#,
            r#"{"b":"x","d":1}"#,
            r#"{"b":1}"#,
            r#"{"a":1,,"b":"x"}"#,
        ],
    );
}

#[test]
fn additional_properties() {
    check(
        r#"{"type":"object","properties":{"a":{"type":"integer"}},"additionalProperties":{"type":"string"}}"#,
        &[r#"{}"#, r#"{"a":1,"x":"y"}"#, r#"{"zz":"y","q":""}"#],
        &[r#"{"x":1}"#, r#"{"a":"s"}"#],
    );
    check(
        r#"{"type":"object","patternProperties":{"^x-":{"type":"integer"}},"additionalProperties":false}"#,
        &[r#"{}"#, r#"{"x-a":1,"x-b":2}"#],
        &[r#"{"y":1}"#, r#"{"x-a":"s"}"#],
    );
    // Additional properties beside patterns: keys that match neither a name nor a
    // pattern (however escaped) take the additional schema.
    check(
        r#"{"type":"object","properties":{"id":{"type":"integer"}},"patternProperties":{"^x-":{"type":"integer"}},"additionalProperties":{"type":"string"}}"#,
        &[
            r#"{"id":1,"x-a":2,"y":"s"}"#,
            r#"{"x":"s","x-":3}"#,
            r#"{"id":1}"#,
        ],
        &[
            r#"{"x-a":"s"}"#,
            r#"{"y":1}"#,
            r#"{"id":"s"}"#,
            r#"{"\u0078-a":"s"}"#,
        ],
    );
    check(
        r#"{"type":"object","patternProperties":{"^[0-9]+$":{"type":"boolean"}}}"#,
        &[r#"{"12":true,"a":[1]}"#, r#"{"1a":null}"#],
        &[r#"{"12":1}"#],
    );
    // Additional keys are every plain-spelled key but the names: names that are prefixes
    // of one another, escaped and non-ASCII names.
    check(
        r#"{"type":"object","properties":{"a":{"type":"integer"},"ab":{"type":"integer"},"q\"t":{"type":"integer"},"é":{"type":"integer"},"tab\t":{"type":"integer"}},"additionalProperties":{"type":"string"}}"#,
        &[
            r#"{"x":"s"}"#,
            r#"{"a":1,"ab":2}"#,
            r#"{"abc":"s"}"#,
            r#"{"":"s"}"#,
            r#"{"é":1}"#,
            r#"{"éé":"s"}"#,
            r#"{"q\"t":1}"#,
            r#"{"q\"":"s"}"#,
            r#"{"tab\t":1,"tab":"s"}"#,
        ],
        &[
            r#"{"ab":"s"}"#,
            r#"{"a":"s"}"#,
            r#"{"é":"s"}"#,
            r#"{"q\"t":"s"}"#,
            r#"{"tab\t":"s"}"#,
        ],
    );
    // Overlapping patterns: a key matching both needs both schemas (refused).
    assert!(
        compile_json_schema(
            r#"{"type":"object","patternProperties":{"a*":{"type":"integer"},"aaa*":{"maximum":20}}}"#,
            &JsonSchemaOptions::default()
        )
        .is_err()
    );
    // A named property that matches a pattern takes both schemas, and only once.
    check(
        r#"{"type":"object","properties":{"a":{"type":"integer"}},"patternProperties":{"^[a-z]$":{"minimum":0}},"additionalProperties":false}"#,
        &[r#"{"a":1,"b":2}"#, r#"{"b":0}"#],
        &[
            r#"{"a":-1}"#,
            r#"{"b":-1}"#,
            r#"{"a":1,"a":2}"#,
            r#"{"b":1,"a":1}"#,
        ],
    );
}

#[test]
fn counted_properties() {
    check(
        r#"{"type":"object","properties":{"a":{},"b":{},"c":{}},"minProperties":1,"maxProperties":2,"additionalProperties":false}"#,
        &[r#"{"a":1}"#, r#"{"a":1,"c":3}"#, r#"{"b":null,"c":3}"#],
        &[r#"{}"#, r#"{"a":1,"b":2,"c":3}"#],
    );
}

#[test]
fn any_order() {
    let opts = JsonSchemaOptions {
        property_order: PropertyOrder::Any,
        ..JsonSchemaOptions::default()
    };
    let c = compile_json_schema(
        r#"{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"}},"required":["a"],"additionalProperties":false}"#,
        &opts,
    )
    .unwrap();
    for (s, ok) in [
        (r#"{"a":1,"b":"x"}"#, true),
        (r#"{"b":"x","a":1}"#, true),
        (r#"{"a":1}"#, true),
        (r#"{"b":"x"}"#, false),
        (r#"{"a":1,"a":2}"#, false),
    ] {
        assert_eq!(
            match_bytes(&c.grammar, s.as_bytes()).unwrap() == MatchOutcome::Accepted,
            ok,
            "{s}\n{}",
            c.gbnf()
        );
    }
}

#[test]
fn arrays() {
    check(
        r#"{"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":3}"#,
        &["[1]", "[1, 2, 3]"],
        &["[]", "[1,2,3,4]", "[\"a\"]"],
    );
    check(
        r#"{"type":"array","prefixItems":[{"type":"string"},{"type":"integer"}],"items":false}"#,
        &["[]", "[\"a\"]", "[\"a\",1]"],
        &["[1]", "[\"a\",1,2]"],
    );
    check(
        r#"{"type":"array","items":[{"type":"string"}],"additionalItems":{"type":"boolean"},"minItems":2}"#,
        &["[\"a\",true]", "[\"a\",true,false]"],
        &["[\"a\"]", "[\"a\",1]"],
    );
}

#[test]
fn strings() {
    check(
        r#"{"type":"string","minLength":2,"maxLength":3}"#,
        &[r#""ab""#, r#""abc""#, r#""\u00e9\n""#, r#""😀😀""#],
        &[r#""a""#, r#""abcd""#, r#""\x""#],
    );
    check(
        r#"{"type":"string","pattern":"^[a-z]+$","maxLength":4}"#,
        &[r#""abcd""#, r#""\u0061""#],
        &[r#""abcde""#, r#""""#, r#""A""#],
    );
    check(
        r#"{"type":"string","format":"date"}"#,
        &[r#""2024-02-29""#],
        &[r#""2023-02-29""#],
    );
    check(
        r#"{"type":"string","pattern":"b"}"#,
        &[r#""abc""#, r#""b""#],
        &[r#""ac""#],
    );
    // Intersections: a pattern whose length no single repetition carries, a format with
    // a pattern.
    check(
        r#"{"type":"string","pattern":"[0-9a-f]+","minLength":4,"maxLength":4}"#,
        &[r#""zz0z""#, r#""beef""#, r#""AAaA""#],
        &[r#""zzzz""#, r#""beefs""#, r#""abc""#],
    );
    check(
        r#"{"type":"string","pattern":"^[a-z]+(-[a-z]+)*$","maxLength":5}"#,
        &[r#""ab-cd""#, r#""abcde""#, r#""a""#],
        &[r#""ab-cde""#, r#""ab-""#, r#""abcdef""#],
    );
    check(
        r#"{"type":"string","format":"date","pattern":"^2024-"}"#,
        &[r#""2024-02-29""#],
        &[r#""2023-02-28""#, r#""2024-02-30""#, r#""2024-""#],
    );
    check(
        r#"{"type":"string","format":"email","maxLength":8}"#,
        &[r#""a@b.com""#],
        &[r#""ab@cd.com""#, r#""abcdefgh""#],
    );
    // `maxLength: 0` beside a pattern of no single repetition: a counter of one state,
    // which still allows only the empty string.
    check(
        r#"{"type":"string","pattern":"^a*b*$","maxLength":0}"#,
        &[r#""""#],
        &[r#""a""#, r#""ab""#],
    );
    check(
        r#"{"type":"string","pattern":"","maxLength":0}"#,
        &[r#""""#],
        &[r#""x""#],
    );
    // The email's counted local part times a counter of 255: more states than
    // max_product_states as a product of sizes, few of them reachable.
    let (l64, l65) = ("a".repeat(64), "a".repeat(65));
    check(
        r#"{"type":"string","format":"email","maxLength":254}"#,
        &[r#""a@b.com""#, &format!(r#""{l64}@x.y""#)],
        &[
            &format!(r#""{l65}@x.y""#),
            &format!(r#""a@{}""#, "b".repeat(253)),
        ],
    );
}

#[test]
fn numbers() {
    check(
        r#"{"type":"integer","minimum":-5,"exclusiveMaximum":10}"#,
        &["-5", "0", "9", "-0"],
        &["-6", "10", "1.5", "1e2"],
    );
    check(
        r#"{"type":"number","minimum":0.5,"maximum":2}"#,
        &["0.5", "1", "2.0", "1.99"],
        &["0.49", "2.01", "-1"],
    );
    check(
        r#"{"type":"integer","multipleOf":5}"#,
        &["0", "15", "-20"],
        &["7"],
    );
    check(
        r#"{"type":"integer","multipleOf":3,"minimum":0,"maximum":10}"#,
        &["0", "3", "9"],
        &["10", "4"],
    );
    check(
        r#"{"type":"number","multipleOf":0.01}"#,
        &["1.25", "3", "1.50"],
        &["1.255"],
    );
    check(
        r#"{"type":"number"}"#,
        &["-1.5e-3", "0", "10"],
        &["01", "1.", ".5"],
    );
}

#[test]
fn combinators_and_refs() {
    check(
        r##"{"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},"next":{"$ref":"#/$defs/node"}},"required":["v"],"additionalProperties":false}},"$ref":"#/$defs/node"}"##,
        &[r#"{"v":1}"#, r#"{"v":1,"next":{"v":2,"next":{"v":3}}}"#],
        &[r#"{"v":1,"next":{}}"#],
    );
    check(
        r#"{"anyOf":[{"type":"string"},{"type":"integer"}]}"#,
        &[r#""x""#, "3"],
        &["1.5", "null"],
    );
    check(
        r#"{"oneOf":[{"type":"object","properties":{"kind":{"const":"a"},"x":{"type":"integer"}},"required":["kind"]},{"type":"object","properties":{"kind":{"const":"b"}},"required":["kind"]}]}"#,
        &[r#"{"kind":"a","x":1}"#, r#"{"kind":"b"}"#],
        &[r#"{"kind":"c"}"#],
    );
    check(
        r#"{"allOf":[{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]},{"properties":{"b":{"type":"string"}},"required":["b"]}]}"#,
        &[r#"{"a":1,"b":"x"}"#],
        &[r#"{"a":1}"#, r#"{"b":"x"}"#],
    );
    check(
        r#"{"enum":["a",1,null,{"k":[true]}]}"#,
        &[r#""a""#, "1", "null", r#"{"k": [true]}"#],
        &[r#""b""#, "2"],
    );
    check(
        r#"{"type":"string","enum":["a","bb",3],"maxLength":1}"#,
        &[r#""a""#],
        &[r#""bb""#, "3"],
    );
}

#[test]
fn enum_values_under_lengths_alone_are_kept_as_the_subschemas_grammar_keeps_them() {
    // Lengths alone are counted directly; beside a pattern that matches every string, the
    // same bounds go through the subschema's grammar. Both must keep the same values.
    let values = serde_json::json!([
        "",
        "a",
        "é",
        "\u{1F600}",
        "ab",
        "a\"b",
        "a\\u0062",
        "éé",
        "abcd",
        3,
        null,
        ["x"]
    ]);
    let bounds = [
        r#""minLength":2"#,
        r#""maxLength":1"#,
        r#""minLength":1,"maxLength":2"#,
        r#""minLength":3,"maxLength":1"#,
        r#""maxLength":0"#,
    ];
    let candidates: Vec<String> = values
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.to_string())
        .collect();
    for b in bounds {
        let direct = compile(&format!(r#"{{"enum":{values},{b}}}"#));
        let by_grammar = compile(&format!(r#"{{"enum":{values},{b},"pattern":""}}"#));
        let kept = |c: &CompiledSchema| -> Vec<&str> {
            candidates
                .iter()
                .filter(|t| {
                    match_bytes(&c.grammar, t.as_bytes()).unwrap() == MatchOutcome::Accepted
                })
                .map(String::as_str)
                .collect()
        };
        assert_eq!(kept(&direct), kept(&by_grammar), "{b}");
        assert!(
            kept(&direct).contains(&"3"),
            "{b}: non-strings are not bounded"
        );
    }
    let some = compile(&format!(
        r#"{{"enum":{values},"minLength":1,"maxLength":2}}"#
    ));
    for (t, ok) in [
        (r#""é""#, true),
        (r#""éé""#, true),
        (r#""a\"b""#, false),
        (r#""""#, false),
    ] {
        let got = match_bytes(&some.grammar, t.as_bytes()).unwrap() == MatchOutcome::Accepted;
        assert_eq!(got, ok, "{t}");
    }
    // Closed objects (structured generation) keep an enum's object values either way.
    let closed = JsonSchemaOptions {
        closed_objects: true,
        ..JsonSchemaOptions::default()
    };
    for extra in ["", r#","pattern":"""#] {
        let schema = format!(r#"{{"enum":[{{"a":1}},"ab"],"maxLength":3{extra}}}"#);
        let c = compile_json_schema(&schema, &closed).unwrap_or_else(|e| panic!("{e}"));
        for t in [r#"{"a":1}"#, r#""ab""#] {
            assert_eq!(
                match_bytes(&c.grammar, t.as_bytes()).unwrap(),
                MatchOutcome::Accepted,
                "{schema}: {t}"
            );
        }
    }
    let e = compile_json_schema(
        r#"{"enum":["a"],"minLength":-1}"#,
        &JsonSchemaOptions::default(),
    )
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("minLength must be a non-negative integer"),
        "{e}"
    );
}

#[test]
fn unsupported_keywords_are_positioned_errors() {
    let e = compile_json_schema(
        "{\n  \"type\": \"array\",\n  \"uniqueItems\": true\n}",
        &JsonSchemaOptions::default().with_origin("s.json"),
    )
    .unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.starts_with("s.json:3:3: 'uniqueItems' at #/uniqueItems cannot"),
        "{msg}"
    );
    let lenient = JsonSchemaOptions {
        lenient: true,
        ..JsonSchemaOptions::default()
    };
    let c = compile_json_schema(r#"{"type":"array","uniqueItems":true}"#, &lenient).unwrap();
    assert_eq!(c.deferred.len(), 1);
    assert_eq!(c.deferred[0].keyword, "uniqueItems");
    // A pattern property deferred: its keys are still accepted (the grammar a superset).
    let c = compile_json_schema(
        r#"{"type":"object","patternProperties":{"^(?!x)a":{"type":"integer"}},"additionalProperties":false}"#,
        &lenient,
    )
    .unwrap();
    assert_eq!(c.deferred[0].keyword, "patternProperties");
    for ok in [r#"{"ab":1}"#, r#"{}"#] {
        assert_eq!(
            match_bytes(&c.grammar, ok.as_bytes()).unwrap(),
            MatchOutcome::Accepted,
            "{ok}\n{}",
            c.gbnf()
        );
    }
    let e = compile_json_schema(
        r#"{"oneOf":[{"type":"integer"},{"minimum":0}]}"#,
        &JsonSchemaOptions::default(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("'oneOf'"), "{e}");
    let e = compile_json_schema(r#"{"type": "strin"}"#, &JsonSchemaOptions::default()).unwrap_err();
    assert!(e.to_string().contains("unknown type"), "{e}");
}

#[test]
fn a_schema_nested_past_the_json_parsers_limit_says_what_the_limit_is() {
    let text = format!(
        "{}{{}}{}",
        r#"{"type": "array", "items": "#.repeat(200),
        "}".repeat(200)
    );
    let e = crate::compile_json_schema(&text, &Default::default()).unwrap_err();
    assert!(e.to_string().contains("deeper than 128 levels"), "{e}");
}

#[test]
fn a_large_enum_of_strings_is_one_lexeme_and_matches_exactly() {
    // 20,000 strings: one alternative per string would keep 20,000 lexer runs alive (past
    // max_lexer_runs); one lexeme, a trie of the literals, keeps one.
    let words: Vec<String> = (0..20_000).map(|i| format!("w{i}\"q")).collect();
    let schema = serde_json::json!({"enum": words.iter().chain(["x".to_string()].iter()).map(|w| serde_json::json!(w)).chain([serde_json::json!(7), serde_json::json!(null)]).collect::<Vec<_>>()});
    let c = compile(&schema.to_string());
    for ok in [r#""w0\"q""#, r#""w19999\"q""#, r#""x""#, "7", "7.0", "null"] {
        assert_eq!(
            match_bytes(&c.grammar, ok.as_bytes()).unwrap(),
            MatchOutcome::Accepted,
            "{ok}"
        );
    }
    for bad in [r#""w20000\"q""#, r#""w1""#, r#""""#, "8"] {
        assert_ne!(
            match_bytes(&c.grammar, bad.as_bytes()).unwrap(),
            MatchOutcome::Accepted,
            "{bad}"
        );
    }
}

/// A minimum above its maximum allows no value of that type: the other types stay, and a
/// schema left with none is refused as unsatisfiable (never a grammar with `{m,n}`, m > n).
#[test]
fn crossed_bounds_allow_no_value_of_their_type() {
    for kind in [
        r#""type":["object","null"],"minProperties":3,"maxProperties":2"#,
        r#""type":["object","null"],"properties":{"a":{"type":"integer"}},"minProperties":2,"maxProperties":1"#,
        r#""type":["string","null"],"minLength":5,"maxLength":3"#,
        r#""type":["array","null"],"minItems":3,"maxItems":2"#,
    ] {
        let schema = format!("{{{kind}}}");
        check(
            &schema,
            &["null"],
            &[r#"{"a":1,"b":2,"c":3}"#, r#""abcd""#, "[1,2]", "{}"],
        );
    }
    for alone in [
        r#"{"type":"object","minProperties":3,"maxProperties":2}"#,
        r#"{"type":"string","minLength":5,"maxLength":3}"#,
    ] {
        let e = compile_json_schema(alone, &JsonSchemaOptions::default()).unwrap_err();
        assert!(
            e.to_string()
                .contains("no JSON value satisfies this schema"),
            "{alone}: {e}"
        );
    }
}
