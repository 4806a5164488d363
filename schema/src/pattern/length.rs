//! How many characters a pattern matches, and a pattern narrowed to a length range
//! (`minLength` and `maxLength` on a string with a `pattern`).

use super::*;

/// The number of characters a regex matches: least and greatest (`None`: unbounded).
pub(crate) fn char_len(h: &Hir) -> (u64, Option<u64>) {
    match h.kind() {
        HirKind::Empty | HirKind::Look(_) => (0, Some(0)),
        HirKind::Literal(l) => {
            let n = String::from_utf8_lossy(&l.0).chars().count() as u64;
            (n, Some(n))
        }
        HirKind::Class(_) => (1, Some(1)),
        HirKind::Capture(c) => char_len(&c.sub),
        HirKind::Repetition(r) => {
            let (a, b) = char_len(&r.sub);
            let max = match (b, r.max) {
                (Some(0), _) => Some(0),
                (Some(b), Some(m)) => b.checked_mul(m as u64),
                _ => None,
            };
            (a.saturating_mul(r.min as u64), max)
        }
        HirKind::Concat(xs) => xs.iter().fold((0, Some(0)), |(a, b), x| {
            let (c, d) = char_len(x);
            (
                a.saturating_add(c),
                b.zip(d).and_then(|(b, d)| b.checked_add(d)),
            )
        }),
        HirKind::Alternation(xs) => {
            let lens: Vec<_> = xs.iter().map(char_len).collect();
            let min = lens.iter().map(|l| l.0).min().unwrap_or(0);
            let max = lens.iter().try_fold(0u64, |m, l| l.1.map(|x| m.max(x)));
            (min, max)
        }
    }
}

/// What [`restrict_length`] made of a pattern.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Restricted {
    /// The pattern within the length bounds.
    To(Hir),
    /// No string of the pattern has a length within the bounds.
    Nothing,
    /// The pattern is not of the shape handled: the length needs a counter of its own.
    NotOneRepetition,
}

/// Restricts a whole-string regex to `min..=max` characters when that can be done exactly
/// by adjusting one repetition: the pattern is a sequence of fixed-length pieces and one
/// repetition of a fixed-length piece (`[a-z][a-z0-9_]+`, `[A-Z]{2,}`).
pub(crate) fn restrict_length(h: &Hir, min: u64, max: Option<u64>) -> Restricted {
    let (lo, hi) = char_len(h);
    let within_max = match (hi, max) {
        (_, None) => true,
        (Some(hi), Some(m)) => hi <= m,
        (None, Some(_)) => false,
    };
    if lo >= min && within_max {
        return Restricted::To(h.clone());
    }
    if max.is_some_and(|m| lo > m || m < min) || hi.is_some_and(|hi| hi < min) {
        return Restricted::Nothing;
    }
    let mut items = Vec::new();
    flatten_concat(h, &mut items);
    let variable: Vec<usize> = (0..items.len())
        .filter(|&i| {
            let (a, b) = char_len(&items[i]);
            b != Some(a)
        })
        .collect();
    let [v] = variable.as_slice() else {
        return Restricted::NotOneRepetition;
    };
    let HirKind::Repetition(r) = items[*v].kind() else {
        return Restricted::NotOneRepetition;
    };
    let (k, kmax) = char_len(&r.sub);
    if kmax != Some(k) || k == 0 {
        return Restricted::NotOneRepetition;
    }
    let fixed: u64 = items
        .iter()
        .enumerate()
        .filter(|(i, _)| i != v)
        .map(|(_, x)| char_len(x).0)
        .sum();
    let need_min = min.saturating_sub(fixed).div_ceil(k);
    let cmin = need_min.max(r.min as u64);
    let cmax = match (max, r.max) {
        (Some(m), rmax) => {
            let Some(room) = m.checked_sub(fixed) else {
                return Restricted::Nothing;
            };
            let c = room / k;
            Some(rmax.map_or(c, |x| c.min(x as u64)))
        }
        (None, rmax) => rmax.map(u64::from),
    };
    if cmax.is_some_and(|c| c < cmin) {
        return Restricted::Nothing;
    }
    // Counts past u32 (regex-syntax's repetition bounds): left to the length counter.
    let (Ok(cmin), Ok(cmax)) = (u32::try_from(cmin), cmax.map(u32::try_from).transpose()) else {
        return Restricted::NotOneRepetition;
    };
    items[*v] = Hir::repetition(Repetition {
        min: cmin,
        max: cmax,
        greedy: true,
        sub: r.sub.clone(),
    });
    Restricted::To(Hir::concat(items))
}

pub(super) fn flatten_concat(h: &Hir, out: &mut Vec<Hir>) {
    match h.kind() {
        HirKind::Concat(xs) => xs.iter().for_each(|x| flatten_concat(x, out)),
        HirKind::Capture(c) => flatten_concat(&c.sub, out),
        _ => out.push(h.clone()),
    }
}
