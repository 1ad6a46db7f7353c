//! How a network holds its activations between layers: as given (NCHW, the input's dtype:
//! f32 training, bf16 inference), or channels-last `(n, h, w, c)` in a chosen dtype, the
//! `--precision bf16` training path (cuDNN's NHWC kernels need no layout transposes, and bf16
//! halves the bytes every layer moves). Parameters stay f32 either way.

use candle_core::{DType, Result, Tensor};
use octet_train_ops::permute;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Activations {
    /// NCHW in the input's dtype; layers cast their f32 parameters to it.
    #[default]
    Nchw,
    /// `(n, h, w, c)` contiguous tensors of this dtype from the first layer to the global
    /// pooling; the classifier head and the logits are f32.
    ChannelsLast(DType),
}

impl Activations {
    /// The network input (normalised NCHW) in this format: for channels-last, one
    /// permute-and-cast per batch.
    pub fn enter(self, x: &Tensor) -> Result<Tensor> {
        match self {
            Activations::Nchw => Ok(x.clone()),
            Activations::ChannelsLast(dtype) => permute::nhwc_as(x, dtype),
        }
    }

    pub fn channels_last(self) -> bool {
        matches!(self, Activations::ChannelsLast(_))
    }
}

/// A channels-last `(n, h, w, c)` tensor as contiguous f32 `(n, c, h, w)`, for the f32 layers
/// after the convolutional trunk (pooling, the classifier).
pub(crate) fn nchw_f32(x: &Tensor) -> Result<Tensor> {
    permute::nchw_as(x, DType::F32)
}
