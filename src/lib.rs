//! # corral
//!
//! A grammar-constrained decoding engine. This crate re-exports the public API of the layer
//! crates, adds the one-call entry points, and holds the `corral` command-line tool.
//!
//! - [`grammar`]: GBNF and regex front ends, lexemes, the Earley recognizer (`corral match`).
//! - [`schema`]: JSON Schema -> grammar, validation and retry feedback (`corral schema`).
//! - [`trie`]: token byte strings, the token trie, masks.
//! - [`engine`]: the `RobustConstrainedAdapter`, sampling, the generation loop.
//! - [`split`]: stream splitters, post-processing, the tool-call codec (`corral split`).
//! - [`models`]: candle models (GGUF and safetensors), chat templates.
//! - [`server`]: `corral serve`, the OpenAI-compatible HTTP server.
//!
//! What joins layers lives here: [`scope`] (where a grammar applies, from a splitter's
//! format) and structured output ([`generate_structured`]: the model, the schema's grammar
//! and the validator).
//!
//! ```no_run
//! use corral::{GenerateOptions, Model, DeviceSpec, compile_gbnf, generate_constrained};
//!
//! let mut model = Model::load("assets/models/SmolLM2-135M-Instruct.Q4_1.gguf", DeviceSpec::Cpu)?;
//! let grammar = compile_gbnf(r#"root ::= "yes" | "no""#, &Default::default())?;
//! let out = generate_constrained(&mut model, &grammar, "Is water wet? Answer yes or no.", &GenerateOptions::default())?;
//! assert!(out.text == "yes" || out.text == "no");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub use corral_engine as engine;
pub use corral_grammar as grammar;
pub use corral_models as models;
pub use corral_schema as schema;
pub use corral_server as server;
pub use corral_split as split;
pub use corral_trie as trie;

pub use corral_engine::{
    Constraint, Emit, FinishReason, GenerateOptions, Generation, GenerationStats, SamplingOptions,
    Scope,
};
pub use corral_grammar::{
    CompileOptions, DfaCache, Grammar, GrammarError, Limits, MatchOutcome, Recognizer,
    compile_gbnf, compile_regex, match_bytes,
};
pub use corral_models::{DeviceSpec, Model};
pub use corral_schema::{
    CompiledSchema, JsonSchemaOptions, PropertyOrder, SchemaError, Whitespace, compile_json_schema,
    compile_json_schema_value,
};
pub use structured::{
    Attempt, StructuredError, StructuredOptions, StructuredOutput, extract, generate_json,
    generate_structured, schema_constraint,
};

pub mod scope;
mod structured;

use std::sync::Arc;

/// Errors of the one-call entry points.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A grammar that does not compile (boxed to keep `Error` small).
    #[error(transparent)]
    Grammar(Box<GrammarError>),
    /// A JSON Schema that does not compile (boxed, like `Grammar`).
    #[error(transparent)]
    Schema(Box<SchemaError>),
    /// The model cannot be loaded, or the prompt cannot be rendered or encoded.
    #[error(transparent)]
    Load(#[from] corral_models::LoadError),
    /// Generation failed: the network, the constraint, the sampling options or the budget.
    #[error(transparent)]
    Generate(#[from] corral_engine::GenerateError),
    /// Structured output failed: every attempt rejected, the prompt too long, the schema
    /// unusable for validation, or the value not of the requested type.
    #[error(transparent)]
    Structured(#[from] structured::StructuredError),
}

impl From<GrammarError> for Error {
    fn from(e: GrammarError) -> Error {
        Error::Grammar(Box::new(e))
    }
}

impl From<SchemaError> for Error {
    fn from(e: SchemaError) -> Error {
        Error::Schema(Box::new(e))
    }
}

/// A prompt: the user's message, an optional system message, and whether to skip the chat
/// template (`raw`).
#[derive(Clone, Debug, Default)]
pub struct Prompt {
    /// The user's message; with `raw`, the prompt's text.
    pub user: String,
    /// The system message (a harmony model's developer instructions). Without `raw`, a model
    /// with neither a chat template nor harmony's format leaves it out.
    pub system: Option<String>,
    /// Skip the chat template: the prompt is `system` (if any) and `user` joined by a
    /// newline, trusted (special tokens' names in it are control tokens).
    pub raw: bool,
}

impl From<&str> for Prompt {
    fn from(user: &str) -> Prompt {
        Prompt {
            user: user.into(),
            ..Prompt::default()
        }
    }
}

/// Generates text in `grammar`'s language after `prompt` (chat template applied). The
/// grammar's constraint is kept in the model's [`ModelText::constraints`](corral_models::ModelText::constraints), so calling again
/// with the same `grammar` starts with its mask caches warm.
pub fn generate_constrained(
    model: &mut Model,
    grammar: &Arc<Grammar>,
    prompt: impl Into<Prompt>,
    options: &GenerateOptions,
) -> Result<Generation, Error> {
    generate_streaming(model, Some(grammar), prompt, options, &mut |_| {})
}

/// Like [`generate_constrained`], calling `on_delta` with each piece of text as it decodes;
/// `grammar` may be `None` for unconstrained generation.
pub fn generate_streaming(
    model: &mut Model,
    grammar: Option<&Arc<Grammar>>,
    prompt: impl Into<Prompt>,
    options: &GenerateOptions,
    on_delta: &mut dyn FnMut(&str),
) -> Result<Generation, Error> {
    let constraint = grammar.map(|g| model.constraints().for_grammar(g));
    generate_with(model, constraint.as_ref(), prompt, options, on_delta)
}

/// Generation with a prepared [`Constraint`] (reuse one across calls: it holds the mask
/// caches).
pub fn generate_with(
    model: &mut Model,
    constraint: Option<&Arc<Constraint>>,
    prompt: impl Into<Prompt>,
    options: &GenerateOptions,
    on_delta: &mut dyn FnMut(&str),
) -> Result<Generation, Error> {
    let mut out = |e: Emit<'_>| e.as_text().map_or((), &mut *on_delta);
    generate_emitting(model, constraint, prompt, options, &mut out)
}

/// [`generate_with`], with the output as [`Emit`] pieces: text, and control tokens by id
/// (harmony's channels are control tokens).
pub fn generate_emitting(
    model: &mut Model,
    constraint: Option<&Arc<Constraint>>,
    prompt: impl Into<Prompt>,
    options: &GenerateOptions,
    out: &mut dyn FnMut(Emit<'_>),
) -> Result<Generation, Error> {
    let prompt = prompt.into();
    let text = model.prompt_text(prompt.system.as_deref(), &prompt.user, prompt.raw)?;
    let ids = model.encode_prompt(&text)?;
    let space = model.space().clone();
    Ok(corral_engine::generate_emitting(
        model.lm(),
        &space,
        constraint,
        &ids,
        options,
        out,
    )?)
}
