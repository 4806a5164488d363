//! Decimal ranges: the integer part, then the fraction compared digit by digit.

use super::*;

/// Digits after the decimal point: `empty_ok` says whether stopping right away (value
/// `0.0...`) is allowed, `more` matches one or more further digits.
pub(super) struct Frac {
    pub(super) empty_ok: bool,
    pub(super) more: Option<Expr>,
}

impl Frac {
    /// The continuation as one expression (possibly empty), `None` if nothing fits.
    pub(super) fn as_cont(&self) -> Option<Expr> {
        match (&self.more, self.empty_ok) {
            (Some(m), true) => Some(opt(m.clone())),
            (Some(m), false) => Some(m.clone()),
            (None, true) => Some(eps()),
            (None, false) => None,
        }
    }

    /// `("." digits)` after an integer part: optional when `empty_ok`.
    pub(super) fn as_suffix(&self) -> Option<Expr> {
        let dot = self.more.as_ref().map(|m| seq(vec![lit("."), m.clone()]));
        match (dot, self.empty_ok) {
            (Some(d), true) => Some(opt(d)),
            (Some(d), false) => Some(d),
            (None, true) => Some(eps()),
            (None, false) => None,
        }
    }
}

/// A pending comparison of the fraction digits against a bound's remaining fraction digits.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) struct Tight<'a> {
    pub(super) rest: &'a [u8],
    pub(super) strict: bool,
}

/// Fraction digit strings `d` with `lo <= 0.d <= hi` (each bound still tight, or absent =
/// released).
pub(super) fn frac(lo: Option<Tight<'_>>, hi: Option<Tight<'_>>) -> Frac {
    // A released lower bound with nothing left and not strict is no bound.
    let lo = lo.filter(|t| !t.rest.is_empty() || t.strict);
    // States whose bound digits are used up loop on zeros: closed forms.
    let done = |t: &Option<Tight<'_>>| t.is_none_or(|t| t.rest.is_empty());
    if done(&lo) && done(&hi) {
        let need_nonzero = lo.is_some(); // lo is (nothing left, strict)
        return match (need_nonzero, hi) {
            (false, None) => Frac {
                empty_ok: true,
                more: Some(g("[0-9]+")),
            },
            (true, None) => Frac {
                empty_ok: false,
                more: Some(g("[0-9]* [1-9] [0-9]*")),
            },
            // Only zeros may follow (value equal to hi), unless that is excluded too.
            (false, Some(h)) if !h.strict => Frac {
                empty_ok: true,
                more: Some(g(r#""0"+"#)),
            },
            _ => Frac {
                empty_ok: false,
                more: None,
            },
        };
    }
    // Stopping now means the remaining digits are all zero.
    let empty_ok = lo.is_none_or(|t| t.rest.is_empty() && !t.strict)
        && hi.is_none_or(|t| !t.strict || !t.rest.is_empty());
    // Next digit c: the new state of each bound, grouped into digit ranges.
    let step_lo = |c: u8| -> Result<Option<Tight<'_>>, ()> {
        match lo {
            None => Ok(None),
            Some(t) => {
                let d = t.rest.first().copied().unwrap_or(b'0');
                match c.cmp(&d) {
                    Ordering::Less => Err(()),
                    Ordering::Greater => Ok(None),
                    Ordering::Equal => Ok(Some(Tight {
                        rest: t.rest.get(1..).unwrap_or(&[]),
                        strict: t.strict,
                    })),
                }
            }
        }
    };
    let step_hi = |c: u8| -> Result<Option<Tight<'_>>, ()> {
        match hi {
            None => Ok(None),
            Some(t) => {
                let d = t.rest.first().copied().unwrap_or(b'0');
                match c.cmp(&d) {
                    Ordering::Greater => Err(()),
                    Ordering::Less => Ok(None),
                    Ordering::Equal => Ok(Some(Tight {
                        rest: t.rest.get(1..).unwrap_or(&[]),
                        strict: t.strict,
                    })),
                }
            }
        }
    };
    let mut groups: Vec<(u8, u8, Option<Tight<'_>>, Option<Tight<'_>>)> = Vec::new();
    for c in b'0'..=b'9' {
        let (Ok(l), Ok(h)) = (step_lo(c), step_hi(c)) else {
            continue;
        };
        match groups.last_mut() {
            Some(g) if g.1 + 1 == c && g.2 == l && g.3 == h => g.1 = c,
            _ => groups.push((c, c, l, h)),
        }
    }
    let mut alts = Vec::new();
    for (a, b, l, h) in groups {
        if let Some(cont) = frac(l, h).as_cont() {
            alts.push(seq(vec![digit_class(a, b), cont]));
        }
    }
    Frac {
        empty_ok,
        more: alt(alts),
    }
}

/// Non-negative decimals (no exponent) within the bounds; `lo` is required (use 0).
pub(super) fn nonneg_decimal(lo: &Bound, hi: Option<&Bound>) -> Option<Expr> {
    let li = &lo.value.mag.int;
    let lo_frac = Tight {
        rest: &lo.value.mag.frac,
        strict: lo.strict,
    };
    let mut alts = Vec::new();
    match hi {
        Some(h) if &h.value.mag.int == li => {
            let hf = Tight {
                rest: &h.value.mag.frac,
                strict: h.strict,
            };
            if let Some(s) = frac(Some(lo_frac), Some(hf)).as_suffix() {
                alts.push(seq(vec![digits_lit(li), s]));
            }
        }
        _ => {
            if let Some(s) = frac(Some(lo_frac), None).as_suffix() {
                alts.push(seq(vec![digits_lit(li), s]));
            }
            let mid_hi = hi.map(|h| decr_or_none(&h.value.mag.int));
            let mid = match &mid_hi {
                Some(None) => None,
                Some(Some(m)) => uint_range(&incr(li), Some(m)),
                None => uint_range(&incr(li), None),
            };
            if let Some(m) = mid {
                alts.push(seq(vec![m, opt(seq(vec![lit("."), g("[0-9]+")]))]));
            }
            if let Some(h) = hi {
                let hf = Tight {
                    rest: &h.value.mag.frac,
                    strict: h.strict,
                };
                if let Some(s) = frac(None, Some(hf)).as_suffix() {
                    alts.push(seq(vec![digits_lit(&h.value.mag.int), s]));
                }
            }
        }
    }
    alt(alts)
}
