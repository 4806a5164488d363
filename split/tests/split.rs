//! Stream splitters: every edge case of the harmony and generic formats, each tool-call
//! format, and two properties over all test streams: chunk invariance (every chunking gives
//! the same summary and the same concatenated deltas) and the every-prefix property (what
//! was emitted after any prefix of the stream is a prefix of the final result).

use corral_split::{
    Format, GenericParser, HarmonyMarkers, HarmonyMode, HarmonyParser, Splitter, Stop, Summary,
    split_all,
};
use proptest::prelude::*;

fn harmony() -> HarmonyParser {
    HarmonyParser::new(HarmonyMode::Lenient)
}

fn run(mut s: impl Splitter, text: &str) -> Summary {
    split_all(&mut s, [text]).0
}

fn calls(s: &Summary) -> Vec<(&str, &str)> {
    s.tool_calls
        .iter()
        .map(|(n, a)| (n.as_str(), a.as_str()))
        .collect()
}

#[test]
fn harmony_channels_and_return() {
    let s = run(
        harmony(),
        "<|start|>assistant<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final<|message|>Answer.<|return|>ignored",
    );
    assert_eq!(
        (s.reasoning.as_str(), s.content.as_str()),
        ("Think.", "Answer.")
    );
    assert_eq!(s.stop, Some(Stop::Return));
}

#[test]
fn harmony_starts_inside_the_header() {
    let s = run(
        harmony(),
        "<|channel|>analysis<|message|>hmm<|end|><|start|>assistant<|channel|>final<|message|>ok",
    );
    assert_eq!(
        (s.reasoning.as_str(), s.content.as_str(), s.stop),
        ("hmm", "ok", None)
    );
}

#[test]
fn harmony_tool_calls_with_recipient_in_either_part() {
    let s = run(
        harmony(),
        "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Paris\"}<|call|>",
    );
    assert_eq!(calls(&s), vec![("get_weather", "{\"city\":\"Paris\"}")]);
    assert_eq!(s.stop, Some(Stop::Call));
    let s = run(
        harmony(),
        "<|start|>assistant to=functions.lookup<|channel|>commentary json<|message|>{}<|call|>",
    );
    assert_eq!(calls(&s), vec![("lookup", "{}")]);
    // Commentary without a recipient is a preamble: content.
    let s = run(
        harmony(),
        "<|channel|>commentary<|message|>Let me check.<|end|>",
    );
    assert_eq!(s.content, "Let me check.");
    assert!(s.tool_calls.is_empty());
}

#[test]
fn harmony_lone_angle_brackets_are_content() {
    let s = run(
        harmony(),
        "<|channel|>final<|message|>a < b, x <| y, <|nope|> and <|end",
    );
    assert_eq!(s.content, "a < b, x <| y, <|nope|> and <|end");
}

#[test]
fn harmony_stop_inside_an_unfinished_header() {
    let text = "<|start|>assistant<|channel|>fin<|return|>";
    let s = run(HarmonyParser::new(HarmonyMode::Lenient), text);
    assert_eq!(
        (s.content.as_str(), s.stop),
        ("assistant<|channel|>fin", Some(Stop::Return))
    );
    let s = run(HarmonyParser::new(HarmonyMode::Strict), text);
    assert_eq!((s.content.as_str(), s.stop), ("", Some(Stop::Return)));
}

#[test]
fn harmony_token_id_path_matches_the_text_path() {
    let m = HarmonyMarkers::GPT_OSS;
    let tokens: Vec<(u32, &str)> = vec![
        (m.channel, ""),
        (1, "analysis"),
        (m.message, ""),
        (1, "a <"),
        (1, "|b"),
        (m.end, ""),
        (m.start, ""),
        (1, "assistant"),
        (m.channel, ""),
        (1, "final"),
        (m.message, ""),
        (1, "done"),
        (m.return_, ""),
    ];
    let mut p = harmony();
    let mut stop = None;
    for (id, text) in &tokens {
        stop = p.process_token(&m, *id, text);
    }
    assert_eq!(p.take_reasoning(), "a <|b");
    assert_eq!(p.take_content(), "done");
    assert_eq!(stop, Some(Stop::Return));
}

#[test]
fn generic_think_prefilled_unclosed_and_custom_markers() {
    let s = run(
        GenericParser::new(Format::hermes()).unwrap(),
        "<think>plan</think>Answer",
    );
    assert_eq!(
        (s.reasoning.as_str(), s.content.as_str()),
        ("plan", "Answer")
    );
    let s = run(
        GenericParser::new(Format::hermes().prefilled(true)).unwrap(),
        "plan</think>Answer",
    );
    assert_eq!(
        (s.reasoning.as_str(), s.content.as_str()),
        ("plan", "Answer")
    );
    let s = run(
        GenericParser::new(Format::hermes()).unwrap(),
        "Hi <think>still thinking",
    );
    assert_eq!(
        (s.reasoning.as_str(), s.content.as_str()),
        ("still thinking", "Hi ")
    );
    let s = run(
        GenericParser::new(Format::hermes().with_reasoning_markers("<reasoning>", "</reasoning>"))
            .unwrap(),
        "<reasoning>r</reasoning>c<think>",
    );
    assert_eq!(
        (s.reasoning.as_str(), s.content.as_str()),
        ("r", "c<think>")
    );
}

#[test]
fn generic_hermes_calls_fences_and_tags_inside_strings() {
    let s = run(
        GenericParser::new(Format::hermes()).unwrap(),
        "Sure.<tool_call>{\"name\": \"a\", \"arguments\": {\"x\": 1}}</tool_call><tool_call>\n{\"name\": \"echo\", \"arguments\": {\"text\": \"a </tool_call> b\"}}\n</tool_call>",
    );
    assert_eq!(s.content, "Sure.");
    assert_eq!(
        calls(&s),
        vec![
            ("a", "{\"x\":1}"),
            ("echo", "{\"text\":\"a </tool_call> b\"}")
        ]
    );
    let fenced =
        "Example:\n```xml\n<tool_call>{\"name\": \"a\"}</tool_call> <think>no</think>\n```\nEnd";
    let s = run(GenericParser::new(Format::hermes()).unwrap(), fenced);
    assert_eq!(s.content, fenced);
    assert!(s.tool_calls.is_empty() && s.reasoning.is_empty());
}

#[test]
fn generic_llama3_python_tag_and_bare_json() {
    let s = run(
        GenericParser::new(Format::llama3()).unwrap(),
        "<|python_tag|>{\"name\": \"search\", \"parameters\": {\"q\": \"rust\"}}",
    );
    assert_eq!(calls(&s), vec![("search", "{\"q\":\"rust\"}")]);
    let s = run(
        GenericParser::new(Format::llama3()).unwrap(),
        "  {\"name\": \"search\", \"parameters\": {\"q\": \"x\"}}",
    );
    assert_eq!(calls(&s), vec![("search", "{\"q\":\"x\"}")]);
    // A JSON answer that is not a call stays content; JSON later in the answer is content.
    let s = run(
        GenericParser::new(Format::llama3()).unwrap(),
        "{\"result\": 42}",
    );
    assert_eq!(
        (s.content.as_str(), s.tool_calls.len()),
        ("{\"result\": 42}", 0)
    );
    let s = run(
        GenericParser::new(Format::llama3()).unwrap(),
        "The object {\"name\": \"x\", \"parameters\": {}} is shown.",
    );
    assert_eq!(s.tool_calls.len(), 0);
}

#[test]
fn generic_mistral_and_qwen3_coder() {
    let s = run(
        GenericParser::new(Format::mistral()).unwrap(),
        "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"k\": \"v\"}}, {\"name\": \"b\", \"arguments\": {}}]",
    );
    assert_eq!(calls(&s), vec![("a", "{\"k\":\"v\"}"), ("b", "{}")]);
    let s = run(
        GenericParser::new(Format::qwen3_coder()).unwrap(),
        "I'll check.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
    );
    assert_eq!(s.content, "I'll check.\n");
    assert_eq!(
        calls(&s),
        vec![("get_weather", "{\"city\":\"Paris\",\"days\":3}")]
    );
}

/// The streams the properties run over.
/// `(name, make a splitter, the stream)`.
type Stream = (&'static str, fn() -> Box<dyn Splitter>, &'static str);

fn streams() -> Vec<Stream> {
    fn h() -> Box<dyn Splitter> {
        Box::new(HarmonyParser::new(HarmonyMode::Lenient))
    }
    fn hs() -> Box<dyn Splitter> {
        Box::new(HarmonyParser::new(HarmonyMode::Strict))
    }
    fn g() -> Box<dyn Splitter> {
        Box::new(GenericParser::new(Format::hermes()).unwrap())
    }
    fn l() -> Box<dyn Splitter> {
        Box::new(GenericParser::new(Format::llama3()).unwrap())
    }
    fn m() -> Box<dyn Splitter> {
        Box::new(GenericParser::new(Format::mistral()).unwrap())
    }
    fn q() -> Box<dyn Splitter> {
        Box::new(GenericParser::new(Format::qwen3_coder()).unwrap())
    }
    vec![
        (
            "harmony",
            h,
            "<|start|>assistant<|channel|>analysis<|message|>Let me think about <this> carefully.<|end|><|start|>assistant<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"a\": \"<|x\"}<|call|>",
        ),
        (
            "harmony-final",
            h,
            "<|channel|>analysis<|message|>é 日本 😀 <| <<|end|><|start|>assistant<|channel|>final<|message|>Done: a<b<|return|>",
        ),
        (
            "harmony-strict",
            hs,
            "<|start|>assistant<|channel|>fi<|end|>x<|start|>assistant<|channel|>final<|message|>y<|return|>",
        ),
        (
            "hermes",
            g,
            "<think>Plan: call <tool>.</think>Text <b>bold</b> ```code <think>``` <tool_call>{\"name\": \"t\", \"arguments\": {\"s\": \"</tool_call>\\\"\"}}</tool_call> tail <",
        ),
        (
            "llama3",
            l,
            " {\"name\": \"f\", \"parameters\": {\"x\": [1, {\"y\": \"}\"}]}}",
        ),
        (
            "mistral",
            m,
            "ok [TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"k\": \"]\"}}]",
        ),
        (
            "qwen3-coder",
            q,
            "<think>x</think><tool_call><function=f><parameter=p>v</parameter></function></tool_call>after",
        ),
    ]
}

fn chunked(text: &str, sizes: &[usize]) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let (mut i, mut k) = (0, 0);
    while i < chars.len() {
        let n = sizes[k % sizes.len()].max(1);
        out.push(chars[i..(i + n).min(chars.len())].iter().collect());
        i += n;
        k += 1;
    }
    out
}

#[test]
fn chunk_invariance_fixed_sizes() {
    for (name, make, text) in streams() {
        let whole = split_all(make().as_mut(), [text]).0;
        for sizes in [[1usize].as_slice(), &[2], &[3], &[7], &[1, 5, 2, 9]] {
            let chunks = chunked(text, sizes);
            let got = split_all(make().as_mut(), chunks.iter().map(String::as_str)).0;
            assert_eq!(got, whole, "{name} in chunks of {sizes:?}");
        }
    }
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
    #![proptest_config(ProptestConfig { cases: 128, rng_seed: seed(), ..ProptestConfig::default() })]

    #[test]
    fn chunk_invariance_random(sizes in proptest::collection::vec(1usize..12, 1..20), which in 0usize..7) {
        let (name, make, text) = streams()[which];
        let whole = split_all(make().as_mut(), [text]).0;
        let chunks = chunked(text, &sizes);
        let got = split_all(make().as_mut(), chunks.iter().map(String::as_str)).0;
        prop_assert_eq!(got, whole, "{} in chunks {:?}", name, sizes);
    }

    #[test]
    fn every_prefix_emits_a_prefix_of_the_result(sizes in proptest::collection::vec(1usize..6, 1..12), which in 0usize..7) {
        let (name, make, text) = streams()[which];
        let whole = split_all(make().as_mut(), [text]).0;
        let mut s = make();
        let (mut content, mut reasoning) = (String::new(), String::new());
        for chunk in chunked(text, &sizes) {
            let stop = s.process(&chunk);
            content.push_str(&s.take_content());
            reasoning.push_str(&s.take_reasoning());
            prop_assert!(whole.content.starts_with(&content), "{}: {:?} not a prefix of {:?}", name, content, whole.content);
            prop_assert!(whole.reasoning.starts_with(&reasoning), "{}: reasoning", name);
            if stop.is_some() {
                break;
            }
        }
    }
}

#[test]
fn harmony_by_id_keeps_text_that_spells_markers_as_text() {
    let m = HarmonyMarkers::GPT_OSS;
    let mut p = HarmonyParser::new(HarmonyMode::Lenient).with_markers(m);
    assert!(p.reads_control_tokens());
    for (id, text) in [
        (m.channel, "<|channel|>"),
        (1, "final"),
        (m.message, "<|message|>"),
    ] {
        assert_eq!(p.process_control(id, text), None);
    }
    // The model writes the markers' spelling as plain text: it stays the answer's text.
    assert_eq!(p.process("say <|return|> and <|end|><|start|>"), None);
    assert_eq!(
        p.process_control(m.return_, "<|return|>"),
        Some(Stop::Return)
    );
    assert_eq!(p.take_content(), "say <|return|> and <|end|><|start|>");
}
