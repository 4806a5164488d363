//! Numbers as JSON writes them, within bounds: `minimum`, `maximum`, `exclusiveMinimum`,
//! `exclusiveMaximum` and integer `multipleOf`, exactly, for any size of bound.
//!
//! Bounds are decimal strings (arbitrary precision: `1e30` is 10^30, not a float), turned
//! into digit-by-digit comparisons: an integer range becomes the classic alternation by
//! length and leading digits; a decimal range splits on the integer part and compares the
//! fraction digit by digit (a fraction `0.d` is compared as if padded with zeros).
//!
//! With an exponent, bounded numbers take the form serializers write, normalized scientific
//! notation: one non-zero digit before the point (`1e-09`, `2.5E+3`, `-7.25e1`; zero as
//! `0e0`). For `d.ddd × 10^E` the exponent alone places the value between two powers of ten,
//! so each bound becomes a mantissa range at its own exponent and any mantissa between
//! (a regular language). Other exponent spellings (`25e2`, `0.5e1`) compare two unbounded
//! digit counts, which no regular language can do: they are refused where a bound applies,
//! except for a bound at zero with no other bound (`minimum: 0`, `exclusiveMinimum: 0`),
//! where the sign and the digits decide.

use super::gbnf::{alt, class, digit, eps, g, lit, opt, repeat, seq};
use corral_grammar::ast::Expr;
use std::cmp::Ordering;

mod decimal;
mod fraction;
mod integer;
mod multiple;
mod scientific;
#[cfg(test)]
mod tests;

pub(crate) use decimal::*;
use fraction::*;
pub(crate) use integer::*;
pub(crate) use multiple::*;
use scientific::*;

/// The JSON number grammar, unconstrained.
pub(crate) const JSON_NUMBER: &str =
    r#""-"? ( "0" | [1-9] [0-9]* ) ( "." [0-9]+ )? ( [eE] [-+]? [0-9]+ )?"#;

/// The JSON integer grammar, unconstrained.
pub(crate) const JSON_INTEGER: &str = r#""-"? ( "0" | [1-9] [0-9]* )"#;

/// Numbers (decimal notation) within the bounds; `None` if no number fits.
pub(crate) fn number_range(lo: Option<&Bound>, hi: Option<&Bound>) -> Option<Expr> {
    let zero = SDec::zero();
    match (lo, hi) {
        (None, None) => return Some(g(JSON_NUMBER)),
        // Bounds at zero keep the exponent.
        (Some(b), None) if b.value == zero => {
            let mant = if b.strict {
                // Some non-zero digit.
                r#"( [1-9] [0-9]* ( "." [0-9]+ )? | "0" "." [0-9]* [1-9] [0-9]* )"#
            } else {
                r#"( "0" | [1-9] [0-9]* ) ( "." [0-9]+ )?"#
            };
            let mut alts = vec![seq(vec![g(mant), g(r#"( [eE] [-+]? [0-9]+ )?"#)])];
            if !b.strict {
                alts.push(g(r#""-" "0" ( "." "0"+ )? ( [eE] [-+]? [0-9]+ )?"#));
            }
            return alt(alts);
        }
        _ => {}
    }
    if let (Some(l), Some(h)) = (lo, hi) {
        match l.value.cmp(&h.value) {
            Ordering::Greater => return None,
            Ordering::Equal if l.strict || h.strict => return None,
            _ => {}
        }
    }
    let mut alts = Vec::new();
    // Negative values: |x| in [max(-hi, 0+), -lo].
    if lo.is_none_or(|l| l.value.neg) {
        let mlo = match hi {
            Some(h) if h.value.neg => Bound {
                value: h.value.negated(),
                strict: h.strict,
            },
            _ => Bound {
                value: zero.clone(),
                strict: true,
            },
        };
        let mhi = lo.map(|l| Bound {
            value: l.value.negated(),
            strict: l.strict,
        });
        if let Some(r) = nonneg_decimal(&mlo, mhi.as_ref()) {
            alts.push(seq(vec![lit("-"), r]));
        }
        if let Some(r) = scientific(&mlo, mhi.as_ref()) {
            alts.push(seq(vec![lit("-"), r]));
        }
    }
    let zero_ok = lo.is_none_or(|l| l.value < zero || (l.value == zero && !l.strict))
        && hi.is_none_or(|h| h.value > zero || (h.value == zero && !h.strict));
    if zero_ok {
        alts.push(g(r#""-" "0" ( "." "0"+ )?"#));
        alts.push(g(r#""-"? "0" ( "." "0"+ )? [eE] [-+]? [0-9]+"#));
    }
    // Non-negative values.
    if hi.is_none_or(|h| !h.value.neg) {
        let plo = match lo {
            Some(l) if !l.value.neg => l.clone(),
            _ => Bound {
                value: zero.clone(),
                strict: false,
            },
        };
        if let Some(r) = nonneg_decimal(&plo, hi) {
            alts.push(r);
        }
        if let Some(r) = scientific(&plo, hi) {
            alts.push(r);
        }
    }
    alt(alts)
}
