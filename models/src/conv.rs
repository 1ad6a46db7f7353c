use candle_core::{DType, Result, Tensor};
use octet_train_ops::BnLayout;

use crate::builder::LayerBuilder;
use crate::{OpsConfig, Role};

/// A convolution's settings beyond its channels and kernel size. `Default`: stride 1, no
/// padding, a bias, one group (PyTorch's `nn.Conv2d`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conv2dConfig {
    pub stride: usize,
    pub padding: usize,
    pub bias: bool,
    /// Input channels split into this many groups, each convolved with its share of the
    /// outputs; the input channels for a depthwise convolution.
    pub groups: usize,
}

impl Default for Conv2dConfig {
    fn default() -> Self {
        Self {
            stride: 1,
            padding: 0,
            bias: true,
            groups: 1,
        }
    }
}

/// 2-D convolution, weight `(out, in / groups, k, k)` as in PyTorch.
#[derive(Debug, Clone)]
pub struct Conv2d {
    weight: Tensor,
    bias: Option<Tensor>,
    stride: usize,
    padding: usize,
    ops: OpsConfig,
}

impl Conv2d {
    /// `name`'s `cin → cout` convolution with a `kernel × kernel` window.
    pub(crate) fn new(
        b: &mut LayerBuilder,
        name: &str,
        (cin, cout): (usize, usize),
        kernel: usize,
        cfg: Conv2dConfig,
    ) -> crate::Result<Self> {
        let dev = b.params.device().clone();
        let cin = cin / cfg.groups.max(1);
        let fan_in = cin * kernel * kernel;
        let w = b
            .init
            .uniform_fan_in(&[cout, cin, kernel, kernel], fan_in, &dev)?;
        let weight = b.params.add(format!("{name}.weight"), w, Role::Weight)?;
        let bias = if cfg.bias {
            let bias = b.init.uniform_fan_in(&[cout], fan_in, &dev)?;
            Some(b.params.add(format!("{name}.bias"), bias, Role::Weight)?)
        } else {
            None
        };
        Ok(Self {
            weight: weight.as_tensor().clone(),
            bias: bias.map(|b| b.as_tensor().clone()),
            stride: cfg.stride,
            padding: cfg.padding,
            ops: b.ops,
        })
    }

    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        // cuDNN forward and backward on CUDA, candle's conv2d elsewhere. Parameters follow the
        // input's dtype (bf16 inference keeps f32 weights and casts them here).
        let w = self.weight.to_dtype(x.dtype())?;
        let y = self.ops.conv2d(x, &w, self.padding, self.stride)?;
        self.add_bias(y, x.dtype(), BnLayout::Nchw)
    }

    /// The convolution of a channels-last `(n, h, w, c)` input: the f32 weight is cast to
    /// the input's dtype in the `(k, kh, kw, c)` layout every call (its gradient comes back
    /// f32 in PyTorch's layout), and the output is channels-last too.
    pub fn forward_channels_last(&self, x: &Tensor) -> Result<Tensor> {
        let w = self.ops.weight_channels_last(&self.weight, x.dtype())?;
        let y = self
            .ops
            .conv2d_channels_last(x, &w, self.padding, self.stride)?;
        self.add_bias(y, x.dtype(), BnLayout::ChannelsLast)
    }

    /// `y` plus the bias (if any) in `dtype`, broadcast over `layout`'s channel axis.
    fn add_bias(&self, y: Tensor, dtype: DType, layout: BnLayout) -> Result<Tensor> {
        match &self.bias {
            Some(b) => {
                let shape = layout.channel_shape(b.elem_count());
                y.broadcast_add(&b.to_dtype(dtype)?.reshape(shape)?)
            }
            None => Ok(y),
        }
    }
}

impl candle_nn::Module for Conv2d {
    fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        Conv2d::forward(self, xs)
    }
}
