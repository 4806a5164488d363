//! Numbers: ranges (exact, digit by digit, see `crate::numbers`) and `multipleOf`.

use super::*;

impl Compiler<'_> {
    /// A number (or integer) schema: its range and `multipleOf`.
    pub(super) fn number(
        &mut self,
        m: &Map<String, Value>,
        ptr: &str,
        integer: bool,
        hint: &str,
    ) -> Res<Option<Expr>> {
        let (lo, hi) = bounds(m, ptr)?;
        let k = match m.get("multipleOf") {
            None => None,
            Some(v) => Some(
                v.as_number()
                    .and_then(|n| SDec::parse(&n.to_string()))
                    .filter(|d| !d.neg && *d != SDec::zero())
                    .ok_or_else(|| {
                        invalid(&child(ptr, "multipleOf"), "multipleOf must be a number > 0")
                    })?,
            ),
        };
        let expr = match k.as_ref().map(|k| step(k, integer)) {
            None | Some(Step::Digits(_)) if integer => int_range(&lo, &hi),
            None => numbers::number_range(lo.as_ref(), hi.as_ref()),
            // Multiples of 1 are the integers.
            Some(Step::Digits(0)) => int_range(&lo, &hi),
            Some(Step::Digits(d)) => {
                if lo.is_some() || hi.is_some() {
                    self.unsupported(
                        "multipleOf",
                        ptr,
                        "a fractional multipleOf together with minimum/maximum",
                    )?;
                    numbers::number_range(lo.as_ref(), hi.as_ref())
                } else {
                    let d = u32::try_from(d).unwrap_or(u32::MAX);
                    Some(seq(vec![
                        g(numbers::JSON_INTEGER),
                        opt(seq(vec![
                            lit("."),
                            repeat(digit(), 1, Some(d)),
                            g(r#""0"*"#),
                        ])),
                    ]))
                }
            }
            Some(Step::Int(n)) => self.integer_multiples(n, &lo, &hi, ptr)?,
            Some(Step::Fraction) => {
                self.unsupported(
                    "multipleOf",
                    ptr,
                    "a fractional multipleOf other than 10^-n",
                )?;
                numbers::number_range(lo.as_ref(), hi.as_ref())
            }
        };
        Ok(expr.map(|e| {
            let name = if integer { "integer" } else { "number" };
            if e == g(numbers::JSON_NUMBER) {
                self.fixed_rule("json-number", |_| e)
            } else if e == g(numbers::JSON_INTEGER) {
                self.fixed_rule("json-integer", |_| e)
            } else {
                self.rule(&format!("{hint}-{name}"), e)
            }
        }))
    }

    /// Multiples of the integer `n` within the bounds: listed when both bounds are given,
    /// by their last digits when neither is (and `n` divides a power of ten).
    fn integer_multiples(
        &mut self,
        n: u64,
        lo: &Option<Bound>,
        hi: &Option<Bound>,
        ptr: &str,
    ) -> Res<Option<Expr>> {
        let (l, h) = numbers::integer_bounds(lo.as_ref(), hi.as_ref());
        Ok(match (&l, &h) {
            (Some(l), Some(h)) => {
                match numbers::listed_multiples(n as i128, l, h, self.opts.max_listed_multiples) {
                    Ok(e) => e,
                    Err(()) => {
                        self.unsupported(
                            "multipleOf",
                            ptr,
                            "multipleOf over a minimum..maximum range too wide to list (max_listed_multiples)",
                        )?;
                        numbers::integer_range(Some(l), Some(h))
                    }
                }
            }
            (None, None) => match numbers::multiples_by_last_digits(n) {
                Some(e) => Some(e),
                None => {
                    self.unsupported(
                        "multipleOf",
                        ptr,
                        "an unbounded multipleOf that does not divide a power of ten",
                    )?;
                    Some(g(numbers::JSON_INTEGER))
                }
            },
            _ => {
                self.unsupported(
                    "multipleOf",
                    ptr,
                    "multipleOf with a bound on one side only",
                )?;
                numbers::integer_range(l.as_ref(), h.as_ref())
            }
        })
    }
}

/// The integers between the bounds (all of them without bounds).
fn int_range(lo: &Option<Bound>, hi: &Option<Bound>) -> Option<Expr> {
    let (l, h) = numbers::integer_bounds(lo.as_ref(), hi.as_ref());
    if l.is_none() && h.is_none() {
        Some(g(numbers::JSON_INTEGER))
    } else {
        numbers::integer_range(l.as_ref(), h.as_ref())
    }
}

/// The lower and upper bounds of a number schema (the tightest of the four keywords).
pub(super) fn bounds(m: &Map<String, Value>, ptr: &str) -> Res<(Option<Bound>, Option<Bound>)> {
    let mut m = m.clone();
    normalize_bounds(&mut m);
    let get = |k: &str| -> Res<Option<SDec>> {
        match m.get(k) {
            None => Ok(None),
            Some(v) => num(v)
                .map(Some)
                .ok_or_else(|| invalid(&child(ptr, k), format!("{k} must be a number"))),
        }
    };
    let pick = |a: Option<Bound>, b: Option<Bound>, lower: bool| -> Option<Bound> {
        match (a, b) {
            (Some(x), Some(y)) => {
                let tighter = match x.value.cmp(&y.value) {
                    std::cmp::Ordering::Equal => x.strict,
                    std::cmp::Ordering::Greater => lower,
                    std::cmp::Ordering::Less => !lower,
                };
                Some(if tighter { x } else { y })
            }
            (x, None) => x,
            (None, y) => y,
        }
    };
    let b = |v: Option<SDec>, strict: bool| v.map(|value| Bound { value, strict });
    let lo = pick(
        b(get("minimum")?, false),
        b(get("exclusiveMinimum")?, true),
        true,
    );
    let hi = pick(
        b(get("maximum")?, false),
        b(get("exclusiveMaximum")?, true),
        false,
    );
    Ok((lo, hi))
}

/// What `multipleOf k` allows, k = a / 10^d.
pub(super) enum Step {
    /// k = 10^-d: no constraint on integers; numbers have at most d fraction digits (d = 0:
    /// k = 1, the integers).
    Digits(usize),
    /// Integers that are multiples of n > 1.
    Int(u64),
    /// Another fraction, on numbers.
    Fraction,
}

/// On integers, `a / 10^d` steps are multiples of `a / gcd(a, 10^d)`.
pub(super) fn step(k: &SDec, integer: bool) -> Step {
    let d = k.mag.frac.len();
    let digits: String = k
        .mag
        .int
        .iter()
        .chain(&k.mag.frac)
        .map(|&b| b as char)
        .collect();
    let Ok(a) = digits.parse::<u64>() else {
        return Step::Fraction;
    };
    if a == 1 {
        return Step::Digits(d);
    }
    if d == 0 {
        return Step::Int(a);
    }
    if !integer {
        return Step::Fraction;
    }
    match 10u64.checked_pow(d as u32) {
        Some(p) => match a / gcd(a, p) {
            1 => Step::Digits(0),
            n => Step::Int(n),
        },
        None => Step::Fraction,
    }
}

pub(super) fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
}
