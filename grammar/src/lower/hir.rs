//! Regular expressions (regex-syntax's `Hir`) of the grammar's regular parts, from which
//! lexeme automata are built.

use super::*;

pub(super) fn class_hir(c: &ClassAst) -> Hir {
    let mut class = ClassUnicode::new(c.ranges.iter().map(|&(a, b)| ClassUnicodeRange::new(a, b)));
    if c.negated {
        class.negate();
    }
    Hir::class(Class::Unicode(class))
}

/// The regex of a regular expression (every rule it references is regular and built).
pub(super) fn hir_of(e: &Expr, index: &FxHashMap<&str, usize>, rule_hir: &[Option<Hir>]) -> Hir {
    hir_with(e, index, &mut |j| {
        rule_hir[j]
            .clone()
            .expect("regular rules reference only regular rules, built first")
    })
}

/// The regex of a regular expression, `rule(j)` giving the regex of rule `j`.
pub(super) fn hir_with(
    e: &Expr,
    index: &FxHashMap<&str, usize>,
    rule: &mut dyn FnMut(usize) -> Hir,
) -> Hir {
    match &e.kind {
        ExprKind::Literal(cs) => Hir::literal(cs.iter().collect::<String>().into_bytes()),
        ExprKind::Class(c) => class_hir(c),
        ExprKind::Any => Hir::class(Class::Unicode(ClassUnicode::new([ClassUnicodeRange::new(
            '\0',
            char::MAX,
        )]))),
        ExprKind::RuleRef(name) => rule(index[name.as_str()]),
        ExprKind::Seq(xs) => Hir::concat(xs.iter().map(|x| hir_with(x, index, rule)).collect()),
        ExprKind::Alt(xs) => {
            Hir::alternation(xs.iter().map(|x| hir_with(x, index, rule)).collect())
        }
        ExprKind::Group(inner) => hir_with(inner, index, rule),
        ExprKind::Repeat { inner, min, max } => Hir::repetition(Repetition {
            min: *min,
            max: *max,
            greedy: true,
            sub: Box::new(hir_with(inner, index, rule)),
        }),
        ExprKind::Token(_) | ExprKind::And(_) | ExprKind::Not(_) => {
            unreachable!("token references, '&' and '~' are never regular")
        }
    }
}

/// `.*`: every string (the base of a complement).
pub(super) fn any_string() -> Hir {
    Hir::repetition(Repetition {
        min: 0,
        max: None,
        greedy: true,
        sub: Box::new(Hir::class(Class::Unicode(ClassUnicode::new([
            ClassUnicodeRange::new('\0', char::MAX),
        ])))),
    })
}
