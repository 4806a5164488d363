//! The AVX2 kernel for Q4_1 and Q8_0 weights in the file's own layout ([`super::matmul`]).

use super::RowBlock;
use std::arch::x86_64::*;

/// Adds the eight lanes.
#[target_feature(enable = "avx2,fma")]
fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

/// Two f16 at `p` (unaligned) as f32.
#[target_feature(enable = "f16c")]
unsafe fn two_f16(p: *const u8) -> (f32, f32) {
    // SAFETY: the caller guarantees 4 readable bytes at `p`.
    let bits = unsafe { std::ptr::read_unaligned(p as *const i32) };
    let v = _mm_cvtph_ps(_mm_cvtsi32_si128(bits));
    (_mm_cvtss_f32(v), _mm_cvtss_f32(_mm_movehdup_ps(v)))
}

/// `F` Q4_1 weight rows against `R` quantized input rows.
///
/// # Safety
/// AVX2, FMA and F16C are available; each of `ws` holds `xs[r].len()` 20-byte blocks
/// for every r.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q4_1<const F: usize, const R: usize>(
    ws: &[&[u8]; F],
    xs: &[&[RowBlock]; R],
) -> [[f32; R]; F] {
    let nibble = _mm_set1_epi8(0x0F);
    let ones = _mm256_set1_epi16(1);
    let mut acc = [[_mm256_setzero_ps(); R]; F];
    let mut offset = [[0f32; R]; F];
    let blocks = xs.first().map_or(0, |x| x.len());
    for b in 0..blocks {
        // SAFETY: b < xs[r].len() for every r.
        let xb: [&RowBlock; R] = std::array::from_fn(|r| unsafe { xs[r].get_unchecked(b) });
        // SAFETY: 32 readable bytes each.
        let y: [__m256i; R] =
            std::array::from_fn(|r| unsafe { _mm256_loadu_si256(xb[r].qs.as_ptr().cast()) });
        for f in 0..F {
            // SAFETY: block b lies within ws[f] (caller's contract).
            let (v, d, m) = unsafe {
                let p = ws[f].as_ptr().add(b * 20);
                let (d, m) = two_f16(p);
                let q = _mm_loadu_si128(p.add(4).cast());
                let lo = _mm_and_si128(q, nibble);
                let hi = _mm_and_si128(_mm_srli_epi16(q, 4), nibble);
                (_mm256_set_m128i(hi, lo), d, m)
            };
            for r in 0..R {
                // Weight nibbles are 0..15 and activations -127..127: pair sums fit i16.
                let dot = _mm256_madd_epi16(_mm256_maddubs_epi16(v, y[r]), ones);
                acc[f][r] = _mm256_fmadd_ps(
                    _mm256_cvtepi32_ps(dot),
                    _mm256_set1_ps(d * xb[r].d),
                    acc[f][r],
                );
                offset[f][r] += m * xb[r].s;
            }
        }
    }
    std::array::from_fn(|f| std::array::from_fn(|r| hsum(acc[f][r]) + offset[f][r]))
}

/// `F` Q8_0 weight rows against `R` quantized input rows.
///
/// # Safety
/// AVX2, FMA and F16C are available; each of `ws` holds `xs[r].len()` 34-byte blocks
/// for every r.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q8_0<const F: usize, const R: usize>(
    ws: &[&[u8]; F],
    xs: &[&[RowBlock]; R],
) -> [[f32; R]; F] {
    let ones = _mm256_set1_epi16(1);
    let mut acc = [[_mm256_setzero_ps(); R]; F];
    let blocks = xs.first().map_or(0, |x| x.len());
    for b in 0..blocks {
        // SAFETY: b < xs[r].len() for every r.
        let xb: [&RowBlock; R] = std::array::from_fn(|r| unsafe { xs[r].get_unchecked(b) });
        // SAFETY: 32 readable bytes each.
        let y: [__m256i; R] =
            std::array::from_fn(|r| unsafe { _mm256_loadu_si256(xb[r].qs.as_ptr().cast()) });
        for f in 0..F {
            // SAFETY: block b lies within ws[f] (caller's contract).
            let (q, d) = unsafe {
                let p = ws[f].as_ptr().add(b * 34);
                let (d, _) = two_f16(p);
                (_mm256_loadu_si256(p.add(2).cast()), d)
            };
            // maddubs takes one unsigned operand: |w| against y carrying w's sign.
            let magnitude = _mm256_sign_epi8(q, q);
            for r in 0..R {
                let signed = _mm256_sign_epi8(y[r], q);
                // |w| <= 128 and |y| <= 127: pair sums stay within i16.
                let dot = _mm256_madd_epi16(_mm256_maddubs_epi16(magnitude, signed), ones);
                acc[f][r] = _mm256_fmadd_ps(
                    _mm256_cvtepi32_ps(dot),
                    _mm256_set1_ps(d * xb[r].d),
                    acc[f][r],
                );
            }
        }
    }
    std::array::from_fn(|f| std::array::from_fn(|r| hsum(acc[f][r])))
}
