//! The tiled kernel against candle's dequantization and the f32 product.

use super::*;
use crate::test_rng::rng;
use candle_core::quantized::{QStorage, QTensor};
use candle_core::{Device, Tensor};

/// Weights of `dtype`: quantized by candle from random values, and raw random bytes
/// (every scale and high-bit pattern) with sane f16 scales.
fn weights(dtype: GgmlDType, out: usize, inp: usize, seed: u64) -> Vec<(Vec<u8>, Vec<f32>)> {
    let dev = Device::Cpu;
    let mut next = rng(seed);
    let values: Vec<f32> = (0..out * inp)
        .map(|_| (next() % 20_001) as f32 / 10_000.0 - 1.0)
        .collect();
    let w = Tensor::from_vec(values, (out, inp), &dev).unwrap();
    let q = QTensor::quantize(&w, dtype).unwrap();
    let quantized = q.data().unwrap().into_owned();
    let layout = Layout::of(dtype).unwrap();
    let mut raw: Vec<u8> = (0..quantized.len()).map(|_| next() as u8).collect();
    let scale = |b: &mut [u8], at: usize, v: f32| {
        b[at..at + 2].copy_from_slice(&half::f16::from_f32(v).to_bits().to_le_bytes());
    };
    for block in raw.chunks_exact_mut(layout.bytes()) {
        let v = (next() % 1000) as f32 / 20_000.0 + 1e-4;
        match layout {
            Layout::Q6K => scale(block, 208, v),
            Layout::Q4_1 | Layout::Q5_1 | Layout::Q4K | Layout::Q5K => {
                scale(block, 0, v);
                scale(block, 2, v * 0.7);
            }
            _ => scale(block, 0, v),
        }
    }
    [quantized, raw]
        .into_iter()
        .map(|bytes| {
            let storage =
                QStorage::from_data(std::borrow::Cow::Borrowed(&bytes), &dev, dtype).unwrap();
            let t = QTensor::new(storage, (out, inp)).unwrap();
            let f = t
                .dequantize(&dev)
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1::<f32>()
                .unwrap();
            (bytes, f)
        })
        .collect()
}

/// The tiled form reads back as candle dequantizes each layout (up to the rounding of
/// `u * d + m` against `(u - z) * d`), for quantized and raw random blocks.
#[test]
fn repacked_weights_read_back_as_candle_dequantizes() {
    for dtype in TILED_TYPES {
        for (bytes, expect) in weights(dtype, 40, 512, 7) {
            let p = Packed::new(dtype, &bytes, 40, 512).unwrap().unwrap();
            // About the file's size (40 features pad to 48: a tile is 16).
            let padded = bytes.len() * 48 / 40;
            assert!(
                p.memory_usage() * 100 <= padded * 106,
                "{dtype:?}: {} bytes from {padded}",
                p.memory_usage()
            );
            let got = p.dequantize();
            for (k, (g, e)) in got.iter().zip(&expect).enumerate() {
                assert!(
                    (g - e).abs() <= 1e-6 * e.abs().max(1e-2),
                    "{dtype:?} [{k}]: {g} vs {e}"
                );
            }
        }
    }
}

/// Both paths agree with the f32 product of the dequantized weights (within the
/// activations' 8-bit quantization) and with each other (within f32 rounding), for
/// every row count a pass groups, on matrices small and large enough to split.
#[test]
fn products_match_the_dequantized_weights() {
    if !tiled_kernel_is_fast() {
        eprintln!(
            "this CPU lacks AVX-512 VNNI: `matmul` runs the portable loop, so only the f32 \
             product checks it (fast against portable compares the loop with itself)"
        );
    }
    for dtype in TILED_TYPES {
        for (out, inp) in [(16, 256), (40, 512), (600, 768)] {
            for (w, wf) in weights(dtype, out, inp, out as u64) {
                let p = Packed::new(dtype, &w, out, inp).unwrap().unwrap();
                for rows in [1, 3, 4, 6, 9] {
                    let mut next = rng(rows as u64);
                    let x: Vec<f32> = (0..rows * inp)
                        .map(|_| (next() % 2001) as f32 / 1000.0 - 1.0)
                        .collect();
                    let mut fast = vec![0f32; rows * out];
                    let mut portable = vec![0f32; rows * out];
                    p.matmul(&x, &mut fast).unwrap();
                    p.run(&x, &mut portable, false).unwrap();
                    for r in 0..rows {
                        for f in 0..out {
                            let wrow = &wf[f * inp..(f + 1) * inp];
                            let xrow = &x[r * inp..(r + 1) * inp];
                            let exact: f32 = wrow.iter().zip(xrow).map(|(a, b)| a * b).sum();
                            let norm: f32 = wrow.iter().zip(xrow).map(|(a, b)| (a * b).abs()).sum();
                            let (g, q) = (fast[r * out + f], portable[r * out + f]);
                            assert!(
                                (g - exact).abs() <= 0.02 * norm + 1e-4,
                                "{dtype:?} {out}x{inp} rows {rows} [{r},{f}]: {g} vs {exact}"
                            );
                            assert!(
                                (g - q).abs() <= 1e-5 * norm.max(1.0),
                                "{dtype:?} fast {g} vs portable {q}"
                            );
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn mismatched_sizes_and_unread_types_are_refused() {
    let w = vec![0u8; 4 * 2 * 20];
    assert!(Packed::new(GgmlDType::Q4_1, &w, 4, 64).unwrap().is_some());
    assert!(Packed::new(GgmlDType::Q4_1, &w[1..], 4, 64).is_err());
    assert!(Packed::new(GgmlDType::Q4K, &w, 4, 64).is_err());
    assert!(Packed::new(GgmlDType::F16, &w, 4, 64).unwrap().is_none());
    let p = Packed::new(GgmlDType::Q4_1, &w, 4, 64).unwrap().unwrap();
    assert!(p.matmul(&[0.0; 64], &mut [0.0; 3]).is_err());
    assert!(p.matmul(&[0.0; 63], &mut [0.0; 4]).is_err());
}

/// An activation that is not finite makes its row's outputs NaN (as an f32 product
/// would), instead of quantizing to zeros; the other rows are untouched.
#[test]
fn activations_that_are_not_finite_poison_their_row() {
    for dtype in TILED_TYPES {
        let (w, _) = weights(dtype, 16, 256, 3).remove(0);
        let p = Packed::new(dtype, &w, 16, 256).unwrap().unwrap();
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            let mut x = vec![0.5f32; 2 * 256];
            x[256 + 7] = bad;
            for vnni in [false, tiled_kernel_is_fast()] {
                let mut dst = vec![0f32; 2 * 16];
                p.run(&x, &mut dst, vnni).unwrap();
                assert!(dst[..16].iter().all(|v| v.is_finite()), "{dtype:?}");
                assert!(dst[16..].iter().all(|v| v.is_nan()), "{dtype:?} {bad}");
            }
        }
    }
}
