//! Strings: JSON Schema `pattern` (ECMA-262 regular expressions) and formats as regular
//! expressions over code points, and their JSON spelling.
//!
//! 1. [`ecma_to_hir`] translates an ECMA-262 pattern into Rust regex syntax and parses it with
//!    regex-syntax. ECMA's `\d \w \s .` are ASCII / ECMA sets (not Unicode's), `{` that is not a
//!    quantifier is a literal, classes are re-written item by item. Refused, with the reason:
//!    look-ahead and look-behind (`(?=` `(?!` `(?<=` `(?<!`), backreferences (`\1`, `\k<n>`),
//!    word boundaries (`\b` `\B`), and anchors anywhere but at the ends of the pattern or of
//!    its top-level alternatives.
//! 2. A pattern matches anywhere in the string unless anchored: `abc` means `.*abc.*`.
//! 3. [`json_encode`] turns a regex over the string's *value* into a regex over its JSON
//!    *text*: every character may be written raw (except `"`, `\` and control characters,
//!    which JSON requires escaped), with its short escape (`\n`, `\/`...), or as `\uXXXX`
//!    (astral characters as a surrogate pair), upper- or lower-case hex.

use regex_syntax::hir::{Class, ClassUnicode, ClassUnicodeRange, Hir, HirKind, Look, Repetition};
use rustc_hash::FxHashMap;
use std::sync::OnceLock;

mod encode;
mod length;

pub(crate) use encode::*;
pub(crate) use length::*;

/// Any code point.
pub(crate) fn any_char() -> Hir {
    Hir::class(Class::Unicode(ClassUnicode::new([ClassUnicodeRange::new(
        '\0',
        char::MAX,
    )])))
}

fn any_string() -> Hir {
    Hir::repetition(Repetition {
        min: 0,
        max: None,
        greedy: true,
        sub: Box::new(any_char()),
    })
}

const ECMA_SPACE: &str = r"\x{9}-\x{D}\x{20}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000}\x{FEFF}";

/// Why a `pattern` cannot be used: its message says which part.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum PatternError {
    /// ECMA-262 that a finite automaton cannot match, or that no JSON string matches:
    /// look-around, backreferences, word boundaries, anchors inside the pattern, a lone
    /// surrogate.
    #[error("{0}")]
    Unsupported(&'static str),
    /// Not a valid ECMA-262 pattern.
    #[error("{0}")]
    Malformed(String),
}

/// Translates an ECMA-262 pattern into Rust regex syntax. `Err` names what is not supported.
pub(crate) fn ecma_to_rust(p: &str) -> Result<String, PatternError> {
    let cs: Vec<char> = p.chars().collect();
    let mut out = String::with_capacity(p.len() + 8);
    let mut i = 0;
    while i < cs.len() {
        let c = cs[i];
        match c {
            '\\' => {
                let (piece, used) = escape(&cs, i, false)?;
                out.push_str(&piece);
                i += used;
                continue;
            }
            '[' => {
                let (piece, used) = class(&cs, i)?;
                out.push_str(&piece);
                i += used;
                continue;
            }
            '.' => out.push_str(r"[^\n\r\x{2028}\x{2029}]"),
            '(' => {
                let rest: String = cs[i..cs.len().min(i + 4)].iter().collect();
                if rest.starts_with("(?=") || rest.starts_with("(?!") {
                    return Err(PatternError::Unsupported(
                        "look-ahead (?= (?! is not supported",
                    ));
                }
                if rest.starts_with("(?<=") || rest.starts_with("(?<!") {
                    return Err(PatternError::Unsupported(
                        "look-behind (?<= (?<! is not supported",
                    ));
                }
                if rest.starts_with("(?<") {
                    out.push_str("(?P<");
                    i += 3;
                    continue;
                }
                if rest.starts_with("(?") && !rest.starts_with("(?:") {
                    return Err(PatternError::Malformed(
                        "inline flags (?i) are not ECMA-262".into(),
                    ));
                }
                out.push('(');
            }
            '{' => {
                // A quantifier {n}, {n,}, {n,m}; anything else is a literal brace.
                let mut j = i + 1;
                while j < cs.len() && cs[j].is_ascii_digit() {
                    j += 1;
                }
                let mut ok = j > i + 1;
                if ok && j < cs.len() && cs[j] == ',' {
                    j += 1;
                    while j < cs.len() && cs[j].is_ascii_digit() {
                        j += 1;
                    }
                }
                ok = ok && j < cs.len() && cs[j] == '}';
                if ok {
                    out.extend(&cs[i..=j]);
                    i = j + 1;
                    continue;
                }
                out.push_str(r"\{");
            }
            '}' => out.push_str(r"\}"),
            ']' => out.push_str(r"\]"),
            '#' | '&' | '~' | ' ' => push_char(&mut out, c),
            c => out.push(c),
        }
        i += 1;
    }
    Ok(out)
}

fn push_char(out: &mut String, c: char) {
    use std::fmt::Write;
    let _ = write!(out, r"\x{{{:X}}}", c as u32);
}

fn hex_at(cs: &[char], at: usize, n: usize) -> Option<u32> {
    if at + n > cs.len() {
        return None;
    }
    let s: String = cs[at..at + n].iter().collect();
    if s.chars().all(|c| c.is_ascii_hexdigit()) {
        u32::from_str_radix(&s, 16).ok()
    } else {
        None
    }
}

/// An escape at `cs[i] == '\\'`: the Rust syntax for it and the characters used. Inside a
/// class, class escapes become nested classes and `\b` is backspace.
fn escape(cs: &[char], i: usize, in_class: bool) -> Result<(String, usize), PatternError> {
    let Some(&e) = cs.get(i + 1) else {
        return Err(PatternError::Malformed(
            "the pattern ends with a lone backslash".into(),
        ));
    };
    let one = |c: char| {
        let mut s = String::new();
        push_char(&mut s, c);
        s
    };
    let piece = match e {
        'd' => "[0-9]".to_string(),
        'D' => "[^0-9]".to_string(),
        'w' => "[A-Za-z0-9_]".to_string(),
        'W' => "[^A-Za-z0-9_]".to_string(),
        's' => format!("[{ECMA_SPACE}]"),
        'S' => format!("[^{ECMA_SPACE}]"),
        'b' if in_class => one('\u{8}'),
        'b' | 'B' => {
            return Err(PatternError::Unsupported(
                "word boundaries \\b \\B are not supported",
            ));
        }
        'n' => one('\n'),
        'r' => one('\r'),
        't' => one('\t'),
        'f' => one('\u{c}'),
        'v' => one('\u{b}'),
        '0' if !cs.get(i + 2).is_some_and(char::is_ascii_digit) => one('\0'),
        '1'..='9' => {
            return Err(PatternError::Unsupported(
                "backreferences (\\1) are not supported",
            ));
        }
        'k' if cs.get(i + 2) == Some(&'<') => {
            return Err(PatternError::Unsupported(
                "named backreferences (\\k<name>) are not supported",
            ));
        }
        'c' if cs.get(i + 2).is_some_and(char::is_ascii_alphabetic) => {
            let v = (cs[i + 2] as u32) % 32;
            return Ok((one(char::from_u32(v).expect("ASCII")), 3));
        }
        'x' => match hex_at(cs, i + 2, 2) {
            Some(v) => return Ok((one(char::from_u32(v).expect("byte")), 4)),
            None => one('x'),
        },
        'u' => {
            if cs.get(i + 2) == Some(&'{') {
                let close = cs[i + 3..]
                    .iter()
                    .position(|&c| c == '}')
                    .ok_or(PatternError::Malformed("unterminated \\u{...}".into()))?;
                let v = hex_at(cs, i + 3, close)
                    .ok_or(PatternError::Malformed("bad \\u{...} escape".into()))?;
                let c = char::from_u32(v).ok_or(PatternError::Malformed(
                    "\\u{...} is not a code point".into(),
                ))?;
                return Ok((one(c), close + 4));
            }
            let Some(v) = hex_at(cs, i + 2, 4) else {
                return Ok((one('u'), 2));
            };
            if (0xD800..0xDC00).contains(&v)
                && cs.get(i + 6) == Some(&'\\')
                && cs.get(i + 7) == Some(&'u')
                && let Some(lo) = hex_at(cs, i + 8, 4)
                && (0xDC00..0xE000).contains(&lo)
            {
                let c = 0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00);
                return Ok((one(char::from_u32(c).expect("astral")), 12));
            }
            match char::from_u32(v) {
                Some(c) => return Ok((one(c), 6)),
                None => {
                    return Err(PatternError::Unsupported(
                        "a lone surrogate \\uD8xx cannot match a JSON string",
                    ));
                }
            }
        }
        'p' | 'P' if cs.get(i + 2) == Some(&'{') => {
            let close = cs[i + 3..]
                .iter()
                .position(|&c| c == '}')
                .ok_or(PatternError::Malformed("unterminated \\p{...}".into()))?;
            let s: String = cs[i..i + close + 4].iter().collect();
            return Ok((s, close + 4));
        }
        c => one(c),
    };
    Ok((piece, 2))
}

/// A class at `cs[i] == '['`, rewritten item by item.
fn class(cs: &[char], i: usize) -> Result<(String, usize), PatternError> {
    let mut j = i + 1;
    let negated = cs.get(j) == Some(&'^');
    if negated {
        j += 1;
    }
    let mut items: Vec<String> = Vec::new();
    // Single characters of the class, to form ranges.
    let mut last_char: Option<char> = None;
    loop {
        let Some(&c) = cs.get(j) else {
            return Err(PatternError::Malformed(
                "unterminated character class".into(),
            ));
        };
        if c == ']' {
            j += 1;
            break;
        }
        // A range a-b (the '-' is literal at the ends).
        if c == '-'
            && let Some(a) = last_char
            && cs.get(j + 1).is_some_and(|&n| n != ']')
        {
            let (b, used) = class_atom(cs, j + 1)?;
            let Some(b) = b else {
                return Err(PatternError::Malformed(
                    "a range ends in a class escape such as \\d".into(),
                ));
            };
            if b < a {
                return Err(PatternError::Malformed(format!(
                    "character range out of order: U+{:04X} > U+{:04X}",
                    a as u32, b as u32
                )));
            }
            items.pop();
            let mut s = String::new();
            push_char(&mut s, a);
            s.push('-');
            push_char(&mut s, b);
            items.push(s);
            last_char = None;
            j += 1 + used;
            continue;
        }
        let (ch, used) = class_atom(cs, j)?;
        match ch {
            Some(ch) => {
                let mut s = String::new();
                push_char(&mut s, ch);
                items.push(s);
                last_char = Some(ch);
            }
            None => {
                let (piece, _) = escape(cs, j, true)?;
                items.push(piece);
                last_char = None;
            }
        }
        j += used;
    }
    let body = items.concat();
    let out = match (negated, body.is_empty()) {
        // [] matches nothing, [^] anything.
        (false, true) => r"[^\x{0}-\x{10FFFF}]".to_string(),
        (true, true) => r"[\x{0}-\x{10FFFF}]".to_string(),
        (false, false) => format!("[{body}]"),
        (true, false) => format!("[^{body}]"),
    };
    Ok((out, j - i))
}

/// One class item at `cs[j]`: `Some(char)` for a single character, `None` for a class
/// escape (`\d`...), with the characters used.
fn class_atom(cs: &[char], j: usize) -> Result<(Option<char>, usize), PatternError> {
    let c = cs[j];
    if c != '\\' {
        return Ok((Some(c), 1));
    }
    match cs.get(j + 1) {
        Some('d' | 'D' | 'w' | 'W' | 's' | 'S') => Ok((None, 2)),
        Some('p' | 'P') if cs.get(j + 2) == Some(&'{') => {
            let (_, used) = escape(cs, j, true)?;
            Ok((None, used))
        }
        _ => {
            let (piece, used) = escape(cs, j, true)?;
            // Single characters come back as \x{HEX}.
            let hex = piece
                .strip_prefix(r"\x{")
                .and_then(|s| s.strip_suffix('}'))
                .and_then(|h| u32::from_str_radix(h, 16).ok())
                .and_then(char::from_u32);
            match hex {
                Some(ch) => Ok((Some(ch), used)),
                None => Ok((None, used)),
            }
        }
    }
}

/// Parses an ECMA-262 pattern into a regex over the whole string value (anchored: an
/// unanchored pattern may be preceded and followed by anything).
pub(crate) fn ecma_to_hir(p: &str, nest_limit: u32) -> Result<Hir, PatternError> {
    let rust = ecma_to_rust(p)?;
    let hir = regex_syntax::ParserBuilder::new()
        .nest_limit(nest_limit)
        .build()
        .parse(&rust)
        .map_err(|e| {
            PatternError::Malformed(match &e {
                regex_syntax::Error::Parse(p) => p.kind().to_string(),
                regex_syntax::Error::Translate(t) => t.kind().to_string(),
                _ => e.to_string(),
            })
        })?;
    anchor(hir)
}

fn is_look(h: &Hir, look: Look) -> bool {
    matches!(h.kind(), HirKind::Look(l) if *l == look)
}

fn has_look(h: &Hir) -> bool {
    !h.properties().look_set().is_empty()
}

/// Makes a search pattern a whole-string pattern: `^`/`$` at the ends of the pattern (or of
/// each top-level alternative) anchor it, elsewhere it may be surrounded by anything.
fn anchor(h: Hir) -> Result<Hir, PatternError> {
    let inner_look =
        || PatternError::Unsupported("anchors (^ $) are supported only at the ends of the pattern");
    match h.kind() {
        HirKind::Alternation(xs) if has_look(&h) => {
            // The unanchored alternatives share one `.*( | ).*` (a copy of `.*` after each
            // would make the automaton's subset construction exponential in their number).
            let (free, anchored): (Vec<Hir>, Vec<Hir>) =
                xs.iter().cloned().partition(|x| !has_look(x));
            let mut out: Vec<Hir> = anchored.into_iter().map(anchor).collect::<Result<_, _>>()?;
            if !free.is_empty() {
                out.push(anchor(Hir::alternation(free))?);
            }
            Ok(Hir::alternation(out))
        }
        HirKind::Capture(c) if has_look(&c.sub) => anchor((*c.sub).clone()),
        HirKind::Look(Look::Start | Look::End) => Ok(any_string()),
        HirKind::Concat(xs) => {
            let mut xs: Vec<Hir> = xs.clone();
            let start = xs.first().is_some_and(|x| is_look(x, Look::Start));
            if start {
                xs.remove(0);
            }
            let end = xs.last().is_some_and(|x| is_look(x, Look::End));
            if end {
                xs.pop();
            }
            if xs.iter().any(has_look) {
                // `^(a|b)$`-like: anchors inside a single group.
                if xs.len() == 1 && !start && !end {
                    return anchor(xs.pop().expect("one"));
                }
                return Err(inner_look());
            }
            let mut parts = Vec::with_capacity(xs.len() + 2);
            if !start {
                parts.push(any_string());
            }
            parts.extend(xs);
            if !end {
                parts.push(any_string());
            }
            Ok(Hir::concat(parts))
        }
        _ if has_look(&h) => Err(inner_look()),
        _ => Ok(Hir::concat(vec![any_string(), h, any_string()])),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use corral_grammar::LexemeDfa;

    fn dfa(h: &Hir) -> LexemeDfa {
        LexemeDfa::build(h, 1 << 26).unwrap()
    }

    fn pattern_dfa(p: &str) -> LexemeDfa {
        dfa(&ecma_to_hir(p, 200).unwrap_or_else(|e| panic!("{p}: {e}")))
    }

    #[test]
    fn a_plain_literal_is_the_concatenation_of_its_characters_encodings() {
        for text in [
            "apiVersion",
            "",
            "a b~\u{7f}",
            "é😀x",
            "say \"hi\"",
            "back\\slash",
            "tab\there\n",
        ] {
            for spelling in [Spelling::Plain, Spelling::Any] {
                let by_char = Hir::concat(
                    text.chars()
                        .map(|c| encode::encode_class(&[(c, c)], spelling))
                        .collect(),
                );
                let h = json_encode(&Hir::literal(text.as_bytes()), spelling);
                assert_eq!(h, by_char, "{text:?} {spelling:?}");
            }
        }
    }

    #[test]
    fn ecma_patterns() {
        let d = pattern_dfa(r"^\d{3}-[a-z]+$");
        assert!(d.matches(b"123-abc"));
        assert!(!d.matches("١٢٣-abc".as_bytes()), "\\d is ASCII in ECMA");
        assert!(!d.matches(b"x123-abc"));
        let d = pattern_dfa("abc");
        assert!(d.matches(b"xxabcyy"));
        assert!(!d.matches(b"ab"));
        let d = pattern_dfa(r"^a{|^b}$|c]");
        assert!(d.matches(b"a{zz"));
        assert!(d.matches(b"b}"));
        assert!(d.matches(b"xc]x"));
        let d = pattern_dfa(r"^[\w.-]+@[^\s@]+$");
        assert!(d.matches(b"a.b-c@x.y"));
        assert!(!d.matches(b"a b@x"));
        let d = pattern_dfa(r"^[+--]$");
        assert!(d.matches(b",") && d.matches(b"+") && !d.matches(b"a"));
        let d = pattern_dfa(r"^\u00e9\uD83D\uDE00\/$");
        assert!(d.matches("é😀/".as_bytes()));
        let d = pattern_dfa(r"^(?<year>\d{4})$");
        assert!(d.matches(b"2024"));
        let d = pattern_dfa(r"^.$");
        assert!(!d.matches(b"\n") && d.matches(b"x"));
        for bad in [
            r"(?=a)", r"a(?!b)", r"(a)\1", r"\bword", "^a|(b$)c", r"(?<=x)y",
        ] {
            assert!(ecma_to_hir(bad, 200).is_err(), "{bad}");
        }
    }

    #[test]
    fn lengths() {
        let h = ecma_to_hir(r"^[a-z][a-z0-9_]+$", 200).unwrap();
        assert_eq!(char_len(&h), (2, None));
        let Restricted::To(r) = restrict_length(&h, 3, Some(5)) else {
            panic!("one repetition restricts");
        };
        let d = dfa(&r);
        assert!(!d.matches(b"ab") && d.matches(b"abc") && d.matches(b"abcde"));
        assert!(!d.matches(b"abcdef"));
        let h = ecma_to_hir(r"^[A-Z]{2}$", 200).unwrap();
        assert_eq!(restrict_length(&h, 3, None), Restricted::Nothing);
        let h = ecma_to_hir(r"x\d+y\d+", 200).unwrap();
        assert_eq!(
            restrict_length(&h, 0, Some(10)),
            Restricted::NotOneRepetition
        );
    }

    #[test]
    fn json_spellings() {
        let h = json_encode(
            &ecma_to_hir(r#"^[a"\\é😀\n/]+$"#, 200).unwrap(),
            Spelling::Any,
        );
        let d = dfa(&h);
        for ok in [
            r#"a"#,
            r#"\u0061"#,
            r#"\u00E9\u00e9é"#,
            r#"\""#,
            r#"\\"#,
            r#"\n\u000A"#,
            r#"\/\u002f/"#,
            r#"\ud83d\ude00😀"#,
        ] {
            assert!(d.matches(ok.as_bytes()), "{ok}");
        }
        for bad in [r#"""#, r#"\"#, "\n", r#"\u0062"#, r#"\ud83d"#, r#"\t"#] {
            assert!(!d.matches(bad.as_bytes()), "{bad}");
        }
        // Every BMP character by its escape, exactly.
        let h = json_encode(
            &Hir::class(Class::Unicode(ClassUnicode::new([
                ClassUnicodeRange::new('\u{100}', '\u{2FF}'),
                ClassUnicodeRange::new('\u{E123}', '\u{FFFF}'),
            ]))),
            Spelling::Any,
        );
        let d = dfa(&h);
        for v in (0u32..0x10000).step_by(7) {
            let inside = (0x100..=0x2FF).contains(&v) || v >= 0xE123;
            assert_eq!(d.matches(format!("\\u{v:04x}").as_bytes()), inside, "{v:x}");
        }
    }
}
