//! Moving activations between NCHW and channels-last `(n, h, w, c)`: contiguous permutes,
//! with a cast where the next layer needs one.

use candle_core::{DType, Result, Tensor};

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

/// `(n, c, h, w)` → contiguous `(n, h, w, c)` of `dtype`.
pub fn nhwc_as(x: &Tensor, dtype: DType) -> Result<Tensor> {
    permuted(x, TO_NHWC, dtype)
}

/// `(n, c, h, w)` → contiguous `(n, h, w, c)`.
pub fn nhwc(x: &Tensor) -> Result<Tensor> {
    nhwc_as(x, x.dtype())
}

/// `(n, h, w, c)` → contiguous `(n, c, h, w)` of `dtype`.
pub fn nchw_as(x: &Tensor, dtype: DType) -> Result<Tensor> {
    permuted(x, TO_NCHW, dtype)
}

/// `(n, h, w, c)` → contiguous `(n, c, h, w)`.
pub fn nchw(x: &Tensor) -> Result<Tensor> {
    nchw_as(x, x.dtype())
}
