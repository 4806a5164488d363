//! Rules printed as GBNF parse back to the same rules, and rules compiled without text
//! (`compile_rules`) give the grammar their text gives.

use corral_grammar::ast::{Expr, RuleAst, print_rules};
use corral_grammar::parse_gbnf as parse;
use corral_grammar::{
    CompileOptions, ErrorKind, Limits, MatchOutcome, compile_gbnf, compile_rules, match_bytes,
};

const GRAMMARS: &[&str] = &[
    include_str!("../../grammars/json.gbnf"),
    r#"root ::= "a" [0-9]+ ("," [0-9]+)* | x{2,5} y{3} z{4,} ( "q" | "r" )? "" "#,
    r#"root ::= "\"\\\n\r\t\x01\x7f é😀" [^\]\[\\^\x2D"a-c\x00-\x1F\u00e9\U0001F600] .
x ::= ( "a" | "b" ) ( ( "c" ) "d" )
y ::= ~"ab" & [a-z]{2} | "zz"
z ::= ~( "a" [b]* ) & ( [a-c]+ & ~"ccc" )"#,
    r#"root ::= <think> ( !<[7]> )* <[42]> ( "x" )* ( "y"* )+ ~"z"?"#,
    r#"root ::= ( ( ( "a" "b" ) ( "c" | "d" ) ) ) ( "e" ( "f" ( "g" ) ) )"#,
];

fn normal(e: &Expr) -> Expr {
    e.normalized()
}

fn normal_rules(rules: &[RuleAst]) -> Vec<(String, Expr)> {
    rules
        .iter()
        .map(|r| (r.name.clone(), normal(&r.body)))
        .collect()
}

#[test]
fn printed_rules_parse_back_to_the_same_rules() {
    for text in GRAMMARS {
        let rules = parse(text, "g", 200).unwrap();
        let printed = print_rules(&rules);
        let again = parse(&printed, "printed", 200)
            .unwrap_or_else(|e| panic!("{e}\nprinted from\n{text}\nas\n{printed}"));
        assert_eq!(
            normal_rules(&rules),
            normal_rules(&again),
            "{text}\nprinted as\n{printed}"
        );
        // Printing is stable.
        assert_eq!(print_rules(&again), printed);
    }
}

#[test]
fn rules_compiled_without_text_match_what_their_text_matches() {
    let json = parse(GRAMMARS[0], "g", 200).unwrap();
    // Positions dropped, as a program builds them.
    let built: Vec<RuleAst> = json
        .iter()
        .map(|r| RuleAst {
            name: r.name.clone(),
            name_span: Default::default(),
            body: normal(&r.body),
        })
        .collect();
    let opts = CompileOptions::default();
    let from_rules = compile_rules(&built, &opts).unwrap();
    let from_text = compile_gbnf(GRAMMARS[0], &opts).unwrap();
    for doc in [
        &br#"{"a": [1, 2.5e-3, "x\u00e9", true, null, {}]}"#[..],
        br#"{"a" 1}"#,
        b"[1, 2",
        b"  \"\\q\"",
        b"-0.0E+12",
    ] {
        assert_eq!(
            match_bytes(&from_rules, doc).unwrap(),
            match_bytes(&from_text, doc).unwrap(),
            "{}",
            String::from_utf8_lossy(doc)
        );
    }
    assert_eq!(
        match_bytes(&from_rules, br#"{"a": [1]}"#).unwrap(),
        MatchOutcome::Accepted
    );
}

#[test]
fn an_error_in_built_rules_is_placed_in_their_printed_text() {
    let rules = parse("root ::= \"a\" valeu", "g", 200).unwrap();
    let err = compile_rules(&rules, &CompileOptions::default().origin("built")).unwrap_err();
    assert_eq!(err.kind, ErrorKind::UndefinedRule("valeu".into()));
    let shown = err.to_string();
    assert!(
        shown.starts_with("built:1:14: undefined rule 'valeu'"),
        "{shown}"
    );

    // Nested past the limit: refused with the limit's name, as the text would be.
    let deep = parse(
        &format!("root ::= {}\"a\"{}", "( ".repeat(30), " )".repeat(30)),
        "g",
        200,
    )
    .unwrap();
    let limits = Limits {
        max_nesting_depth: 10,
        ..Limits::default()
    };
    let err = compile_rules(&deep, &CompileOptions::default().limits(limits)).unwrap_err();
    assert!(
        matches!(
            err.kind,
            ErrorKind::Limit {
                limit_name: "max_nesting_depth",
                ..
            }
        ),
        "{err}"
    );
    // The value is where counting stopped, and the message says no more than that.
    assert!(
        err.to_string()
            .contains("expression nesting depth reached 11, more than max_nesting_depth = 10"),
        "{err}"
    );
}

#[test]
fn built_rules_the_text_could_not_say_are_refused() {
    use corral_grammar::ast::{ClassAst, ExprKind, TokenAst, TokenTarget};
    let rule = |name: &str, kind: ExprKind| RuleAst {
        name: name.into(),
        name_span: Default::default(),
        body: Expr::built(kind),
    };
    let a = || Box::new(Expr::built(ExprKind::Literal(vec!['a'])));
    let opts = CompileOptions::default();
    let cases = [
        rule(
            "root",
            ExprKind::Repeat {
                inner: a(),
                min: 3,
                max: Some(2),
            },
        ),
        rule(
            "root",
            ExprKind::Class(ClassAst {
                negated: false,
                ranges: vec![('z', 'a')],
            }),
        ),
        rule("root", ExprKind::Alt(Vec::new())),
        rule("root", ExprKind::And(Vec::new())),
        rule("root", ExprKind::RuleRef("no spaces".into())),
        rule("ro ot", ExprKind::Literal(vec!['a'])),
        rule(
            "root",
            ExprKind::Token(TokenAst {
                negated: false,
                target: TokenTarget::Text("im_end".into()),
            }),
        ),
    ];
    for r in cases {
        let shown = format!("{r}");
        let e = compile_rules(std::slice::from_ref(&r), &opts).unwrap_err();
        match (&r.body.kind, &e.kind) {
            (ExprKind::Repeat { .. }, ErrorKind::BadRepetition(_))
            | (ExprKind::Class(_), ErrorKind::ReversedRange { .. })
            | (_, ErrorKind::Unexpected { .. }) => {}
            _ => panic!("{shown}: {e}"),
        }
    }

    // Nested far past the limit: refused without being printed.
    let mut deep = Expr::built(ExprKind::Literal(vec!['a']));
    for _ in 0..100_000 {
        deep = Expr::built(ExprKind::Not(Box::new(deep)));
    }
    let r = RuleAst {
        name: "root".into(),
        name_span: Default::default(),
        body: deep,
    };
    let e = compile_rules(std::slice::from_ref(&r), &opts).unwrap_err();
    assert!(matches!(e.kind, ErrorKind::Limit { .. }), "{e}");
    // Dropping a deep expression recurses too: leak it (a test only).
    std::mem::forget(r);
}

#[test]
fn a_rule_defined_twice_is_placed_by_both_definitions() {
    let text = "root ::= a\na ::= \"x\"\n\na ::= \"y\"\n";
    let err = compile_gbnf(text, &CompileOptions::default()).unwrap_err();
    assert_eq!(
        err.kind,
        ErrorKind::DuplicateRule {
            name: "a".into(),
            first_line: Some(2)
        }
    );
    let shown = err.to_string();
    assert!(
        shown.contains("rule 'a' is defined twice (first definition at line 2)"),
        "{shown}"
    );
    // Built rules are placed in their printed text, where the first definition has a line.
    let rules = parse(text, "g", 200).unwrap();
    let err = compile_rules(&rules, &CompileOptions::default()).unwrap_err();
    assert!(
        matches!(
            err.kind,
            ErrorKind::DuplicateRule {
                first_line: Some(_),
                ..
            }
        ),
        "{err}"
    );
    assert!(!err.to_string().contains("line 0"), "{err}");
}
