//! `--device cpu | cuda | cuda:N`.

use crate::LoadError;
use candle_core::Device;

/// Where the model runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceSpec {
    /// The CPU (`cpu`).
    Cpu,
    /// The CUDA GPU of this ordinal (`cuda:N`; `cuda` and `gpu` mean 0).
    Cuda(usize),
}

impl std::str::FromStr for DeviceSpec {
    type Err = LoadError;

    fn from_str(s: &str) -> Result<DeviceSpec, LoadError> {
        match s {
            "cpu" => Ok(DeviceSpec::Cpu),
            "cuda" | "gpu" => Ok(DeviceSpec::Cuda(0)),
            _ => match s.strip_prefix("cuda:").map(str::parse::<usize>) {
                Some(Ok(n)) => Ok(DeviceSpec::Cuda(n)),
                _ => Err(LoadError::Device(format!(
                    "unknown device {s:?}: use cpu, cuda or cuda:N"
                ))),
            },
        }
    }
}

impl DeviceSpec {
    /// The candle device. CUDA needs the `cuda` feature at build time.
    pub fn device(self) -> Result<Device, LoadError> {
        match self {
            DeviceSpec::Cpu => Ok(Device::Cpu),
            DeviceSpec::Cuda(n) => {
                if !cfg!(feature = "cuda") {
                    return Err(LoadError::Device(
                        "this build has no CUDA support: rebuild with `--features cuda` (needs the CUDA toolkit)".into(),
                    ));
                }
                // candle's fast quantized CUDA kernels round the activations to 8 bits and
                // were measured 4.6 times further from the exact function than candle's own
                // CPU kernel (docs/models.md, "Devices"); its dequantizing kernels keep
                // them in f32 and agree with it to 1e-12. corral uses those.
                #[cfg(feature = "cuda")]
                candle_core::quantized::cuda::set_force_dmmv(true);
                Device::new_cuda(n).map_err(|e| LoadError::candle(format!("device cuda:{n}"), e))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_devices() {
        assert_eq!("cpu".parse::<DeviceSpec>().unwrap(), DeviceSpec::Cpu);
        assert_eq!("cuda".parse::<DeviceSpec>().unwrap(), DeviceSpec::Cuda(0));
        assert_eq!("cuda:1".parse::<DeviceSpec>().unwrap(), DeviceSpec::Cuda(1));
        assert!("tpu".parse::<DeviceSpec>().is_err());
        assert!("cuda:x".parse::<DeviceSpec>().is_err());
        #[cfg(not(feature = "cuda"))]
        assert!(
            DeviceSpec::Cuda(0)
                .device()
                .unwrap_err()
                .to_string()
                .contains("--features cuda")
        );
    }
}
