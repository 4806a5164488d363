//! `corral serve` with a harmony model: a random-weight gpt-oss folder (2 layers) with the
//! real gpt-oss tokenizer. The conversation is rendered by the harmony renderer, the output
//! split by channel, and `response_format` applies in the final channel: a random model
//! writes no channel header of its own, so `reasoning_budget` forces the final channel's
//! header and the schema applies from there. Tools, and reasoning efforts other than low,
//! medium and high, are refused with a 400 naming the field.

#[path = "../../tests/support/random_gpt_oss.rs"]
mod random_gpt_oss;
mod support;

use random_gpt_oss::{GptOssShape, write_random_gpt_oss};
use serde_json::{Value, json};
use support::{Server, chat, content, error_message};

/// A server of its own over a random gpt-oss folder of its own (`name` tells them apart).
fn server(name: &str) -> Option<(Server, std::path::PathBuf)> {
    let tokenizer = support::gptoss_tokenizer()?;
    let dir = std::env::temp_dir().join(format!(
        "corral-serve-gpt-oss-{name}-{}",
        std::process::id()
    ));
    let shape = GptOssShape {
        width: 64,
        layers: 2,
        heads: 4,
        kv_heads: 2,
        head_dim: 16,
        experts: 4,
        top_k: 2,
        expert_width: 64,
        vocab: 201_088,
        sliding_window: 128,
    };
    write_random_gpt_oss(&dir, &shape, Some(&tokenizer), 21);
    let s = Server::start_from(Default::default(), dir.display().to_string());
    Some((s, dir))
}

#[test]
fn a_gpt_oss_answers_in_its_final_channel_under_a_schema() {
    let Some((s, dir)) = server("schema") else {
        return;
    };
    let schema = json!({
        "type": "object",
        "properties": {"city": {"enum": ["Paris", "Lima"]}, "n": {"type": "integer", "minimum": 0, "maximum": 9}},
        "required": ["city", "n"],
        "additionalProperties": false
    });
    let format =
        json!({"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}});
    for effort in ["low", "medium", "high"] {
        let body = chat(
            "A city and a digit.",
            json!({
                "messages": [
                    {"role": "system", "content": "Answer in JSON."},
                    {"role": "user", "content": "Earlier question."},
                    {"role": "assistant", "content": "{\"city\": \"Lima\", \"n\": 1}", "reasoning_content": "thinking"},
                    {"role": "user", "content": "A city and a digit."}
                ],
                "response_format": format,
                "reasoning_budget": 4,
                "reasoning_effort": effort,
                "max_tokens": 64
            }),
        );
        let (code, v) = s.post("/v1/chat/completions", &body);
        assert_eq!(code, 200, "{v}");
        let answer: Value = serde_json::from_str(content(&v))
            .unwrap_or_else(|e| panic!("{effort}: content is not JSON ({e}): {v}"));
        assert!(
            ["Paris", "Lima"].contains(&answer["city"].as_str().unwrap()),
            "{answer}"
        );
        assert!(
            answer["n"].as_i64().is_some_and(|n| (0..=9).contains(&n)),
            "{answer}"
        );
        eprintln!("reasoning_effort {effort}: {}", v["choices"][0]["message"]);
        // The control tokens of the stream are not content.
        assert!(!content(&v).contains("<|"), "{v}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn what_a_harmony_model_is_not_served_is_refused_by_name() {
    let Some((s, dir)) = server("refused") else {
        return;
    };
    let tools =
        json!([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]);
    for (extra, field) in [
        (json!({"tools": tools}), "tools"),
        (json!({"tool_choice": "none"}), "tool_choice"),
        (json!({"reasoning_effort": "extreme"}), "reasoning_effort"),
        (
            json!({"messages": [{"role": "tool", "content": "1", "tool_call_id": "c"}]}),
            "messages",
        ),
    ] {
        let (code, v) = s.post("/v1/chat/completions", &chat("x", extra));
        assert_eq!(code, 400, "{v}");
        assert_eq!(v["error"]["param"], field, "{v}");
        assert!(!error_message(&v).is_empty());
    }
    // The server still serves.
    let (code, v) = s.post(
        "/v1/chat/completions",
        &chat("hello", json!({"max_tokens": 4})),
    );
    assert_eq!(code, 200, "{v}");
    std::fs::remove_dir_all(&dir).unwrap();
}
