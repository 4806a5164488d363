//! Writing GBNF: the JSON Schema front end emits GBNF text (what `corral schema` prints), and
//! these helpers build its expressions. An expression is a `String` of GBNF; the empty
//! language is `None` wherever a piece can be unsatisfiable.

use regex_syntax::hir::{Class, Hir, HirKind};
use std::fmt::Write;

/// The empty string.
pub(crate) const EPSILON: &str = "\"\"";

/// A GBNF literal matching exactly `s`.
pub(crate) fn lit(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c == '\x7f' => {
                let _ = write!(out, "\\x{:02X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// One character inside a class, escaped where the class syntax would read it otherwise.
fn class_char(out: &mut String, c: char) {
    let v = c as u32;
    if c.is_ascii_alphanumeric() || (c.is_ascii_punctuation() && !"[]\\^-\"".contains(c)) {
        out.push(c);
    } else if v <= 0xff {
        let _ = write!(out, "\\x{v:02X}");
    } else if v <= 0xffff {
        let _ = write!(out, "\\u{v:04X}");
    } else {
        let _ = write!(out, "\\U{v:08X}");
    }
}

/// A class of code-point ranges (sorted, non-overlapping); `None` if empty.
pub(crate) fn class(ranges: &[(char, char)]) -> Option<String> {
    if ranges.is_empty() {
        return None;
    }
    if let [(a, b)] = ranges
        && a == b
    {
        return Some(lit(&a.to_string()));
    }
    let mut out = String::from("[");
    for &(a, b) in ranges {
        class_char(&mut out, a);
        if b != a {
            if b as u32 > a as u32 + 1 {
                out.push('-');
            }
            class_char(&mut out, b);
        }
    }
    out.push(']');
    Some(out)
}

/// A sequence; epsilons are dropped.
pub(crate) fn seq<S: AsRef<str>>(parts: &[S]) -> String {
    let parts: Vec<&str> = parts
        .iter()
        .map(AsRef::as_ref)
        .filter(|p| *p != EPSILON && !p.is_empty())
        .collect();
    match parts.len() {
        0 => EPSILON.to_string(),
        _ => parts.join(" "),
    }
}

/// Alternatives (duplicates removed, order kept); `None` when there are none.
pub(crate) fn alt(parts: Vec<String>) -> Option<String> {
    let mut seen = rustc_hash::FxHashSet::default();
    let mut uniq: Vec<String> = Vec::with_capacity(parts.len());
    for p in parts {
        if seen.insert(p.clone()) {
            uniq.push(p);
        }
    }
    match uniq.len() {
        0 => None,
        1 => uniq.pop(),
        _ => Some(format!("( {} )", uniq.join(" | "))),
    }
}

/// `x?`.
pub(crate) fn opt(x: &str) -> String {
    if x == EPSILON {
        return x.to_string();
    }
    format!("{}?", group(x))
}

/// `x{min,max}` (`max == None`: unbounded).
pub(crate) fn repeat(x: &str, min: u32, max: Option<u32>) -> String {
    if max == Some(0) || x == EPSILON {
        return EPSILON.to_string();
    }
    let g = group(x);
    match (min, max) {
        (0, None) => format!("{g}*"),
        (1, None) => format!("{g}+"),
        (0, Some(1)) => format!("{g}?"),
        (1, Some(1)) => x.to_string(),
        (m, None) => format!("{g}{{{m},}}"),
        (m, Some(n)) if m == n => format!("{g}{{{m}}}"),
        (m, Some(n)) => format!("{g}{{{m},{n}}}"),
    }
}

/// `a & b & ...`: strings of every operand (corral's GBNF extension; operands regular).
pub(crate) fn and(parts: &[String]) -> String {
    parts
        .iter()
        .map(|p| group(p))
        .collect::<Vec<_>>()
        .join(" & ")
}

/// `~x`: strings not of `x` (corral's GBNF extension; `x` regular).
pub(crate) fn not(x: &str) -> String {
    format!("~{}", group(x))
}

/// `x` as one item (parenthesized unless it already is one).
pub(crate) fn group(x: &str) -> String {
    if is_atom(x) {
        x.to_string()
    } else {
        format!("( {x} )")
    }
}

/// Whether `x` is a single GBNF item: a name, literal, class or parenthesized group.
fn is_atom(x: &str) -> bool {
    let b = x.as_bytes();
    if b.is_empty() {
        return false;
    }
    if x.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-') {
        return true;
    }
    let (open, close) = match b[0] {
        b'"' => (b'"', b'"'),
        b'[' => (b'[', b']'),
        b'(' => (b'(', b')'),
        _ => return false,
    };
    if b[b.len() - 1] != close {
        return false;
    }
    // The opening delimiter must close only at the very end.
    let mut depth = 0i32;
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'\\' {
            i += 2;
            continue;
        }
        if open == b'(' {
            match c {
                b'"' => {
                    // skip a literal
                    i += 1;
                    while i < b.len() && b[i] != b'"' {
                        i += if b[i] == b'\\' { 2 } else { 1 };
                    }
                }
                b'[' => {
                    i += 1;
                    while i < b.len() && b[i] != b']' {
                        i += if b[i] == b'\\' { 2 } else { 1 };
                    }
                }
                b'(' => depth += 1,
                b')' => {
                    depth -= 1;
                    if depth == 0 && i != b.len() - 1 {
                        return false;
                    }
                }
                _ => {}
            }
        } else if i > 0 && c == close {
            return i == b.len() - 1;
        }
        i += 1;
    }
    open == b'(' && depth == 0
}

/// Prints a regular expression (code points, no look-around) as a GBNF expression; `None`
/// if it matches nothing.
pub(crate) fn from_hir(h: &Hir) -> Option<String> {
    match h.kind() {
        HirKind::Empty => Some(EPSILON.to_string()),
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
        HirKind::Look(_) => Some(EPSILON.to_string()),
        HirKind::Repetition(r) => {
            let inner = from_hir(&r.sub);
            match inner {
                Some(x) => Some(repeat(&x, r.min, r.max)),
                None if r.min == 0 => Some(EPSILON.to_string()),
                None => None,
            }
        }
        HirKind::Capture(c) => from_hir(&c.sub),
        HirKind::Concat(xs) => {
            let mut parts = Vec::with_capacity(xs.len());
            for x in xs {
                let p = from_hir(x)?;
                parts.push(if needs_group_in_seq(&p) { group(&p) } else { p });
            }
            Some(seq(&parts))
        }
        HirKind::Alternation(xs) => alt(xs.iter().filter_map(from_hir).collect()),
    }
}

/// A top-level alternation must be grouped to sit in a sequence.
fn needs_group_in_seq(x: &str) -> bool {
    x.contains('|') && !is_atom(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atoms() {
        assert!(is_atom("\"a(b\""));
        assert!(is_atom("[a-z]"));
        assert!(is_atom("( a | b )"));
        assert!(is_atom("value-3"));
        assert!(!is_atom("( a ) ( b )"));
        assert!(!is_atom("\"a\" \"b\""));
        assert!(!is_atom("[a] [b]"));
        assert!(is_atom("( \")\" | [(] )"));
    }

    #[test]
    fn escapes() {
        assert_eq!(lit("a\"b\\c\n\x01"), r#""a\"b\\c\n\x01""#);
        assert_eq!(
            class(&[('a', 'c'), ('-', '-'), (']', '^')]).unwrap(),
            r"[a-c\x2D\x5D\x5E]"
        );
        assert_eq!(repeat("[0-9]", 2, Some(4)), "[0-9]{2,4}");
        assert_eq!(repeat("\"a\" \"b\"", 0, None), "( \"a\" \"b\" )*");
    }
}
