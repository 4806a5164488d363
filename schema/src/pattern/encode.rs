//! A pattern over characters turned into one over JSON text: each character as a JSON
//! string may write it, plain or escaped (`\n`, `\u00e9`, surrogate pairs).

use super::*;

/// How a string's characters may be written in JSON text.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Spelling {
    /// Every way JSON allows: raw, short escapes, `\uXXXX` in either case.
    Any,
    /// The one way serializers write it: raw, except `"` `\` and control characters, which
    /// take their short escape or lower-case `\u00xx`. Object keys are matched this way.
    Plain,
}

/// The JSON text of any string value the regex matches (without the quotes).
#[cfg(test)]
pub(crate) fn json_encode(h: &Hir, spelling: Spelling) -> Hir {
    Encoder::default().encode(h, spelling)
}

/// [`json_encode`] with the encodings of character classes remembered (a schema's strings
/// share their classes: every bounded string repeats "any character").
#[derive(Debug, Default)]
pub(crate) struct Encoder {
    classes: FxHashMap<(Vec<(char, char)>, Spelling), Hir>,
}

impl Encoder {
    pub(crate) fn encode(&mut self, h: &Hir, spelling: Spelling) -> Hir {
        match h.kind() {
            HirKind::Empty | HirKind::Look(_) => Hir::empty(),
            HirKind::Literal(l) => {
                let text = String::from_utf8_lossy(&l.0);
                // Written plainly, a character JSON lets stand unescaped is itself: a run
                // of them is one literal (an object's key names, mostly).
                let raw = |c: char| c >= ' ' && c != '"' && c != '\\';
                if spelling == Spelling::Plain && text.chars().all(raw) {
                    return Hir::literal(text.as_bytes());
                }
                Hir::concat(
                    text.chars()
                        .map(|c| self.class(vec![(c, c)], spelling))
                        .collect(),
                )
            }
            HirKind::Class(Class::Unicode(c)) => {
                let ranges: Vec<(char, char)> = c.iter().map(|r| (r.start(), r.end())).collect();
                self.class(ranges, spelling)
            }
            HirKind::Class(Class::Bytes(c)) => {
                let ranges: Vec<(char, char)> = c
                    .iter()
                    .map(|r| (r.start() as char, r.end() as char))
                    .collect();
                self.class(ranges, spelling)
            }
            HirKind::Repetition(r) => Hir::repetition(Repetition {
                min: r.min,
                max: r.max,
                greedy: true,
                sub: Box::new(self.encode(&r.sub, spelling)),
            }),
            HirKind::Capture(c) => self.encode(&c.sub, spelling),
            HirKind::Concat(xs) => {
                Hir::concat(xs.iter().map(|x| self.encode(x, spelling)).collect())
            }
            HirKind::Alternation(xs) => {
                Hir::alternation(xs.iter().map(|x| self.encode(x, spelling)).collect())
            }
        }
    }

    fn class(&mut self, ranges: Vec<(char, char)>, spelling: Spelling) -> Hir {
        // Any character, in every string without a pattern: a constant of the process.
        if ranges == [('\0', char::MAX)] {
            static ANY: [OnceLock<Hir>; 2] = [OnceLock::new(), OnceLock::new()];
            return ANY[spelling as usize]
                .get_or_init(|| encode_class(&ranges, spelling))
                .clone();
        }
        if let Some(h) = self.classes.get(&(ranges.clone(), spelling)) {
            return h.clone();
        }
        let h = encode_class(&ranges, spelling);
        self.classes.insert((ranges, spelling), h.clone());
        h
    }
}

pub(super) fn uclass(ranges: impl IntoIterator<Item = (u32, u32)>) -> Hir {
    let rs: Vec<ClassUnicodeRange> = ranges
        .into_iter()
        .filter_map(|(a, b)| {
            Some(ClassUnicodeRange::new(
                char::from_u32(a)?,
                char::from_u32(b)?,
            ))
        })
        .collect();
    Hir::class(Class::Unicode(ClassUnicode::new(rs)))
}

pub(super) fn text(s: &str) -> Hir {
    Hir::literal(s.as_bytes())
}

/// Intersection of sorted ranges with `[lo, hi]`.
pub(super) fn clip(ranges: &[(u32, u32)], lo: u32, hi: u32) -> Vec<(u32, u32)> {
    ranges
        .iter()
        .filter_map(|&(a, b)| {
            let (a, b) = (a.max(lo), b.min(hi));
            (a <= b).then_some((a, b))
        })
        .collect()
}

/// The JSON spellings of one character of the class.
pub(super) fn encode_class(ranges: &[(char, char)], spelling: Spelling) -> Hir {
    let r: Vec<(u32, u32)> = ranges.iter().map(|&(a, b)| (a as u32, b as u32)).collect();
    let mut alts = Vec::new();
    let raw = unescaped(&r);
    if !raw.is_empty() {
        alts.push(uclass(raw));
    }
    match spelling {
        Spelling::Plain => plain_escapes(&r, &mut alts),
        _ => {
            any_escapes(&r, &mut alts);
            surrogate_pairs(&r, &mut alts);
        }
    }
    match alts.len() {
        0 => Hir::fail(),
        1 => alts.pop().expect("one"),
        _ => Hir::alternation(alts),
    }
}

/// Whether a code point is in the ranges.
pub(super) fn in_ranges(r: &[(u32, u32)], c: u32) -> bool {
    r.iter().any(|&(a, b)| a <= c && c <= b)
}

/// The ranges' characters JSON lets stand unescaped: all but controls, '"' and '\'.
pub(super) fn unescaped(r: &[(u32, u32)]) -> Vec<(u32, u32)> {
    let mut raw = Vec::new();
    for &(a, b) in r {
        let mut lo = a.max(0x20);
        while lo <= b {
            let cut = [0x22u32, 0x5c].into_iter().find(|&x| x >= lo && x <= b);
            match cut {
                Some(x) => {
                    if x > lo {
                        raw.push((lo, x - 1));
                    }
                    lo = x + 1;
                }
                None => {
                    raw.push((lo, b));
                    break;
                }
            }
        }
    }
    raw
}

/// The escapes JSON requires, as serializers write them: short ones where JSON has them,
/// other controls as `\u00xx` in lower-case hex, grouped by the third digit.
pub(super) fn plain_escapes(r: &[(u32, u32)], alts: &mut Vec<Hir>) {
    for (c, esc) in [
        ('"', "\\\""),
        ('\\', "\\\\"),
        ('\u{8}', "\\b"),
        ('\u{c}', "\\f"),
        ('\n', "\\n"),
        ('\r', "\\r"),
        ('\t', "\\t"),
    ] {
        if in_ranges(r, c as u32) {
            alts.push(text(esc));
        }
    }
    for hi in 0..2u32 {
        let lows: Vec<(u32, u32)> = (0..16)
            .filter(|lo| {
                let c = hi * 16 + lo;
                in_ranges(r, c) && ![8, 9, 10, 12, 13].contains(&c)
            })
            .map(|lo| {
                let d = if lo < 10 { 0x30 + lo } else { 0x61 + lo - 10 };
                (d, d)
            })
            .collect();
        if !lows.is_empty() {
            alts.push(Hir::concat(vec![text(&format!("\\u00{hi}")), uclass(lows)]));
        }
    }
}

/// Every escape JSON allows for the ranges' characters: the short ones, and `\uXXXX` (either
/// case) for the Basic Multilingual Plane (surrogates are not characters).
pub(super) fn any_escapes(r: &[(u32, u32)], alts: &mut Vec<Hir>) {
    let short: Vec<(u32, u32)> = [
        ('"', '"'),
        ('\\', '\\'),
        ('/', '/'),
        ('\u{8}', 'b'),
        ('\u{c}', 'f'),
        ('\n', 'n'),
        ('\r', 'r'),
        ('\t', 't'),
    ]
    .into_iter()
    .filter(|&(c, _)| in_ranges(r, c as u32))
    .map(|(_, e)| (e as u32, e as u32))
    .collect();
    if !short.is_empty() {
        alts.push(Hir::concat(vec![text("\\"), uclass(short)]));
    }
    let bmp: Vec<(u32, u32)> = clip(r, 0, 0xD7FF)
        .into_iter()
        .chain(clip(r, 0xE000, 0xFFFF))
        .collect();
    if !bmp.is_empty() {
        alts.push(Hir::concat(vec![text("\\u"), hex4(&bmp)]));
    }
}

/// The ranges' astral characters as escaped surrogate pairs (`\uD83D\uDE00`).
pub(super) fn surrogate_pairs(r: &[(u32, u32)], alts: &mut Vec<Hir>) {
    for (a, b) in clip(r, 0x10000, 0x10FFFF) {
        let (a, b) = (a - 0x10000, b - 0x10000);
        let (ha, la) = (0xD800 + (a >> 10), 0xDC00 + (a & 0x3FF));
        let (hb, lb) = (0xD800 + (b >> 10), 0xDC00 + (b & 0x3FF));
        let mut pair = |h: (u32, u32), l: (u32, u32)| {
            alts.push(Hir::concat(vec![
                text("\\u"),
                hex4(&[h]),
                text("\\u"),
                hex4(&[l]),
            ]));
        };
        if ha == hb {
            pair((ha, ha), (la, lb));
        } else {
            pair((ha, ha), (la, 0xDFFF));
            if ha + 1 < hb {
                pair((ha + 1, hb - 1), (0xDC00, 0xDFFF));
            }
            pair((hb, hb), (0xDC00, lb));
        }
    }
}

/// One hex digit in `a..=b` (0-15), either case.
pub(super) fn hex_digit_class(a: u32, b: u32) -> Hir {
    let mut rs = Vec::new();
    let digits = (a.min(9), b.min(9));
    if a <= 9 {
        rs.push((0x30 + digits.0, 0x30 + digits.1));
    }
    if b >= 10 {
        let (x, y) = (a.max(10) - 10, b - 10);
        rs.push((0x61 + x, 0x61 + y));
        rs.push((0x41 + x, 0x41 + y));
    }
    uclass(rs)
}

/// Four hex digits whose value is in one of the ranges (sorted, within 0..=0xFFFF).
pub(super) fn hex4(ranges: &[(u32, u32)]) -> Hir {
    let mut alts = Vec::new();
    for &(a, b) in ranges {
        hex_range(a, b, 4, &mut Vec::new(), &mut alts);
    }
    match alts.len() {
        1 => alts.pop().expect("one"),
        _ => Hir::alternation(alts),
    }
}

/// Fixed-width hex strings of `width` digits with value in `[a, b]`, appended to `out`
/// after the digits in `prefix`.
pub(super) fn hex_range(a: u32, b: u32, width: u32, prefix: &mut Vec<Hir>, out: &mut Vec<Hir>) {
    if width == 0 {
        out.push(Hir::concat(prefix.clone()));
        return;
    }
    let base = 16u32.pow(width - 1);
    let full = base - 1;
    let any = |n: u32| -> Hir {
        Hir::repetition(Repetition {
            min: n,
            max: Some(n),
            greedy: true,
            sub: Box::new(hex_digit_class(0, 15)),
        })
    };
    let (ah, al) = (a / base, a % base);
    let (bh, bl) = (b / base, b % base);
    if ah == bh {
        prefix.push(hex_digit_class(ah, ah));
        hex_range(al, bl, width - 1, prefix, out);
        prefix.pop();
        return;
    }
    // First leading digit (partial unless al == 0).
    let mut lo_full = ah;
    if al != 0 {
        prefix.push(hex_digit_class(ah, ah));
        hex_range(al, full, width - 1, prefix, out);
        prefix.pop();
        lo_full = ah + 1;
    }
    let mut hi_full = bh;
    let last_partial = bl != full;
    if last_partial {
        hi_full = bh.wrapping_sub(1);
    }
    if lo_full <= hi_full && hi_full != u32::MAX {
        let mut parts = prefix.clone();
        parts.push(hex_digit_class(lo_full, hi_full));
        parts.push(any(width - 1));
        out.push(Hir::concat(parts));
    }
    if last_partial {
        prefix.push(hex_digit_class(bh, bh));
        hex_range(0, bl, width - 1, prefix, out);
        prefix.pop();
    }
}
