//! The key that names a regex in the DFA and mask caches ([`regex_key`]).

use regex_syntax::hir::{Class, Hir, HirKind};
use std::fmt::Write;

/// A string that names `hir` in caches: equal keys mean equal regexes (the encoding is
/// one-to-one, but for the index and name of a capture group, which change neither the
/// language nor the automaton), so a DFA cached by key serves every grammar whose lexeme
/// has that key, state for state. Written in one pass over the regex: a grammar makes one
/// per run of regular items, and `regex_syntax`'s printer (which keys once were) took a
/// tenth of the compile of a large schema.
///
/// Each node is self-delimiting and starts with its own tag: `'` a literal (`'` and `\`
/// escaped, bytes that are not UTF-8 as `\xHH`), `[` a class of characters, `B[` a class
/// of bytes, `^{…}` a look-around, `R{min,max}(…)` a repetition (`R?` lazy), `C(…)` a
/// capture (its index and name do not change the language, so they are left out),
/// `(:…)` a concatenation, `(|…)` an alternation with `|` between its branches, and
/// `E` the empty regex. Nothing else may start a key: other keys are built from these
/// (`#t ` for whole tables, `(?:a)&(?:b)` for products) and cannot be one node.
pub fn regex_key(hir: &Hir) -> String {
    enum Step<'h> {
        Node(&'h Hir),
        Text(&'static str),
    }
    let mut out = String::with_capacity(64);
    let mut stack = vec![Step::Node(hir)];
    while let Some(step) = stack.pop() {
        let h = match step {
            Step::Text(t) => {
                out.push_str(t);
                continue;
            }
            Step::Node(h) => h,
        };
        match h.kind() {
            HirKind::Empty => out.push('E'),
            HirKind::Literal(lit) => {
                out.push('\'');
                literal(&mut out, &lit.0);
                out.push('\'');
            }
            HirKind::Class(Class::Unicode(c)) => {
                out.push('[');
                for r in c.ranges() {
                    class_char(&mut out, r.start());
                    out.push('-');
                    class_char(&mut out, r.end());
                }
                out.push(']');
            }
            HirKind::Class(Class::Bytes(c)) => {
                out.push_str("B[");
                for r in c.ranges() {
                    hex(&mut out, r.start().into(), 2);
                    hex(&mut out, r.end().into(), 2);
                }
                out.push(']');
            }
            HirKind::Look(look) => {
                let _ = write!(out, "^{{{look:?}}}");
            }
            HirKind::Repetition(r) => {
                out.push('R');
                if !r.greedy {
                    out.push('?');
                }
                out.push('{');
                decimal(&mut out, r.min);
                out.push(',');
                if let Some(max) = r.max {
                    decimal(&mut out, max);
                }
                out.push_str("}(");
                stack.push(Step::Text(")"));
                stack.push(Step::Node(&r.sub));
            }
            HirKind::Capture(c) => {
                out.push_str("C(");
                stack.push(Step::Text(")"));
                stack.push(Step::Node(&c.sub));
            }
            HirKind::Concat(xs) => {
                out.push_str("(:");
                stack.push(Step::Text(")"));
                stack.extend(xs.iter().rev().map(Step::Node));
            }
            HirKind::Alternation(xs) => {
                out.push_str("(|");
                stack.push(Step::Text(")"));
                for (i, x) in xs.iter().enumerate().rev() {
                    stack.push(Step::Node(x));
                    if i > 0 {
                        stack.push(Step::Text("|"));
                    }
                }
            }
        }
    }
    out
}

/// Literal bytes between quotes: UTF-8 as is (`'` and `\` escaped), other bytes as `\xHH`.
fn literal(out: &mut String, mut bytes: &[u8]) {
    while !bytes.is_empty() {
        let (text, rest) = match std::str::from_utf8(bytes) {
            Ok(s) => (s, &[][..]),
            Err(e) => {
                let (ok, bad) = bytes.split_at(e.valid_up_to());
                (std::str::from_utf8(ok).expect("valid up to here"), bad)
            }
        };
        for ch in text.chars() {
            if ch == '\'' || ch == '\\' {
                out.push('\\');
            }
            out.push(ch);
        }
        if let Some((&b, more)) = rest.split_first() {
            out.push_str("\\x");
            hex(out, b.into(), 2);
            bytes = more;
        } else {
            bytes = rest;
        }
    }
}

/// One end of a character range: printable ASCII but `]`, `-` and `\` as is, the rest as
/// `\u{…}`.
fn class_char(out: &mut String, ch: char) {
    if ch.is_ascii_graphic() && !matches!(ch, ']' | '-' | '\\') {
        out.push(ch);
    } else {
        out.push_str("\\u{");
        hex(out, ch.into(), 1);
        out.push('}');
    }
}

/// `x` in decimal.
fn decimal(out: &mut String, x: u32) {
    let mut digits = [0u8; 10];
    let (mut x, mut n) = (x, 0);
    loop {
        digits[n] = b'0' + (x % 10) as u8;
        n += 1;
        x /= 10;
        if x == 0 {
            break;
        }
    }
    out.extend(digits[..n].iter().rev().map(|&d| char::from(d)));
}

/// `x` in lowercase hexadecimal, at least `width` digits (written without `fmt`, which
/// took most of a key's time: a JSON string's classes have hundreds of ranges).
fn hex(out: &mut String, x: u32, width: u32) {
    let digits = (32 - x.leading_zeros()).div_ceil(4).max(width);
    for i in (0..digits).rev() {
        let d = (x >> (4 * i)) & 0xf;
        out.push(char::from_digit(d, 16).expect("a hex digit"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use regex_syntax::ParserBuilder;

    fn key(re: &str) -> String {
        regex_key(&ParserBuilder::new().utf8(false).build().parse(re).unwrap())
    }

    #[test]
    fn keys_tell_regexes_apart_and_agree_on_equal_ones() {
        let res = [
            "a",
            "ab",
            "a|b",
            "[ab]",
            "(?:a|b)c",
            "a(?:b|c)",
            "a*",
            "a*?",
            "a{2,5}",
            "a{2,}",
            "(a)",
            "'",
            "\\\\",
            "\\\\'",
            "[\\]-]",
            "[\\x00-\\x{10FFFF}]",
            "(?-u:[\\x80-\\xff])",
            "(?-u:\\xff)",
            "^a$",
            "",
            "a|",
            "(?:a|b)|c",
        ];
        let keys: Vec<String> = res.iter().map(|r| key(r)).collect();
        for (i, a) in keys.iter().enumerate() {
            for (j, b) in keys.iter().enumerate() {
                if i != j {
                    let same = ParserBuilder::new()
                        .utf8(false)
                        .build()
                        .parse(res[i])
                        .unwrap()
                        == ParserBuilder::new()
                            .utf8(false)
                            .build()
                            .parse(res[j])
                            .unwrap();
                    assert_eq!(a == b, same, "{} vs {}: {a} / {b}", res[i], res[j]);
                }
            }
        }
        assert_eq!(key("a(?:b|c)"), key("a(?:b|c)"));
        // Capture groups' numbers and names are left out: they change no automaton.
        assert_eq!(key("(a)(b)"), key("(a)(?P<n>b)"));
        assert_eq!(key("(a)"), "C('a')");
        assert_eq!(key("(?-u:\\xff)"), "'\\xff'");
        assert_eq!(key("a{2,5}"), "R{2,5}('a')");
        assert_eq!(key("a{0,1234567}"), "R{0,1234567}('a')");
        assert_eq!(key("[\\x00-\\x{10FFFF}]"), "[\\u{0}-\\u{10ffff}]");
        assert_eq!(key("(?-u:[\\x05-\\xf0])"), "B[05f0]");
    }
}
