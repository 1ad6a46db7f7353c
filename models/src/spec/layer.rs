//! The vocabulary a network is described in: one variant per layer kind, with the settings a
//! description file gives (`op = "conv"`, `out = 16`, …). Shapes that follow from the input
//! (a convolution's input channels, a linear layer's inputs) are never written: they are
//! inferred, so a description fits any image size and channel count.

use serde::{Deserialize, Serialize};

/// One layer. The settings mirror PyTorch's `nn` modules of the same name, and so do the
/// parameter names (`{layer}.weight`, `{layer}.running_mean`, …).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Layer {
    /// `nn.Conv2d` with a square kernel: `out` channels, zero `padding` on every side.
    Conv {
        out: usize,
        kernel: usize,
        #[serde(default = "one")]
        stride: usize,
        #[serde(default)]
        padding: usize,
        #[serde(default = "yes")]
        bias: bool,
    },
    /// `nn.Conv2d` with `groups` = input channels: each input channel convolved on its own
    /// into `multiplier` outputs (MobileNet's and DS-CNN's depthwise convolution).
    DepthwiseConv {
        #[serde(default = "one")]
        multiplier: usize,
        kernel: usize,
        #[serde(default = "one")]
        stride: usize,
        #[serde(default)]
        padding: usize,
        #[serde(default = "yes")]
        bias: bool,
    },
    /// `nn.BatchNorm2d` over the input's channels (eps 1e-5, momentum 0.1).
    BatchNorm,
    Relu,
    /// `min(max(x, 0), 6)`, MobileNet's activation.
    Relu6,
    /// `kernel`×`kernel` windows, `stride` defaulting to `kernel` (PyTorch's `max_pool2d`).
    MaxPool {
        kernel: usize,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stride: Option<usize>,
    },
    /// As `max_pool`, averaging.
    AvgPool {
        kernel: usize,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stride: Option<usize>,
    },
    /// The mean over the whole image: one value per channel, whatever the input size.
    GlobalAvgPool,
    /// The element-wise sum of the layer's input and the output of layer `with` (same shape).
    Add {
        with: String,
    },
    /// `(n, c, h, w)` → `(n, c·h·w)` in PyTorch's order.
    Flatten,
    /// `nn.Dropout`: in training each value is zeroed with probability `p` (in [0, 1)) and
    /// the rest scaled by 1/(1 − p); the identity in evaluation and in the int8 model.
    Dropout {
        p: f32,
    },
    /// `nn.Linear` on a flat input; `out` omitted: as many outputs as the data has classes.
    Linear {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        out: Option<usize>,
    },
}

fn one() -> usize {
    1
}

fn yes() -> bool {
    true
}

impl Layer {
    /// The `op` name of a description file.
    pub fn op(&self) -> &'static str {
        match self {
            Layer::Conv { .. } => "conv",
            Layer::DepthwiseConv { .. } => "depthwise_conv",
            Layer::BatchNorm => "batch_norm",
            Layer::Relu => "relu",
            Layer::Relu6 => "relu6",
            Layer::MaxPool { .. } => "max_pool",
            Layer::AvgPool { .. } => "avg_pool",
            Layer::GlobalAvgPool => "global_avg_pool",
            Layer::Add { .. } => "add",
            Layer::Flatten => "flatten",
            Layer::Dropout { .. } => "dropout",
            Layer::Linear { .. } => "linear",
        }
    }

    /// Whether the layer has weights (`{name}.weight`).
    pub fn has_weights(&self) -> bool {
        matches!(
            self,
            Layer::Conv { .. } | Layer::DepthwiseConv { .. } | Layer::Linear { .. }
        )
    }

    /// A clamp of the previous layer's output (what int8 fuses into that layer).
    pub fn is_activation(&self) -> bool {
        matches!(self, Layer::Relu | Layer::Relu6)
    }
}
