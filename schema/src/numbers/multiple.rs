//! Integer `multipleOf`: the multiples listed within a range, or recognized by their last
//! digits.

use super::*;

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
