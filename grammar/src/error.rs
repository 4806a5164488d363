//! Typed, positioned errors.
//!
//! Every error the front ends produce carries a [`Span`] into the grammar source. A
//! [`GrammarError`] renders as `origin:line:col: message`, followed by the source line and a
//! caret under the offending column, the way compilers print diagnostics.

use std::fmt;

/// A half-open byte range `start..end` in a source text.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Span {
    /// Byte offset of the first byte.
    pub start: usize,
    /// Byte offset just past the last byte.
    pub end: usize,
}

impl Span {
    /// The span `start..end` (not checked: `start` should not exceed `end`).
    pub fn new(start: usize, end: usize) -> Span {
        Span { start, end }
    }

    /// The smallest span covering both.
    pub fn to(self, other: Span) -> Span {
        Span::new(self.start.min(other.start), self.end.max(other.end))
    }
}

/// What went wrong, without the position.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ErrorKind {
    /// The grammar's bytes are not UTF-8; the span is the first invalid byte.
    #[error("grammar is not valid UTF-8")]
    InvalidUtf8,
    /// A character that starts no GBNF token; holds it.
    #[error("unexpected character {0:?}")]
    UnexpectedChar(char),
    /// A `"..."` literal that reaches the end of the input.
    #[error("unterminated literal: missing closing '\"'")]
    UnterminatedLiteral,
    /// A `[...]` class that reaches the end of the input.
    #[error("unterminated character class: missing closing ']'")]
    UnterminatedClass,
    /// A `<...>` token reference that reaches the end of its line or of the input.
    #[error("unterminated token reference: missing closing '>'")]
    UnterminatedToken,
    /// A `!` that is not followed by `<`.
    #[error("'!' must be followed by a token reference such as <[42]> or <|end|>")]
    BangWithoutToken,
    /// `<[...]>` that is not a decimal `u32` closed by `]>`; holds the text after `<[`.
    #[error("invalid token id in <[...]>: {0}")]
    BadTokenId(String),
    /// A backslash escape that GBNF does not define; holds the character after the backslash.
    #[error(
        "unknown escape '\\{0}' (known: \\n \\r \\t \\\\ \\\" \\[ \\] \\xHH \\uHHHH \\UHHHHHHHH)"
    )]
    UnknownEscape(char),
    /// A backslash that ends the input, with nothing after it to escape.
    #[error("a backslash ends the input: nothing follows it to escape")]
    EscapeAtEnd,
    /// `\x`, `\u` or `\U` without as many hex digits as it needs.
    #[error("escape '\\{escape}' needs exactly {digits} hex digits")]
    BadHexEscape {
        /// The escape letter: `x`, `u` or `U`.
        escape: char,
        /// The hex digits it needs: 2, 4 or 8.
        digits: usize,
    },
    /// A hex escape whose value is a surrogate or above U+10FFFF; holds the value.
    #[error("U+{0:X} is not a Unicode scalar value (surrogate or above U+10FFFF)")]
    InvalidCodePoint(u32),
    /// A class range `a-b` whose end comes before its start (also checked in built rules).
    #[error("character range is reversed: U+{start:04X} > U+{end:04X}")]
    ReversedRange {
        /// The code point before the `-`.
        start: u32,
        /// The code point after the `-`, below `start`.
        end: u32,
    },
    /// A malformed `{m,n}`: a count that does not fit in a `u32`, a missing number or brace,
    /// `{,}`, or a minimum above the maximum; holds the detail.
    #[error("bad repetition: {0}")]
    BadRepetition(String),
    /// Something the GBNF parser does not take at this point. Also a rule built by a program
    /// that GBNF text could not express (a bad rule name or token reference).
    #[error("{found}, expected {expected}")]
    Unexpected {
        /// What was found, as a phrase (`unexpected '|'`, `unexpected end of input`).
        found: String,
        /// What could come there instead, with a hint where one helps.
        expected: String,
    },
    /// A reference to a rule that is not defined; holds its name.
    #[error("undefined rule '{0}'")]
    UndefinedRule(String),
    /// A rule name defined twice; the span is the second definition's name.
    #[error("rule '{name}' is defined twice{}", first_line.map_or(String::new(), |l| format!(" (first definition at line {l})")))]
    DuplicateRule {
        /// The rule's name.
        name: String,
        /// 1-based line of the first definition; `None` when the rules have no source text.
        first_line: Option<usize>,
    },
    /// The start rule is not defined (also the error for a grammar with no rules).
    #[error("grammar has no start rule '{name}' (defined rules: {defined})")]
    MissingStartRule {
        /// The start rule's name.
        name: String,
        /// Up to eight defined rule names joined by `, `, or `none` when there are no rules.
        defined: String,
    },
    /// The start rule derives no string at all; holds its name.
    #[error("the grammar's language is empty: rule '{0}' derives no string")]
    EmptyLanguage(String),
    /// A compile limit of [`Limits`](crate::Limits) was exceeded.
    #[error("limit exceeded: {what} reached {value}, more than {limit_name} = {limit}")]
    Limit {
        /// What was measured, as a phrase for the message.
        what: String,
        /// What it had reached when the limit was found exceeded. Counting stops there, so
        /// the whole may be larger (a lexeme's automaton reports the limit plus one).
        value: usize,
        /// The [`Limits`](crate::Limits) field that bounds it.
        limit_name: &'static str,
        /// That field's value.
        limit: usize,
    },
    /// An operand of `&` or `~` that is not regular: it names a rule that is not regular,
    /// holds a token reference, or nests `&`/`~` inside a sequence, alternative or
    /// repetition; holds the reason.
    #[error("operands of '&' and '~' must be regular expressions: {0}")]
    NotRegularOperand(String),
    /// A regular expression that cannot become a lexeme DFA: a regex syntax error, an anchor
    /// or word boundary, or another failure to build the automaton; holds the message.
    #[error("cannot compile lexeme: {0}")]
    Lexeme(String),
}

/// A grammar error with its position in the source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GrammarError {
    /// What went wrong.
    pub kind: ErrorKind,
    /// The bytes of the source it concerns; `0..0` for an error with no place.
    pub span: Span,
    /// Where the source came from (a file name, `<string>`, ...).
    pub origin: String,
    /// 1-based line and column (in characters) of `span.start`, with the text of that line;
    /// `None` when the error has no place in the source.
    pub location: Option<Location>,
}

/// Characters of the source line shown on each side of an error's caret.
pub const CARET_WINDOW: usize = 80;

/// Line and column of a byte offset, with the line's text (for the caret display).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Location {
    /// 1-based line number.
    pub line: usize,
    /// 1-based column, counted in characters (a tab counts as one).
    pub col: usize,
    /// The text of that line, without its line ending.
    pub line_text: String,
}

impl Location {
    /// Locates byte `offset` of `text` (clamped to its length and to a char boundary).
    pub fn of(text: &str, offset: usize) -> Location {
        let mut offset = offset.min(text.len());
        while !text.is_char_boundary(offset) {
            offset -= 1;
        }
        // Lines end at "\n", "\r\n" or a "\r" alone (the GBNF lexer takes all three).
        let bytes = text.as_bytes();
        let ends_line =
            |i: usize| bytes[i] == b'\n' || (bytes[i] == b'\r' && bytes.get(i + 1) != Some(&b'\n'));
        let line_start = (0..offset)
            .rev()
            .find(|&i| ends_line(i))
            .map_or(0, |i| i + 1);
        let line_end = text[offset..]
            .find(['\n', '\r'])
            .map_or(text.len(), |i| offset + i);
        let line = (0..line_start).filter(|&i| ends_line(i)).count() + 1;
        let col = text[line_start..offset].chars().count() + 1;
        Location {
            line,
            col,
            line_text: text[line_start..line_end].to_string(),
        }
    }

    /// The source line and a caret line under column `col`. A long line is cut to
    /// `CARET_WINDOW` (80) characters on each side of the caret (`...` marks a cut); control
    /// characters other than tabs show as `?`, so an error never echoes raw control bytes.
    /// Tabs before the column are kept so the caret lines up in a terminal.
    pub fn caret_lines(&self) -> String {
        let chars: Vec<char> = self.line_text.chars().collect();
        let at = (self.col - 1).min(chars.len());
        let start = at.saturating_sub(CARET_WINDOW);
        let end = (at + CARET_WINDOW).min(chars.len());
        let shown = |c: char| if c.is_control() && c != '\t' { '?' } else { c };
        let mut line = String::new();
        let mut pad = String::new();
        if start > 0 {
            line.push_str("...");
            pad.push_str("   ");
        }
        for (i, &c) in chars[start..end].iter().enumerate() {
            line.push(shown(c));
            if start + i < at {
                pad.push(if c == '\t' { '\t' } else { ' ' });
            }
        }
        if end < chars.len() {
            line.push_str("...");
        }
        format!("{line}\n{pad}^")
    }
}

impl GrammarError {
    /// An error at `span` of `text`.
    pub fn at(kind: ErrorKind, span: Span, origin: &str, text: &str) -> GrammarError {
        GrammarError {
            kind,
            span,
            origin: origin.to_string(),
            location: Some(Location::of(text, span.start)),
        }
    }

    /// An error with no place in the source.
    pub fn unplaced(kind: ErrorKind, origin: &str) -> GrammarError {
        GrammarError {
            kind,
            span: Span::default(),
            origin: origin.to_string(),
            location: None,
        }
    }
}

impl fmt::Display for GrammarError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_positioned(f, &self.origin, self.location.as_ref(), &self.kind)
    }
}

/// How every positioned error of corral reads: `origin:line:col: what` and the caret lines
/// under the source, or `origin: what` where there is no place.
pub fn write_positioned(
    f: &mut fmt::Formatter<'_>,
    origin: &str,
    location: Option<&Location>,
    what: &dyn fmt::Display,
) -> fmt::Result {
    match location {
        Some(loc) => write!(
            f,
            "{origin}:{}:{}: {what}\n{}",
            loc.line,
            loc.col,
            loc.caret_lines()
        ),
        None => write!(f, "{origin}: {what}"),
    }
}

impl std::error::Error for GrammarError {}

/// Errors while recognizing input (not grammar errors): a configured limit was hit. Boxed,
/// so `Result<bool, RecognizeError>` stays small on the per-byte path.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RecognizeError {
    /// A configured recognizer limit was hit; the box says which and by how much.
    #[error("limit exceeded while parsing: {} reached {}, more than {} = {}", .0.what, .0.value, .0.limit_name, .0.limit)]
    Limit(Box<LimitHit>),
}

/// Which limit was hit, and by how much.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LimitHit {
    /// What was counted, as a phrase for the message ("Earley items in one set").
    pub what: &'static str,
    /// How much it reached (for some limits just the limit plus one).
    pub value: usize,
    /// The [`Limits`](crate::Limits) field that bounds it, such as `max_items_per_set`.
    pub limit_name: &'static str,
    /// That limit's configured value.
    pub limit: usize,
}

impl RecognizeError {
    /// A [`RecognizeError::Limit`]: `what` reached `value`, more than `limit_name` = `limit`.
    pub fn limit(
        what: &'static str,
        value: usize,
        limit_name: &'static str,
        limit: usize,
    ) -> RecognizeError {
        RecognizeError::Limit(Box::new(LimitHit {
            what,
            value,
            limit_name,
            limit,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn location_counts_lines_and_chars() {
        let text = "ab\ncdé f\n";
        let loc = Location::of(text, text.find('f').unwrap());
        assert_eq!((loc.line, loc.col), (2, 5));
        assert_eq!(loc.line_text, "cdé f");
        assert_eq!(loc.caret_lines(), "cdé f\n    ^");
    }

    #[test]
    fn location_takes_every_line_ending() {
        for text in ["ab\ncd f\n", "ab\r\ncd f\r\n", "ab\rcd f\r"] {
            let loc = Location::of(text, text.find('f').unwrap());
            assert_eq!((loc.line, loc.col), (2, 4), "{text:?}");
            assert_eq!(loc.line_text, "cd f", "{text:?}");
        }
        // The "\n" of a "\r\n" is on the line it ends.
        let text = "ab\r\ncd";
        assert_eq!(Location::of(text, 3).line, 1);
        assert_eq!(Location::of(text, 4).line, 2);
    }

    #[test]
    fn grammar_errors_show_a_window_of_a_long_line_without_control_bytes() {
        let text = format!("root ::= \"a\" {} \u{1} ]", "x".repeat(1000));
        let loc = Location::of(&text, text.find('\u{1}').unwrap());
        let shown = loc.caret_lines();
        let (line, caret) = shown.split_once('\n').unwrap();
        assert!(line.starts_with("...x") && line.contains('?'), "{line}");
        assert!(!shown.contains('\u{1}'));
        assert!(
            line.chars().count() <= 2 * CARET_WINDOW + 6,
            "{}",
            line.len()
        );
        // The caret still sits under the offending character.
        assert_eq!(line.chars().nth(caret.chars().count() - 1), Some('?'));
    }

    #[test]
    fn display_has_origin_position_and_caret() {
        let text = "root ::= valeu\n";
        let e = GrammarError::at(
            ErrorKind::UndefinedRule("valeu".into()),
            Span::new(9, 14),
            "g.gbnf",
            text,
        );
        assert_eq!(
            e.to_string(),
            "g.gbnf:1:10: undefined rule 'valeu'\nroot ::= valeu\n         ^"
        );
    }
}
