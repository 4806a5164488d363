//! `corral serve` with a harmony model (gpt-oss), over the real gpt-oss tokenizer.
//!
//! - A random-weight gpt-oss folder (2 layers) writes no harmony of its own, so these
//!   tests force the headers: `reasoning_budget` forces the final channel's header, and
//!   `tool_choice` `required` or a named tool forces the commentary header of a call. The
//!   grammar makes the rest valid: the answer under `response_format`, the call's recipient
//!   and its arguments under the tool's parameters.
//! - A scripted network over the same tokenizer writes the harmony a real gpt-oss writes
//!   (reasoning then answer, reasoning then a call, an answer after a tool's result), so
//!   the split by channel is checked exactly, streamed and not. It records the prompts it
//!   is given, so the rendered history is checked too.

#[path = "../../tests/support/random_gpt_oss.rs"]
mod random_gpt_oss;
mod support;

use corral_engine::{BatchItem, CausalLm, Logits, ModelError, Sequence, apply_mask_in_place};
use corral_models::{DeviceSpec, Model};
use corral_trie::{FixedBitSet, TokenId};
use random_gpt_oss::{GptOssShape, write_random_gpt_oss};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use support::{Server, chat, content, error_message};

/// A random gpt-oss folder of its own (`name` tells them apart), with the real tokenizer.
fn random_folder(name: &str) -> PathBuf {
    let tokenizer = support::gptoss_tokenizer();
    let dir = std::env::temp_dir().join(format!(
        "corral-serve-gpt-oss-{name}-{}",
        std::process::id()
    ));
    let shape = GptOssShape::with_gpt_oss_vocabulary();
    write_random_gpt_oss(&dir, &shape, Some(&tokenizer), 21);
    dir
}

/// A server over a random gpt-oss folder of its own.
fn random_server(name: &str) -> (Server, PathBuf) {
    let dir = random_folder(name);
    let s = Server::start_from(Default::default(), dir.display().to_string());
    (s, dir)
}

/// A network that writes `script` (harmony text, tokenized by the model's tokenizer): at
/// each step it proposes the script's token after the longest start of the script that the
/// tokens so far end with. Where the mask refuses it, the lowest allowed id is taken (every
/// other logit is equal). It keeps the tokens of the last sequence it ran (prompt and
/// output), so a test can read the prompt it was given.
struct Scripted {
    script: Vec<TokenId>,
    width: usize,
    end: TokenId,
    last: Arc<Mutex<Vec<u32>>>,
}

/// A sequence's tokens so far.
struct Fed(Vec<TokenId>);

struct Proposal {
    width: usize,
    token: TokenId,
}

impl Logits for Proposal {
    fn to_masked_vec(&self, mask: Option<&FixedBitSet>) -> Result<Vec<f32>, ModelError> {
        let mut v = vec![0.0; self.width];
        // Far above the rest: drawn at any temperature.
        v[self.token.index()] = 100.0;
        if let Some(m) = mask {
            apply_mask_in_place(&mut v, m);
        }
        Ok(v)
    }
}

impl Scripted {
    fn next(&self, fed: &[TokenId]) -> TokenId {
        let k = (0..=self.script.len())
            .rev()
            .find(|&k| fed.ends_with(&self.script[..k]))
            .unwrap_or(0);
        self.script.get(k).copied().unwrap_or(self.end)
    }
}

impl CausalLm for Scripted {
    fn forward(&mut self, _: &[TokenId], _: usize) -> Result<Box<dyn Logits>, ModelError> {
        Err(ModelError::Backend(
            "the scripted network runs through forward_batch".into(),
        ))
    }
    fn logit_width(&self) -> usize {
        self.width
    }
    fn max_positions(&self) -> usize {
        8192
    }
    fn reset(&mut self) {}
    fn new_sequence(&self) -> Sequence {
        Sequence::new(Fed(Vec::new()))
    }
    fn forward_batch(
        &mut self,
        items: &mut [BatchItem<'_>],
    ) -> Result<Vec<Box<dyn Logits>>, ModelError> {
        let mut out: Vec<Box<dyn Logits>> = Vec::new();
        for item in items.iter_mut() {
            let fed = item
                .sequence
                .downcast_mut::<Fed>()
                .ok_or_else(|| ModelError::Backend("not a scripted sequence".into()))?;
            if item.pos == 0 {
                fed.0.clear();
            }
            fed.0.extend_from_slice(item.tokens);
            *self.last.lock().unwrap() = fed.0.iter().map(|t| t.0).collect();
            out.push(Box::new(Proposal {
                width: self.width,
                token: self.next(&fed.0),
            }));
        }
        Ok(out)
    }
}

/// A server whose network writes `script` after each prompt, and the text of the last
/// sequence it ran (control tokens by name).
fn scripted_server(name: &str, script: &str) -> (Server, impl Fn() -> String) {
    let dir = random_folder(name);
    let model = Model::load(&dir.display().to_string(), DeviceSpec::Cpu).expect("loads");
    std::fs::remove_dir_all(&dir).unwrap();
    let (lm, text) = model.into_parts();
    let ids = |s: &str| -> Vec<TokenId> {
        let enc = text.tokenizer().encode(s, false).expect("tokenizes");
        enc.get_ids().iter().map(|&i| TokenId(i)).collect()
    };
    let last = Arc::new(Mutex::new(Vec::new()));
    let scripted = Scripted {
        script: ids(script),
        width: lm.logit_width(),
        end: ids("<|return|>")[0],
        last: last.clone(),
    };
    drop(lm);
    let served = text.clone();
    let s = Server::start_with(
        Default::default(),
        Box::new(move || Ok(Model::from_parts(Box::new(scripted), served))),
    );
    let seen = move || {
        let ids = last.lock().unwrap().clone();
        text.tokenizer().decode(&ids, false).expect("decodes")
    };
    (s, seen)
}

/// A streamed chat completion: the `delta`s' content, reasoning, calls (name, arguments)
/// and the finish reason.
fn streamed(s: &Server, body: &Value) -> (String, String, Vec<(String, String)>, String) {
    let mut body = body.clone();
    body["stream"] = json!(true);
    let r = ureq::post(&format!("{}/v1/chat/completions", s.base))
        .send_string(&body.to_string())
        .expect("200");
    let (mut content, mut reasoning, mut calls, mut finish) = (
        String::new(),
        String::new(),
        Vec::<(String, String)>::new(),
        String::new(),
    );
    for line in BufReader::new(r.into_reader()).lines() {
        let line = line.expect("line");
        let Some(d) = line.strip_prefix("data: ").filter(|d| *d != "[DONE]") else {
            continue;
        };
        let v: Value = serde_json::from_str(d).expect("chunk");
        let choice = &v["choices"][0];
        let delta = &choice["delta"];
        content.push_str(delta["content"].as_str().unwrap_or_default());
        reasoning.push_str(delta["reasoning_content"].as_str().unwrap_or_default());
        for c in delta["tool_calls"].as_array().into_iter().flatten() {
            let index = c["index"].as_u64().expect("index") as usize;
            if calls.len() <= index {
                calls.resize(index + 1, Default::default());
            }
            if let Some(n) = c["function"]["name"].as_str() {
                calls[index].0.push_str(n);
            }
            if let Some(a) = c["function"]["arguments"].as_str() {
                calls[index].1.push_str(a);
            }
        }
        if let Some(f) = choice["finish_reason"].as_str() {
            finish = f.to_string();
        }
    }
    (content, reasoning, calls, finish)
}

fn weather_tools() -> Value {
    json!([{"type": "function", "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"enum": ["Paris", "Lima"]}, "days": {"type": "integer", "minimum": 1, "maximum": 3}},
            "required": ["city", "days"],
            "additionalProperties": false
        }
    }}])
}

/// Checks a call's arguments against `weather_tools`' schema.
fn valid_weather_args(args: &str) {
    let a: Value = serde_json::from_str(args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
    assert!(
        ["Paris", "Lima"].contains(&a["city"].as_str().unwrap_or_default()),
        "{a}"
    );
    assert!(
        a["days"].as_i64().is_some_and(|d| (1..=3).contains(&d)),
        "{a}"
    );
    assert_eq!(a.as_object().map(|o| o.len()), Some(2), "{a}");
}

#[test]
#[ignore = "needs scripts/fetch-assets"]
fn reasoning_and_answer_are_split_by_channel() {
    let (s, _seen) = scripted_server(
        "split",
        "<|channel|>analysis<|message|>The user greets me.<|end|><|start|>assistant<|channel|>final<|message|>Hello there.<|return|>",
    );
    let body = chat("Hi!", json!({"max_tokens": 100}));
    let (code, v) = s.post("/v1/chat/completions", &body);
    assert_eq!(code, 200, "{v}");
    let m = &v["choices"][0]["message"];
    assert_eq!(m["content"], "Hello there.", "{v}");
    assert_eq!(m["reasoning_content"], "The user greets me.", "{v}");
    assert_eq!(v["choices"][0]["finish_reason"], "stop", "{v}");
    let (content, reasoning, calls, finish) = streamed(&s, &body);
    assert_eq!(
        (
            content.as_str(),
            reasoning.as_str(),
            calls.len(),
            finish.as_str()
        ),
        ("Hello there.", "The user greets me.", 0, "stop")
    );
}

#[test]
#[ignore = "needs scripts/fetch-assets"]
fn a_call_in_commentary_is_a_tool_call_with_constrained_arguments() {
    // The script's arguments break the schema (Rome, 7 days): the grammar has the last word.
    let (s, _seen) = scripted_server(
        "call",
        "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Rome\",\"days\":7}<|call|>",
    );
    let body = chat(
        "Weather in Paris?",
        json!({"tools": weather_tools(), "max_tokens": 100}),
    );
    let (code, v) = s.post("/v1/chat/completions", &body);
    assert_eq!(code, 200, "{v}");
    let choice = &v["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls", "{v}");
    assert_eq!(choice["message"]["reasoning_content"], "Need the weather.");
    let calls = choice["message"]["tool_calls"].as_array().expect("calls");
    assert_eq!(calls.len(), 1, "{v}");
    assert_eq!(calls[0]["function"]["name"], "get_weather");
    valid_weather_args(calls[0]["function"]["arguments"].as_str().unwrap());
    assert!(choice["message"]["content"].is_null(), "{v}");
    let (content, reasoning, calls, finish) = streamed(&s, &body);
    assert_eq!((content.as_str(), finish.as_str()), ("", "tool_calls"));
    assert_eq!(reasoning, "Need the weather.");
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].0, "get_weather");
    valid_weather_args(&calls[0].1);
}

#[test]
#[ignore = "needs scripts/fetch-assets"]
fn a_tool_result_goes_back_as_the_tools_message() {
    let (s, seen) = scripted_server(
        "result",
        "<|channel|>final<|message|>It is sunny in Paris.<|return|>",
    );
    let body = json!({
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "reasoning_content": "Need the weather.", "content": null,
             "tool_calls": [{"id": "call_1", "type": "function",
                             "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\",\"days\":1}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "{\"sky\":\"sunny\"}"}
        ],
        "tools": weather_tools(),
        "max_tokens": 60
    });
    let (code, v) = s.post("/v1/chat/completions", &body);
    assert_eq!(code, 200, "{v}");
    assert_eq!(content(&v), "It is sunny in Paris.", "{v}");
    assert_eq!(v["choices"][0]["finish_reason"], "stop", "{v}");
    // The history as harmony writes it: the call to the tool, the tool's answer to the
    // assistant, the reasoning of the turn in progress kept.
    let seen = seen();
    for part in [
        "<|start|>developer<|message|># Instructions\n\nBe brief.",
        "namespace functions {",
        "type get_weather = (_:",
        "<|start|>assistant<|channel|>analysis<|message|>Need the weather.<|end|>",
        "<|start|>assistant to=functions.get_weather<|channel|>commentary <|constrain|>json<|message|>{\"city\":\"Paris\",\"days\":1}<|call|>",
        "<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>{\"sky\":\"sunny\"}<|end|>",
    ] {
        assert!(seen.contains(part), "{part:?} is not in {seen:?}");
    }
}

#[test]
#[ignore = "needs scripts/fetch-assets"]
fn a_random_gpt_oss_answers_in_its_final_channel_under_a_schema() {
    let (s, dir) = random_server("schema");
    let schema = json!({
        "type": "object",
        "properties": {"city": {"enum": ["Paris", "Lima"]}, "n": {"type": "integer", "minimum": 0, "maximum": 9}},
        "required": ["city", "n"],
        "additionalProperties": false
    });
    let format =
        json!({"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}});
    // A budget of 0 forces the final header at once; others once the random network has
    // written that many tokens of its first header (the header is completed, not ended).
    for (effort, budget) in [("low", 0), ("medium", 4), ("high", 9)] {
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
                "reasoning_budget": budget,
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
        // JSON Schema's integers are numbers without a fraction (`-0.0` is one).
        assert!(
            answer["n"]
                .as_f64()
                .is_some_and(|n| n.fract() == 0.0 && (0.0..=9.0).contains(&n)),
            "{answer}"
        );
        eprintln!("reasoning_effort {effort}: {}", v["choices"][0]["message"]);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
#[ignore = "needs scripts/fetch-assets"]
fn a_random_gpt_oss_makes_the_call_it_is_required_to() {
    let (s, dir) = random_server("required");
    for choice in [
        json!("required"),
        json!({"type": "function", "function": {"name": "get_weather"}}),
    ] {
        let body = chat(
            "Weather?",
            json!({"tools": weather_tools(), "tool_choice": choice, "reasoning_budget": 3, "max_tokens": 80}),
        );
        let (code, v) = s.post("/v1/chat/completions", &body);
        assert_eq!(code, 200, "{v}");
        assert_eq!(v["choices"][0]["finish_reason"], "tool_calls", "{v}");
        let calls = v["choices"][0]["message"]["tool_calls"]
            .as_array()
            .expect("calls");
        assert_eq!(calls.len(), 1, "{v}");
        assert_eq!(calls[0]["function"]["name"], "get_weather");
        valid_weather_args(calls[0]["function"]["arguments"].as_str().unwrap());
        let (_, _, calls, finish) = streamed(&s, &body);
        assert_eq!(finish, "tool_calls");
        assert_eq!(calls.len(), 1);
        valid_weather_args(&calls[0].1);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
#[ignore = "needs scripts/fetch-assets"]
fn what_a_harmony_model_cannot_honour_is_refused_by_name() {
    let (s, dir) = random_server("refused");
    let bad_name = json!([{"type": "function", "function": {"name": "get weather", "parameters": {"type": "object"}}}]);
    for (extra, field) in [
        (json!({"stop": ["\n"]}), "stop"),
        (json!({"reasoning_effort": "extreme"}), "reasoning_effort"),
        (json!({"tools": bad_name}), "tools"),
        (
            json!({"tools": weather_tools(), "reasoning_budget": 5}),
            "reasoning_budget",
        ),
        (
            json!({"messages": [{"role": "tool", "content": "1", "tool_call_id": "c"}]}),
            "messages",
        ),
        (
            json!({"messages": [{"role": "system", "name": "x", "content": "1"}, {"role": "user", "content": "hi"}]}),
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
