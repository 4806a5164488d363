//! # corral-schema
//!
//! JSON Schema for corral: a schema (draft 2020-12; draft-07 `definitions`, array-form
//! `items` and draft-04 boolean `exclusiveMinimum` accepted) -> GBNF rules -> the same
//! compiled [`Grammar`] the GBNF front end produces; and, after generation, validation of
//! the value against the whole schema with the feedback a retry needs ([`validate`]).
//!
//! The GBNF is the single source of truth: the rules are built as GBNF expressions and
//! compiled without being written out and parsed again, and `corral schema` prints them
//! ([`CompiledSchema::gbnf`]); that text compiles to the same grammar. How a schema
//! becomes GBNF:
//!
//! 1. `$ref` (local: JSON pointers, `$anchor`s, the root's own `$id`) becomes a rule, so
//!    recursion is plain rule recursion; `allOf` is merged into one schema; `anyOf` becomes
//!    alternatives, and `oneOf` too where its branches are provably disjoint.
//! 2. Objects list their properties in the schema's order (the order of `properties`;
//!    `PropertyOrder::Any` accepts any order), each optional one skippable, then any
//!    additional properties. `minProperties`/`maxProperties` count through the chain.
//! 3. Strings are a regular expression over the value (`pattern`, `format`, lengths in code
//!    points), re-written over the JSON text so every escape JSON allows is accepted in
//!    values. Object keys, `enum` and `const` strings are matched as serializers write
//!    them (raw, escaping only `"`, `\` and control characters): keys stay forced
//!    continuations, and the automata of key sets stay small.
//!    Numbers are JSON's grammar, bounded digit by digit (see `numbers`).
//! 4. What the grammar cannot express (`uniqueItems`, `not`, `if`/`then`/`else`,
//!    `dependentRequired`, `contains`, a float `multipleOf`, a remote `$ref`, ...) is a typed
//!    error naming the keyword and its JSON pointer. With `lenient`, it is recorded in
//!    [`CompiledSchema::deferred`] instead, to be checked by a validator after generation.
//!    No keyword is silently ignored; annotations (`title`, `description`, `default`, ...)
//!    and unknown keywords are not assertions.
//!
//! Key types: [`compile_json_schema`] / [`JsonSchemaOptions`] -> [`CompiledSchema`], or a
//! positioned [`SchemaError`]; [`validate::Validator`] for what the grammar leaves to
//! validation.
//!
//! ```
//! use corral_schema::{compile_json_schema, JsonSchemaOptions};
//! use corral_grammar::{match_bytes, MatchOutcome};
//!
//! let s = compile_json_schema(
//!     r#"{"type": "object", "properties": {"age": {"type": "integer", "minimum": 0}},
//!         "required": ["age"], "additionalProperties": false}"#,
//!     &JsonSchemaOptions::default(),
//! )?;
//! assert_eq!(match_bytes(&s.grammar, br#"{"age": 42}"#)?, MatchOutcome::Accepted);
//! assert_ne!(match_bytes(&s.grammar, br#"{"age": -1}"#)?, MatchOutcome::Accepted);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

// Schema errors carry the source line for their caret display; they are returned once per
// compile, never on a hot path, so their size does not matter.
#![allow(clippy::result_large_err)]

mod compile;
mod error;
mod formats;
mod gbnf;
mod locate;
mod numbers;
mod pattern;
pub mod validate;

use corral_grammar::{DfaCache, Grammar, Limits, RuleAst, Span};
use serde_json::Value;
use std::sync::Arc;

pub use error::{SchemaError, SchemaErrorKind};

pub use formats::KNOWN as KNOWN_FORMATS;

/// Whitespace between JSON tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Whitespace {
    /// None at all: `{"a":1}`.
    Compact,
    /// Between two tokens: nothing or one space, `{"a": 1, "b": [1, 2]}` (Python's
    /// `json.dumps`): readable on one line, and a model cannot pad.
    Spaced,
    /// Between two tokens: nothing, one space, or one line break followed by up to
    /// `max_indent` spaces or tabs: what one-line (`{"a": 1}`) and indented JSON both need,
    /// and no more (no run of line breaks, no padding beyond one indentation).
    Lines {
        /// Most spaces or tabs after the line break.
        max_indent: u32,
    },
    /// Up to `max` spaces, tabs and line breaks between tokens, in any mix. Bounded, so a
    /// model cannot loop on it.
    Flexible {
        /// Most whitespace characters between two tokens.
        max: u32,
    },
}

/// Where object properties may appear.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PropertyOrder {
    /// In the order of `properties` (then `required` names not listed there, then any
    /// additional properties). The default: models follow it, and it keeps jump-forward
    /// over keys.
    Schema,
    /// Any order, each property at most once (exact, by tracking which properties have
    /// appeared: the grammar grows as 2^n in the number of properties, bounded by
    /// `max_any_order_properties`).
    Any,
}

/// Options for [`compile_json_schema`].
#[derive(Clone, Debug)]
pub struct JsonSchemaOptions {
    /// Default `Flexible { max: 32 }`, for matching JSON written by anyone; generation takes
    /// [`JsonSchemaOptions::for_generation`]'s [`GENERATION_WHITESPACE`].
    pub whitespace: Whitespace,
    /// Default `Schema`.
    pub property_order: PropertyOrder,
    /// Keywords the grammar cannot express are recorded in [`CompiledSchema::deferred`]
    /// (for validation after generation) instead of refused. Default false.
    pub lenient: bool,
    /// Names the schema in error messages. Default `<schema>`.
    pub origin: String,
    /// Limits of the grammar compile and of the recognizer's work. Default
    /// `Limits::default()`.
    pub limits: Limits,
    /// `multipleOf` with `minimum`/`maximum` lists the multiples when there are at most
    /// this many. Default 1,000.
    pub max_listed_multiples: usize,
    /// Most properties of one object in `PropertyOrder::Any`. Default 10.
    pub max_any_order_properties: usize,
    /// Most rules one object's property chain may take (properties x the counts that
    /// `minProperties`/`maxProperties` track). Default 10,000.
    pub max_object_states: usize,
    /// Deepest nesting of subschemas followed while compiling: reference chains, merges
    /// of `allOf` and `$ref`, and the walk that collects `$id`s and anchors. Deeper is an
    /// error naming the pointer. Each level is a few frames of recursion. Default 256.
    pub max_schema_depth: u32,
    /// Most automaton states (estimated before JSON encoding) of the intersection of a
    /// string's `pattern`, `format` and length; larger ones are refused (lenient:
    /// deferred to validation) rather than built. Memory and compile time grow with it.
    /// Default 20,000.
    pub max_product_states: usize,
    /// Most state pairs explored to decide whether two `patternProperties` patterns
    /// overlap; past it they are taken to overlap (refused, or deferred when lenient).
    /// Default 200,000.
    pub max_overlap_pairs: usize,
    /// Objects without `additionalProperties` allow no properties beyond those the schema
    /// names. Default false (the schema's meaning: they allow any); structured generation
    /// turns it on, since a model left free to add keys rarely helps.
    pub closed_objects: bool,
    /// Whitespace before and after the value (RFC 8259 allows it around a JSON text; a
    /// file usually ends with a line break). Default false: generation stops right after
    /// the value.
    pub outer_whitespace: bool,
    /// Lexeme DFAs come from, and go to, this cache (see [`corral_grammar::DfaCache`]).
    /// Default `None`.
    pub dfa_cache: Option<DfaCache>,
}

impl Default for JsonSchemaOptions {
    fn default() -> JsonSchemaOptions {
        JsonSchemaOptions {
            whitespace: Whitespace::Flexible { max: 32 },
            property_order: PropertyOrder::Schema,
            lenient: false,
            origin: "<schema>".into(),
            limits: Limits::default(),
            max_listed_multiples: 1000,
            max_any_order_properties: 10,
            max_object_states: 10_000,
            max_schema_depth: 256,
            max_product_states: 20_000,
            max_overlap_pairs: 200_000,
            closed_objects: false,
            outer_whitespace: false,
            dfa_cache: None,
        }
    }
}

/// The whitespace of generated JSON: one optional space between tokens. Measured over 50
/// JSONSchemaBench schemas with SmolLM2 (`examples/whitespace_share.rs`), a model under
/// `Flexible { max: 32 }` spent 14.7% of its tokens on whitespace-only tokens, under
/// `Lines { max_indent: 20 }` 14.2%, under `Spaced` 3.7%, and `Compact` 0.1% (but one line
/// with no space to read by).
pub const GENERATION_WHITESPACE: Whitespace = Whitespace::Spaced;

impl JsonSchemaOptions {
    /// The defaults, with the whitespace of generated JSON ([`GENERATION_WHITESPACE`]):
    /// what the server, `corral generate` and the Python package compile schemas with.
    pub fn for_generation() -> JsonSchemaOptions {
        JsonSchemaOptions::default().with_whitespace(GENERATION_WHITESPACE)
    }

    /// Sets [`JsonSchemaOptions::origin`].
    pub fn with_origin(mut self, origin: impl Into<String>) -> Self {
        self.origin = origin.into();
        self
    }

    /// Sets [`JsonSchemaOptions::lenient`].
    pub fn with_lenient(mut self, lenient: bool) -> Self {
        self.lenient = lenient;
        self
    }

    /// Sets [`JsonSchemaOptions::whitespace`].
    pub fn with_whitespace(mut self, whitespace: Whitespace) -> Self {
        self.whitespace = whitespace;
        self
    }

    /// Sets [`JsonSchemaOptions::property_order`].
    pub fn with_property_order(mut self, order: PropertyOrder) -> Self {
        self.property_order = order;
        self
    }

    /// Sets [`JsonSchemaOptions::outer_whitespace`].
    pub fn with_outer_whitespace(mut self, outer: bool) -> Self {
        self.outer_whitespace = outer;
        self
    }

    /// Sets [`JsonSchemaOptions::dfa_cache`].
    pub fn with_dfa_cache(mut self, cache: Option<DfaCache>) -> Self {
        self.dfa_cache = cache;
        self
    }
}

/// A keyword left to validation after generation (lenient mode).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Deferred {
    /// The keyword as the schema spells it (`multipleOf`, `oneOf`, ...).
    pub keyword: String,
    /// JSON pointer of the schema that holds it.
    pub pointer: String,
    /// Why the grammar does not express it.
    pub reason: String,
}

/// A compiled schema: the grammar, its GBNF rules, and what was left to validation.
#[derive(Clone, Debug)]
pub struct CompiledSchema {
    /// The compiled grammar, ready to constrain or match JSON text.
    pub grammar: Arc<Grammar>,
    /// The GBNF rules the grammar was compiled from, start rule `root` first (the text is
    /// [`CompiledSchema::gbnf`]).
    pub rules: Arc<[RuleAst]>,
    /// Keywords left to validation after generation, each once, in the order met (empty
    /// unless `lenient`).
    pub deferred: Vec<Deferred>,
}

impl CompiledSchema {
    /// The grammar as GBNF text (what `corral schema` prints), one rule per line; it
    /// compiles to the same grammar.
    pub fn gbnf(&self) -> String {
        corral_grammar::ast::print_rules(&self.rules)
    }
}

/// Compiles a JSON Schema given as text (errors are positioned in it).
pub fn compile_json_schema(
    text: &str,
    opts: &JsonSchemaOptions,
) -> Result<CompiledSchema, SchemaError> {
    let schema: Value = serde_json::from_str(text).map_err(|e| {
        let offset = line_col_offset(text, e.line(), e.column());
        SchemaError::at(
            SchemaErrorKind::NotJson(json_error(&e)),
            String::new(),
            Span::new(offset, offset + 1),
            &opts.origin,
            text,
        )
    })?;
    compile_inner(&schema, opts).map_err(|(kind, pointer)| {
        let span = locate::locate(text, &pointer);
        SchemaError::at(kind, pointer, span, &opts.origin, text)
    })
}

/// A grammar with the lexemes every schema compiled with `opts` shares: brackets and
/// separators with their whitespace, a property's separator after its key, and the scalar
/// values. It is a fixed schema's grammar, for a token-set cache made once per tokenizer
/// (`MaskCache::prefilled` in the engine crate), so that a new schema's first masks find
/// these lexemes' sets already made. Only `Flexible` whitespace (a counted run) makes
/// brackets and separators whose DFAs a base can hold: with `Lines`, `Spaced` or `Compact`
/// they are built on demand, numbered as reached, and a base holds none of them.
pub fn shared_lexemes(opts: &JsonSchemaOptions) -> Result<Arc<Grammar>, SchemaError> {
    let schema = serde_json::json!({
        "type": "object",
        "properties": {
            "s": {"type": "string"},
            "n": {"type": "number"},
            "i": {"type": "integer"},
            "b": {"type": "boolean"},
            "z": {"type": "null"},
            "a": {"type": "array", "items": {"type": "string"}},
            "o": {"type": "object"}
        }
    });
    Ok(compile_json_schema_value(&schema, opts)?.grammar)
}

/// serde_json's message, with its nesting limit spelled out.
pub fn json_error(e: &serde_json::Error) -> String {
    let m = e.to_string();
    if m.starts_with("recursion limit exceeded") {
        return format!(
            "{m}: it nests arrays and objects deeper than {JSON_NESTING_LIMIT} levels, the JSON parser's limit"
        );
    }
    m
}

/// How deep serde_json (without its `unbounded_depth` feature) lets arrays and objects
/// nest.
pub const JSON_NESTING_LIMIT: usize = 128;

/// Compiles a JSON Schema value (errors name the JSON pointer, with no source position).
pub fn compile_json_schema_value(
    schema: &Value,
    opts: &JsonSchemaOptions,
) -> Result<CompiledSchema, SchemaError> {
    compile_inner(schema, opts)
        .map_err(|(kind, pointer)| SchemaError::unplaced(kind, pointer, &opts.origin))
}

fn compile_inner(
    schema: &Value,
    opts: &JsonSchemaOptions,
) -> Result<CompiledSchema, (SchemaErrorKind, String)> {
    let (rules, deferred) = compile::to_rules(schema, opts)?;
    let grammar = corral_grammar::compile_rules(&rules, &compile::grammar_options(opts))
        .map_err(|e| (SchemaErrorKind::Grammar(Box::new(e)), String::new()))?;
    Ok(CompiledSchema {
        grammar,
        rules: rules.into(),
        deferred,
    })
}

/// Byte offset of a 1-based line and column (serde_json's error position).
fn line_col_offset(text: &str, line: usize, col: usize) -> usize {
    let start: usize = text
        .split_inclusive('\n')
        .take(line.saturating_sub(1))
        .map(str::len)
        .sum();
    (start + col.saturating_sub(1)).min(text.len())
}
