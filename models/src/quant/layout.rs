//! GGUF weight blocks read one 32-value piece at a time, in one form for every type: 32
//! unsigned bytes `u` and, per half of 16 values, a scale `d` and an offset `m`, so that a
//! value is `u * d + m`. Signed quants are shifted up (Q8_0's `q` is `u - 128`), which moves
//! their zero point into `m`. The tiled kernel ([`super::tiles`]) is built from this form.
//!
//! The layouts are GGML's: blocks of 32 values (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0), and
//! super-blocks of 256 (Q4_K, Q5_K, Q6_K) made of 8 sub-blocks of 32 (Q6_K's halves have
//! scales of their own).

use candle_core::quantized::GgmlDType;
use half::f16;

/// One 32-value piece of a weight row: `value[i] = u[i] * d[i / 16] + m[i / 16]`, with
/// the scales as the file stores them (`code`), from which `d` and `m` are computed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Piece {
    pub u: [u8; 32],
    pub d: [f32; 2],
    pub m: [f32; 2],
    pub code: Code,
}

/// A piece's scales as stored in the file.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Code {
    /// 32-value blocks: the block's f16 scale and, where the layout has one, its f16
    /// offset (bits); without one, `m = zero * d` ([`Layout::zero`]).
    Small { d: u16, m: Option<u16> },
    /// Q4_K and Q5_K: the super-block's scale and minimum's scale, and this piece's 6-bit
    /// codes: `d = d * sc`, `m = -dmin * mn`.
    K { d: f32, dmin: f32, sc: u8, mn: u8 },
    /// Q6_K: the super-block's scale and each half's signed code: `d = d * sc`,
    /// `m = -32 * d`.
    Six { d: f32, sc: [i8; 2] },
}

/// The block layouts read here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Layout {
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q4K,
    Q5K,
    Q6K,
}

impl Layout {
    pub fn of(dtype: GgmlDType) -> Option<Layout> {
        Some(match dtype {
            GgmlDType::Q4_0 => Layout::Q4_0,
            GgmlDType::Q4_1 => Layout::Q4_1,
            GgmlDType::Q5_0 => Layout::Q5_0,
            GgmlDType::Q5_1 => Layout::Q5_1,
            GgmlDType::Q8_0 => Layout::Q8_0,
            GgmlDType::Q4K => Layout::Q4K,
            GgmlDType::Q5K => Layout::Q5K,
            GgmlDType::Q6K => Layout::Q6K,
            _ => return None,
        })
    }

    /// Values per block.
    pub fn values(self) -> usize {
        match self {
            Layout::Q4K | Layout::Q5K | Layout::Q6K => 256,
            _ => 32,
        }
    }

    /// Bytes per block.
    pub fn bytes(self) -> usize {
        match self {
            Layout::Q4_0 => 18,
            Layout::Q4_1 => 20,
            Layout::Q5_0 => 22,
            Layout::Q5_1 => 24,
            Layout::Q8_0 => 34,
            Layout::Q4K => 144,
            Layout::Q5K => 176,
            Layout::Q6K => 210,
        }
    }

    /// Bits of each `u`.
    pub fn bits(self) -> u32 {
        match self {
            Layout::Q4_0 | Layout::Q4_1 | Layout::Q4K => 4,
            Layout::Q5_0 | Layout::Q5_1 | Layout::Q5K => 5,
            Layout::Q6K => 6,
            Layout::Q8_0 => 8,
        }
    }

    /// The zero point of a 32-value layout without an offset (`m = zero * d`).
    pub fn zero(self) -> f32 {
        match self {
            Layout::Q4_0 => -8.0,
            Layout::Q5_0 => -16.0,
            Layout::Q8_0 => -128.0,
            _ => 0.0,
        }
    }

    /// Piece `p` (values `32 p .. 32 p + 32`) of a row of blocks.
    pub fn piece(self, row: &[u8], p: usize) -> Piece {
        let per = self.values() / 32;
        let block = &row[p / per * self.bytes()..][..self.bytes()];
        let sub = p % per;
        let mut u = [0u8; 32];
        let bits = |at: usize| u16::from_le_bytes([block[at], block[at + 1]]);
        let code = match self {
            Layout::Q4_0 | Layout::Q4_1 => {
                let (m, qs) = match self {
                    Layout::Q4_0 => (None, &block[2..18]),
                    _ => (Some(bits(2)), &block[4..20]),
                };
                for (j, &q) in qs.iter().enumerate() {
                    u[j] = q & 0x0F;
                    u[j + 16] = q >> 4;
                }
                Code::Small { d: bits(0), m }
            }
            Layout::Q5_0 | Layout::Q5_1 => {
                let (m, rest) = match self {
                    Layout::Q5_0 => (None, &block[2..22]),
                    _ => (Some(bits(2)), &block[4..24]),
                };
                let qh = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]);
                for (j, &q) in rest[4..20].iter().enumerate() {
                    u[j] = (q & 0x0F) | (((qh >> j) & 1) << 4) as u8;
                    u[j + 16] = (q >> 4) | (((qh >> (j + 16)) & 1) << 4) as u8;
                }
                Code::Small { d: bits(0), m }
            }
            Layout::Q8_0 => {
                for (u, &q) in u.iter_mut().zip(&block[2..34]) {
                    *u = q ^ 0x80;
                }
                Code::Small {
                    d: bits(0),
                    m: None,
                }
            }
            Layout::Q4K | Layout::Q5K => {
                let (sc, mn) = scale_min(&block[4..16], sub);
                let qs = match self {
                    Layout::Q4K => &block[16..144],
                    _ => &block[48..176],
                };
                for (l, &q) in qs[32 * (sub / 2)..][..32].iter().enumerate() {
                    u[l] = if sub.is_multiple_of(2) {
                        q & 0x0F
                    } else {
                        q >> 4
                    };
                    if self == Layout::Q5K {
                        u[l] |= ((block[16 + l] >> sub) & 1) << 4;
                    }
                }
                Code::K {
                    d: half(bits(0)),
                    dmin: half(bits(2)),
                    sc,
                    mn,
                }
            }
            Layout::Q6K => {
                let (n, k) = (sub / 4, sub % 4);
                let ql = &block[64 * n + 32 * (k & 1)..][..32];
                let qh = &block[128 + 32 * n..][..32];
                for l in 0..32 {
                    let low = if k < 2 { ql[l] & 0x0F } else { ql[l] >> 4 };
                    u[l] = low | ((qh[l] >> (2 * k)) & 3) << 4;
                }
                let sc = |h: usize| block[192 + 8 * n + 2 * k + h] as i8;
                Code::Six {
                    d: half(bits(208)),
                    sc: [sc(0), sc(1)],
                }
            }
        };
        let (d, m) = self.scales(&code);
        Piece { u, d, m, code }
    }

    /// Each half's `d` and `m` from a piece's code, computed as the kernel does.
    pub fn scales(self, code: &Code) -> ([f32; 2], [f32; 2]) {
        match *code {
            Code::Small { d, m } => {
                let d = half(d);
                let m = m.map_or(self.zero() * d, half);
                ([d; 2], [m; 2])
            }
            Code::K { d, dmin, sc, mn } => ([d * f32::from(sc); 2], [-dmin * f32::from(mn); 2]),
            Code::Six { d, sc } => {
                let d = sc.map(|c| d * f32::from(c));
                (d, d.map(|d| d * -32.0))
            }
        }
    }
}

/// An f16's bits as f32.
pub(super) fn half(bits: u16) -> f32 {
    f16::from_bits(bits).to_f32()
}

/// Sub-block `j`'s 6-bit scale and minimum, packed in Q4_K's and Q5_K's 12 bytes.
fn scale_min(q: &[u8], j: usize) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}
