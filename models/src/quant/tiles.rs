//! The tiled kernel: a weight matrix repacked once, at load, so that one AVX-512 VNNI
//! instruction (`vpdpbusd`) multiplies 4 weights of each of 16 output features by the same
//! 4 activation bytes, for every weight type of [`Layout`].
//!
//! The repacked form, per tile of 16 features and per 32-value piece of the input:
//! - the 32 x 16 unsigned weight values of [`Layout::piece`], grouped by 4 inputs: for
//!   each group of 4 inputs, the 16 features' 4 values (64 bytes, one register). Q8_0 keeps
//!   them as bytes. The others keep their low 4 bits two groups per byte (inputs `4 g ..` in
//!   the low nibble, `16 + 4 g ..` in the high one), then their 5th (and 6th) bits as one
//!   64-bit mask per group, which AVX-512 turns back into bytes with one masked move;
//! - the 16 features' scales as the file stores them ([`Mode`]): f16 scales (and offsets)
//!   of 32-value blocks, or a K-quant piece's 6-bit or 8-bit codes, with the super-block's
//!   f32 scales kept once per 8 pieces. The repacked matrix is about as large as the file's
//!   (decoding one sequence reads every weight once a step: bytes are its time).
//!
//! A piece's integer sums (one per feature, exact in i32) are scaled by the weight's and the
//! activation's scales and added in f32; the offsets multiply the activation's sums. The
//! rows of a pass share each loaded weight register. Without VNNI the same sums run in a
//! portable loop (the tests' reference, and other CPUs' path).

use super::ShapeError;
use super::layout::{Code, Layout, Piece};
use candle_core::quantized::GgmlDType;

/// Features per tile.
const TILE: usize = 16;

/// The GGUF weight types the tiled kernel reads (`Packed::new` declines the others).
pub const TILED_TYPES: [GgmlDType; 8] = [
    GgmlDType::Q4_0,
    GgmlDType::Q4_1,
    GgmlDType::Q5_0,
    GgmlDType::Q5_1,
    GgmlDType::Q8_0,
    GgmlDType::Q4K,
    GgmlDType::Q5K,
    GgmlDType::Q6K,
];

/// A quantized activation piece: 32 signed bytes, their scale, and the scaled sums of each
/// half (what the weights' offsets multiply).
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
struct XPiece {
    qs: [i8; 32],
    d: f32,
    h: [f32; 2],
}

/// A weight matrix in the tiled form. See the module docs.
#[derive(Clone, Debug)]
pub struct Packed {
    layout: Layout,
    out: usize,
    inp: usize,
    /// Per tile, per piece: [`quant_bytes`]: 256 bytes of nibbles and 64 per high-bit
    /// plane (256, 320 or 384 for 4, 5 or 6 bits), or 512 bytes for 8 bits.
    quants: Vec<u8>,
    /// Per tile, per piece: [`code_bytes`] of the 16 features' codes.
    codes: Vec<u8>,
    /// Per tile, per super-block of 8 pieces (K-quants): [`super_floats`] f32 scales.
    supers: Vec<f32>,
}

/// How a layout's scales are stored per (tile, piece), and what the kernel computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// 16 f16 scales; `m = zero * d` ([`Layout::zero`]).
    Zero,
    /// 16 f16 scales, then 16 f16 offsets.
    Offset,
    /// 16 6-bit scale codes, then 16 minimum codes; per super-block 16 scales, then 16
    /// negated minimum scales: `d * sc`, `-dmin * mn`.
    K,
    /// 16 signed codes per half; per super-block 16 scales: `d * sc`, `-32 d sc`.
    Six,
}

fn mode(layout: Layout) -> Mode {
    match layout {
        Layout::Q4_1 | Layout::Q5_1 => Mode::Offset,
        Layout::Q4K | Layout::Q5K => Mode::K,
        Layout::Q6K => Mode::Six,
        _ => Mode::Zero,
    }
}

/// Bytes of weights per (tile, piece).
fn quant_bytes(layout: Layout) -> usize {
    match layout.bits() {
        8 => 512,
        bits => 256 + 64 * planes(bits),
    }
}

/// Planes of high bits (past the low nibble) of a layout of `bits` below 8.
fn planes(bits: u32) -> usize {
    bits as usize - 4
}

/// Bytes of codes per (tile, piece).
fn code_bytes(layout: Layout) -> usize {
    if mode(layout) == Mode::Offset { 64 } else { 32 }
}

/// Floats per (tile, super-block).
fn super_floats(layout: Layout) -> usize {
    match mode(layout) {
        Mode::K => 2 * TILE,
        Mode::Six => TILE,
        _ => 0,
    }
}

impl Packed {
    /// Repacks `bytes`, `out` rows of `inp` weights of `dtype` (GGUF's layout). `None` for
    /// a type this kernel does not read; an error for sizes that do not match.
    pub fn new(
        dtype: GgmlDType,
        bytes: &[u8],
        out: usize,
        inp: usize,
    ) -> Result<Option<Packed>, ShapeError> {
        let Some(layout) = Layout::of(dtype) else {
            return Ok(None);
        };
        if inp == 0 || !inp.is_multiple_of(layout.values()) {
            return Err(ShapeError::Inputs {
                inp,
                ty: format!("{dtype:?}"),
                block: layout.values(),
            });
        }
        let row_bytes = inp / layout.values() * layout.bytes();
        if bytes.len() != out * row_bytes {
            return Err(ShapeError::Bytes {
                got: bytes.len(),
                expected: out * row_bytes,
                out,
                inp,
                ty: format!("{dtype:?}"),
            });
        }
        let pieces = inp / 32;
        let tiles = out.div_ceil(TILE);
        let (qb, cb, sf) = (
            quant_bytes(layout),
            code_bytes(layout),
            super_floats(layout),
        );
        let mut packed = Packed {
            layout,
            out,
            inp,
            quants: vec![0; tiles * pieces * qb],
            codes: vec![0; tiles * pieces * cb],
            supers: vec![0.0; tiles * pieces.div_ceil(8) * sf],
        };
        for f in 0..out {
            let row = &bytes[f * row_bytes..(f + 1) * row_bytes];
            for p in 0..pieces {
                packed.place(f, p, &layout.piece(row, p));
            }
        }
        Ok(Some(packed))
    }

    /// Output features and inputs.
    pub fn dims(&self) -> (usize, usize) {
        (self.out, self.inp)
    }

    /// Heap bytes held.
    pub fn memory_usage(&self) -> usize {
        self.quants.len() + self.codes.len() + 4 * self.supers.len()
    }

    /// Where feature `f`'s piece `p` lies: its tile's lane, and the offsets of the
    /// (tile, piece)'s weights and codes and of its super-block's scales.
    fn at(&self, f: usize, p: usize) -> (usize, usize, usize, usize) {
        let (t, i) = (f / TILE, f % TILE);
        let pieces = self.inp / 32;
        let at = t * pieces + p;
        let sup = (t * pieces.div_ceil(8) + p / 8) * super_floats(self.layout);
        (
            i,
            at * quant_bytes(self.layout),
            at * code_bytes(self.layout),
            sup,
        )
    }

    /// Writes feature `f`'s piece `p`.
    fn place(&mut self, f: usize, p: usize, piece: &Piece) {
        let (i, q, c, sup) = self.at(f, p);
        let q = &mut self.quants[q..q + quant_bytes(self.layout)];
        let bits = self.layout.bits();
        for (k, &u) in piece.u.iter().enumerate() {
            // Group g's register holds feature i's 4 values at bytes 4 i ...
            let (g, n) = (k / 4, 4 * i + k % 4);
            if bits == 8 {
                q[64 * g + n] = u;
                continue;
            }
            q[64 * (g % 4) + n] |= if g < 4 { u & 0x0F } else { u << 4 };
            for j in 0..planes(bits) {
                // Bit n of the little-endian mask at 256 + 64 j + 8 g.
                q[256 + 64 * j + 8 * g + n / 8] |= ((u >> (4 + j)) & 1) << (n % 8);
            }
        }
        let c = &mut self.codes[c..c + code_bytes(self.layout)];
        match piece.code {
            Code::Small { d, m } => {
                c[2 * i..2 * i + 2].copy_from_slice(&d.to_le_bytes());
                if let Some(m) = m {
                    c[32 + 2 * i..32 + 2 * i + 2].copy_from_slice(&m.to_le_bytes());
                }
            }
            Code::K { d, dmin, sc, mn } => {
                (c[i], c[TILE + i]) = (sc, mn);
                self.supers[sup + i] = d;
                self.supers[sup + TILE + i] = -dmin;
            }
            Code::Six { d, sc } => {
                (c[i], c[TILE + i]) = (sc[0] as u8, sc[1] as u8);
                self.supers[sup + i] = d;
            }
        }
    }

    /// Feature `f`'s piece `p` read back: its unsigned values, and each half's `d` and `m`.
    fn piece(&self, f: usize, p: usize) -> ([u8; 32], [f32; 2], [f32; 2]) {
        let (i, q, c, sup) = self.at(f, p);
        let q = &self.quants[q..q + quant_bytes(self.layout)];
        let bits = self.layout.bits();
        let u = std::array::from_fn(|k| {
            let (g, n) = (k / 4, 4 * i + k % 4);
            if bits == 8 {
                return q[64 * g + n];
            }
            let byte = q[64 * (g % 4) + n];
            let mut u = if g < 4 { byte & 0x0F } else { byte >> 4 };
            for j in 0..planes(bits) {
                let at = 256 + 64 * j + 8 * g;
                let mask = u64::from_le_bytes(q[at..at + 8].try_into().unwrap_or_default());
                u |= (((mask >> n) & 1) as u8) << (4 + j);
            }
            u
        });
        let c = &self.codes[c..c + code_bytes(self.layout)];
        let bits = |at: usize| u16::from_le_bytes([c[at], c[at + 1]]);
        let code = match mode(self.layout) {
            Mode::Zero => Code::Small {
                d: bits(2 * i),
                m: None,
            },
            Mode::Offset => Code::Small {
                d: bits(2 * i),
                m: Some(bits(32 + 2 * i)),
            },
            Mode::K => Code::K {
                d: self.supers[sup + i],
                dmin: -self.supers[sup + TILE + i],
                sc: c[i],
                mn: c[TILE + i],
            },
            Mode::Six => Code::Six {
                d: self.supers[sup + i],
                sc: [c[i] as i8, c[TILE + i] as i8],
            },
        };
        let (d, m) = self.layout.scales(&code);
        (u, d, m)
    }

    /// The weights as f32, row-major `(out, inp)`.
    pub fn dequantize(&self) -> Vec<f32> {
        let mut w = vec![0f32; self.out * self.inp];
        for (f, row) in w.chunks_exact_mut(self.inp).enumerate() {
            self.dequantize_row(f, row);
        }
        w
    }

    /// Feature `f`'s weights as f32 into `row` (`inp` of them). Panics where `f` is not
    /// below `out` or `row`'s length is not `inp`: callers check both.
    pub fn dequantize_row(&self, f: usize, row: &mut [f32]) {
        assert!(f < self.out && row.len() == self.inp);
        for (p, values) in row.chunks_exact_mut(32).enumerate() {
            let (u, d, m) = self.piece(f, p);
            for (k, v) in values.iter_mut().enumerate() {
                *v = f32::from(u[k]) * d[k / 16] + m[k / 16];
            }
        }
    }

    /// `dst (rows x out) = x (rows x inp) * w^T`; slices of matching sizes (checked).
    pub fn matmul(&self, x: &[f32], dst: &mut [f32]) -> Result<(), ShapeError> {
        self.run(x, dst, vnni_available())
    }

    fn run(&self, x: &[f32], dst: &mut [f32], vnni: bool) -> Result<(), ShapeError> {
        let (out, inp) = (self.out, self.inp);
        ShapeError::check_operands(x.len(), dst.len(), out, inp)?;
        let rows = x.len() / inp;
        if rows == 0 || out == 0 {
            return Ok(());
        }
        let xq: Vec<XPiece> = super::quantize_pieces(x, quantize_piece);
        let tiles = out.div_ceil(TILE);
        let pass = Pass {
            w: self,
            xq: &xq,
            rows,
            vnni,
        };
        let base = dst.as_mut_ptr() as usize;
        if out * inp * rows < super::PARALLEL_MIN_WORK {
            // SAFETY: `dst` holds rows x out values, and this call is alone.
            unsafe { pass.tiles(0..tiles, base as *mut f32) };
        } else {
            let per_chunk = 2;
            candle_core::utils::barrier_pool().execute_chunked(
                tiles.div_ceil(per_chunk),
                |range| {
                    for c in range {
                        let ts = c * per_chunk..tiles.min((c + 1) * per_chunk);
                        // SAFETY: each chunk writes only its own tiles' features of each row,
                        // which no other chunk writes, and `dst` outlives the call.
                        unsafe { pass.tiles(ts, base as *mut f32) };
                    }
                },
            );
        }
        Ok(())
    }
}

fn quantize_piece(x: &[f32]) -> XPiece {
    let mut p = XPiece::default();
    let (d, sums) = super::quantize_32(x, &mut p.qs);
    p.d = d;
    p.h = sums.map(|s| d * s as f32);
    p
}

fn vnni_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx512f")
            && std::is_x86_feature_detected!("avx512bw")
            && std::is_x86_feature_detected!("avx512vnni")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Whether this CPU runs the tiled kernel with VNNI (elsewhere it runs a portable loop).
pub fn tiled_kernel_is_fast() -> bool {
    vnni_available()
}

/// Rows per pass over a tile (each row holds an f32 and one or two i32 accumulators: 8
/// rows fit AVX-512's 32 registers).
const ROWS_PER_PASS: usize = 8;

/// One multiplication's operands.
struct Pass<'a> {
    w: &'a Packed,
    xq: &'a [XPiece],
    rows: usize,
    vnni: bool,
}

impl Pass<'_> {
    /// The features of tiles `ts`, for every row, written into `dst` (`rows x out`).
    ///
    /// # Safety
    /// `dst` is valid for `rows x out` writes, and no one else writes these tiles' features.
    unsafe fn tiles(&self, ts: std::ops::Range<usize>, dst: *mut f32) {
        let (out, pieces) = (self.w.out, self.w.inp / 32);
        for t in ts {
            let n = TILE.min(out - t * TILE);
            let mut r0 = 0;
            while r0 < self.rows {
                let rows = (self.rows - r0).min(ROWS_PER_PASS);
                let xs: [&[XPiece]; ROWS_PER_PASS] = std::array::from_fn(|r| {
                    let r = (r0 + r).min(self.rows - 1);
                    &self.xq[r * pieces..(r + 1) * pieces]
                });
                let res = self.tile(t, rows, &xs);
                for (r, values) in res.iter().enumerate().take(rows) {
                    // SAFETY: row r0 + r < rows and features t*16 .. t*16+n < out.
                    unsafe {
                        let at = dst.add((r0 + r) * out + t * TILE);
                        std::ptr::copy_nonoverlapping(values.as_ptr(), at, n);
                    }
                }
                r0 += rows;
            }
        }
    }

    /// Tile `t` against the first `rows` of `xs`.
    fn tile(
        &self,
        t: usize,
        rows: usize,
        xs: &[&[XPiece]; ROWS_PER_PASS],
    ) -> [[f32; TILE]; ROWS_PER_PASS] {
        let w = self.w;
        let mut res = [[0f32; TILE]; ROWS_PER_PASS];
        #[cfg(target_arch = "x86_64")]
        if self.vnni {
            let pieces = w.inp / 32;
            let (qb, cb, sf) = (
                quant_bytes(w.layout),
                code_bytes(w.layout),
                super_floats(w.layout),
            );
            let tile = vnni::Tile {
                quants: &w.quants[t * pieces * qb..(t + 1) * pieces * qb],
                codes: &w.codes[t * pieces * cb..(t + 1) * pieces * cb],
                supers: &w.supers[t * pieces.div_ceil(8) * sf..(t + 1) * pieces.div_ceil(8) * sf],
                zero: w.layout.zero(),
            };
            macro_rules! run {
                ($r:literal) => {{
                    let x: [&[XPiece]; $r] = std::array::from_fn(|r| xs[r]);
                    // SAFETY: AVX-512 F, BW and VNNI are present (checked at run time); the
                    // tile holds `pieces` pieces, as each of `x` does.
                    let got = unsafe {
                        match (w.layout.bits(), mode(w.layout)) {
                            (4, Mode::Zero) => vnni::tile::<$r, 4, 0>(&tile, &x),
                            (4, Mode::Offset) => vnni::tile::<$r, 4, 1>(&tile, &x),
                            (4, _) => vnni::tile::<$r, 4, 2>(&tile, &x),
                            (5, Mode::Zero) => vnni::tile::<$r, 5, 0>(&tile, &x),
                            (5, Mode::Offset) => vnni::tile::<$r, 5, 1>(&tile, &x),
                            (5, _) => vnni::tile::<$r, 5, 2>(&tile, &x),
                            (6, _) => vnni::tile::<$r, 6, 3>(&tile, &x),
                            _ => vnni::tile::<$r, 8, 0>(&tile, &x),
                        }
                    };
                    res[..$r].copy_from_slice(&got);
                }};
            }
            match rows {
                1 => run!(1),
                2 => run!(2),
                3 => run!(3),
                4 => run!(4),
                5 => run!(5),
                6 => run!(6),
                7 => run!(7),
                _ => run!(8),
            }
            return res;
        }
        for (values, x) in res.iter_mut().zip(xs).take(rows) {
            for (i, v) in values.iter_mut().enumerate() {
                let f = t * TILE + i;
                if f < w.out {
                    *v = portable_dot(w, f, x);
                }
            }
        }
        res
    }
}

/// Feature `f` against one activation row, without SIMD: the same integer sums, scaled.
fn portable_dot(w: &Packed, f: usize, x: &[XPiece]) -> f32 {
    let mut total = 0f32;
    for (p, xp) in x.iter().enumerate() {
        let (u, d, m) = w.piece(f, p);
        for h in 0..2 {
            let sum: i32 = (16 * h..16 * h + 16)
                .map(|k| i32::from(u[k]) * i32::from(xp.qs[k]))
                .sum();
            total += sum as f32 * d[h] * xp.d + m[h] * xp.h[h];
        }
    }
    total
}

#[cfg(target_arch = "x86_64")]
mod vnni;

#[cfg(test)]
mod tests;
