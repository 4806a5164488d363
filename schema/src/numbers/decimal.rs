//! Decimals of any precision, as digit strings: parsing, order, and the neighbours of an
//! integer.

use super::*;

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
    pub(super) fn zero() -> Dec {
        Dec {
            int: vec![b'0'],
            frac: Vec::new(),
        }
    }

    pub(super) fn is_zero(&self) -> bool {
        self.int == b"0" && self.frac.is_empty()
    }

    pub(super) fn is_integer(&self) -> bool {
        self.frac.is_empty()
    }

    pub(super) fn from_digits(int: &[u8], frac: &[u8]) -> Dec {
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

    pub(super) fn negated(&self) -> SDec {
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

pub(super) fn int_sdec(neg: bool, int: Vec<u8>) -> SDec {
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

pub(super) fn incr(int: &[u8]) -> Vec<u8> {
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
pub(super) fn decr(int: &[u8]) -> Vec<u8> {
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
