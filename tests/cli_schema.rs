//! `corral match --json-schema` keeps the exit-code contract of `match` (0 in the language,
//! 1 not, 2 bad schema), and `corral schema` prints GBNF that compiles to the same language.

mod common;

use common::{run_corral, temp_file as write};

const PERSON: &str = r#"{
  "type": "object",
  "properties": {
    "name": {"type": "string", "minLength": 1},
    "age": {"type": "integer", "minimum": 0, "maximum": 150},
    "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2}
  },
  "required": ["name"],
  "additionalProperties": false
}"#;

#[test]
fn match_exit_codes() {
    let s = write("person.json", PERSON);
    let (code, out, _) = run_corral(
        &["match", "--json-schema", &s],
        b"{\"name\": \"Ada\", \"age\": 36}\n",
    );
    assert_eq!(code, 0, "{out}");
    let (code, out, err) = run_corral(
        &["match", "--json-schema", &s],
        br#"{"name": "Ada", "age": 151}"#,
    );
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("rejected at byte offset 25"), "{out}");
    assert!(err.contains("<stdin>:1:26:"), "{err}");
    let (code, _, err) = run_corral(&["match", "--json-schema", &s], br#"{"name": "Ada""#);
    assert_eq!(code, 1);
    assert!(err.contains("input ends early"), "{err}");
    let (code, _, _) = run_corral(
        &["match", "--json-schema", &s],
        br#"{"age": 3, "name": "x"}"#,
    );
    assert_eq!(code, 1, "schema order is the default");
    let (code, _, _) = run_corral(
        &["match", "--json-schema", &s, "--any-order"],
        br#"{"age": 3, "name": "x"}"#,
    );
    assert_eq!(code, 0);
}

#[test]
fn bad_schemas_exit_2_with_a_positioned_error() {
    let s = write(
        "bad.json",
        "{\n  \"type\": \"object\",\n  \"properties\": {\"x\": {\"not\": {}}}\n}\n",
    );
    let (code, _, err) = run_corral(&["match", "--json-schema", &s], b"{}");
    assert_eq!(code, 2);
    assert!(
        err.contains("bad.json:3:24: 'not' at #/properties/x/not cannot be expressed as a grammar"),
        "{err}"
    );
    assert!(err.contains("^"), "{err}");
    let s = write("notjson.json", "{\"type\": \"object\",,}");
    let (code, _, err) = run_corral(&["match", "--json-schema", &s], b"{}");
    assert_eq!(code, 2);
    assert!(
        err.contains("notjson.json:1:19: invalid schema at #: not valid JSON"),
        "{err}"
    );
    let s = write("badref.json", r##"{"$ref": "#/$defs/missing"}"##);
    let (code, _, err) = run_corral(&["match", "--json-schema", &s], b"{}");
    assert_eq!(code, 2);
    assert!(err.contains("points to nothing"), "{err}");
}

#[test]
fn lenient_keywords_are_checked_on_the_value() {
    let s = write(
        "unique.json",
        r#"{"type": "array", "items": {"type": "integer"}, "uniqueItems": true}"#,
    );
    let (code, _, err) = run_corral(&["match", "--json-schema", &s], b"[1, 2]");
    assert_eq!(code, 2, "strict mode refuses uniqueItems: {err}");
    let (code, _, _) = run_corral(&["match", "--json-schema", &s, "--lenient"], b"[1, 2]");
    assert_eq!(code, 0);
    let (code, out, err) = run_corral(&["match", "--json-schema", &s, "--lenient"], b"[1, 1]");
    assert_eq!(code, 1, "{out}");
    assert!(err.contains("non-unique"), "{err}");
    let (code, gbnf, _) = run_corral(&["schema", &s, "--lenient"], b"");
    assert_eq!(code, 0);
    assert!(
        gbnf.starts_with("# left to validation after generation: 'uniqueItems' at #"),
        "{gbnf}"
    );
}

#[test]
fn printed_gbnf_compiles_to_the_same_language() {
    let s = write("person2.json", PERSON);
    let (code, gbnf, _) = run_corral(&["schema", &s], b"");
    assert_eq!(code, 0);
    assert!(gbnf.contains("root ::= "), "{gbnf}");
    let g = write("person2.gbnf", &gbnf);
    for (input, want) in [
        (r#"{"name":"A","tags":["x","y"]}"#, 0),
        (r#"{"name":"A","tags":["x","y","z"]}"#, 1),
        (r#"{"name":"","age":1}"#, 1),
        (r#"{"name":"caf\u00e9","age":150}"#, 0),
    ] {
        let (a, _, _) = run_corral(&["match", "--json-schema", &s], input.as_bytes());
        let (b, _, _) = run_corral(&["match", "--grammar", &g], input.as_bytes());
        assert_eq!((a, b), (want, want), "{input}");
    }
}
