//! The grammar as written: rules and expressions with their source spans.
//!
//! This is what the GBNF parser produces and what error messages point into. It is lowered
//! into the dense, index-based [`crate::Grammar`] by [`crate::lower`]; nothing at decode time
//! looks at the AST.

use crate::error::Span;

/// One `name ::= body` definition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleAst {
    pub name: String,
    pub name_span: Span,
    pub body: Expr,
}

/// An expression with its span and nesting depth (bounded by `Limits::max_nesting_depth`, so
/// recursive walks over the AST cannot overflow the stack).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expr {
    pub kind: ExprKind,
    pub span: Span,
    pub depth: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExprKind {
    /// A sequence of items; empty for an empty alternative.
    Seq(Vec<Expr>),
    /// Alternatives `a | b | ...` (at least two).
    Alt(Vec<Expr>),
    /// `"..."`: code points.
    Literal(Vec<char>),
    /// `[...]` / `[^...]`.
    Class(ClassAst),
    /// `.`: any code point.
    Any,
    /// A reference to a rule by name.
    RuleRef(String),
    /// `<[id]>`, `<text>`, with optional `!`.
    Token(TokenAst),
    /// `x*`, `x+`, `x?`, `x{m}`, `x{m,}`, `x{m,n}`; `max == None` is unbounded.
    Repeat {
        inner: Box<Expr>,
        min: u32,
        max: Option<u32>,
    },
    /// `( ... )`.
    Group(Box<Expr>),
    /// `a & b & ...`: strings in every operand's language (a corral extension; operands
    /// are regular).
    And(Vec<Expr>),
    /// `~x`: strings not in x's language (a corral extension; x is regular).
    Not(Box<Expr>),
}

/// A character class: inclusive code-point ranges, possibly negated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClassAst {
    pub negated: bool,
    pub ranges: Vec<(char, char)>,
}

/// A token reference: matched against whole tokens by id, not against bytes.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TokenAst {
    /// `!<...>`: any token except this one.
    pub negated: bool,
    pub target: TokenTarget,
}

/// Which token a reference names.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TokenTarget {
    /// `<[42]>`.
    Id(u32),
    /// `<|im_end|>`, `<think>`: the token whose text is exactly this (brackets included).
    Text(String),
}

impl Expr {
    pub fn new(kind: ExprKind, span: Span) -> Expr {
        let depth = match &kind {
            ExprKind::Seq(xs) | ExprKind::Alt(xs) | ExprKind::And(xs) => {
                xs.iter().map(|x| x.depth).max().unwrap_or(0) + 1
            }
            ExprKind::Repeat { inner, .. } | ExprKind::Group(inner) | ExprKind::Not(inner) => {
                inner.depth + 1
            }
            _ => 1,
        };
        Expr { kind, span, depth }
    }
}
