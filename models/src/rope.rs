//! RoPE's angles for the dense llama pass, up to the positions the GGUF file declares.
//!
//! The angles of the positions in play are computed when a pass needs them (a decoding
//! step needs one row of `head_dim / 2` cosines and sines), so the context costs no table:
//! a 128k-position model keeps only its frequencies. Frequencies are `base^(-2i/d)`, then:
//! - divided by the file's per-frequency factors where it has a `rope_freqs` tensor
//!   (Llama 3.1's long-context scaling);
//! - divided by the factor of linear scaling: `llama.rope.scaling.factor` (or the older
//!   `llama.rope.scale_linear`) where `llama.rope.scaling.type` is `linear` or absent, as
//!   llama.cpp reads them; a factor of 0 means none, and type `none` ignores the factor.
//!
//! Other scalings (YaRN) are refused when the model loads.

use candle_core::quantized::gguf_file::{Content, Value};
use candle_core::{Result, Tensor};

/// Positions of a GGUF file that does not say (`llama.context_length` absent).
pub const DEFAULT_POSITIONS: usize = 4096;

/// A float of the metadata: `None` where absent, an error where it is not a number.
fn float(content: &Content, key: &str) -> Result<Option<f32>> {
    match content.metadata.get(key) {
        None => Ok(None),
        Some(Value::F32(f)) => Ok(Some(*f)),
        Some(Value::F64(f)) => Ok(Some(*f as f32)),
        Some(v) => Err(candle_core::Error::Msg(format!(
            "{key} is not a float ({v:?})"
        ))),
    }
}

/// A model's RoPE frequencies and its number of positions.
#[derive(Clone, Debug)]
pub struct RopeAngles {
    inv: Vec<f32>,
    positions: usize,
}

impl RopeAngles {
    /// From the metadata of a GGUF file (`factors`: its `rope_freqs` tensor, if any), for
    /// heads of `dim` rotated dimensions.
    pub fn from_gguf(
        content: &Content,
        dim: usize,
        factors: Option<Vec<f32>>,
    ) -> Result<RopeAngles> {
        let msg = |m: String| candle_core::Error::Msg(m);
        let base = float(content, "llama.rope.freq_base")?.unwrap_or(10_000.0);
        let positions = match content.metadata.get("llama.context_length") {
            None => DEFAULT_POSITIONS,
            Some(Value::U32(n)) => *n as usize,
            Some(Value::U64(n)) => usize::try_from(*n).unwrap_or(usize::MAX),
            Some(v) => {
                return Err(msg(format!(
                    "llama.context_length is not an unsigned integer ({v:?})"
                )));
            }
        };
        if positions == 0 {
            return Err(msg("llama.context_length is 0".into()));
        }
        // As llama.cpp reads the keys: the type defaults to linear, the factor comes from
        // `scaling.factor` or else the older `scale_linear`, and 0 means none.
        let kind = match content.metadata.get("llama.rope.scaling.type") {
            None => "linear",
            Some(Value::String(s)) => s.as_str(),
            Some(v) => {
                return Err(msg(format!(
                    "llama.rope.scaling.type is not a string ({v:?})"
                )));
            }
        };
        let factor = match float(content, "llama.rope.scaling.factor")? {
            Some(f) => f,
            None => float(content, "llama.rope.scale_linear")?.unwrap_or(0.0),
        };
        let linear = match (kind, factor) {
            ("none", _) | ("linear", 0.0) => 1.0,
            ("linear", f) => f,
            (other, _) => {
                return Err(msg(format!(
                    "RoPE scaling '{other}' is not supported (none and linear are)"
                )));
            }
        };
        if !(linear.is_finite() && linear > 0.0 && base.is_finite() && base > 0.0) {
            return Err(msg(format!(
                "RoPE base {base} or scaling factor {linear} is not a positive number"
            )));
        }
        let half = dim / 2;
        if let Some(f) = &factors
            && (f.len() != half || f.iter().any(|x| !(x.is_finite() && *x > 0.0)))
        {
            return Err(msg(format!(
                "rope_freqs holds {} factors, not {half} positive ones",
                f.len()
            )));
        }
        let inv = (0..half)
            .map(|i| {
                let f = factors.as_ref().map_or(1.0, |f| f[i]);
                1.0 / base.powf((2 * i) as f32 / dim as f32) / f / linear
            })
            .collect();
        Ok(RopeAngles { inv, positions })
    }

    /// Positions the model takes: the file's context length.
    pub fn positions(&self) -> usize {
        self.positions
    }

    /// The cosines and sines of positions `pos .. pos + n`, row after row of `dim / 2`.
    pub fn rows(&self, pos: usize, n: usize) -> (Vec<f32>, Vec<f32>) {
        let mut cos = Vec::with_capacity(n * self.inv.len());
        let mut sin = Vec::with_capacity(n * self.inv.len());
        for p in pos..pos + n {
            for &f in &self.inv {
                let (s, c) = (p as f32 * f).sin_cos();
                cos.push(c);
                sin.push(s);
            }
        }
        (cos, sin)
    }

    /// The same as two `(n, dim / 2)` tensors on `device`.
    pub fn tensors(
        &self,
        pos: usize,
        n: usize,
        device: &candle_core::Device,
    ) -> Result<(Tensor, Tensor)> {
        let (cos, sin) = self.rows(pos, n);
        let shape = (n, self.inv.len());
        Ok((
            Tensor::from_vec(cos, shape, device)?,
            Tensor::from_vec(sin, shape, device)?,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn content(meta: &[(&str, Value)]) -> Content {
        Content {
            magic: candle_core::quantized::gguf_file::VersionedMagic::GgufV3,
            metadata: meta
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect::<HashMap<_, _>>(),
            tensor_infos: HashMap::new(),
            tensor_data_offset: 0,
        }
    }

    /// Angles at position 16,000 as the definition gives them, in f64, with the file's
    /// context length, its frequency factors and a linear scaling.
    #[test]
    fn angles_follow_the_file() {
        let c = content(&[
            ("llama.context_length", Value::U32(32_768)),
            ("llama.rope.freq_base", Value::F32(500_000.0)),
            ("llama.rope.scaling.type", Value::String("linear".into())),
            ("llama.rope.scaling.factor", Value::F32(2.0)),
        ]);
        let factors: Vec<f32> = (0..4).map(|i| 1.0 + i as f32).collect();
        let r = RopeAngles::from_gguf(&c, 8, Some(factors.clone())).unwrap();
        assert_eq!(r.positions(), 32_768);
        let (cos, sin) = r.rows(16_000, 2);
        for (row, p) in [16_000f64, 16_001.0].iter().enumerate() {
            for i in 0..4 {
                let f = 1.0 / 500_000f64.powf(2.0 * i as f64 / 8.0) / f64::from(factors[i]) / 2.0;
                let a = p * f;
                // f32 angles of about 10^4 radians carry an error of about 10^-3.
                assert!(
                    (f64::from(cos[row * 4 + i]) - a.cos()).abs() < 2e-3,
                    "cos {i}"
                );
                assert!(
                    (f64::from(sin[row * 4 + i]) - a.sin()).abs() < 2e-3,
                    "sin {i}"
                );
            }
        }
        assert_eq!(
            RopeAngles::from_gguf(&content(&[]), 8, None)
                .unwrap()
                .positions(),
            DEFAULT_POSITIONS
        );
    }

    #[test]
    fn unsupported_scalings_and_bad_factors_are_refused() {
        let yarn = content(&[("llama.rope.scaling.type", Value::String("yarn".into()))]);
        let e = RopeAngles::from_gguf(&yarn, 8, None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("yarn"), "{e}");
        assert!(RopeAngles::from_gguf(&content(&[]), 8, Some(vec![1.0; 3])).is_err());
        // Metadata of the wrong type is refused, not read as absent.
        for bad in [
            ("llama.rope.scaling.type", Value::U32(1)),
            ("llama.rope.scaling.factor", Value::String("2".into())),
            ("llama.rope.freq_base", Value::U32(10_000)),
            ("llama.context_length", Value::F32(8192.0)),
            ("llama.context_length", Value::U32(0)),
            ("llama.rope.scaling.factor", Value::F32(-1.0)),
        ] {
            let key = bad.0;
            assert!(
                RopeAngles::from_gguf(&content(&[bad]), 8, None).is_err(),
                "{key}"
            );
        }
        assert!(RopeAngles::from_gguf(&content(&[]), 8, Some(vec![1.0, 0.0, 1.0, 1.0])).is_err());
    }

    /// A factor without a type scales linearly; type `none` ignores it; 0 means no scaling.
    #[test]
    fn the_scaling_keys_read_as_llama_cpp_reads_them() {
        let first = |c: Content| RopeAngles::from_gguf(&c, 8, None).unwrap().inv[0];
        let factor = ("llama.rope.scaling.factor", Value::F32(4.0));
        assert_eq!(first(content(std::slice::from_ref(&factor))), 0.25);
        assert_eq!(
            first(content(&[("llama.rope.scale_linear", Value::F32(2.0))])),
            0.5
        );
        let none = ("llama.rope.scaling.type", Value::String("none".into()));
        assert_eq!(first(content(&[factor, none])), 1.0);
        assert_eq!(
            first(content(&[("llama.rope.scaling.factor", Value::F32(0.0))])),
            1.0
        );
    }
}
