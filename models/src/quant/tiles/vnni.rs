//! The tiled kernel's AVX-512 VNNI loop: one tile's 16 features against up to 8 rows.

use super::{TILE, XPiece};
use std::arch::x86_64::*;

/// One tile's slices of a [`super::Packed`].
pub(super) struct Tile<'a> {
    pub quants: &'a [u8],
    pub codes: &'a [u8],
    pub supers: &'a [f32],
    pub zero: f32,
}

/// The 4 activation bytes of group `g` in every lane.
#[inline]
#[target_feature(enable = "avx512f")]
fn group(x: &XPiece, g: usize) -> __m512i {
    let b = &x.qs[4 * g..4 * g + 4];
    _mm512_set1_epi32(i32::from_le_bytes([
        b[0] as u8, b[1] as u8, b[2] as u8, b[3] as u8,
    ]))
}

/// 16 codes at `p` widened to f32, unsigned or signed.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn codes(p: *const u8, signed: bool) -> __m512 {
    // SAFETY: the caller guarantees 16 readable bytes.
    let v = unsafe { _mm_loadu_si128(p.cast()) };
    _mm512_cvtepi32_ps(if signed {
        _mm512_cvtepi8_epi32(v)
    } else {
        _mm512_cvtepu8_epi32(v)
    })
}

/// The 16 features' `d` and `m` of half `h` of piece `p` (see [`super::Mode`]; `MODE`
/// is its index).
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn scales<const MODE: u8>(tile: &Tile<'_>, p: usize, h: usize) -> (__m512, __m512) {
    // SAFETY: every read below is within the tile, which holds piece p's codes and its
    // super-block's scales.
    unsafe {
        let c = tile.codes.as_ptr().add(p * if MODE == 1 { 64 } else { 32 });
        match MODE {
            0 | 1 => {
                let d = _mm512_cvtph_ps(_mm256_loadu_si256(c.cast()));
                let m = match MODE {
                    0 => _mm512_mul_ps(_mm512_set1_ps(tile.zero), d),
                    _ => _mm512_cvtph_ps(_mm256_loadu_si256(c.add(32).cast())),
                };
                (d, m)
            }
            2 => {
                let s = tile.supers.as_ptr().add(p / 8 * 2 * TILE);
                let d = _mm512_mul_ps(_mm512_loadu_ps(s), codes(c, false));
                let m = _mm512_mul_ps(_mm512_loadu_ps(s.add(TILE)), codes(c.add(TILE), false));
                (d, m)
            }
            _ => {
                let s = tile.supers.as_ptr().add(p / 8 * TILE);
                let d = _mm512_mul_ps(_mm512_loadu_ps(s), codes(c.add(TILE * h), true));
                (d, _mm512_mul_ps(d, _mm512_set1_ps(-32.0)))
            }
        }
    }
}

/// One tile's 16 features against `R` rows. `BITS`: the layout's bits (8: bytes;
/// fewer: nibbles and `BITS - 4` planes); `MODE`: how its scales are stored (Q6_K's
/// mode, 3, has scales per half).
///
/// # Safety
/// AVX-512 F, BW and VNNI are available; the tile holds as many pieces as each of `xs`.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub(super) unsafe fn tile<const R: usize, const BITS: u32, const MODE: u8>(
    tile: &Tile<'_>,
    xs: &[&[XPiece]; R],
) -> [[f32; TILE]; R] {
    let halves = MODE == 3;
    let qb = if BITS == 8 {
        512
    } else {
        256 + 64 * (BITS as usize - 4)
    };
    let low = _mm512_set1_epi8(0x0F);
    let mut acc = [_mm512_setzero_ps(); R];
    for (p, q) in tile.quants.chunks_exact(qb).enumerate() {
        let q = q.as_ptr();
        let x: [&XPiece; R] = std::array::from_fn(|r| &xs[r][p]);
        // Integer sums per half (one accumulator where the halves share scales).
        let mut sums = [[_mm512_setzero_si512(); 2]; R];
        for k in 0..4 {
            // SAFETY: the piece's bytes hold 8 registers of 64 bytes (Q8_0), or 4 and
            // `BITS - 4` planes of 8 masks.
            let (a, b) = unsafe {
                if BITS == 8 {
                    (
                        _mm512_loadu_si512(q.add(64 * k).cast()),
                        _mm512_loadu_si512(q.add(64 * (k + 4)).cast()),
                    )
                } else {
                    let v = _mm512_loadu_si512(q.add(64 * k).cast());
                    let mut a = _mm512_and_si512(v, low);
                    let mut b = _mm512_and_si512(_mm512_srli_epi16::<4>(v), low);
                    for j in 0..BITS as usize - 4 {
                        let planes = q.add(256 + 64 * j).cast::<u64>();
                        let bit = _mm512_set1_epi8(1 << (4 + j));
                        let ma = planes.add(k).read_unaligned();
                        let mb = planes.add(k + 4).read_unaligned();
                        a = _mm512_or_si512(a, _mm512_maskz_mov_epi8(ma, bit));
                        b = _mm512_or_si512(b, _mm512_maskz_mov_epi8(mb, bit));
                    }
                    (a, b)
                }
            };
            for (s, x) in sums.iter_mut().zip(&x) {
                s[0] = _mm512_dpbusd_epi32(s[0], a, group(x, k));
                let second = usize::from(halves);
                s[second] = _mm512_dpbusd_epi32(s[second], b, group(x, k + 4));
            }
        }
        for h in 0..1 + usize::from(halves) {
            // SAFETY: the tile holds piece p.
            let (d, m) = unsafe { scales::<MODE>(tile, p, h) };
            for ((acc, s), x) in acc.iter_mut().zip(&sums).zip(&x) {
                let xh = if halves { x.h[h] } else { x.h[0] + x.h[1] };
                let scale = _mm512_mul_ps(d, _mm512_set1_ps(x.d));
                *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[h]), scale, *acc);
                *acc = _mm512_fmadd_ps(m, _mm512_set1_ps(xh), *acc);
            }
        }
    }
    std::array::from_fn(|r| {
        let mut v = [0f32; TILE];
        // SAFETY: 16 floats.
        unsafe { _mm512_storeu_ps(v.as_mut_ptr(), acc[r]) };
        v
    })
}
