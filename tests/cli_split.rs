//! `corral split`: events and the summary contract, chunk invariance through the CLI, tools
//! validation through the codec.

mod common;

use common::run_corral;
use serde_json::{Value, json};

fn summary(args: &[&str], input: &str) -> Value {
    let mut a = vec!["split"];
    a.extend_from_slice(args);
    a.push("--summary");
    let (code, out, err) = run_corral(&a, input.as_bytes());
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(out.trim()).unwrap()
}

const HARMONY: &str = "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}<|call|>";

#[test]
fn harmony_summary() {
    let s = summary(&["--format", "harmony"], HARMONY);
    assert_eq!(
        s,
        json!({"content": "", "reasoning": "Need the weather.", "tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}], "stop": "call"})
    );
    let s = summary(
        &["--format", "harmony"],
        "<|channel|>final<|message|>Hi <b>!<|return|>",
    );
    assert_eq!(s["content"], "Hi <b>!");
    assert_eq!(s["stop"], "return");
    let s = summary(
        &["--format", "harmony"],
        "<|channel|>final<|message|>cut off",
    );
    assert_eq!(s["stop"], "end_of_input");
}

#[test]
fn chunk_sizes_give_the_same_summary() {
    let whole = summary(&["--format", "harmony"], HARMONY);
    for n in ["1", "2", "3", "7"] {
        assert_eq!(
            summary(&["--format", "harmony", "--chunk-size", n], HARMONY),
            whole,
            "chunk size {n}"
        );
    }
}

#[test]
fn generic_formats_and_prefilled_reasoning() {
    let s = summary(
        &["--format", "generic", "--think-prefilled"],
        "plan</think>Done.<tool_call>{\"name\": \"a\", \"arguments\": {\"x\": 1}}</tool_call>",
    );
    assert_eq!(
        s,
        json!({"content": "Done.", "reasoning": "plan", "tool_calls": [{"name": "a", "arguments": {"x": 1}}], "stop": "end_of_input"})
    );
    let s = summary(
        &["--format", "generic", "--tool-format", "mistral"],
        "[TOOL_CALLS][{\"name\": \"b\", \"arguments\": {}}]",
    );
    assert_eq!(s["tool_calls"], json!([{"name": "b", "arguments": {}}]));
    let s = summary(
        &["--format", "generic", "--tool-format", "qwen3-coder"],
        "<tool_call><function=c><parameter=q>hi</parameter></function></tool_call>",
    );
    assert_eq!(
        s["tool_calls"],
        json!([{"name": "c", "arguments": {"q": "hi"}}])
    );
    let (code, _, err) = run_corral(
        &["split", "--format", "generic", "--tool-format", "nope"],
        b"",
    );
    assert_eq!(code, 2);
    assert!(err.contains("unknown --tool-format"), "{err}");
}

#[test]
fn tools_repair_and_validate_arguments() {
    let dir = std::env::temp_dir().join(format!("corral-split-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let tools = dir.join("tools.json");
    std::fs::write(
        &tools,
        json!([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]).to_string(),
    )
    .unwrap();
    let t = tools.to_str().unwrap();
    // Barewords, single quotes, a trailing comma, bidi marks: repaired, then validated.
    let s = summary(
        &["--format", "generic", "--tools", t],
        "<tool_call>{name: get_weather, arguments: {'city': '\u{200F}תל אביב',}}</tool_call>",
    );
    assert_eq!(
        s["tool_calls"],
        json!([{"name": "get_weather", "arguments": {"city": "תל אביב"}}])
    );
    // Arguments that do not match the schema come back raw, with the reason.
    let s = summary(
        &["--format", "generic", "--tools", t],
        "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"town\": 1}}</tool_call>",
    );
    let args = &s["tool_calls"][0]["arguments"];
    assert!(
        args["error"]
            .as_str()
            .unwrap()
            .contains("do not match its schema"),
        "{s}"
    );
    assert_eq!(args["raw"], "{\"town\":1}");
    // A bare JSON answer that validates is a call (the codec's last gate).
    let s = summary(
        &["--format", "generic", "--tools", t],
        "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}",
    );
    assert_eq!(
        s["tool_calls"],
        json!([{"name": "get_weather", "arguments": {"city": "Rome"}}])
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn events_and_postprocessing_final_event() {
    let (code, out, _) = run_corral(
        &["split", "--format", "generic", "--postprocess"],
        "<think>a b c</think>one two  two".as_bytes(),
    );
    assert_eq!(code, 0);
    let lines: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines[0], json!({"type": "reasoning", "text": "a b c"}));
    let last = lines.last().unwrap();
    assert_eq!(last["type"], "final");
    assert_eq!(last["reasoning_tokens"], 3);
    assert_eq!(last["final_tokens"], 3);
    assert_eq!(last["reasoning_text"], Value::Null);
    assert_eq!(last["leak_detected"], false);
    let content: String = lines
        .iter()
        .filter(|l| l["type"] == "delta")
        .map(|l| l["text"].as_str().unwrap())
        .collect();
    assert_eq!(content, "one two two");
}

fn events(args: &[&str], input: &[u8]) -> (i32, Vec<Value>, String) {
    let mut a = vec!["split"];
    a.extend_from_slice(args);
    let (code, out, err) = run_corral(&a, input);
    let lines = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (code, lines, err)
}

#[test]
fn events_keep_the_stream_order() {
    let (code, ev, err) = events(
        &["--format", "generic"],
        b"<think>A</think>x<think>B</think>y",
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        ev,
        vec![
            json!({"type": "reasoning", "text": "A"}),
            json!({"type": "delta", "text": "x"}),
            json!({"type": "reasoning", "text": "B"}),
            json!({"type": "delta", "text": "y"}),
        ]
    );
}

#[test]
fn a_tool_call_cut_by_the_end_of_input_is_truncated() {
    let (code, ev, err) = events(
        &["--format", "generic"],
        b"hi<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1",
    );
    assert_eq!(code, 0, "{err}");
    let last = ev.last().expect("events");
    assert_eq!(last["type"], "tool_call");
    assert_eq!(last["truncated"], true, "{last}");
    // A closed call is not.
    let (_, ev, _) = events(
        &["--format", "generic"],
        b"<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>",
    );
    assert!(ev.last().expect("events").get("truncated").is_none());
}

#[test]
fn invalid_utf8_names_its_byte_offset() {
    let (code, _, err) = events(&["--format", "generic"], b"abc\xffdef");
    assert_ne!(code, 0);
    assert!(err.contains("invalid UTF-8 at byte 3"), "{err}");
}
