//! Building GBNF: the JSON Schema front end builds the grammar's rules as expressions
//! ([`Expr`]) that are compiled without being written as text; `corral schema` prints them.
//! These helpers build the expressions; the empty language is `None` wherever a piece can
//! be unsatisfiable.

use corral_grammar::ast::{ClassAst, Expr, ExprKind};
use regex_syntax::hir::{Class, Hir, HirKind};

/// The empty string.
pub(crate) fn eps() -> Expr {
    Expr::built(ExprKind::Literal(Vec::new()))
}

/// Whether `e` is the empty string written as `""`.
pub(crate) fn is_eps(e: &Expr) -> bool {
    matches!(&e.kind, ExprKind::Literal(cs) if cs.is_empty())
}

/// A constant piece of GBNF (`"-"? [0-9]+`), parsed once per process.
pub(crate) fn g(text: &'static str) -> Expr {
    use std::sync::{LazyLock, Mutex, PoisonError};
    static PIECES: LazyLock<Mutex<rustc_hash::FxHashMap<&'static str, Expr>>> =
        LazyLock::new(Mutex::default);
    let mut pieces = PIECES.lock().unwrap_or_else(PoisonError::into_inner);
    pieces
        .entry(text)
        .or_insert_with(|| {
            let rules = corral_grammar::parse_gbnf(&format!("x ::= {text}"), "<constant>", 64)
                .unwrap_or_else(|e| panic!("a constant piece of GBNF parses: {e}"));
            rules[0].body.normalized()
        })
        .clone()
}

/// `[0-9]`.
pub(crate) fn digit() -> Expr {
    class(&[('0', '9')]).expect("non-empty")
}

/// A literal matching exactly `s`.
pub(crate) fn lit(s: &str) -> Expr {
    Expr::built(ExprKind::Literal(s.chars().collect()))
}

/// A reference to the rule `name`.
pub(crate) fn name(name: &str) -> Expr {
    Expr::built(ExprKind::RuleRef(name.to_string()))
}

/// A class of code-point ranges (sorted, non-overlapping); `None` if empty.
pub(crate) fn class(ranges: &[(char, char)]) -> Option<Expr> {
    if ranges.is_empty() {
        return None;
    }
    if let [(a, b)] = ranges
        && a == b
    {
        return Some(Expr::built(ExprKind::Literal(vec![*a])));
    }
    Some(Expr::built(ExprKind::Class(ClassAst {
        negated: false,
        ranges: ranges.to_vec(),
    })))
}

/// A sequence; epsilons are dropped and sequences spliced in.
pub(crate) fn seq(parts: Vec<Expr>) -> Expr {
    let mut items = Vec::with_capacity(parts.len());
    for p in parts {
        match p.kind {
            ExprKind::Seq(xs) => items.extend(xs),
            _ if is_eps(&p) => {}
            _ => items.push(p),
        }
    }
    match items.len() {
        0 => eps(),
        1 => items.pop().expect("one"),
        _ => Expr::built(ExprKind::Seq(items)),
    }
}

/// Alternatives (duplicates removed, order kept); `None` when there are none.
pub(crate) fn alt(parts: Vec<Expr>) -> Option<Expr> {
    let mut uniq: Vec<Expr> = Vec::with_capacity(parts.len());
    if parts.len() <= 8 {
        for p in parts {
            if !uniq.contains(&p) {
                uniq.push(p);
            }
        }
    } else {
        let mut seen = rustc_hash::FxHashSet::default();
        for p in parts {
            if seen.insert(p.clone()) {
                uniq.push(p);
            }
        }
    }
    match uniq.len() {
        0 => None,
        1 => uniq.pop(),
        _ => Some(Expr::built(ExprKind::Alt(uniq))),
    }
}

/// `x?`.
pub(crate) fn opt(x: Expr) -> Expr {
    repeat(x, 0, Some(1))
}

/// `x{min,max}` (`max == None`: unbounded).
pub(crate) fn repeat(x: Expr, min: u32, max: Option<u32>) -> Expr {
    if max == Some(0) || is_eps(&x) {
        return eps();
    }
    if (min, max) == (1, Some(1)) {
        return x;
    }
    Expr::built(ExprKind::Repeat {
        inner: Box::new(x),
        min,
        max,
    })
}

/// `a & b & ...`: strings of every operand (corral's GBNF extension; operands regular).
pub(crate) fn and(parts: Vec<Expr>) -> Expr {
    Expr::built(ExprKind::And(parts))
}

/// `~x`: strings not of `x` (corral's GBNF extension; `x` regular).
pub(crate) fn not(x: Expr) -> Expr {
    Expr::built(ExprKind::Not(Box::new(x)))
}

/// A regular expression (code points, no look-around) as a GBNF expression; `None` if it
/// matches nothing.
pub(crate) fn from_hir(h: &Hir) -> Option<Expr> {
    match h.kind() {
        HirKind::Empty | HirKind::Look(_) => Some(eps()),
        HirKind::Literal(l) => Some(lit(&String::from_utf8_lossy(&l.0))),
        HirKind::Class(Class::Unicode(c)) => {
            let ranges: Vec<(char, char)> = c.iter().map(|r| (r.start(), r.end())).collect();
            class(&ranges)
        }
        HirKind::Class(Class::Bytes(c)) => {
            let ranges: Vec<(char, char)> = c
                .iter()
                .map(|r| (r.start() as char, r.end() as char))
                .collect();
            class(&ranges)
        }
        HirKind::Repetition(r) => match from_hir(&r.sub) {
            Some(x) => Some(repeat(x, r.min, r.max)),
            None if r.min == 0 => Some(eps()),
            None => None,
        },
        HirKind::Capture(c) => from_hir(&c.sub),
        HirKind::Concat(xs) => {
            let mut parts = Vec::with_capacity(xs.len());
            for x in xs {
                parts.push(from_hir(x)?);
            }
            Some(seq(parts))
        }
        HirKind::Alternation(xs) => alt(xs.iter().filter_map(from_hir).collect()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printed() {
        assert_eq!(lit("a\"b\\c\n\x01").to_string(), r#""a\"b\\c\n\x01""#);
        assert_eq!(
            class(&[('a', 'c'), ('-', '-'), (']', '^')])
                .unwrap()
                .to_string(),
            r"[a-c\x2D\x5D\x5E]"
        );
        let digit = || class(&[('0', '9')]).unwrap();
        assert_eq!(repeat(digit(), 2, Some(4)).to_string(), "[0-9]{2,4}");
        assert_eq!(
            repeat(seq(vec![lit("a"), lit("b")]), 0, None).to_string(),
            "( \"a\" \"b\" )*"
        );
        let ab = alt(vec![lit("a"), lit("b"), lit("a")]).unwrap();
        assert_eq!(
            seq(vec![ab, eps(), digit()]).to_string(),
            "( \"a\" | \"b\" ) [0-9]"
        );
        assert!(is_eps(&seq(vec![eps(), repeat(lit("x"), 0, Some(0))])));
    }
}
