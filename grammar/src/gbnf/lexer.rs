//! Hand-written tokenizer for GBNF, feeding the lalrpop-generated parser.
//!
//! GBNF is newline-sensitive in one place only: outside parentheses a rule ends at the end of
//! its line, unless the line ends with `|` (or with `::=`). The lexer resolves that, so the
//! parser sees a `Newline` token exactly where a rule may end, and never two in a row.
//! Literals, classes, token references and `{m,n}` are scanned whole here, which keeps
//! escape handling and its error positions in one place.

use crate::ast::{ClassAst, TokenAst, TokenTarget};
use crate::error::{ErrorKind, Span};

/// A GBNF token, as the parser sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Tok<'a> {
    /// A rule name: ASCII letters, digits and `-`.
    Name(&'a str),
    /// `::=`.
    Define,
    /// `|`.
    Pipe,
    /// `(`.
    LParen,
    /// `)`.
    RParen,
    /// A `"..."` literal, escapes resolved.
    Literal(Vec<char>),
    /// A `[...]` or `[^...]` class, escapes resolved.
    Class(ClassAst),
    /// `.`.
    Dot,
    /// `*`.
    Star,
    /// `+`.
    Plus,
    /// `?`.
    Question,
    /// `{m}`, `{m,}`, `{m,n}` (and `{,n}`, read as `{0,n}`).
    Repeat(u32, Option<u32>),
    /// A token reference: `<[42]>`, `<|end|>`, either with `!` before it.
    Token(TokenAst),
    /// A line break (with any blank or comment lines after it) where a rule may end: outside
    /// parentheses, after a token other than `|`, `::=`, `&` or `~`. It covers no bytes.
    Newline,
    /// `&`: intersection (a corral extension).
    Amp,
    /// `~`: complement (a corral extension).
    Tilde,
}

/// A lexing error (also the parser's user error type).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LexError {
    /// What went wrong.
    pub kind: ErrorKind,
    /// The bytes of the source it covers.
    pub span: Span,
}

impl LexError {
    fn new(kind: ErrorKind, start: usize, end: usize) -> LexError {
        LexError {
            kind,
            span: Span::new(start, end),
        }
    }
}

/// One item from the lexer: a token with its start and end byte offsets, or an error.
pub type Spanned<'a> = Result<(usize, Tok<'a>, usize), LexError>;

/// The GBNF lexer: an iterator of [`Spanned`] tokens over a grammar's text, for the parser.
#[derive(Debug)]
pub struct Lexer<'a> {
    text: &'a str,
    pos: usize,
    depth: usize,
    /// Whether a newline here would end a rule: false at the start, after `|`, `::=`, `(`
    /// and after another newline.
    newline_significant: bool,
}

impl<'a> Lexer<'a> {
    /// A lexer at the start of `text`.
    pub fn new(text: &'a str) -> Lexer<'a> {
        Lexer {
            text,
            pos: 0,
            depth: 0,
            newline_significant: false,
        }
    }

    fn peek(&self) -> Option<char> {
        self.text[self.pos..].chars().next()
    }

    fn peek2(&self) -> Option<char> {
        let mut it = self.text[self.pos..].chars();
        it.next();
        it.next()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += c.len_utf8();
        Some(c)
    }

    /// Skips spaces, tabs and comments; returns true if a newline was crossed.
    fn skip_space(&mut self) -> bool {
        let mut newline = false;
        while let Some(c) = self.peek() {
            match c {
                ' ' | '\t' => {
                    self.pos += 1;
                }
                '\n' | '\r' => {
                    newline = true;
                    self.pos += 1;
                }
                '#' => {
                    while let Some(c) = self.peek() {
                        if c == '\n' || c == '\r' {
                            break;
                        }
                        self.bump();
                    }
                }
                _ => break,
            }
        }
        newline
    }

    /// Reads one (possibly escaped) character of a literal or class body.
    fn char_escape(&mut self) -> Result<char, LexError> {
        let start = self.pos;
        let c = self.bump().expect("caller checked for end of input");
        if c != '\\' {
            return Ok(c);
        }
        let Some(e) = self.bump() else {
            return Err(LexError::new(ErrorKind::EscapeAtEnd, start, self.pos));
        };
        let digits = match e {
            'n' => return Ok('\n'),
            'r' => return Ok('\r'),
            't' => return Ok('\t'),
            '\\' | '"' | '[' | ']' => return Ok(e),
            'x' => 2,
            'u' => 4,
            'U' => 8,
            other => {
                return Err(LexError::new(
                    ErrorKind::UnknownEscape(other),
                    start,
                    self.pos,
                ));
            }
        };
        let hex_start = self.pos;
        let hex: String = self.text[hex_start..]
            .chars()
            .take(digits)
            .take_while(|c| c.is_ascii_hexdigit())
            .collect();
        if hex.len() != digits {
            return Err(LexError::new(
                ErrorKind::BadHexEscape { escape: e, digits },
                start,
                hex_start + hex.len(),
            ));
        }
        self.pos += digits;
        let value = u32::from_str_radix(&hex, 16).expect("checked hex digits");
        char::from_u32(value)
            .ok_or_else(|| LexError::new(ErrorKind::InvalidCodePoint(value), start, self.pos))
    }

    fn literal(&mut self, start: usize) -> Result<Tok<'a>, LexError> {
        let mut chars = Vec::new();
        loop {
            match self.peek() {
                None => {
                    return Err(LexError::new(
                        ErrorKind::UnterminatedLiteral,
                        start,
                        self.pos,
                    ));
                }
                Some('"') => {
                    self.pos += 1;
                    return Ok(Tok::Literal(chars));
                }
                Some(_) => chars.push(self.char_escape()?),
            }
        }
    }

    fn class(&mut self, start: usize) -> Result<Tok<'a>, LexError> {
        let negated = self.peek() == Some('^');
        if negated {
            self.pos += 1;
        }
        let mut ranges = Vec::new();
        loop {
            match self.peek() {
                None => return Err(LexError::new(ErrorKind::UnterminatedClass, start, self.pos)),
                Some(']') => {
                    self.pos += 1;
                    return Ok(Tok::Class(ClassAst { negated, ranges }));
                }
                Some(_) => {
                    let lo_start = self.pos;
                    let lo = self.char_escape()?;
                    let mut hi = lo;
                    if self.peek() == Some('-') && !matches!(self.peek2(), Some(']') | None) {
                        self.pos += 1;
                        hi = self.char_escape()?;
                        if hi < lo {
                            return Err(LexError::new(
                                ErrorKind::ReversedRange {
                                    start: lo as u32,
                                    end: hi as u32,
                                },
                                lo_start,
                                self.pos,
                            ));
                        }
                    }
                    ranges.push((lo, hi));
                }
            }
        }
    }

    fn token_ref(&mut self, start: usize, negated: bool) -> Result<Tok<'a>, LexError> {
        // At '<'.
        let open = self.pos;
        self.pos += 1;
        if self.peek() == Some('[') {
            self.pos += 1;
            let digits_start = self.pos;
            while self.peek().is_some_and(|c| c.is_ascii_digit()) {
                self.pos += 1;
            }
            let digits = &self.text[digits_start..self.pos];
            if !self.text[self.pos..].starts_with("]>") {
                let shown = self.text[digits_start..]
                    .chars()
                    .take_while(|c| *c != '>' && *c != '\n')
                    .collect::<String>();
                return Err(LexError::new(ErrorKind::BadTokenId(shown), start, self.pos));
            }
            let id = digits.parse::<u32>().map_err(|_| {
                LexError::new(ErrorKind::BadTokenId(digits.into()), start, self.pos)
            })?;
            self.pos += 2;
            return Ok(Tok::Token(TokenAst {
                negated,
                target: TokenTarget::Id(id),
            }));
        }
        loop {
            match self.peek() {
                None | Some('\n') | Some('\r') => {
                    return Err(LexError::new(ErrorKind::UnterminatedToken, start, self.pos));
                }
                Some('>') => {
                    self.pos += 1;
                    return Ok(Tok::Token(TokenAst {
                        negated,
                        target: TokenTarget::Text(self.text[open..self.pos].to_string()),
                    }));
                }
                Some(_) => {
                    self.bump();
                }
            }
        }
    }

    fn number(&mut self) -> Option<Result<u32, LexError>> {
        let start = self.pos;
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.pos += 1;
        }
        if start == self.pos {
            return None;
        }
        Some(self.text[start..self.pos].parse::<u32>().map_err(|_| {
            LexError::new(
                ErrorKind::BadRepetition("count does not fit in 32 bits".into()),
                start,
                self.pos,
            )
        }))
    }

    fn repeat(&mut self, start: usize) -> Result<Tok<'a>, LexError> {
        // After '{'. Spaces are allowed around the numbers, as in llama.cpp.
        self.skip_inline_space();
        let min = match self.number() {
            Some(n) => Some(n?),
            None => None,
        };
        self.skip_inline_space();
        let expected = |l: &Lexer, what: &str| {
            let found = l
                .peek()
                .map_or("end of input".to_string(), |c| format!("{c:?}"));
            LexError::new(
                ErrorKind::BadRepetition(format!("expected {what} in {{m,n}}, found {found}")),
                start,
                l.pos + l.peek().map_or(0, char::len_utf8),
            )
        };
        match self.peek() {
            Some('}') if min.is_some() => {
                self.pos += 1;
                let m = min.expect("checked");
                Ok(Tok::Repeat(m, Some(m)))
            }
            Some(',') => {
                self.pos += 1;
                self.skip_inline_space();
                let max = match self.number() {
                    Some(n) => Some(n?),
                    None => None,
                };
                self.skip_inline_space();
                if self.peek() != Some('}') {
                    return Err(expected(self, "'}'"));
                }
                self.pos += 1;
                match (min, max) {
                    (None, None) => Err(LexError::new(
                        ErrorKind::BadRepetition("'{,}' has no bound; write '*'".into()),
                        start,
                        self.pos,
                    )),
                    (Some(m), Some(n)) if m > n => Err(LexError::new(
                        ErrorKind::BadRepetition(format!("minimum {m} is more than maximum {n}")),
                        start,
                        self.pos,
                    )),
                    (m, n) => Ok(Tok::Repeat(m.unwrap_or(0), n)),
                }
            }
            _ if min.is_none() => Err(expected(self, "a number")),
            _ => Err(expected(self, "',' or '}'")),
        }
    }

    fn skip_inline_space(&mut self) {
        while let Some(c) = self.peek() {
            let newline_ok = self.depth > 0;
            if c == ' ' || c == '\t' || (newline_ok && (c == '\n' || c == '\r')) {
                self.pos += 1;
            } else {
                break;
            }
        }
    }

    fn next_token(&mut self) -> Option<Spanned<'a>> {
        {
            let crossed_newline = self.skip_space();
            if crossed_newline && self.depth == 0 && self.newline_significant {
                self.newline_significant = false;
                let p = self.pos;
                return Some(Ok((p, Tok::Newline, p)));
            }
            let start = self.pos;
            let c = self.peek()?;
            let tok = match c {
                '"' => {
                    self.pos += 1;
                    self.literal(start)
                }
                '[' => {
                    self.pos += 1;
                    self.class(start)
                }
                '<' => self.token_ref(start, false),
                '!' => {
                    self.pos += 1;
                    if self.peek() == Some('<') {
                        self.token_ref(start, true)
                    } else {
                        Err(LexError::new(ErrorKind::BangWithoutToken, start, self.pos))
                    }
                }
                '(' => {
                    self.pos += 1;
                    self.depth += 1;
                    Ok(Tok::LParen)
                }
                ')' => {
                    self.pos += 1;
                    self.depth = self.depth.saturating_sub(1);
                    Ok(Tok::RParen)
                }
                '|' => {
                    self.pos += 1;
                    Ok(Tok::Pipe)
                }
                '.' => {
                    self.pos += 1;
                    Ok(Tok::Dot)
                }
                '&' => {
                    self.pos += 1;
                    Ok(Tok::Amp)
                }
                '~' => {
                    self.pos += 1;
                    Ok(Tok::Tilde)
                }
                '*' => {
                    self.pos += 1;
                    Ok(Tok::Star)
                }
                '+' => {
                    self.pos += 1;
                    Ok(Tok::Plus)
                }
                '?' => {
                    self.pos += 1;
                    Ok(Tok::Question)
                }
                '{' => {
                    self.pos += 1;
                    self.repeat(start)
                }
                ':' if self.text[self.pos..].starts_with("::=") => {
                    self.pos += 3;
                    Ok(Tok::Define)
                }
                c if c.is_ascii_alphanumeric() || c == '-' => {
                    while self
                        .peek()
                        .is_some_and(|c| c.is_ascii_alphanumeric() || c == '-')
                    {
                        self.pos += 1;
                    }
                    Ok(Tok::Name(&self.text[start..self.pos]))
                }
                other => {
                    self.bump();
                    Err(LexError::new(
                        ErrorKind::UnexpectedChar(other),
                        start,
                        self.pos,
                    ))
                }
            };
            Some(tok.map(|t| {
                self.newline_significant = !matches!(
                    t,
                    Tok::Pipe | Tok::Define | Tok::LParen | Tok::Amp | Tok::Tilde
                );
                (start, t, self.pos)
            }))
        }
    }
}

impl<'a> Iterator for Lexer<'a> {
    type Item = Spanned<'a>;

    fn next(&mut self) -> Option<Spanned<'a>> {
        self.next_token()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(s: &str) -> Vec<Tok<'_>> {
        Lexer::new(s).map(|r| r.unwrap().1).collect()
    }

    #[test]
    fn newline_only_where_a_rule_can_end() {
        let t = toks("a ::=\n  b |\n c\n\n\nd ::= (e\n f)\n");
        assert_eq!(
            t,
            vec![
                Tok::Name("a"),
                Tok::Define,
                Tok::Name("b"),
                Tok::Pipe,
                Tok::Name("c"),
                Tok::Newline,
                Tok::Name("d"),
                Tok::Define,
                Tok::LParen,
                Tok::Name("e"),
                Tok::Name("f"),
                Tok::RParen,
                Tok::Newline,
            ]
        );
    }

    #[test]
    fn escapes_and_classes() {
        let t = toks(r#""\x41\u00e9\U0001F600\n\"" [^a-c\]\\-]"#);
        assert_eq!(t[0], Tok::Literal(vec!['A', 'é', '😀', '\n', '"']));
        assert_eq!(
            t[1],
            Tok::Class(ClassAst {
                negated: true,
                ranges: vec![('a', 'c'), (']', ']'), ('\\', '\\'), ('-', '-')]
            })
        );
    }

    #[test]
    fn repetitions() {
        assert_eq!(toks("{3}"), vec![Tok::Repeat(3, Some(3))]);
        assert_eq!(toks("{ 4}"), vec![Tok::Repeat(4, Some(4))]);
        assert_eq!(toks("{2,}"), vec![Tok::Repeat(2, None)]);
        assert_eq!(toks("{2 , 5 }"), vec![Tok::Repeat(2, Some(5))]);
        assert_eq!(toks("{,5}"), vec![Tok::Repeat(0, Some(5))]);
        assert!(Lexer::new("{,}").next().unwrap().is_err());
        assert!(Lexer::new("{5,2}").next().unwrap().is_err());
    }

    #[test]
    fn token_refs() {
        assert_eq!(
            toks("<[12]> !<|end|>"),
            vec![
                Tok::Token(TokenAst {
                    negated: false,
                    target: TokenTarget::Id(12)
                }),
                Tok::Token(TokenAst {
                    negated: true,
                    target: TokenTarget::Text("<|end|>".into())
                }),
            ]
        );
    }

    #[test]
    fn errors_are_positioned() {
        let e = Lexer::new("a ::= \"x\\q\"").nth(2).unwrap().unwrap_err();
        assert_eq!(e.kind, ErrorKind::UnknownEscape('q'));
        assert_eq!(e.span.start, 8);
        let e = Lexer::new("a ::= [z-a]").nth(2).unwrap().unwrap_err();
        assert!(matches!(e.kind, ErrorKind::ReversedRange { .. }));
        // A backslash that ends the input, in a literal and in a class.
        for text in ["a ::= \"x\\", "a ::= [x\\"] {
            let e = Lexer::new(text).nth(2).unwrap().unwrap_err();
            assert_eq!(e.kind, ErrorKind::EscapeAtEnd, "{text}");
            assert_eq!(e.span.start, text.len() - 1);
        }
    }
}
