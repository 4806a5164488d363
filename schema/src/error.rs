//! Schema errors: what is wrong, the JSON pointer of the subschema, and (when the schema
//! was given as text) its place in that text, rendered with a caret like grammar errors.

use corral_grammar::{GrammarError, Location, Span};
use std::fmt;

/// What went wrong, without the place.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SchemaErrorKind {
    /// The text is not JSON.
    #[error("invalid schema at #: not valid JSON: {0}")]
    NotJson(String),
    /// The schema breaks JSON Schema's rules (a keyword of the wrong type, a dangling
    /// `$ref`, nothing satisfiable).
    #[error("invalid schema at #{pointer}: {message}")]
    Invalid {
        /// JSON pointer of the subschema, without the `#` (empty for the root).
        pointer: String,
        /// What is wrong with it.
        message: String,
    },
    /// A keyword the grammar cannot express; lenient mode defers it to validation.
    #[error(
        "'{keyword}' at #{pointer} cannot be expressed as a grammar: {reason} (lenient mode leaves it to validation after generation)"
    )]
    Unsupported {
        /// The keyword as the schema spells it.
        keyword: String,
        /// JSON pointer of the keyword, or of its subschema where the schema does not hold
        /// the keyword itself (a merge); without the `#`.
        pointer: String,
        /// Why the grammar cannot express it.
        reason: String,
    },
    /// A configured limit of [`crate::JsonSchemaOptions`].
    #[error("limit exceeded: {what} reached {value}, more than {limit_name} = {limit}")]
    Limit {
        /// What was measured, as a phrase for the message.
        what: String,
        /// What it had reached when the limit was found exceeded. Counting stops there, so
        /// the whole may be larger (`max_schema_depth` reports the limit plus one).
        value: usize,
        /// The [`JsonSchemaOptions`](crate::JsonSchemaOptions) field that bounds it.
        limit_name: &'static str,
        /// That field's value.
        limit: usize,
    },
    /// The grammar the schema became could not be compiled (a grammar limit, such as
    /// `max_lexeme_bytes`).
    #[error("the schema's grammar: {}", .0.kind)]
    Grammar(Box<GrammarError>),
}

/// A schema error with its place. See the module docs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchemaError {
    /// What went wrong.
    pub kind: SchemaErrorKind,
    /// JSON pointer of the subschema at fault (empty: the root or unknown).
    pub pointer: String,
    /// Its bytes in the schema text, when compiled from text.
    pub span: Option<Span>,
    /// Names the schema (a file name, `<schema>`).
    pub origin: String,
    /// Line, column and line text of `span`.
    pub location: Option<Location>,
}

impl SchemaError {
    /// An error at `span` of `text`.
    pub(crate) fn at(
        kind: SchemaErrorKind,
        pointer: String,
        span: Span,
        origin: &str,
        text: &str,
    ) -> SchemaError {
        SchemaError {
            kind,
            pointer,
            span: Some(span),
            origin: origin.to_string(),
            location: Some(Location::of(text, span.start)),
        }
    }

    /// An error with no place in a text (the schema was given as a value).
    pub(crate) fn unplaced(kind: SchemaErrorKind, pointer: String, origin: &str) -> SchemaError {
        SchemaError {
            kind,
            pointer,
            span: None,
            origin: origin.to_string(),
            location: None,
        }
    }

    /// The keyword this error is about, where it names one (unsupported keywords).
    pub fn keyword(&self) -> Option<&str> {
        match &self.kind {
            SchemaErrorKind::Unsupported { keyword, .. } => Some(keyword),
            _ => None,
        }
    }
}

impl fmt::Display for SchemaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        corral_grammar::write_positioned(f, &self.origin, self.location.as_ref(), &self.kind)
    }
}

impl std::error::Error for SchemaError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.kind {
            SchemaErrorKind::Grammar(e) => Some(&**e),
            _ => None,
        }
    }
}
