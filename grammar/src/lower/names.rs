//! Step 1 of lowering: rule names resolved, their references listed, and the positioned
//! errors for duplicates, undefined names and a missing start rule.

use super::*;

/// Rule indices by name, each rule's references, and which rules are opaque (hold token
/// references or `&`/`~`, so are never inlined into lexemes). Step 1 of [`lower`].
#[allow(clippy::type_complexity)]
pub(super) fn names_and_references<'r>(
    rules: &'r [RuleAst],
    text: Option<&str>,
    err: &dyn Fn(ErrorKind, Span) -> GrammarError,
) -> Result<(FxHashMap<&'r str, usize>, Vec<Vec<usize>>, Vec<bool>), GrammarError> {
    let mut index: FxHashMap<&str, usize> = FxHashMap::default();
    for (i, r) in rules.iter().enumerate() {
        if let Some(&first) = index.get(r.name.as_str()) {
            let first_line = text
                .map(|text| crate::error::Location::of(text, rules[first].name_span.start).line);
            return Err(err(
                ErrorKind::DuplicateRule {
                    name: r.name.clone(),
                    first_line,
                },
                r.name_span,
            ));
        }
        index.insert(&r.name, i);
    }
    let mut refs: Vec<Vec<usize>> = vec![Vec::new(); rules.len()];
    let mut opaque = vec![false; rules.len()];
    for (i, r) in rules.iter().enumerate() {
        let mut undefined = None;
        visit(&r.body, &mut |e| match &e.kind {
            ExprKind::RuleRef(name) => match index.get(name.as_str()) {
                Some(&j) => refs[i].push(j),
                None => {
                    if undefined.is_none() {
                        undefined = Some((name.clone(), e.span));
                    }
                }
            },
            ExprKind::Token(_) | ExprKind::And(_) | ExprKind::Not(_) => opaque[i] = true,
            _ => {}
        });
        if let Some((name, span)) = undefined {
            return Err(err(ErrorKind::UndefinedRule(name), span));
        }
    }
    Ok((index, refs, opaque))
}

/// The error for a start rule that is not defined, listing a few rules that are
/// (`empty`: the error for a grammar with no rules at all).
pub(super) fn missing_start(
    rules: &[RuleAst],
    start: &str,
    err: &dyn Fn(ErrorKind, Span) -> GrammarError,
    empty: impl FnOnce() -> GrammarError,
) -> GrammarError {
    if rules.is_empty() {
        return empty();
    }
    let defined: Vec<&str> = rules.iter().take(8).map(|r| r.name.as_str()).collect();
    let kind = ErrorKind::MissingStartRule {
        name: start.to_string(),
        defined: defined.join(", "),
    };
    err(kind, rules[0].name_span)
}
