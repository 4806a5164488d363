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

/// A non-negative decimal: integer digits without leading zeros (`"0"` for zero) and
/// fraction digits without trailing zeros.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Dec {
    pub int: Vec<u8>,
    pub frac: Vec<u8>,
}

/// A signed decimal; zero is never negative.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SDec {
    pub neg: bool,
    pub mag: Dec,
}

impl Dec {
    fn zero() -> Dec {
        Dec {
            int: vec![b'0'],
            frac: Vec::new(),
        }
    }

    fn is_zero(&self) -> bool {
        self.int == b"0" && self.frac.is_empty()
    }

    fn is_integer(&self) -> bool {
        self.frac.is_empty()
    }

    fn from_digits(int: &[u8], frac: &[u8]) -> Dec {
        let first = int.iter().position(|&d| d != b'0').unwrap_or(int.len());
        let int = if first == int.len() {
            vec![b'0']
        } else {
            int[first..].to_vec()
        };
        let last = frac.iter().rposition(|&d| d != b'0').map_or(0, |i| i + 1);
        Dec {
            int,
            frac: frac[..last].to_vec(),
        }
    }
}

impl Ord for Dec {
    fn cmp(&self, other: &Dec) -> Ordering {
        self.int
            .len()
            .cmp(&other.int.len())
            .then_with(|| self.int.cmp(&other.int))
            // Fractions are trimmed, so plain lexicographic order is numeric order.
            .then_with(|| self.frac.cmp(&other.frac))
    }
}

impl PartialOrd for Dec {
    fn partial_cmp(&self, other: &Dec) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl SDec {
    pub fn zero() -> SDec {
        SDec {
            neg: false,
            mag: Dec::zero(),
        }
    }

    /// Parses a JSON number (`-1.5e3`), exactly.
    pub fn parse(s: &str) -> Option<SDec> {
        let (neg, s) = match s.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, s),
        };
        let (mant, exp) = match s.find(['e', 'E']) {
            Some(i) => (&s[..i], s[i + 1..].parse::<i64>().ok()?),
            None => (s, 0),
        };
        let (ip, fp) = match mant.find('.') {
            Some(i) => (&mant[..i], &mant[i + 1..]),
            None => (mant, ""),
        };
        if ip.is_empty() || !ip.bytes().chain(fp.bytes()).all(|b| b.is_ascii_digit()) {
            return None;
        }
        if exp.unsigned_abs() > 10_000 {
            return None;
        }
        let mut digits: Vec<u8> = ip.bytes().chain(fp.bytes()).collect();
        let mut point = ip.len() as i64 + exp;
        if point < 0 {
            let pad = (-point) as usize;
            digits.splice(0..0, std::iter::repeat_n(b'0', pad));
            point = 0;
        }
        let point = point as usize;
        if point > digits.len() {
            digits.resize(point, b'0');
        }
        let mag = Dec::from_digits(&digits[..point], &digits[point..]);
        Some(SDec {
            neg: neg && !mag.is_zero(),
            mag,
        })
    }

    pub fn is_integer(&self) -> bool {
        self.mag.is_integer()
    }

    fn negated(&self) -> SDec {
        SDec {
            neg: !self.neg && !self.mag.is_zero(),
            mag: self.mag.clone(),
        }
    }

    /// The least integer >= self.
    pub fn ceil(&self) -> SDec {
        if self.is_integer() {
            return self.clone();
        }
        if self.neg {
            // -3.5 -> -3
            int_sdec(true, self.mag.int.clone())
        } else {
            int_sdec(false, incr(&self.mag.int))
        }
    }

    /// The greatest integer <= self.
    pub fn floor(&self) -> SDec {
        self.negated().ceil().negated()
    }

    /// self + 1 (for integers).
    pub fn succ(&self) -> SDec {
        if self.neg {
            int_sdec(true, decr(&self.mag.int))
        } else {
            int_sdec(false, incr(&self.mag.int))
        }
    }

    /// self - 1 (for integers).
    pub fn pred(&self) -> SDec {
        self.negated().succ().negated()
    }

    /// The integer as i128, if it fits.
    pub fn to_i128(&self) -> Option<i128> {
        if !self.is_integer() || self.mag.int.len() > 37 {
            return None;
        }
        let v: i128 = std::str::from_utf8(&self.mag.int).ok()?.parse().ok()?;
        Some(if self.neg { -v } else { v })
    }

    pub fn from_i128(v: i128) -> SDec {
        int_sdec(v < 0, v.unsigned_abs().to_string().into_bytes())
    }
}

fn int_sdec(neg: bool, int: Vec<u8>) -> SDec {
    let mag = Dec::from_digits(&int, &[]);
    SDec {
        neg: neg && !mag.is_zero(),
        mag,
    }
}

impl Ord for SDec {
    fn cmp(&self, other: &SDec) -> Ordering {
        match (self.neg, other.neg) {
            (false, false) => self.mag.cmp(&other.mag),
            (true, true) => other.mag.cmp(&self.mag),
            (true, false) => Ordering::Less,
            (false, true) => Ordering::Greater,
        }
    }
}

impl PartialOrd for SDec {
    fn partial_cmp(&self, other: &SDec) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl std::fmt::Display for SDec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.neg {
            f.write_str("-")?;
        }
        f.write_str(std::str::from_utf8(&self.mag.int).unwrap_or("?"))?;
        if !self.mag.frac.is_empty() {
            write!(f, ".{}", std::str::from_utf8(&self.mag.frac).unwrap_or("?"))?;
        }
        Ok(())
    }
}

fn incr(int: &[u8]) -> Vec<u8> {
    let mut d = int.to_vec();
    for i in (0..d.len()).rev() {
        if d[i] == b'9' {
            d[i] = b'0';
        } else {
            d[i] += 1;
            return d;
        }
    }
    d.insert(0, b'1');
    d
}

/// int - 1 for int >= 1.
fn decr(int: &[u8]) -> Vec<u8> {
    let mut d = int.to_vec();
    for i in (0..d.len()).rev() {
        if d[i] == b'0' {
            d[i] = b'9';
        } else {
            d[i] -= 1;
            break;
        }
    }
    Dec::from_digits(&d, &[]).int
}

/// A bound: the value and whether it is exclusive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Bound {
    pub value: SDec,
    pub strict: bool,
}

fn digit_class(a: u8, b: u8) -> Expr {
    class(&[(a as char, b as char)]).expect("non-empty")
}

fn any_digits(n: usize) -> Expr {
    let n = u32::try_from(n).expect("digit counts of decimal strings fit in u32");
    repeat(digit(), n, Some(n))
}

fn digits_lit(d: &[u8]) -> Expr {
    lit(std::str::from_utf8(d).expect("ASCII digits"))
}

/// Digit strings of `a.len()` digits (leading zeros allowed) between `a` and `b`, as a
/// flat alternation (a branch per digit position, never nested by position): bounds of
/// hundreds of digits (`1e308`) stay within the grammar's nesting limit.
fn between(a: &[u8], b: &[u8]) -> Expr {
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
fn at_least(x: &[u8]) -> Expr {
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
fn at_most(x: &[u8]) -> Expr {
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
fn uint_range(lo: &[u8], hi: Option<&[u8]>) -> Option<Expr> {
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

/// Digits after the decimal point: `empty_ok` says whether stopping right away (value
/// `0.0...`) is allowed, `more` matches one or more further digits.
struct Frac {
    empty_ok: bool,
    more: Option<Expr>,
}

impl Frac {
    /// The continuation as one expression (possibly empty), `None` if nothing fits.
    fn as_cont(&self) -> Option<Expr> {
        match (&self.more, self.empty_ok) {
            (Some(m), true) => Some(opt(m.clone())),
            (Some(m), false) => Some(m.clone()),
            (None, true) => Some(eps()),
            (None, false) => None,
        }
    }

    /// `("." digits)` after an integer part: optional when `empty_ok`.
    fn as_suffix(&self) -> Option<Expr> {
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
struct Tight<'a> {
    rest: &'a [u8],
    strict: bool,
}

/// Fraction digit strings `d` with `lo <= 0.d <= hi` (each bound still tight, or absent =
/// released).
fn frac(lo: Option<Tight<'_>>, hi: Option<Tight<'_>>) -> Frac {
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
fn nonneg_decimal(lo: &Bound, hi: Option<&Bound>) -> Option<Expr> {
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

/// `floor(log10(d))` of a positive decimal.
fn exponent(d: &Dec) -> i64 {
    if d.int != b"0" {
        d.int.len() as i64 - 1
    } else {
        let zeros = d.frac.iter().position(|&x| x != b'0').expect("positive");
        -(zeros as i64) - 1
    }
}

/// `d × 10^-e`, exactly.
fn shift_down(d: &Dec, e: i64) -> Dec {
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
fn exponent_range(lo: Option<i64>, hi: Option<i64>) -> Option<Expr> {
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
fn scientific(lo: &Bound, hi: Option<&Bound>) -> Option<Expr> {
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

fn decr_or_none(int: &[u8]) -> Option<Vec<u8>> {
    if int == b"0" { None } else { Some(decr(int)) }
}

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

/// Integers that are multiples of `k` within `[lo, hi]`, listed, if there are at most
/// `max_listed` of them; `Err(())` if the range is too wide to list.
pub(crate) fn listed_multiples(
    k: i128,
    lo: &SDec,
    hi: &SDec,
    max_listed: usize,
) -> Result<Option<Expr>, ()> {
    let (Some(l), Some(h)) = (lo.to_i128(), hi.to_i128()) else {
        return Err(());
    };
    if l > h {
        return Ok(None);
    }
    let first = l.div_euclid(k) * k + if l.rem_euclid(k) == 0 { 0 } else { k };
    if first > h {
        return Ok(None);
    }
    let count = (h - first) / k + 1;
    if count > max_listed as i128 {
        return Err(());
    }
    let mut alts = Vec::new();
    let mut v = first;
    while v <= h {
        alts.push(if v == 0 {
            seq(vec![opt(lit("-")), lit("0")])
        } else {
            lit(&v.to_string())
        });
        v += k;
    }
    Ok(alt(alts))
}

/// Integers that are multiples of `k` when `k` divides a power of ten (2, 4, 5, 8, 10, 20,
/// 25, ...): the last `n` digits decide (10^n the least such power). `None` for other `k`.
pub(crate) fn multiples_by_last_digits(k: u64) -> Option<Expr> {
    if k == 0 {
        return None;
    }
    let mut n = 0usize;
    let mut p: u64 = 1;
    while !p.is_multiple_of(k) {
        n += 1;
        if n > 4 {
            return None;
        }
        p *= 10;
    }
    if n == 0 {
        return Some(g(JSON_INTEGER));
    }
    let sign = opt(lit("-"));
    let tails: Vec<String> = (0..p)
        .step_by(k as usize)
        .map(|r| format!("{r:0n$}"))
        .collect();
    let mut alts = vec![seq(vec![sign.clone(), lit("0")])];
    // Fewer than n digits: the number is its own tail.
    let mut v = k;
    while v < p / 10 {
        alts.push(seq(vec![sign.clone(), lit(&v.to_string())]));
        v += k;
    }
    // Exactly n digits: a tail without a leading zero.
    if let Some(exact) = alt(tails
        .iter()
        .filter(|t| !t.starts_with('0'))
        .map(|t| lit(t))
        .collect())
    {
        alts.push(seq(vec![sign.clone(), exact]));
    }
    // More than n digits: any leading part, then a tail.
    let any_tail = alt(tails.iter().map(|t| lit(t)).collect()).expect("0 is a multiple");
    alts.push(seq(vec![sign, g("[1-9] [0-9]*"), any_tail]));
    alt(alts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use corral_grammar::{CompileOptions, MatchOutcome, compile_gbnf, match_bytes};

    fn accepts(expr: &Expr, s: &str) -> bool {
        let g = compile_gbnf(&format!("root ::= {expr}"), &CompileOptions::default())
            .unwrap_or_else(|e| panic!("{e}\n{expr}"));
        match_bytes(&g, s.as_bytes()).unwrap() == MatchOutcome::Accepted
    }

    fn d(s: &str) -> SDec {
        SDec::parse(s).unwrap()
    }

    #[test]
    fn parse_is_exact() {
        assert_eq!(d("1e30").to_string(), format!("1{}", "0".repeat(30)));
        assert_eq!(d("-0.0").to_string(), "0");
        assert_eq!(d("1.50").to_string(), "1.5");
        assert_eq!(d("12.5e-3").to_string(), "0.0125");
        assert_eq!(d("0.5").ceil().to_string(), "1");
        assert_eq!(d("-0.5").ceil().to_string(), "0");
        assert_eq!(d("-0.5").floor().to_string(), "-1");
        assert_eq!(d("-1").succ().to_string(), "0");
        assert_eq!(d("0").pred().to_string(), "-1");
        assert!(d("-2") < d("-1.5"));
        assert!(d("0.25") < d("0.3"));
    }

    #[test]
    fn integer_ranges_match_brute_force() {
        let bounds = [
            None,
            Some(-120),
            Some(-10),
            Some(-1),
            Some(0),
            Some(1),
            Some(7),
            Some(9),
            Some(10),
            Some(99),
            Some(100),
            Some(101),
            Some(250),
        ];
        for lo in bounds {
            for hi in bounds {
                let l = lo.map(SDec::from_i128);
                let h = hi.map(SDec::from_i128);
                let expr = integer_range(l.as_ref(), h.as_ref());
                let Some(expr) = expr else {
                    assert!(lo.unwrap() > hi.unwrap(), "{lo:?} {hi:?}");
                    continue;
                };
                let g =
                    compile_gbnf(&format!("root ::= {expr}"), &CompileOptions::default()).unwrap();
                for v in -300i128..=300 {
                    let inside = lo.is_none_or(|l| v >= l) && hi.is_none_or(|h| v <= h);
                    let got = match_bytes(&g, v.to_string().as_bytes()).unwrap()
                        == MatchOutcome::Accepted;
                    assert_eq!(got, inside, "{v} in [{lo:?}, {hi:?}]: {expr}");
                }
                let zero_in = lo.is_none_or(|l| l <= 0) && hi.is_none_or(|h| h >= 0);
                assert_eq!(
                    match_bytes(&g, b"-0").unwrap() == MatchOutcome::Accepted,
                    zero_in
                );
                assert_ne!(match_bytes(&g, b"007").unwrap(), MatchOutcome::Accepted);
            }
        }
    }

    #[test]
    fn huge_bounds_are_exact() {
        let hi = d("1e30");
        let e = integer_range(Some(&SDec::zero()), Some(&hi)).unwrap();
        assert!(accepts(&e, &format!("1{}", "0".repeat(30))));
        assert!(!accepts(&e, &format!("1{}1", "0".repeat(29))));
        assert!(accepts(&e, &"9".repeat(30)));
    }

    fn frac_cases() -> Vec<String> {
        let mut v = Vec::new();
        for i in 0..=40i32 {
            for f in ["", ".0", ".5", ".25", ".05", ".50", ".999", ".001"] {
                v.push(format!("{i}{f}"));
                v.push(format!("-{i}{f}"));
            }
        }
        v
    }

    fn value(s: &str) -> f64 {
        s.parse().unwrap()
    }

    type Bounds = Option<(&'static str, bool)>;

    /// For every pair of bounds from `bs`: compiles the range and checks each case `(text,
    /// spelled as ranges take it)` is accepted exactly when its value lies in the range
    /// and `spelled` (or `any_spelling(lo, hi)`).
    fn check_ranges(
        bs: &[Bounds],
        cases: &[(String, bool)],
        any_spelling: impl Fn(Bounds, Bounds) -> bool,
    ) {
        for &lo in bs {
            for &hi in bs {
                let bound = |b: Bounds| {
                    b.map(|(v, s)| Bound {
                        value: d(v),
                        strict: s,
                    })
                };
                let expr = number_range(bound(lo).as_ref(), bound(hi).as_ref());
                let g = expr.as_ref().map(|e| {
                    compile_gbnf(&format!("root ::= {e}"), &CompileOptions::default())
                        .unwrap_or_else(|err| panic!("{err}\n{e}"))
                });
                for (s, spelled) in cases {
                    let x = value(s);
                    let inside = lo
                        .is_none_or(|(v, st)| if st { x > value(v) } else { x >= value(v) })
                        && hi.is_none_or(|(v, st)| if st { x < value(v) } else { x <= value(v) });
                    let want = inside && (*spelled || any_spelling(lo, hi));
                    let got = g.as_ref().is_some_and(|g| {
                        match_bytes(g, s.as_bytes()).unwrap() == MatchOutcome::Accepted
                    });
                    assert_eq!(got, want, "{s} in {lo:?}..{hi:?}: {expr:?}");
                }
            }
        }
    }

    #[test]
    fn decimal_ranges_match_brute_force() {
        let bs = [
            None,
            Some(("0", false)),
            Some(("0", true)),
            Some(("0.5", false)),
            Some(("0.5", true)),
            Some(("-2.25", false)),
            Some(("-2.25", true)),
            Some(("3", true)),
            Some(("3", false)),
            Some(("12.05", false)),
            Some(("20", true)),
        ];
        let cases: Vec<(String, bool)> = frac_cases().into_iter().map(|s| (s, true)).collect();
        check_ranges(&bs, &cases, |_, _| true);
    }

    /// Numbers with exponents: normalized (`2.5e1`, zero as `0e0`) and not (`25e0`).
    fn exp_cases() -> Vec<(String, bool)> {
        let mut v = Vec::new();
        let mantissas = [
            ("1", true),
            ("1.5", true),
            ("2.25", true),
            ("2.250", true),
            ("5", true),
            ("9.99", true),
            ("1.205", true),
            ("0", true),
            ("0.0", true),
            ("25", false),
            ("0.5", false),
            ("12.05", false),
        ];
        for (m, normal) in mantissas {
            for e in [
                "e-3", "E-2", "e-01", "e-1", "e0", "e-0", "E+0", "e1", "e+01", "e2", "E3",
            ] {
                v.push((format!("{m}{e}"), normal));
                v.push((format!("-{m}{e}"), normal));
            }
        }
        v
    }

    #[test]
    fn decimal_ranges_take_normalized_exponents() {
        let bs = [
            None,
            Some(("0", false)),
            Some(("0", true)),
            Some(("0.5", false)),
            Some(("0.5", true)),
            Some(("-2.25", false)),
            Some(("-2.25", true)),
            Some(("3", true)),
            Some(("12.05", false)),
            Some(("20", true)),
            Some(("0.00225", false)),
        ];
        // Without bounds, or with only a bound at zero, every spelling.
        check_ranges(&bs, &exp_cases(), |lo, hi| {
            hi.is_none() && lo.is_none_or(|(v, _)| v == "0")
        });
    }

    #[test]
    fn zero_bounds_keep_exponents() {
        let b = Bound {
            value: SDec::zero(),
            strict: true,
        };
        let e = number_range(Some(&b), None).unwrap();
        assert!(accepts(&e, "1e5"));
        assert!(accepts(&e, "0.001e-3"));
        assert!(!accepts(&e, "0e5"));
        assert!(!accepts(&e, "-1"));
        assert!(!accepts(&e, "0.000"));
    }

    #[test]
    fn multiples() {
        for k in [2u64, 4, 5, 8, 10, 20, 25, 50, 100, 125] {
            let e = multiples_by_last_digits(k).unwrap();
            let g = compile_gbnf(&format!("root ::= {e}"), &CompileOptions::default()).unwrap();
            for v in -1100i64..=1100 {
                let got =
                    match_bytes(&g, v.to_string().as_bytes()).unwrap() == MatchOutcome::Accepted;
                assert_eq!(got, v % k as i64 == 0, "{v} multiple of {k}: {e}");
            }
        }
        assert!(multiples_by_last_digits(3).is_none());
        let e = listed_multiples(3, &d("-7"), &d("20"), 100)
            .unwrap()
            .unwrap();
        for v in -10..=25 {
            assert_eq!(
                accepts(&e, &v.to_string()),
                (-7..=20).contains(&v) && v % 3 == 0,
                "{v}"
            );
        }
    }
}
