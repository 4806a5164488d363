//! The grammar as written: rules and expressions with their source spans.
//!
//! This is what the GBNF parser produces and what error messages point into. It is lowered
//! into the dense, index-based [`crate::Grammar`] by lowering (`lower`); nothing at decode time
//! looks at the AST.

use crate::error::{ErrorKind, Span};
use std::fmt::{self, Write};

/// One `name ::= body` definition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleAst {
    /// The rule's name: letters, digits and `-` in GBNF text.
    pub name: String,
    /// Where the name is in the source (`0..0` for a rule built by a program).
    pub name_span: Span,
    /// The right-hand side.
    pub body: Expr,
}

/// An expression with its span and nesting depth (bounded by `Limits::max_nesting_depth`, so
/// recursive walks over the AST cannot overflow the stack).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Expr {
    /// What the expression is, with its children.
    pub kind: ExprKind,
    /// Where it is in the grammar source; `0..0` for an expression built by a program.
    pub span: Span,
    /// 1 for a leaf, else one more than the deepest child's depth.
    pub depth: u32,
}

/// What an expression is: a GBNF construct, or corral's `&` or `~`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
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
        /// The repeated expression.
        inner: Box<Expr>,
        /// Fewest repetitions.
        min: u32,
        /// Most repetitions; `None` for no bound.
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
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ClassAst {
    /// `[^...]`: matches the code points in none of the ranges.
    pub negated: bool,
    /// Inclusive `(low, high)` ranges, in source order (not merged).
    pub ranges: Vec<(char, char)>,
}

/// A token reference: matched against whole tokens by id, not against bytes.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TokenAst {
    /// `!<...>`: any token except this one.
    pub negated: bool,
    /// The token it names.
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
    /// An expression at `span`, with its depth computed from its children's.
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

impl Expr {
    /// An expression with no place in a source text (built by a program, not parsed).
    pub fn built(kind: ExprKind) -> Expr {
        Expr::new(kind, Span::default())
    }

    /// The expression with the shapes that parse alike folded together and no positions:
    /// no groups, sequences spliced into sequences, a one-item sequence as its item, an
    /// empty one as `""`. Two expressions that print alike are equal once normalized.
    pub fn normalized(&self) -> Expr {
        let kind = match &self.kind {
            ExprKind::Group(inner) => return inner.normalized(),
            ExprKind::Seq(xs) => {
                let mut items = Vec::with_capacity(xs.len());
                for x in xs {
                    match x.normalized() {
                        Expr {
                            kind: ExprKind::Seq(ys),
                            ..
                        } => items.extend(ys),
                        y => items.push(y),
                    }
                }
                match items.len() {
                    0 => ExprKind::Literal(Vec::new()),
                    1 => return items.pop().expect("one item"),
                    _ => ExprKind::Seq(items),
                }
            }
            ExprKind::Alt(xs) => ExprKind::Alt(xs.iter().map(Expr::normalized).collect()),
            ExprKind::And(xs) => ExprKind::And(xs.iter().map(Expr::normalized).collect()),
            ExprKind::Repeat { inner, min, max } => ExprKind::Repeat {
                inner: Box::new(inner.normalized()),
                min: *min,
                max: *max,
            },
            ExprKind::Not(inner) => ExprKind::Not(Box::new(inner.normalized())),
            other => other.clone(),
        };
        Expr::built(kind)
    }

    /// How loosely the expression binds, as GBNF text: 0 `a & b`, 1 `a | b`, 2 `a b`,
    /// 3 `x*` and `~x`, 4 an atom.
    fn binding(&self) -> u8 {
        match &self.kind {
            ExprKind::And(_) => 0,
            ExprKind::Alt(_) => 1,
            ExprKind::Seq(xs) if !xs.is_empty() => 2,
            ExprKind::Repeat { .. } | ExprKind::Not(_) => 3,
            _ => 4,
        }
    }

    /// Writes the expression as GBNF, parenthesized if it binds more loosely than `at`.
    fn write_at(&self, out: &mut dyn Write, at: u8) -> fmt::Result {
        if self.binding() < at {
            out.write_str("( ")?;
            self.write_at(out, 0)?;
            return out.write_str(" )");
        }
        let joined = |out: &mut dyn Write, xs: &[Expr], sep: &str, at: u8| -> fmt::Result {
            for (i, x) in xs.iter().enumerate() {
                if i > 0 {
                    out.write_str(sep)?;
                }
                x.write_at(out, at)?;
            }
            Ok(())
        };
        match &self.kind {
            ExprKind::And(xs) => joined(out, xs, " & ", 1),
            ExprKind::Alt(xs) => joined(out, xs, " | ", 2),
            ExprKind::Seq(xs) if xs.is_empty() => out.write_str("\"\""),
            ExprKind::Seq(xs) => {
                for (i, x) in xs.iter().enumerate() {
                    if i > 0 {
                        out.write_char(' ')?;
                    }
                    // A sequence inside a sequence is spliced (the parse is the same).
                    let at = if matches!(&x.kind, ExprKind::Seq(ys) if !ys.is_empty()) {
                        2
                    } else {
                        3
                    };
                    x.write_at(out, at)?;
                }
                Ok(())
            }
            ExprKind::Literal(cs) => {
                out.write_char('"')?;
                for &c in cs {
                    match c {
                        '"' => out.write_str("\\\"")?,
                        '\\' => out.write_str("\\\\")?,
                        '\n' => out.write_str("\\n")?,
                        '\r' => out.write_str("\\r")?,
                        '\t' => out.write_str("\\t")?,
                        c if (c as u32) < 0x20 || c == '\x7f' => {
                            write!(out, "\\x{:02X}", c as u32)?
                        }
                        c => out.write_char(c)?,
                    }
                }
                out.write_char('"')
            }
            ExprKind::Class(c) => {
                out.write_str(if c.negated { "[^" } else { "[" })?;
                for &(a, b) in &c.ranges {
                    class_char(out, a)?;
                    if b != a {
                        if b as u32 > a as u32 + 1 {
                            out.write_char('-')?;
                        }
                        class_char(out, b)?;
                    }
                }
                out.write_char(']')
            }
            ExprKind::Any => out.write_char('.'),
            ExprKind::RuleRef(name) => out.write_str(name),
            ExprKind::Token(t) => {
                if t.negated {
                    out.write_char('!')?;
                }
                match &t.target {
                    TokenTarget::Id(id) => write!(out, "<[{id}]>"),
                    TokenTarget::Text(text) => out.write_str(text),
                }
            }
            ExprKind::Repeat { inner, min, max } => {
                inner.write_at(out, 4)?;
                match (min, max) {
                    (0, None) => out.write_char('*'),
                    (1, None) => out.write_char('+'),
                    (0, Some(1)) => out.write_char('?'),
                    (m, None) => write!(out, "{{{m},}}"),
                    (m, Some(n)) if m == n => write!(out, "{{{m}}}"),
                    (m, Some(n)) => write!(out, "{{{m},{n}}}"),
                }
            }
            ExprKind::Group(inner) => {
                out.write_str("( ")?;
                inner.write_at(out, 0)?;
                out.write_str(" )")
            }
            ExprKind::Not(inner) => {
                out.write_char('~')?;
                inner.write_at(out, 4)
            }
        }
    }
}

/// One character inside a class, escaped where the class syntax would read it otherwise.
fn class_char(out: &mut dyn Write, c: char) -> fmt::Result {
    let v = c as u32;
    if c == ' '
        || c.is_ascii_alphanumeric()
        || (c.is_ascii_punctuation() && !"[]\\^-\"".contains(c))
    {
        out.write_char(c)
    } else if c == '\t' {
        out.write_str("\\t")
    } else if c == '\n' {
        out.write_str("\\n")
    } else if c == '\r' {
        out.write_str("\\r")
    } else if v <= 0xff {
        write!(out, "\\x{v:02X}")
    } else if v <= 0xffff {
        write!(out, "\\u{v:04X}")
    } else {
        write!(out, "\\U{v:08X}")
    }
}

/// GBNF text that parses back to an expression that matches the same strings (groups and
/// nested sequences may come back shaped differently).
impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write_at(f, 0)
    }
}

/// `name ::= body`, on one line.
impl fmt::Display for RuleAst {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ::= {}", self.name, self.body)
    }
}

/// Rules as GBNF text, one per line.
pub fn print_rules(rules: &[RuleAst]) -> String {
    let mut out = String::new();
    for r in rules {
        let _ = writeln!(out, "{r}");
    }
    out
}

/// What [`check_rules`] finds in rules built by a program.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RulesCheck {
    /// The deepest nesting of expressions (each node one level, computed, whatever the
    /// `depth` fields say).
    pub depth: u32,
    /// The first thing GBNF text could not say, or its parser would refuse: a name that is
    /// not a GBNF name, `{m,n}` with `m > n`, a reversed class range, alternatives or `&`
    /// with no operand, a token reference not written `<...>`.
    pub problem: Option<ErrorKind>,
}

/// Checks rules built by a program before they are compiled without text (see
/// `compile_rules`): iteratively, so no nesting can overflow the stack.
pub fn check_rules(rules: &[RuleAst]) -> RulesCheck {
    let mut depth = 0;
    let mut problem = None;
    // Bytes, not chars: a byte of a multi-byte character is not ASCII either.
    let name_ok =
        |n: &str| !n.is_empty() && n.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-');
    let mut stack: Vec<(&Expr, u32)> = Vec::new();
    for r in rules {
        if problem.is_none() && !name_ok(&r.name) {
            problem = Some(not_gbnf(
                format!("rule name {:?}", r.name),
                "a name of letters, digits and '-'",
            ));
        }
        stack.push((&r.body, 1));
        while let Some((e, level)) = stack.pop() {
            depth = depth.max(level);
            let found =
                match &e.kind {
                    ExprKind::Seq(xs) => {
                        stack.extend(xs.iter().map(|x| (x, level + 1)));
                        None
                    }
                    ExprKind::Alt(xs) | ExprKind::And(xs) => {
                        stack.extend(xs.iter().map(|x| (x, level + 1)));
                        xs.is_empty()
                            .then(|| not_gbnf("an empty list of operands".into(), "at least one"))
                    }
                    ExprKind::Repeat { inner, min, max } => {
                        stack.push((inner, level + 1));
                        match max {
                            Some(n) if min > n => Some(ErrorKind::BadRepetition(format!(
                                "minimum {min} is more than maximum {n}"
                            ))),
                            _ => None,
                        }
                    }
                    ExprKind::Group(inner) | ExprKind::Not(inner) => {
                        stack.push((inner, level + 1));
                        None
                    }
                    ExprKind::Class(c) => c.ranges.iter().find(|(a, b)| a > b).map(|&(a, b)| {
                        ErrorKind::ReversedRange {
                            start: a as u32,
                            end: b as u32,
                        }
                    }),
                    ExprKind::RuleRef(n) => (!name_ok(n)).then(|| {
                        not_gbnf(
                            format!("rule name {n:?}"),
                            "a name of letters, digits and '-'",
                        )
                    }),
                    ExprKind::Token(TokenAst {
                        target: TokenTarget::Text(t),
                        ..
                    }) => {
                        let inner = t.strip_prefix('<').and_then(|t| t.strip_suffix('>'));
                        let ok = inner.is_some_and(|i| !i.contains(['>', '\n', '\r']));
                        (!ok).then(|| not_gbnf(format!("token reference {t:?}"), "<...>"))
                    }
                    ExprKind::Literal(_) | ExprKind::Any | ExprKind::Token(_) => None,
                };
            if problem.is_none() {
                problem = found;
            }
        }
    }
    RulesCheck { depth, problem }
}

fn not_gbnf(found: String, expected: &str) -> ErrorKind {
    ErrorKind::Unexpected {
        found,
        expected: expected.to_string(),
    }
}
