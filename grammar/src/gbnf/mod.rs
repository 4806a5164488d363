//! The GBNF front end (llama.cpp dialect): text -> [`RuleAst`]s.
//!
//! Tokens come from the hand-written [`lexer`]; the grammar is `grammar.lalrpop`, turned into
//! an LR(1) parser by lalrpop at build time. Errors are [`GrammarError`]s positioned in the
//! source.

pub mod lexer;

use crate::ast::{Expr, RuleAst};
use crate::error::{ErrorKind, GrammarError, Span};
use lalrpop_util::ParseError;
use lexer::{LexError, Lexer, Tok};

#[allow(
    clippy::all,
    clippy::pedantic,
    unused_parens,
    dead_code,
    unused_imports
)]
mod generated {
    include!(concat!(env!("OUT_DIR"), "/gbnf/grammar.rs"));
}

/// Refuses expressions nested deeper than `max_depth` (called from the parser's actions).
fn checked<'a>(e: Expr, max_depth: u32) -> Result<Expr, ParseError<usize, Tok<'a>, LexError>> {
    if e.depth > max_depth {
        return Err(ParseError::User {
            error: LexError {
                kind: ErrorKind::Limit {
                    what: "expression nesting depth".into(),
                    value: e.depth as usize,
                    limit_name: "max_nesting_depth",
                    limit: max_depth as usize,
                },
                span: e.span,
            },
        });
    }
    Ok(e)
}

/// Parses GBNF text into rules. `origin` names the source in error messages.
pub fn parse(text: &str, origin: &str, max_depth: u32) -> Result<Vec<RuleAst>, GrammarError> {
    let lexer = Lexer::new(text);
    generated::GrammarParser::new()
        .parse(max_depth, lexer)
        .map_err(|e| parse_error(e, origin, text))
}

fn describe(tok: &Tok<'_>) -> String {
    match tok {
        Tok::Name(n) => format!("name '{n}'"),
        Tok::Define => "'::='".into(),
        Tok::Pipe => "'|'".into(),
        Tok::LParen => "'('".into(),
        Tok::RParen => "')'".into(),
        Tok::Literal(_) => "a literal".into(),
        Tok::Class(_) => "a character class".into(),
        Tok::Dot => "'.'".into(),
        Tok::Star => "'*'".into(),
        Tok::Plus => "'+'".into(),
        Tok::Question => "'?'".into(),
        Tok::Repeat(..) => "a repetition '{m,n}'".into(),
        Tok::Token(_) => "a token reference".into(),
        Tok::Newline => "end of line".into(),
        Tok::Amp => "'&'".into(),
        Tok::Tilde => "'~'".into(),
    }
}

/// Turns lalrpop's expected-terminal names into a short English list.
fn expected_list(expected: &[String]) -> String {
    let mut names: Vec<&str> = expected
        .iter()
        .map(|e| match e.trim_matches('"') {
            "name" => "a rule name",
            "::=" => "'::='",
            "|" => "'|'",
            // The extension is not suggested (llama.cpp grammars do not use it).
            "&" => "",
            "~" => "an expression",
            "(" => "'('",
            ")" => "')'",
            "literal" | "class" | "." | "token" => "an expression",
            "*" | "+" | "?" | "{m,n}" => "a quantifier",
            "newline" => "end of line",
            other => other,
        })
        .filter(|n| !n.is_empty())
        .collect();
    names.sort_unstable();
    names.dedup();
    match names.len() {
        0 => "nothing more".into(),
        1 => names[0].into(),
        _ => format!("one of {}", names.join(", ")),
    }
}

fn parse_error(e: ParseError<usize, Tok<'_>, LexError>, origin: &str, text: &str) -> GrammarError {
    let (kind, span) = match e {
        ParseError::User { error } => (error.kind, error.span),
        ParseError::InvalidToken { location } => (
            ErrorKind::Unexpected {
                found: "invalid token".into(),
                expected: "an expression".into(),
            },
            Span::new(location, location),
        ),
        ParseError::UnrecognizedEof { location, expected } => (
            ErrorKind::Unexpected {
                found: "unexpected end of input".into(),
                expected: expected_list(&expected),
            },
            Span::new(location, location),
        ),
        ParseError::UnrecognizedToken {
            token: (l, tok, r),
            expected,
        } => {
            let mut expected = expected_list(&expected);
            if tok == Tok::Pipe
                && text[..l]
                    .trim_end_matches([' ', '\t'])
                    .ends_with(['\n', '\r'])
            {
                expected.push_str(
                    " (outside parentheses a rule ends at the end of its line: put '|' at the \
                     end of the previous line, or wrap the alternatives in parentheses)",
                );
            } else if expected == "'::='" {
                expected.push_str(" (outside parentheses a rule ends at the end of its line)");
            }
            (
                ErrorKind::Unexpected {
                    found: format!("unexpected {}", describe(&tok)),
                    expected,
                },
                Span::new(l, r),
            )
        }
        ParseError::ExtraToken { token: (l, tok, r) } => (
            ErrorKind::Unexpected {
                found: format!("unexpected {}", describe(&tok)),
                expected: "end of input".into(),
            },
            Span::new(l, r),
        ),
    };
    GrammarError::at(kind, span, origin, text)
}
