//! A request turned into what the scheduler runs: the prompt's tokens (the chat template
//! applied), the constraint (from the model's constraint cache, compiled on a miss), and a
//! [`Decoder`] with the request's sampling and budget. Everything that can be refused is
//! refused here, before the request takes a place in the queue.

use crate::api::{ChatRequest, Common, CompletionRequest, PromptInput};
use crate::error::ApiError;
use crate::fields::{check_model, logprobs, refuse_unserved, sampler, sampling};
use crate::metrics::Metrics;
use crate::structured::{constraint, spec};
use crate::tools::{self, Tools};
use crate::{Reasoning, ServeConfig};
use corral_engine::{Decoder, GenerateError, GenerateOptions, ModelError, Scope};
use corral_models::Message;
use corral_models::ModelText;
use corral_models::Prompt;
use corral_split::{Format, HarmonyMarkers};
use corral_trie::TokenId;
use serde_json::Value;
use std::time::Instant;

/// The reasoning block's markers (the hermes family's, as Qwen3 and DeepSeek-R1 write them).
const THINK_OPEN: &str = "<think>";
const THINK_CLOSE: &str = "</think>";

/// A request ready to queue.
pub struct Admitted {
    /// The generation's state: sampling, constraint, budget.
    pub decoder: Decoder,
    /// The prompt's tokens, all of which the model runs before the first output token.
    pub prompt: Vec<TokenId>,
    /// The output is split into content, reasoning and tool calls in this format (chat
    /// requests with tools); `prefix` is what the prompt already opened (a call's marker).
    pub format: Option<Format>,
    /// Output the prompt already wrote: a tool call's opening marker when `tool_choice`
    /// forces a call; empty otherwise.
    pub prefix: String,
    /// Stop sequences: only for unconstrained output (a constrained one ends where its
    /// grammar does, never cut short by a stop sequence).
    pub stops: Vec<String>,
    /// The answer streams as server-sent events (`stream: true`).
    pub stream: bool,
    /// A stream ends with a chunk carrying the token counts (`stream_options.include_usage`).
    pub include_usage: bool,
    /// Whitespace before the answer's first character is not content (a constrained answer
    /// after reasoning).
    pub trim_answer: bool,
    /// Log-probabilities are returned, with this many of the likeliest tokens each.
    pub logprobs: Option<usize>,
    /// `parallel_tool_calls: false`: the output ends after its first tool call.
    pub single_call: bool,
    /// The output is a harmony stream (gpt-oss) with these control tokens, split by
    /// channel.
    pub harmony: Option<HarmonyMarkers>,
    /// The functions a tool call may name, where the output's format can name others
    /// (harmony: any recipient); `None`: the format's grammar or syntax decides.
    pub calls_allowed: Option<Vec<String>>,
}

impl std::fmt::Debug for Admitted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admitted")
            .field("prompt_tokens", &self.prompt.len())
            .field("format", &self.format)
            .field("prefix", &self.prefix)
            .field("stops", &self.stops)
            .field("stream", &self.stream)
            .field("include_usage", &self.include_usage)
            .field("trim_answer", &self.trim_answer)
            .field("logprobs", &self.logprobs)
            .field("single_call", &self.single_call)
            .field("harmony", &self.harmony)
            .field("calls_allowed", &self.calls_allowed)
            .finish_non_exhaustive()
    }
}

/// What the output must match.
#[derive(Debug)]
pub(crate) enum Spec {
    Schema(Value),
    /// A harmony tool call to one of these tools ([`Tools::harmony_call`]).
    HarmonyCall(Tools),
    Gbnf(String),
    Regex(String),
    Choice(Vec<String>),
}

/// Admits a `/v1/chat/completions` request: checks its fields, applies the chat template
/// (tool instructions and the reasoning block included), and makes the decoder; a harmony
/// model's request goes to its own path. An error is the request's (mostly a 400 naming the
/// field at fault).
pub fn chat(
    text: &ModelText,
    config: &ServeConfig,
    metrics: &Metrics,
    req: ChatRequest,
) -> Result<Admitted, ApiError> {
    check_model(req.model.as_deref(), config)?;
    if req.common.parse_special {
        return Err(ApiError::invalid_param(
            "parse_special",
            "parse_special applies to /v1/completions: chat messages are always text",
        ));
    }
    if req.messages.is_empty() {
        return Err(ApiError::invalid_param(
            "messages",
            "messages must hold at least one message",
        ));
    }
    if text.is_harmony() {
        return crate::harmony::chat(text, config, metrics, req);
    }
    if req.reasoning_effort.is_some() {
        return Err(ApiError::invalid_param(
            "reasoning_effort",
            "reasoning effort applies to harmony models (gpt-oss); this model takes `reasoning_budget` (tokens)",
        ));
    }
    let template = text.chat_template().map(|t| t.source());
    let tools = tools::parse(
        req.common.tools.as_ref(),
        req.common.tool_choice.as_ref(),
        template,
    )?;
    let describes = Tools::template_describes(template);
    let messages = chat_messages(&req, template, tools.as_ref().filter(|_| !describes))?;
    let listed = tools.as_ref().filter(|_| describes).map(|t| &t.list);
    // The messages' text stays text: a special token's name in it is not a control token.
    let mut prompt = text
        .chat_prompt(&messages, listed)
        .map_err(|e| ApiError::invalid_param("messages", format!("chat template: {e:#}")))?;
    let (mut scope, prefix, mut format, call) = match &tools {
        Some(t) => {
            let (scope, prefix) = t.scope();
            (scope, prefix, Some(t.format.clone()), Some(t.call_schema()))
        }
        None => (Scope::Whole, String::new(), None, None),
    };
    let reasoning = match config.reasoning {
        Reasoning::Auto => template.is_some_and(|t| t.contains(THINK_CLOSE)),
        Reasoning::Think => true,
        Reasoning::Off => false,
    };
    if reasoning {
        let budget = req.common.reasoning_budget;
        open_reasoning(&mut prompt, &prefix, budget, &mut scope, &mut format);
    }
    prompt.push_trusted(&prefix);
    let after_reasoning = matches!(scope, Scope::After { .. });
    let endpoint = Endpoint {
        chat: true,
        tool_call: call.map(Spec::Schema),
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
    p.trim_answer = after_reasoning && p.decoder.is_constrained();
    p.format = format;
    p.prefix = prefix;
    Ok(p)
}

/// The request's messages as the chat template takes them: roles checked, earlier tool
/// calls written back as the model wrote them, and `instructions` (tools the template does
/// not describe itself) put into the system message.
fn chat_messages(
    req: &ChatRequest,
    template: Option<&str>,
    instructions: Option<&Tools>,
) -> Result<Vec<Message>, ApiError> {
    let mut messages = Vec::with_capacity(req.messages.len() + 1);
    for (i, m) in req.messages.iter().enumerate() {
        let role = role(&m.role, template)
            .map_err(|e| ApiError::invalid_param("messages", format!("messages[{i}]: {e}")))?;
        let mut content = message_text(i, m)?;
        // Earlier calls go back into the text as the model wrote them.
        for call in m.tool_calls.iter().flatten() {
            let f = &call["function"];
            let args = match &f["arguments"] {
                Value::String(s) => s.clone(),
                v => v.to_string(),
            };
            content.push_str(&format!(
                "<tool_call>\n{{\"name\": {}, \"arguments\": {args}}}\n</tool_call>",
                f["name"]
            ));
        }
        messages.push(Message {
            name: m.name.clone(),
            tool_call_id: m.tool_call_id.clone(),
            reasoning_content: m.reasoning_content.clone(),
            ..Message::new(role, &content)
        });
    }
    if let Some(t) = instructions {
        let text = t.instructions();
        match messages.first_mut() {
            Some(m) if m.role == "system" => m.content = format!("{}\n\n{text}", m.content),
            _ => messages.insert(0, Message::new("system", &text)),
        }
    }
    Ok(messages)
}

/// Opens the reasoning block at the end of `prompt` for a model that thinks. Without a
/// tool-call `prefix` the output starts inside the block: the grammar (if any) applies
/// after it (`scope`, with the request's `budget` in tokens), and the splitter sends what
/// comes before as reasoning (`format`). With one, the call starts at the first token, so
/// the block is closed empty first.
fn open_reasoning(
    prompt: &mut Prompt,
    prefix: &str,
    budget: Option<u64>,
    scope: &mut Scope,
    format: &mut Option<Format>,
) {
    if !prompt.escaped_text().trim_end().ends_with(THINK_OPEN) {
        prompt.push_trusted(THINK_OPEN);
        if prefix.is_empty() {
            prompt.push_trusted("\n");
        }
    }
    if !prefix.is_empty() {
        prompt.push_trusted(&format!("\n{THINK_CLOSE}\n\n"));
        return;
    }
    if *scope == Scope::Whole {
        *scope = Scope::After {
            trigger: THINK_CLOSE.into(),
            budget: budget.map(|b| usize::try_from(b).unwrap_or(usize::MAX)),
            forced: None,
        };
    }
    *format = Some(format.take().unwrap_or_else(Format::hermes).prefilled(true));
}

/// A message's text: its content, or an assistant's earlier refusal (what it said).
pub(crate) fn message_text(i: usize, m: &crate::api::ChatMessage) -> Result<String, ApiError> {
    match (&m.content, &m.refusal) {
        (Some(c), _) => c
            .text()
            .map_err(|e| ApiError::invalid_param("messages", format!("messages[{i}]: {e}"))),
        (None, Some(r)) => Ok(r.clone()),
        (None, None) => Ok(String::new()),
    }
}

/// Admits a `/v1/completions` request: one prompt, as text or token ids, without tools.
/// An error is the request's (mostly a 400 naming the field at fault).
pub fn completion(
    text: &ModelText,
    config: &ServeConfig,
    metrics: &Metrics,
    req: CompletionRequest,
) -> Result<Admitted, ApiError> {
    check_model(req.model.as_deref(), config)?;
    // Even an empty list: a field is honoured or refused, and this endpoint has no tools.
    for (field, given) in [
        ("tools", req.common.tools.is_some()),
        ("tool_choice", req.common.tool_choice.is_some()),
    ] {
        if given {
            return Err(ApiError::invalid_param(
                field,
                format!("{field} is served by /v1/chat/completions, not /v1/completions"),
            ));
        }
    }
    let one = |n: usize| {
        ApiError::invalid_param(
            "prompt",
            format!("one prompt per request is served ({n} given)"),
        )
    };
    // A text prompt is user text: special tokens' names in it stay text, unless the
    // request asks for them to be parsed (`parse_special`). Token ids are taken as given.
    let text_prompt = |s: &str| match req.common.parse_special {
        true => Prompt::trusted(s),
        false => text.user_prompt(s),
    };
    let input = match req.prompt {
        PromptInput::One(s) => Input::Text(text_prompt(&s)),
        PromptInput::Many(v) if v.len() == 1 => Input::Text(text_prompt(&v[0])),
        PromptInput::Many(v) => return Err(one(v.len())),
        PromptInput::Ids(ids) => Input::Ids(token_ids(text, ids)?),
        PromptInput::ManyIds(mut v) if v.len() == 1 => Input::Ids(token_ids(text, v.remove(0))?),
        PromptInput::ManyIds(v) => return Err(one(v.len())),
    };
    let endpoint = Endpoint {
        chat: false,
        tool_call: None,
        scope: Scope::Whole,
    };
    admit(text, config, metrics, input, req.common, endpoint)
        .map_err(|e| e.for_param("messages", "prompt"))
}

/// A prompt as given: text (the chat template applied, or a completion's), or token ids.
pub(crate) enum Input {
    Text(Prompt),
    Ids(Vec<TokenId>),
}

/// A completion's prompt of token ids, each one of the model's (any token: the client
/// names control tokens by id on purpose).
fn token_ids(text: &ModelText, ids: Vec<u64>) -> Result<Vec<TokenId>, ApiError> {
    let width = text.space().vocab().len();
    if ids.is_empty() {
        return Err(ApiError::invalid_param(
            "prompt",
            "the prompt has no tokens",
        ));
    }
    ids.into_iter()
        .map(|id| match u32::try_from(id) {
            Ok(t) if (t as usize) < width => Ok(TokenId(t)),
            _ => Err(ApiError::invalid_param(
                "prompt",
                format!("token id {id} is not one of the model's {width} tokens"),
            )),
        })
        .collect()
}

/// What the endpoint adds to a request's common fields: the chat endpoint (true), its tool
/// call's schema, and where the constraint applies.
pub(crate) struct Endpoint {
    pub chat: bool,
    pub tool_call: Option<Spec>,
    pub scope: Scope,
}

pub(crate) fn admit(
    text: &ModelText,
    config: &ServeConfig,
    metrics: &Metrics,
    input: Input,
    c: Common,
    endpoint: Endpoint,
) -> Result<Admitted, ApiError> {
    let Endpoint {
        chat,
        tool_call,
        scope,
    } = endpoint;
    if let Some(n) = c.n.filter(|&n| n != 1) {
        return Err(ApiError::invalid_param(
            "n",
            format!("n is {n}: one choice per request is served"),
        ));
    }
    let (budget_field, requested) = requested_budget(&c)?;
    refuse_unserved(&c)?;
    let logprobs = logprobs(&c, chat)?;
    let mut sampling = sampling(&c, text.space().vocab().len())?;
    sampling.method = sampler(&c, config.max_concurrent, logprobs)?;
    if let Input::Text(p) = &input {
        check_prompt_bytes(text, p.len())?;
    }
    let spec = match (spec(&c)?, tool_call) {
        (None, call) => call.map(|c| ("tools", c)),
        (Some(s), None) => Some(s),
        (Some((param, _)), Some(_)) => {
            return Err(ApiError::invalid_param(
                param,
                "a request with tools takes no other constraint",
            ));
        }
    };
    let constrained_by = spec.as_ref().map(|(param, _)| *param);
    let cache = text.constraints();
    // What earlier generations grew (DFAs built on demand) is counted again here.
    cache.trim();
    let (constraint, compiled) = match spec {
        Some((param, spec)) => {
            let t = Instant::now();
            let r = constraint(cache, param, spec);
            Metrics::add(&metrics.compiles, 1);
            Metrics::add(&metrics.compile_us, t.elapsed().as_micros() as u64);
            let (c, key) = r?;
            (Some(c), key)
        }
        None => (None, None),
    };
    let ids = match input {
        Input::Text(p) => text
            .encode_prompt(&p)
            .map_err(|e| ApiError::invalid(format!("{e:#}")))?,
        Input::Ids(ids) => ids,
    };
    // Without max_tokens: the default, or what the context leaves after the prompt (a
    // prompt that leaves nothing is refused by the decoder as too long).
    let room = text.max_positions().saturating_sub(ids.len() + 1);
    let max_tokens = requested.unwrap_or(config.default_max_tokens.min(room));
    let options = GenerateOptions {
        max_tokens,
        sampling,
        jump_forward: true,
        overlap_mask: false,
        ignore_eos: c.ignore_eos,
        complete_within_budget: true,
        scope,
        logprobs,
    };
    let mut decoder = Decoder::new(
        text.space().clone(),
        constraint.clone(),
        &ids,
        text.max_positions(),
        &options,
    )
    .map_err(|e| decoder_error(e, ids.len(), (budget_field, max_tokens), constrained_by))?;
    // The first mask now, on this preparing thread: a grammar that cannot be used (a
    // lexeme whose automaton outgrows its limit once built) is the request's error, a 400
    // naming the field, not a failure of the generation.
    if let Some(param) = constrained_by
        && let Err(e) = decoder.prepare_mask()
    {
        return Err(ApiError::invalid_param(param, format!("{param}: {e}")));
    }
    // Accepted: a newly compiled constraint is kept for the requests after this one (a
    // refused one never is).
    if let (Some(key), Some(c)) = (compiled, constraint) {
        cache.insert(&key, c);
    }
    let stops = c.stop.map(|s| s.into_vec()).unwrap_or_default();
    if decoder.is_constrained() && !stops.is_empty() {
        // Honoured, a stop sequence could cut a constrained output short of its grammar.
        return Err(ApiError::invalid_param(
            "stop",
            "stop sequences do not apply to a constrained output (it ends where its grammar does): drop `stop`, or the constraint",
        ));
    }
    Ok(Admitted {
        decoder,
        prompt: ids,
        format: None,
        prefix: String::new(),
        stops,
        stream: c.stream,
        include_usage: c.stream_options.is_some_and(|o| o.include_usage),
        logprobs,
        single_call: c.parallel_tool_calls == Some(false),
        trim_answer: false,
        harmony: None,
        calls_allowed: None,
    })
}

/// The field that sets the output's budget (errors name the one the client sent) and the
/// budget it asks for, if any; 0 is refused.
fn requested_budget(c: &Common) -> Result<(&'static str, Option<usize>), ApiError> {
    let field = if c.max_completion_tokens.is_some() {
        "max_completion_tokens"
    } else {
        "max_tokens"
    };
    match c.max_completion_tokens.or(c.max_tokens) {
        Some(0) => Err(ApiError::invalid_param(
            field,
            format!("{field} must be at least 1"),
        )),
        Some(n) => Ok((field, Some(usize::try_from(n).unwrap_or(usize::MAX)))),
        None => Ok((field, None)),
    }
}

/// A prompt of more bytes than the context's positions can hold, each token covering at
/// most the longest token's bytes, is refused before it is tokenized (or its constraint
/// compiled): the cost of a refusal does not grow with the prompt.
fn check_prompt_bytes(text: &ModelText, bytes: usize) -> Result<(), ApiError> {
    let longest = text.longest_token_bytes();
    let max = text.max_positions();
    if bytes > max.saturating_mul(longest) {
        return Err(ApiError {
            code: Some("context_length_exceeded"),
            ..ApiError::invalid_param(
                "messages",
                format!(
                    "the prompt has {bytes} bytes: more than the model's context of {max} positions holds (a token is at most {longest} bytes)"
                ),
            )
        });
    }
    Ok(())
}

/// The API error for a decoder refused over a prompt of `prompt` tokens (`budget`: the
/// field that set the budget and its value; `constraint`: the request's constraint field).
fn decoder_error(
    e: GenerateError,
    prompt: usize,
    (budget_field, max_tokens): (&'static str, usize),
    constraint: Option<&'static str>,
) -> ApiError {
    match e {
        GenerateError::Model(ModelError::Context {
            what: "the prompt and max_tokens",
            max,
            ..
        }) => ApiError {
            code: Some("context_length_exceeded"),
            ..ApiError::invalid_param(
                budget_field,
                format!(
                    "the prompt takes {prompt} tokens and the model's context is {max} positions: \
                     {budget_field} may be at most {}, not {max_tokens}",
                    max.saturating_sub(prompt + 1)
                ),
            )
        },
        GenerateError::Model(ModelError::Context { needed, max, .. }) => ApiError {
            code: Some("context_length_exceeded"),
            ..ApiError::invalid_param(
                "messages",
                format!(
                    "the prompt takes {} tokens; the model's context is {max} positions, and the output needs at least one",
                    needed - 1
                ),
            )
        },
        GenerateError::Sampling(s) => ApiError::invalid_param(s.name, s.to_string()),
        e @ GenerateError::EmptyPrompt => ApiError::invalid_param("messages", e.to_string()),
        e @ GenerateError::BudgetTooSmall { .. } => {
            ApiError::invalid_param(budget_field, e.to_string())
        }
        e @ (GenerateError::NoCompletion | GenerateError::Constraint(_)) => {
            let param = constraint.unwrap_or("grammar");
            ApiError::invalid_param(param, format!("{param}: {e}"))
        }
        e => ApiError::internal(e.to_string()),
    }
}

/// The chat roles served (OpenAI's); `developer` is `system` for a template that does not
/// name it.
fn role<'a>(role: &'a str, template: Option<&str>) -> Result<&'a str, String> {
    match role {
        "system" | "user" | "assistant" | "tool" => Ok(role),
        "developer" if template.is_some_and(|t| t.contains("developer")) => Ok(role),
        "developer" => Ok("system"),
        other => Err(format!(
            "role {other:?} is not one of system, developer, user, assistant, tool"
        )),
    }
}
