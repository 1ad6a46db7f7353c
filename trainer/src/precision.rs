//! `--precision`: the arithmetic a run trains in. Weights, optimiser state, batch-norm
//! statistics and checkpoints are f32 either way.

use candle_core::DType;
use octet_models::Activations;
use serde::{Deserialize, Serialize};

use crate::choice::named_choice;

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

    /// How the network holds its activations in this precision.
    pub fn activations(self) -> Activations {
        match self {
            Precision::F32 => Activations::Nchw,
            Precision::Bf16 => Activations::ChannelsLast(DType::BF16),
        }
    }
}

named_choice!(Precision, "--precision", {
    F32 => "f32" | "fp32" | "float32": "f32 activations, NCHW (cuDNN may use TF32 unless --no-tf32)",
    Bf16 => "bf16" | "bfloat16": "bf16 channels-last activations; f32 master weights, batch-norm \
        statistics, classifier and loss (PyTorch's bf16 autocast + channels_last)",
});

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
