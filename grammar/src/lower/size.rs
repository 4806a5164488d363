//! Sizes of expressions in units (repetitions multiplied out, regular rules inlined), for
//! the size limit and for deciding what is cut into chunks.

use super::*;

pub(super) fn size_limit(value: usize, limits: &crate::Limits) -> ErrorKind {
    ErrorKind::Limit {
        what: "the expansion of this expression (repetitions multiplied out)".into(),
        value,
        limit_name: "max_grammar_size",
        limit: limits.max_grammar_size,
    }
}

/// Pre-order walk (recursion bounded by the nesting limit).
pub(super) fn visit(e: &Expr, f: &mut impl FnMut(&Expr)) {
    f(e);
    match &e.kind {
        ExprKind::Seq(xs) | ExprKind::Alt(xs) | ExprKind::And(xs) => {
            xs.iter().for_each(|x| visit(x, f))
        }
        ExprKind::Repeat { inner, .. } | ExprKind::Group(inner) | ExprKind::Not(inner) => {
            visit(inner, f)
        }
        _ => {}
    }
}

/// Size of an expression's expansion; `Err((size, span))` at the first node over `limit`.
pub(super) fn units(
    e: &Expr,
    index: &FxHashMap<&str, usize>,
    regular: &[bool],
    rule_units: &[usize],
    rule_empty: &dyn Fn(usize) -> bool,
    limit: usize,
) -> Result<usize, (usize, Span)> {
    let sub = |x: &Expr| units(x, index, regular, rule_units, rule_empty, limit);
    let u = match &e.kind {
        ExprKind::Literal(cs) => cs.len().max(1),
        ExprKind::Class(_) | ExprKind::Any | ExprKind::Token(_) => 1,
        ExprKind::RuleRef(name) => {
            let j = index[name.as_str()];
            if regular[j] { rule_units[j] } else { 1 }
        }
        ExprKind::Seq(xs) | ExprKind::Alt(xs) | ExprKind::And(xs) => {
            let mut sum = 1usize;
            for x in xs {
                sum = sum.saturating_add(sub(x)?);
            }
            sum
        }
        ExprKind::Group(inner) | ExprKind::Not(inner) => sub(inner)?,
        ExprKind::Repeat { inner, min, max } => {
            let factor = match max {
                Some(n) => (*n).max(1) as usize,
                None => *min as usize + 1,
            };
            let iu = sub(inner)?;
            let empty = matches_empty(inner, index, rule_empty);
            // As if composed: the larger of the two estimates (no chunks).
            match chunking(iu, empty, true, *min, *max) {
                // A chunk and two tails, and a rule per chunk of the bound.
                Some(k) => iu
                    .saturating_mul(k as usize)
                    .saturating_mul(3)
                    .saturating_add(factor / k as usize + 1),
                None => iu.saturating_mul(factor),
            }
        }
    };
    if u > limit { Err((u, e.span)) } else { Ok(u) }
}

/// Whether `e` holds a repetition that [`chunking`] cuts into chunks (such an expression
/// is not one lexeme).
pub(super) fn has_big_repeat(
    e: &Expr,
    index: &FxHashMap<&str, usize>,
    regular: &[bool],
    rule_units: &[usize],
    rule_empty: &dyn Fn(usize) -> bool,
) -> bool {
    let big = |x: &Expr| has_big_repeat(x, index, regular, rule_units, rule_empty);
    match &e.kind {
        ExprKind::Seq(xs) | ExprKind::Alt(xs) | ExprKind::And(xs) => xs.iter().any(big),
        ExprKind::Group(inner) | ExprKind::Not(inner) => big(inner),
        ExprKind::Repeat { inner, min, max } => {
            big(inner)
                || units(inner, index, regular, rule_units, rule_empty, usize::MAX).is_ok_and(
                    |iu| {
                        let empty = matches_empty(inner, index, rule_empty);
                        chunking(iu, empty, false, *min, *max).is_some()
                    },
                )
        }
        _ => false,
    }
}

/// Whether `e` matches the empty string (a rule: as `rule_empty` says).
pub(super) fn matches_empty(
    e: &Expr,
    index: &FxHashMap<&str, usize>,
    rule_empty: &dyn Fn(usize) -> bool,
) -> bool {
    match &e.kind {
        ExprKind::Literal(cs) => cs.is_empty(),
        ExprKind::Class(_) | ExprKind::Any | ExprKind::Token(_) => false,
        ExprKind::RuleRef(name) => rule_empty(index[name.as_str()]),
        ExprKind::Seq(xs) | ExprKind::And(xs) => {
            xs.iter().all(|x| matches_empty(x, index, rule_empty))
        }
        // Whether `~x` matches "" depends on x exactly; "may" is the safe answer here.
        ExprKind::Not(_) => true,
        ExprKind::Alt(xs) => xs.iter().any(|x| matches_empty(x, index, rule_empty)),
        ExprKind::Group(inner) => matches_empty(inner, index, rule_empty),
        ExprKind::Repeat { inner, min, .. } => *min == 0 || matches_empty(inner, index, rule_empty),
    }
}

/// Size of an expression as written, a repetition's body counted once (regular rules it
/// references counted at their own shape): what inlining copies, where [`units`] counts what
/// the automaton must hold.
pub(super) fn shape_units(
    e: &Expr,
    index: &FxHashMap<&str, usize>,
    regular: &[bool],
    rule_shape: &[usize],
) -> usize {
    match &e.kind {
        ExprKind::Literal(_) | ExprKind::Class(_) | ExprKind::Any | ExprKind::Token(_) => 1,
        ExprKind::RuleRef(name) => {
            let j = index[name.as_str()];
            if regular[j] { rule_shape[j] } else { 1 }
        }
        ExprKind::Seq(xs) | ExprKind::Alt(xs) | ExprKind::And(xs) => {
            xs.iter().fold(1usize, |sum, x| {
                sum.saturating_add(shape_units(x, index, regular, rule_shape))
            })
        }
        ExprKind::Group(inner) => shape_units(inner, index, regular, rule_shape),
        ExprKind::Repeat { inner, .. } | ExprKind::Not(inner) => {
            shape_units(inner, index, regular, rule_shape).saturating_add(1)
        }
    }
}
