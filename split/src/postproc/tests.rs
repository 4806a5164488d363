use super::*;
use crate::{Format, GenericParser};

fn run(opts: PostprocOptions, chunks: &[&str]) -> (String, String, FinalStats) {
    let mut p = PostProcessor::new(GenericParser::new(Format::hermes()).unwrap(), opts);
    let mut events = Vec::new();
    for c in chunks {
        events.extend(p.push(c));
    }
    events.extend(p.finish());
    let mut content = String::new();
    let mut reasoning = String::new();
    let mut fin = None;
    for e in events {
        match e {
            PostEvent::Delta(d) => content.push_str(&d),
            PostEvent::Reasoning(r) => reasoning.push_str(&r),
            PostEvent::Final(f) => fin = Some(f),
            PostEvent::ToolCall(_) => {}
        }
    }
    (content, reasoning, fin.unwrap())
}

#[test]
fn stats_and_drop_from_history() {
    let (c, r, f) = run(
        PostprocOptions::default(),
        &["<think>two words</think>The answer is four."],
    );
    assert_eq!(
        (c.as_str(), r.as_str()),
        ("The answer is four.", "two words")
    );
    assert_eq!((f.reasoning_tokens, f.final_tokens), (2, 4));
    assert!((f.reasoning_ratio - 2.0 / 6.0).abs() < 1e-9);
    assert_eq!(f.reasoning_text, None);
    let keep = PostprocOptions {
        drop_from_history: false,
        ..PostprocOptions::default()
    };
    assert_eq!(
        run(keep, &["<think>x</think>y"])
            .2
            .reasoning_text
            .as_deref(),
        Some("x")
    );
    let (_, _, f) = run(PostprocOptions::default(), &[""]);
    assert_eq!(f.reasoning_ratio, 0.0);
}

#[test]
fn reasoning_budget_forces_the_answer() {
    let opts = PostprocOptions {
        reasoning_max_tokens: Some(3),
        ..PostprocOptions::passthrough()
    };
    let (c, r, f) = run(opts, &["<think>one two three four five"]);
    assert_eq!(r, "one two three");
    assert_eq!(c, " four five");
    assert_eq!(f.reasoning_tokens, 3);
}

#[test]
fn ngram_whitespace_and_service_tokens() {
    let opts = PostprocOptions {
        ngram: Some((2, 64)),
        ..PostprocOptions::passthrough()
    };
    assert_eq!(
        run(opts, &["the cat the cat sat down"]).0,
        "the cat sat down"
    );
    let opts = PostprocOptions {
        collapse_whitespace: true,
        ..PostprocOptions::passthrough()
    };
    assert_eq!(run(opts, &["a  b\n\n\nc \nd"]).0, "a b\nc \nd");
    let opts = PostprocOptions {
        filter_service_tokens: true,
        ..PostprocOptions::passthrough()
    };
    assert_eq!(
        run(opts, &["Hi<|im_end|> there <| x |> a<b"]).0,
        "Hi there <| x |> a<b"
    );
}

#[test]
fn leak_detection() {
    let (_, _, f) = run(
        PostprocOptions::default(),
        &[
            "<think>The user wants a poem about cats.</think>The user wants a poem about cats. Here it is.",
        ],
    );
    assert!(f.leak_detected);
    let (_, _, f) = run(
        PostprocOptions::default(),
        &["<think>The user wants a poem about cats.</think>Here is a poem."],
    );
    assert!(!f.leak_detected);
}
