//! How a network holds its activations between layers: as given (NCHW, the input's dtype:
//! f32 training, bf16 inference), or channels-last `(n, h, w, c)` in a chosen dtype, the
//! `--precision bf16` training path (cuDNN's NHWC kernels need no layout transposes, and bf16
//! halves the bytes every layer moves). Parameters stay f32 either way.

use candle_core::{DType, Result, Tensor};

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
            Activations::ChannelsLast(dtype) => permuted(x, TO_NHWC, dtype),
        }
    }

    pub fn channels_last(self) -> bool {
        matches!(self, Activations::ChannelsLast(_))
    }
}

const TO_NHWC: (usize, usize, usize, usize) = (0, 2, 3, 1);
const TO_NCHW: (usize, usize, usize, usize) = (0, 3, 1, 2);

/// `x` permuted by `dims` as a contiguous tensor of `dtype`.
fn permuted(x: &Tensor, dims: (usize, usize, usize, usize), dtype: DType) -> Result<Tensor> {
    let t = x.permute(dims)?;
    // candle's cast writes a contiguous tensor; the same dtype needs a copy.
    if t.dtype() == dtype {
        t.contiguous()
    } else {
        t.to_dtype(dtype)
    }
}

/// `(n, c, h, w)` → contiguous `(n, h, w, c)`.
pub(crate) fn nhwc(x: &Tensor) -> Result<Tensor> {
    permuted(x, TO_NHWC, x.dtype())
}

/// `(n, h, w, c)` → contiguous `(n, c, h, w)`.
pub(crate) fn nchw(x: &Tensor) -> Result<Tensor> {
    permuted(x, TO_NCHW, x.dtype())
}

/// A channels-last `(n, h, w, c)` tensor as contiguous f32 `(n, c, h, w)`, for the f32 layers
/// after the convolutional trunk (pooling, the classifier).
pub(crate) fn nchw_f32(x: &Tensor) -> Result<Tensor> {
    permuted(x, TO_NCHW, DType::F32)
}
