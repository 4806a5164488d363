//! How a host KV cache holds its keys (or values): a buffer of f32 or f16, appended in place,
//! and the views the attention loops read it through.
//!
//! f16 halves the cache's memory (SmolLM2 holds 46 KB per position in f32), as llama.cpp's
//! default cache does; keys and values are rounded to f16 once, when written, and read back
//! as f32. f32 keeps them as computed, for passes checked against a reference to rounding.

use half::f16;
use half::slice::HalfFloatSliceExt;
use std::borrow::Cow;

/// The type a host KV cache stores its values in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KvType {
    /// Half precision: half the memory, each value rounded once (relative error under 1e-3).
    #[default]
    F16,
    /// Single precision: the values as computed.
    F32,
}

/// One layer's keys (or values) of one sequence: `[position][kv_head][head_dim]`.
#[derive(Clone, Debug)]
pub(crate) enum Values {
    F32(Vec<f32>),
    F16(Vec<f16>),
}

/// A run of [`Values`], read as f32.
#[derive(Clone, Copy, Debug)]
pub(crate) enum ValuesRef<'a> {
    F32(&'a [f32]),
    F16(&'a [f16]),
}

impl Values {
    pub(crate) fn new(ty: KvType) -> Values {
        match ty {
            KvType::F16 => Values::F16(Vec::new()),
            KvType::F32 => Values::F32(Vec::new()),
        }
    }

    /// Values held.
    pub(crate) fn len(&self) -> usize {
        self.view().len()
    }

    /// Bytes held (capacity).
    pub(crate) fn bytes(&self) -> usize {
        match self {
            Values::F32(v) => 4 * v.capacity(),
            Values::F16(v) => 2 * v.capacity(),
        }
    }

    pub(crate) fn clear(&mut self) {
        match self {
            Values::F32(v) => v.clear(),
            Values::F16(v) => v.clear(),
        }
    }

    /// The first `n` values (at most those held), sized to them.
    pub(crate) fn prefix(&self, n: usize) -> Values {
        match self {
            Values::F32(v) => Values::F32(v[..n.min(v.len())].to_vec()),
            Values::F16(v) => Values::F16(v[..n.min(v.len())].to_vec()),
        }
    }

    pub(crate) fn view(&self) -> ValuesRef<'_> {
        match self {
            Values::F32(v) => ValuesRef::F32(v),
            Values::F16(v) => ValuesRef::F16(v),
        }
    }

    /// Appends `values` (rounded to the cache's type), growing the buffer by an eighth (at
    /// least 256 positions of `row` values) when full rather than doubling it: a
    /// 2,550-token prompt held 4,096 positions' room that way, 40% of its cache unused.
    pub(crate) fn append(&mut self, values: &[f32], row: usize) {
        fn room<T>(cache: &mut Vec<T>, add: usize, row: usize) {
            if cache.capacity() - cache.len() < add {
                cache.reserve_exact(add.max(256 * row).max(cache.len() / 8));
            }
        }
        match self {
            Values::F32(c) => {
                room(c, values.len(), row);
                c.extend_from_slice(values);
            }
            Values::F16(c) => {
                room(c, values.len(), row);
                let at = c.len();
                c.resize(at + values.len(), f16::ZERO);
                c[at..].convert_from_f32_slice(values);
            }
        }
    }
}

impl<'a> ValuesRef<'a> {
    pub(crate) fn len(self) -> usize {
        match self {
            ValuesRef::F32(v) => v.len(),
            ValuesRef::F16(v) => v.len(),
        }
    }

    /// Values `range` (in bounds: callers check).
    pub(crate) fn slice(self, range: std::ops::Range<usize>) -> ValuesRef<'a> {
        match self {
            ValuesRef::F32(v) => ValuesRef::F32(&v[range]),
            ValuesRef::F16(v) => ValuesRef::F16(&v[range]),
        }
    }

    /// Values `at..at + scratch.len()` as f32: borrowed where they are f32, else converted
    /// into `scratch`.
    pub(crate) fn read<'s>(self, at: usize, scratch: &'s mut [f32]) -> &'s [f32]
    where
        'a: 's,
    {
        match self {
            ValuesRef::F32(v) => &v[at..at + scratch.len()],
            ValuesRef::F16(v) => {
                v[at..at + scratch.len()].convert_to_f32_slice(scratch);
                scratch
            }
        }
    }

    /// Every value as f32 (borrowed where they are f32).
    pub(crate) fn to_f32(self) -> Cow<'a, [f32]> {
        match self {
            ValuesRef::F32(v) => Cow::Borrowed(v),
            ValuesRef::F16(v) => Cow::Owned(v.iter().map(|x| x.to_f32()).collect()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{KvType, Values};

    /// A cache holds a long prompt's positions with little room to spare, and steps after
    /// it grow it by an eighth.
    #[test]
    fn a_cache_grows_by_an_eighth_not_twofold() {
        let row = 192;
        for ty in [KvType::F32, KvType::F16] {
            let mut cache = Values::new(ty);
            cache.append(&vec![1.0; 2_550 * row], row);
            let elem = cache.bytes() / (2_550 * row);
            assert!(cache.bytes() < 2_551 * row * elem, "{}", cache.bytes());
            for _ in 0..10 {
                cache.append(&vec![2.0; row], row);
            }
            assert_eq!(cache.len(), 2_560 * row);
            let most = (2_550 + 2_550 / 8 + 1) * row * elem;
            assert!(cache.bytes() <= most, "{ty:?}: {}", cache.bytes());
            let mut one = [0f32; 1];
            assert_eq!(cache.view().read(2_550 * row, &mut one), &[2.0]);
            let mut small = Values::new(ty);
            small.append(&vec![1.0; row], row);
            assert!(small.bytes() >= 256 * row * elem);
        }
    }

    /// f16 values read back within f16's rounding, and a prefix copy holds exactly them.
    #[test]
    fn f16_values_read_back_rounded() {
        let xs: Vec<f32> = (0..300).map(|i| (i as f32 * 0.731).sin() * 40.0).collect();
        let mut cache = Values::new(KvType::F16);
        cache.append(&xs, 100);
        assert_eq!(cache.bytes() % 2, 0);
        let mut back = vec![0f32; 300];
        let got = cache.view().read(0, &mut back).to_vec();
        for (g, x) in got.iter().zip(&xs) {
            assert!((g - x).abs() <= x.abs() * 4.9e-4 + 1e-7, "{g} vs {x}");
        }
        let p = cache.prefix(120);
        assert_eq!(p.len(), 120);
        assert_eq!(p.view().to_f32()[..], got[..120]);
        assert_eq!(cache.view().slice(100..200).to_f32()[..], got[100..200]);
    }
}
