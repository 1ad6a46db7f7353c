use candle_core::{Device, Result, Tensor};

use crate::init::Init;
use crate::{Params, Role};

/// 2-D convolution, weight `(out, in, k, k)` as in PyTorch.
#[derive(Debug, Clone)]
pub struct Conv2d {
    weight: Tensor,
    bias: Option<Tensor>,
    stride: usize,
    padding: usize,
}

impl Conv2d {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        params: &mut Params,
        name: &str,
        cin: usize,
        cout: usize,
        kernel: usize,
        stride: usize,
        padding: usize,
        bias: bool,
        init: &mut Init,
        dev: &Device,
    ) -> crate::Result<Self> {
        let fan_in = cin * kernel * kernel;
        let w = init.uniform_fan_in(&[cout, cin, kernel, kernel], fan_in, dev)?;
        let weight = params.add(format!("{name}.weight"), w, Role::Weight)?;
        let bias = if bias {
            let b = init.uniform_fan_in(&[cout], fan_in, dev)?;
            Some(params.add(format!("{name}.bias"), b, Role::Weight)?)
        } else {
            None
        };
        Ok(Self {
            weight: weight.as_tensor().clone(),
            bias: bias.map(|b| b.as_tensor().clone()),
            stride,
            padding,
        })
    }

    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        // cuDNN forward and backward on CUDA, candle's conv2d elsewhere. Parameters follow the
        // input's dtype (bf16 inference keeps f32 weights and casts them here).
        let w = self.weight.to_dtype(x.dtype())?;
        let y = crate::ops::conv2d(x, &w, self.padding, self.stride)?;
        match &self.bias {
            Some(b) => {
                y.broadcast_add(&b.to_dtype(x.dtype())?.reshape((1, b.elem_count(), 1, 1))?)
            }
            None => Ok(y),
        }
    }

    /// The convolution of a channels-last `(n, h, w, c)` input: the f32 weight is cast to
    /// the input's dtype in the `(k, kh, kw, c)` layout every call (its gradient comes back
    /// f32 in PyTorch's layout), and the output is channels-last too.
    pub fn forward_channels_last(&self, x: &Tensor) -> Result<Tensor> {
        let w = crate::ops::weight_channels_last(&self.weight, x.dtype())?;
        let y = crate::ops::conv2d_channels_last(x, &w, self.padding, self.stride)?;
        match &self.bias {
            Some(b) => {
                y.broadcast_add(&b.to_dtype(x.dtype())?.reshape((1, 1, 1, b.elem_count()))?)
            }
            None => Ok(y),
        }
    }
}
