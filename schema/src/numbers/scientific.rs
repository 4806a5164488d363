//! Ranges in normalized scientific notation: each bound a mantissa range at its own
//! exponent, any mantissa between.

use super::*;

/// `floor(log10(d))` of a positive decimal.
pub(super) fn exponent(d: &Dec) -> i64 {
    if d.int != b"0" {
        d.int.len() as i64 - 1
    } else {
        let zeros = d.frac.iter().position(|&x| x != b'0').expect("positive");
        -(zeros as i64) - 1
    }
}

/// `d × 10^-e`, exactly.
pub(super) fn shift_down(d: &Dec, e: i64) -> Dec {
    let digits: Vec<u8> = d.int.iter().chain(&d.frac).copied().collect();
    let point = d.int.len() as i64 - e;
    if point <= 0 {
        let mut frac = vec![b'0'; (-point) as usize];
        frac.extend(&digits);
        Dec::from_digits(b"0", &frac)
    } else if point as usize >= digits.len() {
        let mut int = digits.clone();
        int.resize(point as usize, b'0');
        Dec::from_digits(&int, &[])
    } else {
        let (int, frac) = digits.split_at(point as usize);
        Dec::from_digits(int, frac)
    }
}

/// The digits after `e`/`E` of exponents in `[lo, hi]` (`None`: unbounded): a sign as JSON
/// allows (`+` optional), leading zeros allowed.
pub(super) fn exponent_range(lo: Option<i64>, hi: Option<i64>) -> Option<Expr> {
    let mut alts = Vec::new();
    if hi.is_none_or(|h| h >= 0) {
        let a = lo.map_or(0, |l| l.max(0)).to_string();
        let b = hi.map(|h| h.to_string());
        if let Some(r) = uint_range(a.as_bytes(), b.as_ref().map(|b| b.as_bytes())) {
            alts.push(seq(vec![g(r#""+"?"#), g(r#""0"*"#), r]));
        }
        if lo.is_none_or(|l| l <= 0) {
            alts.push(g(r#""-" "0"+"#));
        }
    }
    if lo.is_none_or(|l| l < 0) {
        let a = hi.map_or(1, |h| (-h).max(1)).to_string();
        let b = lo.map(|l| (-l).to_string());
        if let Some(r) = uint_range(a.as_bytes(), b.as_ref().map(|b| b.as_bytes())) {
            alts.push(seq(vec![lit("-"), g(r#""0"*"#), r]));
        }
    }
    alt(alts)
}

/// Positive numbers in normalized scientific notation within the bounds (`lo` at least
/// zero): at the bounds' exponents, mantissas from the bound to the next power of ten;
/// between them, any mantissa.
pub(super) fn scientific(lo: &Bound, hi: Option<&Bound>) -> Option<Expr> {
    if hi.is_some_and(|h| h.value.neg || h.value.mag.is_zero()) {
        return None;
    }
    let mantissa = |a: Dec, a_strict: bool, b: Dec, b_strict: bool| {
        let lo = Bound {
            value: SDec { neg: false, mag: a },
            strict: a_strict,
        };
        let hi = Bound {
            value: SDec { neg: false, mag: b },
            strict: b_strict,
        };
        nonneg_decimal(&lo, Some(&hi))
    };
    let one = Dec::from_digits(b"1", &[]);
    let ten = Dec::from_digits(b"10", &[]);
    let e = |m: Option<Expr>, lo: Option<i64>, hi: Option<i64>| {
        Some(seq(vec![m?, g("[eE]"), exponent_range(lo, hi)?]))
    };
    let e_lo = (!lo.value.mag.is_zero()).then(|| exponent(&lo.value.mag));
    let e_hi = hi.map(|h| exponent(&h.value.mag));
    let mut alts = Vec::new();
    if let (Some(l), Some(h), Some(hb)) = (e_lo, e_hi, hi)
        && l == h
    {
        let m = mantissa(
            shift_down(&lo.value.mag, l),
            lo.strict,
            shift_down(&hb.value.mag, l),
            hb.strict,
        );
        return e(m, Some(l), Some(l));
    }
    if let Some(l) = e_lo {
        let m = mantissa(shift_down(&lo.value.mag, l), lo.strict, ten.clone(), true);
        alts.extend(e(m, Some(l), Some(l)));
    }
    if let (Some(h), Some(hb)) = (e_hi, hi) {
        let m = mantissa(one.clone(), false, shift_down(&hb.value.mag, h), hb.strict);
        alts.extend(e(m, Some(h), Some(h)));
    }
    let (mid_lo, mid_hi) = (e_lo.map(|l| l + 1), e_hi.map(|h| h - 1));
    if mid_lo.zip(mid_hi).is_none_or(|(a, b)| a <= b) {
        alts.extend(e(mantissa(one, false, ten, true), mid_lo, mid_hi));
    }
    alt(alts)
}

pub(super) fn decr_or_none(int: &[u8]) -> Option<Vec<u8>> {
    if int == b"0" { None } else { Some(decr(int)) }
}
