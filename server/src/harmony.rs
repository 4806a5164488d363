//! Chat requests to a harmony model (gpt-oss).
//!
//! The conversation is rendered by `corral_models::harmony`:
//! - harmony's system message, with the request's `reasoning_effort`;
//! - system and developer messages as the developer's instructions, the tools as its
//!   `functions` namespace;
//! - an assistant turn as its analysis (`reasoning_content`), its calls as commentary
//!   messages to `functions.NAME` with JSON content, and its content as the final answer
//!   (earlier analysis is dropped as harmony drops it);
//! - a tool message as the tool's answer, headed by the tool's name (found from the call
//!   its `tool_call_id` answers).
//!
//! The output is split by channel, reading control tokens by id: analysis is
//! `reasoning_content`, final is `content`, a message to `functions.NAME` is a tool call
//! where the request allows NAME (its text is content otherwise). Where the grammar
//! applies:
//! - `response_format` / `grammar` / `regex`: in the final channel, after its header; a
//!   reasoning budget, or the model ending first, forces the header.
//! - tools with `tool_choice` `auto`: each commentary header's recipient and arguments
//!   ([`Tools::harmony_call`]); `<|call|>` ends the output.
//! - `required` or a named tool: the same after the first commentary header, which is
//!   forced if the model would end (or its reasoning budget is spent) without one.
//!
//! Stop sequences are refused: they would be matched across channels.

use crate::ServeConfig;
use crate::admit::{Admitted, Endpoint, Input, Spec, admit, message_text};
use crate::api::ChatRequest;
use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::tools::{self, Choice, Tools};
use corral_engine::{Forced, Scope};
use corral_models::ModelText;
use corral_models::harmony::{
    Content as Part, DeveloperContent, Message as Turn, ReasoningEffort, Role, SystemContent,
    ToolDescription,
};
use corral_split::{COMMENTARY, FINAL_HEADER, HarmonyMarkers, MESSAGE_OPEN, forced_header};
use serde_json::Value;
use std::collections::HashMap;

pub fn chat(
    text: &ModelText,
    config: &ServeConfig,
    metrics: &Metrics,
    req: ChatRequest,
) -> Result<Admitted, ApiError> {
    if req.common.stop.is_some() {
        return Err(ApiError::invalid_param(
            "stop",
            "stop sequences with a harmony model (gpt-oss) are not served: its output is split by channel, and a stop sequence would be matched across them",
        ));
    }
    let markers = markers(text)?;
    let tools = tools::parse(
        req.common.tools.as_ref(),
        req.common.tool_choice.as_ref(),
        None,
    )?;
    // With `tool_choice` `none` the tools are still described, as OpenAI does; no call is.
    let none = req.common.tool_choice.as_ref().is_some_and(|c| c == "none");
    let described = match none {
        true => tools::parse(req.common.tools.as_ref(), None, None)?,
        false => tools.clone(),
    };
    if let Some(t) = &described {
        check_names(t)?;
    }
    let turns = conversation(&req, described.as_ref())?;
    let calls_allowed: Vec<String> = tools
        .iter()
        .flat_map(|t| t.allowed().map(|tool| tool.name.clone()))
        .collect();
    let Some(renderer) = text.harmony_renderer() else {
        return Err(ApiError::internal("the harmony renderer is missing"));
    };
    let prompt = renderer
        .for_completion(&turns, Role::Assistant, true)
        .map_err(|e| ApiError::invalid_param("messages", e.to_string()))?;
    let budget = req
        .common
        .reasoning_budget
        .map(|b| usize::try_from(b).unwrap_or(usize::MAX));
    let (scope, call) = match tools {
        None => (after(FINAL_HEADER, budget), None),
        Some(t) if t.choice == Choice::Auto => {
            if budget.is_some() {
                return Err(ApiError::invalid_param(
                    "reasoning_budget",
                    "reasoning_budget with tools the model may or may not call (tool_choice auto) is not served for a harmony model: there is no one header to force",
                ));
            }
            let open = COMMENTARY.to_string();
            (Scope::Each { open }, Some(Spec::HarmonyCall(t)))
        }
        Some(t) => (after(COMMENTARY, budget), Some(Spec::HarmonyCall(t))),
    };
    let answer = call.is_none();
    let endpoint = Endpoint {
        chat: true,
        tool_call: call,
        scope,
    };
    let mut p = admit(
        text,
        config,
        metrics,
        Input::Text(prompt),
        req.common,
        endpoint,
    )?;
    p.trim_answer = answer && p.decoder.is_constrained();
    p.harmony = Some(markers);
    p.calls_allowed = Some(calls_allowed);
    Ok(p)
}

/// The grammar after `header`, which a spent budget or an early end forces
/// ([`forced_header`]).
fn after(header: &str, budget: Option<usize>) -> Scope {
    let (in_body, otherwise) = forced_header(header);
    Scope::After {
        trigger: header.into(),
        budget,
        forced: Some(Forced {
            after: MESSAGE_OPEN.into(),
            in_body,
            otherwise,
        }),
    }
}

/// The model's ids of harmony's control tokens.
fn markers(text: &ModelText) -> Result<HarmonyMarkers, ApiError> {
    let vocab = text.space().vocab();
    HarmonyMarkers::find(|name| vocab.token_by_text(name).map(|t| t.0))
        .ok_or_else(|| ApiError::internal("the harmony model lacks a harmony control token"))
}

/// A tool's name is written in a harmony header (`to=functions.NAME`), where only OpenAI's
/// function-name characters keep it one word.
fn check_names(t: &Tools) -> Result<(), ApiError> {
    for tool in &t.tools {
        let ok = tool.name.len() <= 64
            && tool
                .name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !ok {
            return Err(ApiError::invalid_param(
                "tools",
                format!(
                    "tool name {:?}: a harmony model's tool names are 1 to 64 of a-z, A-Z, 0-9, _ and -",
                    tool.name
                ),
            ));
        }
    }
    Ok(())
}

/// The request's messages as harmony messages (see the module docs).
fn conversation(req: &ChatRequest, tools: Option<&Tools>) -> Result<Vec<Turn>, ApiError> {
    let effort = match req.reasoning_effort.as_deref() {
        None | Some("medium") => ReasoningEffort::Medium,
        Some("low") => ReasoningEffort::Low,
        Some("high") => ReasoningEffort::High,
        Some(other) => {
            return Err(ApiError::invalid_param(
                "reasoning_effort",
                format!("reasoning_effort {other:?}: low, medium or high"),
            ));
        }
    };
    let system = SystemContent {
        reasoning_effort: Some(effort),
        ..SystemContent::default()
    };
    let mut turns = vec![Turn {
        content: vec![Part::SystemContent(system)],
        ..Turn::text(Role::System, "")
    }];
    let mut instructions: Vec<String> = Vec::new();
    // The function each earlier call named, by its id: a tool message names its call.
    let mut called: HashMap<String, String> = HashMap::new();
    for (i, m) in req.messages.iter().enumerate() {
        let at = |e: &str| ApiError::invalid_param("messages", format!("messages[{i}]: {e}"));
        let content = message_text(i, m)?;
        let named = |t: Turn| match &m.name {
            Some(n) => t.with_name(n.clone()),
            None => t,
        };
        match m.role.as_str() {
            "system" | "developer" => {
                if m.name.is_some() {
                    return Err(at(
                        "`name` on a system or developer message: a harmony model's instructions have no author name",
                    ));
                }
                instructions.push(content);
            }
            "user" => turns.push(named(Turn::text(Role::User, content))),
            "assistant" => {
                if let Some(r) = m.reasoning_content.as_ref().filter(|r| !r.is_empty()) {
                    turns.push(named(
                        Turn::text(Role::Assistant, r.clone()).with_channel("analysis"),
                    ));
                }
                let calls = m.tool_calls.as_deref().unwrap_or_default();
                if calls.is_empty() {
                    turns.push(named(
                        Turn::text(Role::Assistant, content).with_channel("final"),
                    ));
                    continue;
                }
                if !content.is_empty() {
                    // Text beside calls is what the model said before them: a preamble.
                    turns.push(named(
                        Turn::text(Role::Assistant, content).with_channel("commentary"),
                    ));
                }
                for (k, call) in calls.iter().enumerate() {
                    let (name, args) = call_parts(call)
                        .ok_or_else(|| at(&format!("tool_calls[{k}] has no function name")))?;
                    if let Some(id) = call["id"].as_str() {
                        called.insert(id.to_string(), name.clone());
                    }
                    turns.push(named(
                        Turn::text(Role::Assistant, args)
                            .with_channel("commentary")
                            .with_recipient(format!("functions.{name}"))
                            .with_content_type("<|constrain|>json"),
                    ));
                }
            }
            "tool" => {
                let name = match (&m.tool_call_id, &m.name) {
                    (Some(id), _) if called.contains_key(id) => called[id].clone(),
                    (_, Some(n)) => n.clone(),
                    (Some(id), None) => {
                        return Err(at(&format!(
                            "tool_call_id {id:?} answers no earlier call, and the message has no `name`"
                        )));
                    }
                    (None, None) => {
                        return Err(at("a tool message needs `tool_call_id` (or `name`)"));
                    }
                };
                turns.push(
                    Turn::text(Role::Tool, content)
                        .with_name(format!("functions.{name}"))
                        .with_recipient("assistant")
                        .with_channel("commentary"),
                );
            }
            other => {
                return Err(at(&format!(
                    "role {other:?}: system, developer, user, assistant or tool"
                )));
            }
        }
    }
    let tools: Vec<ToolDescription> = tools.map(descriptions).unwrap_or_default();
    if !instructions.is_empty() || !tools.is_empty() {
        let mut developer = DeveloperContent {
            instructions: (!instructions.is_empty()).then(|| instructions.join("\n\n")),
            tools: None,
        };
        if !tools.is_empty() {
            developer = developer.with_function_tools(tools);
        }
        turns.insert(
            1,
            Turn {
                content: vec![Part::DeveloperContent(developer)],
                ..Turn::text(Role::Developer, "")
            },
        );
    }
    Ok(turns)
}

/// An earlier call's function name and arguments (as text).
fn call_parts(call: &Value) -> Option<(String, String)> {
    let f = &call["function"];
    let name = f["name"].as_str().filter(|n| !n.is_empty())?.to_string();
    let args = match &f["arguments"] {
        Value::String(s) => s.clone(),
        Value::Null => "{}".to_string(),
        v => v.to_string(),
    };
    Some((name, args))
}

/// The request's tools as harmony describes them (descriptions from the request).
fn descriptions(t: &Tools) -> Vec<ToolDescription> {
    let listed = t.list.as_array().map(Vec::as_slice).unwrap_or_default();
    t.tools
        .iter()
        .zip(listed)
        .map(|(tool, given)| {
            let f = given.get("function").unwrap_or(given);
            ToolDescription {
                name: tool.name.clone(),
                description: f["description"].as_str().unwrap_or_default().to_string(),
                parameters: Some(tool.parameters.clone()),
            }
        })
        .collect()
}
