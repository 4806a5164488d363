//! Tool calls: OpenAI's `tools` and `tool_choice` turned into a prompt, a constraint and a
//! scope, in the model's tool-call format (a [`Format`] of corral-split, found in the chat
//! template; hermes' `<tool_call>{"name", "arguments"}</tool_call>` when the template names
//! none).
//!
//! - `auto`: free text until the model opens a call; the call's body then follows the
//!   schema `{"name": one of the tools, "arguments": its parameters}` (the engine's
//!   [`Scope::Each`]), and text is free again after it.
//! - `required` or a named function: the prompt ends with the opening marker, and the
//!   output is one call's body from its first token ([`Scope::Whole`]).
//! - `none`: the tools are left out.

use crate::error::ApiError;
use corral_engine::Scope;
use corral_grammar::Span;
use corral_grammar::ast::{Expr, ExprKind, RuleAst, TokenAst, TokenTarget};
use corral_schema::JsonSchemaOptions;
use corral_split::{BodyKind, Format, RegionKind};
use serde_json::{Value, json};

/// One function the model may call.
#[derive(Clone, Debug)]
pub struct Tool {
    /// The function's name (not empty).
    pub name: String,
    /// The JSON Schema of its arguments; `{"type": "object"}` when the request gives none.
    pub parameters: Value,
}

/// A request's `tool_choice`, apart from `none`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Choice {
    /// The model may call a tool or answer in text (the default).
    Auto,
    /// The output is one call, to any of the tools.
    Required,
    /// The output is one call, to this function.
    Named(String),
}

/// A request's tools, ready to use.
#[derive(Clone, Debug)]
pub struct Tools {
    /// The tools as the request gave them (for templates that describe tools).
    pub list: Value,
    /// The tools parsed, in the request's order; names are unique.
    pub tools: Vec<Tool>,
    /// What `tool_choice` asked for (`none` leaves no [`Tools`] at all).
    pub choice: Choice,
    /// The model's tool-call format, found from its chat template's markers (hermes when
    /// none is found).
    pub format: Format,
}

/// The request's tools, or `None` when it has none or `tool_choice` is `none`.
pub fn parse(
    tools: Option<&Vec<Value>>,
    choice: Option<&Value>,
    template: Option<&str>,
) -> Result<Option<Tools>, ApiError> {
    let bad = |m: String| ApiError::invalid_param("tools", m);
    let list = tools.cloned().unwrap_or_default();
    let choice = match choice {
        None => Choice::Auto,
        Some(Value::String(s)) => match s.as_str() {
            "none" => return Ok(None),
            "auto" => Choice::Auto,
            "required" => Choice::Required,
            other => {
                return Err(ApiError::invalid_param(
                    "tool_choice",
                    format!("tool_choice {other:?}: expected none, auto, required or a function"),
                ));
            }
        },
        Some(v) => match v["function"]["name"].as_str() {
            Some(name) => Choice::Named(name.to_string()),
            None => {
                return Err(ApiError::invalid_param(
                    "tool_choice",
                    "tool_choice: expected {\"type\": \"function\", \"function\": {\"name\": ...}}",
                ));
            }
        },
    };
    if list.is_empty() {
        return match choice {
            Choice::Auto => Ok(None),
            _ => Err(ApiError::invalid_param(
                "tool_choice",
                "tool_choice asks for a call, but the request has no tools",
            )),
        };
    }
    let mut parsed = Vec::with_capacity(list.len());
    for (i, t) in list.iter().enumerate() {
        if t.get("type").is_some_and(|k| k != "function") {
            return Err(bad(format!("tools[{i}]: only function tools are served")));
        }
        let f = t.get("function").unwrap_or(t);
        let name = f["name"]
            .as_str()
            .filter(|n| !n.is_empty())
            .ok_or_else(|| bad(format!("tools[{i}] has no function name")))?;
        if parsed.iter().any(|p: &Tool| p.name == name) {
            return Err(bad(format!("tools[{i}]: {name:?} is listed twice")));
        }
        let parameters = match f.get("parameters") {
            None | Some(Value::Null) => json!({"type": "object"}),
            Some(p) => p.clone(),
        };
        parsed.push(Tool {
            name: name.to_string(),
            parameters,
        });
    }
    if let Choice::Named(n) = &choice
        && !parsed.iter().any(|t| &t.name == n)
    {
        return Err(ApiError::invalid_param(
            "tool_choice",
            format!("tool_choice names {n:?}, which is not in tools"),
        ));
    }
    let format = format_of(template.unwrap_or(""));
    if body(&format).is_none() {
        return Err(bad(format!(
            "tool calls in the {} format are not served",
            format.name
        )));
    }
    Ok(Some(Tools {
        list: Value::Array(list),
        tools: parsed,
        choice,
        format,
    }))
}

/// The model's tool-call format, from its chat template's markers.
fn format_of(template: &str) -> Format {
    if template.contains("<|python_tag|>") {
        Format::llama3()
    } else if template.contains("[TOOL_CALLS]") {
        Format::mistral()
    } else if template.contains("<function=") {
        Format::qwen3_coder()
    } else {
        Format::hermes()
    }
}

/// The tool-call region's opening marker and JSON body shape.
fn body(format: &Format) -> Option<(&str, &BodyKind)> {
    format.regions.iter().find_map(|r| match &r.kind {
        RegionKind::ToolCall(b @ (BodyKind::JsonObject { .. } | BodyKind::JsonArray { .. })) => {
            Some((r.open.as_str(), b))
        }
        _ => None,
    })
}

impl Tools {
    /// Whether the chat template describes the tools itself (it reads `tools`).
    pub fn template_describes(template: Option<&str>) -> bool {
        template.is_some_and(|t| t.contains("tools"))
    }

    /// A system message describing the tools and how to call them, for templates that do
    /// not.
    pub fn instructions(&self) -> String {
        let (open, _) = body(&self.format).expect("checked in parse");
        let close = self
            .format
            .regions
            .iter()
            .find(|r| r.open == open)
            .and_then(|r| r.close.clone())
            .unwrap_or_default();
        let sigs: Vec<String> = self
            .tools
            .iter()
            .map(|t| {
                let f = self
                    .list
                    .as_array()
                    .and_then(|l| {
                        l.iter()
                            .find(|x| x.get("function").unwrap_or(x)["name"] == t.name.as_str())
                    })
                    .cloned()
                    .unwrap_or(Value::Null);
                f.get("function").unwrap_or(&f).to_string()
            })
            .collect();
        format!(
            "You may call functions. Their signatures are within <tools></tools>:\n<tools>\n{}\n</tools>\nTo call one, reply with {open}{{\"name\": <function name>, \"arguments\": <arguments as a JSON object>}}{close}",
            sigs.join("\n")
        )
    }

    /// The schema of one call's body: the name of an allowed tool, and its arguments.
    pub fn call_schema(&self) -> Value {
        let (_, kind) = body(&self.format).expect("checked in parse");
        let (name_key, args_key) = match kind {
            BodyKind::JsonObject {
                name_key,
                args_keys,
            }
            | BodyKind::JsonArray {
                name_key,
                args_keys,
            } => (name_key.as_str(), args_keys[0].as_str()),
            BodyKind::QwenXml => unreachable!("refused in parse"),
        };
        let calls: Vec<Value> = self
            .tools
            .iter()
            .filter(|t| match &self.choice {
                Choice::Named(n) => &t.name == n,
                _ => true,
            })
            .map(|t| {
                json!({
                    "type": "object",
                    "properties": {name_key: {"const": t.name}, args_key: t.parameters},
                    "required": [name_key, args_key],
                    "additionalProperties": false,
                })
            })
            .collect();
        let one = if calls.len() == 1 {
            calls.into_iter().next().unwrap_or_default()
        } else {
            json!({"anyOf": calls})
        };
        match kind {
            BodyKind::JsonArray { .. } => json!({"type": "array", "items": one, "minItems": 1}),
            _ => one,
        }
    }

    /// Where the call grammar applies, and what the prompt ends with.
    pub fn scope(&self) -> (Scope, String) {
        let (open, _) = body(&self.format).expect("checked in parse");
        match self.choice {
            Choice::Auto => (
                Scope::Each {
                    open: open.to_string(),
                },
                String::new(),
            ),
            Choice::Required | Choice::Named(_) => (Scope::Whole, open.to_string()),
        }
    }
}

impl Tools {
    /// What identifies the call grammar of [`Tools::harmony_call`] (its cache key).
    pub fn key(&self) -> String {
        let tools: Vec<Value> = self
            .allowed()
            .map(|t| json!([t.name, t.parameters]))
            .collect();
        Value::Array(tools).to_string()
    }

    /// The tools a call may name (`tool_choice` naming one: that one).
    pub fn allowed(&self) -> impl Iterator<Item = &Tool> {
        self.tools.iter().filter(|t| match &self.choice {
            Choice::Named(n) => &t.name == n,
            _ => true,
        })
    }

    /// A harmony tool call (gpt-oss), from where its commentary header names the recipient
    /// ([`corral_split::COMMENTARY`]): `to=functions.NAME <|constrain|>json<|message|>`, the
    /// arguments under that tool's parameter schema, and `<|call|>`, which ends the output.
    /// Control tokens are token references; each tool's schema rules are prefixed with
    /// `tN-` to keep them apart.
    pub fn harmony_call(&self, opts: &JsonSchemaOptions) -> Result<Vec<RuleAst>, String> {
        let lit = |s: &str| Expr::built(ExprKind::Literal(s.chars().collect()));
        let token = |name: &str| {
            Expr::built(ExprKind::Token(TokenAst {
                negated: false,
                target: TokenTarget::Text(name.to_string()),
            }))
        };
        let mut rules = Vec::new();
        let mut calls = Vec::new();
        for (i, t) in self.allowed().enumerate() {
            let schema = corral_schema::compile_json_schema_value(&t.parameters, opts)
                .map_err(|e| format!("tool {:?}: {e}", t.name))?;
            let prefix = format!("t{i}-");
            rules.extend(schema.rules.iter().map(|r| prefixed(r, &prefix)));
            calls.push(Expr::built(ExprKind::Seq(vec![
                lit(&t.name),
                lit(" "),
                token("<|constrain|>"),
                lit("json"),
                token("<|message|>"),
                Expr::built(ExprKind::RuleRef(format!("{prefix}root"))),
            ])));
        }
        let calls = match calls.len() {
            1 => calls.pop().expect("one"),
            _ => Expr::built(ExprKind::Alt(calls)),
        };
        let body = Expr::built(ExprKind::Seq(vec![
            lit("to=functions."),
            Expr::built(ExprKind::Group(Box::new(calls))),
            token("<|call|>"),
        ]));
        rules.insert(
            0,
            RuleAst {
                name: "root".into(),
                name_span: Span::default(),
                body,
            },
        );
        Ok(rules)
    }
}

/// `rule` with `prefix` before its name and every rule it refers to.
fn prefixed(rule: &RuleAst, prefix: &str) -> RuleAst {
    fn walk(e: &Expr, prefix: &str) -> Expr {
        let kind = match &e.kind {
            ExprKind::RuleRef(n) => ExprKind::RuleRef(format!("{prefix}{n}")),
            ExprKind::Seq(xs) => ExprKind::Seq(xs.iter().map(|x| walk(x, prefix)).collect()),
            ExprKind::Alt(xs) => ExprKind::Alt(xs.iter().map(|x| walk(x, prefix)).collect()),
            ExprKind::And(xs) => ExprKind::And(xs.iter().map(|x| walk(x, prefix)).collect()),
            ExprKind::Repeat { inner, min, max } => ExprKind::Repeat {
                inner: Box::new(walk(inner, prefix)),
                min: *min,
                max: *max,
            },
            ExprKind::Group(inner) => ExprKind::Group(Box::new(walk(inner, prefix))),
            ExprKind::Not(inner) => ExprKind::Not(Box::new(walk(inner, prefix))),
            k => k.clone(),
        };
        Expr {
            kind,
            span: e.span,
            depth: e.depth,
        }
    }
    RuleAst {
        name: format!("{prefix}{}", rule.name),
        name_span: rule.name_span,
        body: walk(&rule.body, prefix),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tools() -> Vec<Value> {
        vec![
            json!({"type": "function", "function": {"name": "weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}),
            json!({"type": "function", "function": {"name": "time"}}),
        ]
    }

    #[test]
    fn choices_and_their_scopes() {
        let t = parse(Some(&tools()), None, None).unwrap().unwrap();
        assert_eq!(t.choice, Choice::Auto);
        assert_eq!(
            t.scope(),
            (
                Scope::Each {
                    open: "<tool_call>".into()
                },
                String::new()
            )
        );
        assert_eq!(
            t.call_schema()["anyOf"].as_array().map(|a| a.len()),
            Some(2)
        );
        let named = json!({"type": "function", "function": {"name": "time"}});
        let t = parse(Some(&tools()), Some(&named), None).unwrap().unwrap();
        assert_eq!(t.scope(), (Scope::Whole, "<tool_call>".into()));
        assert_eq!(t.call_schema()["properties"]["name"]["const"], "time");
        assert!(
            parse(Some(&tools()), Some(&json!("none")), None)
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn bad_tools_are_refused_with_the_parameter_named() {
        let unknown = json!({"type": "function", "function": {"name": "nope"}});
        for (tools, choice) in [
            (tools(), Some(unknown)),
            (vec![], Some(json!("required"))),
            (vec![json!({"type": "function", "function": {}})], None),
            (tools(), Some(json!("sometimes"))),
        ] {
            let e = parse(Some(&tools), choice.as_ref(), None).unwrap_err();
            assert!(e.param.is_some(), "{e:?}");
        }
    }

    #[test]
    fn the_format_comes_from_the_template() {
        let t = parse(Some(&tools()), None, Some("{{ '<|python_tag|>' }}"))
            .unwrap()
            .unwrap();
        assert_eq!(t.format.name, "llama3");
        assert_eq!(t.call_schema()["anyOf"][0]["required"][1], "parameters");
    }
}
