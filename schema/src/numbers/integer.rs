//! Integer ranges as digit-by-digit alternations, by length and leading digits.

use super::*;

/// A bound: the value and whether it is exclusive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Bound {
    pub value: SDec,
    pub strict: bool,
}

pub(super) fn digit_class(a: u8, b: u8) -> Expr {
    class(&[(a as char, b as char)]).expect("non-empty")
}

pub(super) fn any_digits(n: usize) -> Expr {
    let n = u32::try_from(n).expect("digit counts of decimal strings fit in u32");
    repeat(digit(), n, Some(n))
}

pub(super) fn digits_lit(d: &[u8]) -> Expr {
    lit(std::str::from_utf8(d).expect("ASCII digits"))
}

/// Digit strings of `a.len()` digits (leading zeros allowed) between `a` and `b`, as a
/// flat alternation (a branch per digit position, never nested by position): bounds of
/// hundreds of digits (`1e308`) stay within the grammar's nesting limit.
pub(super) fn between(a: &[u8], b: &[u8]) -> Expr {
    let n = a.len();
    let k = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    if k == n {
        return if n == 0 { eps() } else { digits_lit(a) };
    }
    let prefix = &a[..k];
    let (a, b) = (&a[k..], &b[k..]);
    let mut alts = vec![seq(vec![digits_lit(&a[..1]), at_least(&a[1..])])];
    if a[0] + 1 < b[0] {
        alts.push(seq(vec![
            digit_class(a[0] + 1, b[0] - 1),
            any_digits(a.len() - 1),
        ]));
    }
    alts.push(seq(vec![digits_lit(&b[..1]), at_most(&b[1..])]));
    let rest = alt(alts).expect("non-empty");
    seq(vec![digits_lit(prefix), rest])
}

/// Digit strings of `x.len()` digits at least `x`: for each position, `x`'s digits before
/// it and a larger one there, then any digits; and `x` itself (its trailing zeros taken as
/// any digits).
pub(super) fn at_least(x: &[u8]) -> Expr {
    let t = x.iter().rposition(|&d| d != b'0').map_or(0, |i| i + 1);
    let mut alts = Vec::new();
    for i in 0..t {
        if x[i] < b'9' {
            alts.push(seq(vec![
                digits_lit(&x[..i]),
                digit_class(x[i] + 1, b'9'),
                any_digits(x.len() - i - 1),
            ]));
        }
    }
    alts.push(seq(vec![digits_lit(&x[..t]), any_digits(x.len() - t)]));
    alt(alts).expect("non-empty")
}

/// Digit strings of `x.len()` digits at most `x` (as [`at_least`], with nines).
pub(super) fn at_most(x: &[u8]) -> Expr {
    let t = x.iter().rposition(|&d| d != b'9').map_or(0, |i| i + 1);
    let mut alts = Vec::new();
    for i in 0..t {
        if x[i] > b'0' {
            alts.push(seq(vec![
                digits_lit(&x[..i]),
                digit_class(b'0', x[i] - 1),
                any_digits(x.len() - i - 1),
            ]));
        }
    }
    alts.push(seq(vec![digits_lit(&x[..t]), any_digits(x.len() - t)]));
    alt(alts).expect("non-empty")
}

/// Integers without leading zeros in `[lo, hi]` (`hi == None`: unbounded), as digit
/// strings; `None` if the range is empty.
pub(super) fn uint_range(lo: &[u8], hi: Option<&[u8]>) -> Option<Expr> {
    let lo_dec = Dec::from_digits(lo, &[]);
    if let Some(h) = hi
        && lo_dec > Dec::from_digits(h, &[])
    {
        return None;
    }
    let smallest = |len: usize| -> Vec<u8> {
        if len == 1 {
            vec![b'0']
        } else {
            let mut v = vec![b'0'; len];
            v[0] = b'1';
            v
        }
    };
    let n = lo.len();
    let mut alts = Vec::new();
    match hi {
        Some(h) if h.len() == n => alts.push(between(lo, h)),
        _ => {
            alts.push(between(lo, &vec![b'9'; n]));
            match hi {
                Some(h) => {
                    let m = h.len();
                    if m > n + 1 {
                        let count = |x: usize| u32::try_from(x).expect("digit counts fit in u32");
                        let rest = repeat(digit(), count(n), Some(count(m - 2)));
                        alts.push(seq(vec![digit_class(b'1', b'9'), rest]));
                    }
                    alts.push(between(&smallest(m), h));
                }
                None => {
                    let n = u32::try_from(n).expect("digit counts fit in u32");
                    alts.push(seq(vec![digit_class(b'1', b'9'), repeat(digit(), n, None)]));
                }
            }
        }
    }
    alt(alts)
}

/// Integers in `[lo, hi]` (inclusive, either may be absent), as JSON writes them (`-0`
/// included where zero is).
pub(crate) fn integer_range(lo: Option<&SDec>, hi: Option<&SDec>) -> Option<Expr> {
    if let (Some(l), Some(h)) = (lo, hi)
        && l > h
    {
        return None;
    }
    let zero = SDec::zero();
    let one = SDec::from_i128(1);
    let mut alts = Vec::new();
    // Negative values: |v| in [max(1, -hi), -lo].
    if lo.is_none_or(|l| l.neg) {
        let a = match hi {
            Some(h) if h.neg => h.mag.int.clone(),
            _ => vec![b'1'],
        };
        if let Some(r) = uint_range(&a, lo.map(|l| l.mag.int.as_slice())) {
            alts.push(seq(vec![lit("-"), r]));
        }
    }
    if lo.is_none_or(|l| *l <= zero) && hi.is_none_or(|h| *h >= zero) {
        alts.push(seq(vec![opt(lit("-")), lit("0")]));
    }
    if hi.is_none_or(|h| *h > zero) {
        let a = match lo {
            Some(l) if *l > one => l.mag.int.clone(),
            _ => vec![b'1'],
        };
        if let Some(r) = uint_range(&a, hi.map(|h| h.mag.int.as_slice())) {
            alts.push(r);
        }
    }
    alt(alts)
}

/// Integer bounds from decimal bounds: the least and greatest integer allowed.
pub(crate) fn integer_bounds(
    lo: Option<&Bound>,
    hi: Option<&Bound>,
) -> (Option<SDec>, Option<SDec>) {
    let lo = lo.map(|b| {
        if b.strict {
            b.value.floor().succ()
        } else {
            b.value.ceil()
        }
    });
    let hi = hi.map(|b| {
        if b.strict {
            b.value.ceil().pred()
        } else {
            b.value.floor()
        }
    });
    (lo, hi)
}
