//! `--precision`: the arithmetic a run trains in. Weights, optimiser state, batch-norm
//! statistics and checkpoints are f32 either way.

use std::fmt;
use std::str::FromStr;

use candle_core::DType;
use octet_models::Activations;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// f32 activations, NCHW (cuDNN may still use TF32 unless `--no-tf32`).
    #[default]
    F32,
    /// bf16 channels-last activations from the first convolution to the global pooling, f32
    /// master weights cast per step, f32 batch-norm statistics, f32 head and loss (what
    /// PyTorch's bf16 autocast with channels_last computes).
    Bf16,
}

impl Precision {
    pub const ALL: [Precision; 2] = [Precision::F32, Precision::Bf16];

    pub fn name(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::Bf16 => "bf16",
        }
    }

    /// How the network holds its activations in this precision.
    pub fn activations(self) -> Activations {
        match self {
            Precision::F32 => Activations::Nchw,
            Precision::Bf16 => Activations::ChannelsLast(DType::BF16),
        }
    }
}

impl fmt::Display for Precision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Precision {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "f32" | "fp32" | "float32" => Ok(Precision::F32),
            "bf16" | "bfloat16" => Ok(Precision::Bf16),
            _ => Err(format!("--precision {s}: expected f32 or bf16")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_prints_and_serialises() {
        for p in Precision::ALL {
            assert_eq!(p.to_string().parse::<Precision>(), Ok(p));
            let json = serde_json::to_string(&p).unwrap();
            assert_eq!(json, format!("\"{p}\""));
            assert_eq!(serde_json::from_str::<Precision>(&json).unwrap(), p);
        }
        assert_eq!("FP32".parse::<Precision>(), Ok(Precision::F32));
        let err = "fp16".parse::<Precision>().unwrap_err();
        assert!(err.contains("fp16") && err.contains("bf16"), "{err}");
    }
}
