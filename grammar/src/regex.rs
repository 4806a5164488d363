//! A regular expression as a grammar (`corral generate --regex`): the whole output must
//! match it. Parsed by regex-syntax (Rust regex syntax), compiled to one lexeme.

use crate::CompileOptions;
use crate::compiled::{Grammar, GrammarBuilder, Sym};
use crate::error::{ErrorKind, GrammarError, Span};
use std::sync::Arc;

/// Compiles `pattern` into a grammar whose language is exactly the strings it matches
/// (anchored at both ends). Look-around (`^`, `$`, `\b`) is refused: the whole output is
/// matched anyway.
pub fn compile_regex(pattern: &str, opts: &CompileOptions) -> Result<Arc<Grammar>, GrammarError> {
    let hir = regex_syntax::ParserBuilder::new()
        .nest_limit(opts.limits.max_nesting_depth)
        .build()
        .parse(pattern)
        .map_err(|e| {
            let (msg, span) = match &e {
                regex_syntax::Error::Parse(p) => (p.kind().to_string(), *p.span()),
                regex_syntax::Error::Translate(t) => (t.kind().to_string(), *t.span()),
                _ => (
                    e.to_string(),
                    regex_syntax::ast::Span::splat(regex_syntax::ast::Position::new(0, 1, 1)),
                ),
            };
            GrammarError::at(
                ErrorKind::Lexeme(msg),
                Span::new(span.start.offset, span.end.offset),
                &opts.origin,
                pattern,
            )
        })?;
    if !hir.properties().look_set().is_empty() {
        return Err(GrammarError::at(
            ErrorKind::Lexeme("anchors and word boundaries (^ $ \\b \\B) are not supported: the whole output is matched".into()),
            Span::new(0, pattern.len()),
            &opts.origin,
            pattern,
        ));
    }
    let err =
        |k: ErrorKind| GrammarError::at(k, Span::new(0, pattern.len()), &opts.origin, pattern);
    let mut b = GrammarBuilder::new(opts.limits.clone()).with_cache(opts.dfa_cache.clone());
    let root = b.add_rule("root");
    let display: String = if pattern.chars().count() > 40 {
        format!("{}...", pattern.chars().take(37).collect::<String>())
    } else {
        pattern.to_string()
    };
    let lexeme = b.lexeme(hir, || display).map_err(err)?;
    b.add_production(root, vec![Sym::Lexeme(lexeme)])
        .map_err(err)?;
    b.build(root).map(Arc::new).map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{MatchOutcome, match_bytes};

    #[test]
    fn regex_is_matched_whole() {
        let g = compile_regex(r"[0-9]{3}-[a-z]+", &CompileOptions::default()).unwrap();
        assert_eq!(match_bytes(&g, b"123-abc").unwrap(), MatchOutcome::Accepted);
        assert!(matches!(
            match_bytes(&g, b"123-").unwrap(),
            MatchOutcome::Incomplete { .. }
        ));
        assert!(matches!(
            match_bytes(&g, b"12a").unwrap(),
            MatchOutcome::Rejected { offset: 2, .. }
        ));
        let g = compile_regex(r"(yes|no)?", &CompileOptions::default()).unwrap();
        assert_eq!(match_bytes(&g, b"").unwrap(), MatchOutcome::Accepted);
    }

    #[test]
    fn regex_errors_are_positioned() {
        let e = compile_regex(r"ab(c", &CompileOptions::default().origin("--regex")).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("--regex:1:3: cannot compile lexeme: unclosed group"),
            "{e}"
        );
        let e = compile_regex(r"^ab$", &CompileOptions::default()).unwrap_err();
        assert!(e.to_string().contains("anchors"), "{e}");
        assert!(compile_regex(r"[b-a]", &CompileOptions::default()).is_err());
        assert!(
            compile_regex(r"a{2}[^\x00-\x{10FFFF}]", &CompileOptions::default()).is_err(),
            "empty language"
        );
    }
}
