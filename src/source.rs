//! Where a constraint comes from (a GBNF file or a JSON Schema file), shared by `match`,
//! `generate`, `replay` and `schema`.

use anyhow::{Context, Result, anyhow};
use corral::grammar::{CompileOptions, Grammar, Limits};
use corral::schema::{
    CompiledSchema, JsonSchemaOptions, PropertyOrder, Whitespace, compile_json_schema,
};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// How a JSON Schema becomes a grammar.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct SchemaArgs {
    /// JSON Schema: leave keywords the grammar cannot express (uniqueItems, not, ...) to
    /// validation after generation instead of refusing the schema.
    #[arg(long)]
    pub lenient: bool,
    /// JSON Schema: accept object properties in any order (default: the schema's order).
    #[arg(long)]
    pub any_order: bool,
    /// JSON Schema: whitespace between tokens. compact: none; spaced: nothing or one space
    /// (`{"a": 1, "b": 2}`); lines: nothing, a space, or one line break and up to 20 spaces
    /// or tabs of indentation; free: up to 32 spaces, tabs and line breaks. Default: spaced
    /// where a model writes the JSON (generate, schema), free where a file is checked
    /// (match, replay).
    #[arg(long, value_enum)]
    pub whitespace: Option<WhitespaceArg>,
    /// JSON Schema: `--whitespace compact`.
    #[arg(long, conflicts_with = "whitespace")]
    pub compact: bool,
    /// Whitespace around the value (set by `match`, not an option).
    #[arg(skip)]
    pub outer_whitespace: bool,
    /// A model writes the JSON (set by `generate` and `schema`, not an option): the
    /// default whitespace is the generation default.
    #[arg(skip)]
    pub generation: bool,
}

/// `--whitespace`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum WhitespaceArg {
    Compact,
    Spaced,
    Lines,
    Free,
}

impl SchemaArgs {
    pub fn options(&self, origin: &Path) -> JsonSchemaOptions {
        let base = match self.generation {
            true => JsonSchemaOptions::for_generation(),
            false => JsonSchemaOptions::default(),
        };
        let whitespace = match (self.compact, self.whitespace) {
            (true, _) | (_, Some(WhitespaceArg::Compact)) => Whitespace::Compact,
            (_, Some(WhitespaceArg::Spaced)) => Whitespace::Spaced,
            (_, Some(WhitespaceArg::Lines)) => Whitespace::Lines { max_indent: 20 },
            (_, Some(WhitespaceArg::Free)) => Whitespace::Flexible { max: 32 },
            (false, None) => base.whitespace,
        };
        base.with_origin(origin.display().to_string())
            .with_lenient(self.lenient)
            .with_property_order(if self.any_order {
                PropertyOrder::Any
            } else {
                PropertyOrder::Schema
            })
            .with_whitespace(whitespace)
            .with_outer_whitespace(self.outer_whitespace)
    }
}

/// A GBNF grammar or a JSON Schema (exactly one, unless `optional`).
#[derive(clap::Args, Clone, Debug)]
pub struct ConstraintArgs {
    /// GBNF grammar file.
    #[arg(long, short = 'g', conflicts_with = "json_schema")]
    pub grammar: Option<PathBuf>,
    /// JSON Schema file: the text must be a JSON value valid for it.
    #[arg(long)]
    pub json_schema: Option<PathBuf>,
    /// Start rule of a GBNF grammar.
    #[arg(long, default_value = "root")]
    pub start: String,
    #[command(flatten)]
    pub schema: SchemaArgs,
}

/// A compiled constraint, and the schema it came from (if any).
pub struct Loaded {
    pub grammar: Arc<Grammar>,
    pub schema: Option<(serde_json::Value, CompiledSchema)>,
}

impl ConstraintArgs {
    /// The constraint; `Ok(None)` when neither option was given.
    pub fn load(&self) -> Result<Option<Loaded>> {
        match (&self.grammar, &self.json_schema) {
            (Some(path), _) => Ok(Some(Loaded {
                grammar: load_gbnf(path, &self.start)?,
                schema: None,
            })),
            (None, Some(path)) => {
                let (value, compiled) = load_schema(path, &self.schema)?;
                Ok(Some(Loaded {
                    grammar: compiled.grammar.clone(),
                    schema: Some((value, compiled)),
                }))
            }
            (None, None) => Ok(None),
        }
    }

    /// The constraint, which must be given.
    pub fn require(&self) -> Result<Loaded> {
        self.load()?.ok_or_else(|| {
            anyhow!("give a grammar (--grammar FILE.gbnf) or a schema (--json-schema FILE.json)")
        })
    }
}

pub fn load_gbnf(path: &Path, start: &str) -> Result<Arc<Grammar>> {
    let bytes = crate::input::read(path, "grammar")?;
    let opts = CompileOptions::default()
        .start(start)
        .origin(path.display().to_string())
        .limits(Limits::default());
    corral::grammar::compile_gbnf_bytes(&bytes, &opts).map_err(anyhow::Error::from)
}

pub fn load_schema(path: &Path, args: &SchemaArgs) -> Result<(serde_json::Value, CompiledSchema)> {
    let text = crate::input::read_text(path, "JSON Schema")?;
    let compiled = compile_json_schema(&text, &args.options(path)).map_err(anyhow::Error::from)?;
    let value = serde_json::from_str(&text).context("schema is not JSON")?;
    Ok((value, compiled))
}
