//! Control tokens in the decoder's output ([`Decoder::advance_emitting`]): a vocabulary of
//! single bytes plus harmony's markers as byte-less special tokens, and a model that
//! proposes a script of token ids one step at a time (the mask, where the grammar applies,
//! has the last word; the fallback is the highest allowed id).

use corral_engine::{
    Constraint, CpuLogits, Decoder, Emit, FinishReason, Forced, GenerateOptions, Next,
    SamplingOptions, Scope,
};
use corral_grammar::{CompileOptions, compile_gbnf};
use corral_trie::{TokenId, TokenSpace, Vocabulary};
use std::sync::Arc;

const SPECIALS: [&str; 7] = [
    "<|start|>",
    "<|channel|>",
    "<|message|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|constrain|>",
];
const WIDTH: usize = 264;

fn id(name: &str) -> u32 {
    256 + SPECIALS.iter().position(|s| *s == name).expect("a marker") as u32
}

fn space() -> Arc<TokenSpace> {
    let bytes = (0..=255u8).map(|b| (TokenId(b as u32), vec![b]));
    let specials = SPECIALS.iter().map(|s| (TokenId(id(s)), s.to_string()));
    let vocab = Vocabulary::from_parts(bytes, specials);
    let eos = vec![TokenId(id("<|return|>")), TokenId(id("<|call|>"))];
    Arc::new(TokenSpace::new(vocab, Some(WIDTH), eos))
}

/// Token ids of `text`: markers whole, everything else byte by byte.
fn tokens(text: &str) -> Vec<u32> {
    let mut out = Vec::new();
    let mut rest = text;
    'outer: while !rest.is_empty() {
        for s in SPECIALS {
            if let Some(r) = rest.strip_prefix(s) {
                out.push(id(s));
                rest = r;
                continue 'outer;
            }
        }
        out.push(rest.as_bytes()[0] as u32);
        rest = &rest[1..];
    }
    out
}

/// What a run emitted: text pieces joined, control tokens as `[name]` (`[=name]` where the
/// grammar named it), and how it finished.
fn run(script: &str, grammar: Option<&str>, scope: Scope) -> (String, FinishReason) {
    let space = space();
    let constraint = grammar.map(|g| {
        let g = compile_gbnf(g, &CompileOptions::default()).expect("a grammar");
        Constraint::new(g, space.clone())
    });
    let opts = GenerateOptions {
        max_tokens: 200,
        sampling: SamplingOptions::greedy(),
        scope,
        ..GenerateOptions::default()
    };
    let prompt = [TokenId(id("<|start|>")), TokenId(b'a' as u32)];
    let mut d = Decoder::new(space, constraint, &prompt, 4096, &opts).expect("a decoder");
    let script = tokens(script);
    let mut seen = String::new();
    let mut out = |e: Emit<'_>| match e {
        Emit::Text(t) => seen.push_str(t),
        Emit::Control { name, named, .. } => {
            seen.push_str(&format!("[{}{name}]", if named { "=" } else { "" }))
        }
    };
    let finish = loop {
        // The script's token at the output's length is proposed; high ids before low.
        let mut v: Vec<f32> = (0..WIDTH).map(|i| i as f32 / 1000.0 - 1.0).collect();
        let at = d.tokens().len();
        v[*script.get(at).unwrap_or(&id("<|return|>")) as usize] = 10.0;
        match d.advance_emitting(&CpuLogits(v), &mut out).expect("a step") {
            Next::Feed(_) => {}
            Next::Done(f) => break f,
        }
    };
    d.finish_emitting(finish, &mut out);
    (seen, finish)
}

fn harmony_final(budget: Option<usize>) -> Scope {
    Scope::After {
        trigger: "<|channel|>final<|message|>".into(),
        budget,
        forced: Some(Forced {
            after: "<|message|>".into(),
            in_body: "<|end|><|start|>assistant<|channel|>final<|message|>".into(),
            otherwise: "<|start|>assistant<|channel|>final<|message|>".into(),
        }),
    }
}

#[test]
fn control_tokens_and_the_end_token_are_reported_by_id() {
    let (seen, finish) = run(
        "<|channel|>analysis<|message|>hm<|end|><|start|>assistant<|channel|>final<|message|>ok<|return|>",
        None,
        Scope::Whole,
    );
    assert_eq!(
        seen,
        "[<|channel|>]analysis[<|message|>]hm[<|end|>][<|start|>]assistant[<|channel|>]final[<|message|>]ok[<|return|>]"
    );
    assert_eq!(finish, FinishReason::Stop);
}

#[test]
fn a_spent_budget_forces_the_final_header_as_control_tokens() {
    let (seen, finish) = run(
        "<|channel|>analysis<|message|>thinking on and on",
        Some(r#"root ::= "yes" | "no""#),
        harmony_final(Some(13)),
    );
    assert_eq!(
        seen,
        "[<|channel|>]analysis[<|message|>]thi[<|end|>][<|start|>]assistant[<|channel|>]final[<|message|>]yes"
    );
    assert_eq!(finish, FinishReason::GrammarComplete);
}

#[test]
fn a_budget_spent_before_a_message_opens_forces_the_header_alone() {
    // The prompt ends where the assistant's header opens: no message to end yet.
    let (seen, _) = run(
        "<|channel|>analysis<|message|>hm",
        Some(r#"root ::= "yes" | "no""#),
        harmony_final(Some(0)),
    );
    assert_eq!(seen, "[<|channel|>]final[<|message|>]yes");
    // Still in the header: a new header abandons it.
    let (seen, _) = run(
        "<|channel|>analysis<|message|>hm",
        Some(r#"root ::= "yes" | "no""#),
        harmony_final(Some(2)),
    );
    assert_eq!(
        seen,
        "[<|channel|>]a[<|start|>]assistant[<|channel|>]final[<|message|>]yes"
    );
    // Between messages: a new header, no second end.
    let (seen, _) = run(
        "<|channel|>analysis<|message|>hm<|end|>",
        Some(r#"root ::= "yes" | "no""#),
        harmony_final(Some(13)),
    );
    assert_eq!(
        seen,
        "[<|channel|>]analysis[<|message|>]hm[<|end|>][<|start|>]assistant[<|channel|>]final[<|message|>]yes"
    );
}

#[test]
fn a_model_ending_in_its_analysis_is_given_the_final_header() {
    let (seen, _) = run(
        "<|channel|>analysis<|message|>hm<|return|>",
        Some(r#"root ::= "yes" | "no""#),
        harmony_final(None),
    );
    assert_eq!(
        seen,
        "[<|channel|>]analysis[<|message|>]hm[<|end|>][<|start|>]assistant[<|channel|>]final[<|message|>]yes"
    );
}

#[test]
fn a_named_end_token_ends_the_output_once_the_grammar_takes_it() {
    // A tool call's header and arguments after each commentary header; the call token ends.
    let grammar = r#"root ::= " to=functions.f " <|constrain|> "json" <|message|> "{}" <|call|>"#;
    let (seen, finish) = run(
        "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{}<|call|>and more",
        Some(grammar),
        Scope::Each {
            open: "<|channel|>commentary".into(),
        },
    );
    assert_eq!(
        seen,
        "[<|channel|>]commentary to=functions.f [=<|constrain|>]json[=<|message|>]{}[=<|call|>]"
    );
    assert_eq!(finish, FinishReason::Stop);
}

#[test]
fn a_named_end_token_the_grammar_goes_on_after_does_not_end_the_output() {
    let (seen, finish) = run(
        "a<|return|>b",
        Some(r#"root ::= "a" <|return|> "b""#),
        Scope::Whole,
    );
    assert_eq!(seen, "a[=<|return|>]b");
    assert_eq!(finish, FinishReason::GrammarComplete);
}

#[test]
fn ignore_eos_leaves_an_end_token_the_grammar_names() {
    let space = space();
    let g = compile_gbnf(r#"root ::= "a" <|call|>"#, &CompileOptions::default()).unwrap();
    let opts = GenerateOptions {
        max_tokens: 20,
        sampling: SamplingOptions::greedy(),
        ignore_eos: true,
        ..GenerateOptions::default()
    };
    let prompt = [TokenId(id("<|start|>"))];
    let c = Constraint::new(g, space.clone());
    let mut d = Decoder::new(space, Some(c), &prompt, 4096, &opts).unwrap();
    let v = vec![0.0; WIDTH];
    let mut text = String::new();
    let finish = loop {
        match d
            .advance(&CpuLogits(v.clone()), &mut |t| text.push_str(t))
            .unwrap()
        {
            Next::Feed(_) => {}
            Next::Done(f) => break f,
        }
    };
    assert_eq!((text.as_str(), finish), ("a<|call|>", FinishReason::Stop));
}
