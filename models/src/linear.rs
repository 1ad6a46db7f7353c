use candle_core::{Result, Tensor};

use crate::builder::LayerBuilder;
use crate::Role;

/// Fully connected layer, weight `(out, in)` as in PyTorch.
#[derive(Debug, Clone)]
pub struct Linear {
    weight: Tensor,
    bias: Tensor,
}

impl Linear {
    pub(crate) fn new(
        builder: &mut LayerBuilder,
        name: &str,
        fan_in: usize,
        out: usize,
    ) -> crate::Result<Self> {
        let dev = builder.params.device().clone();
        let w = builder.init.uniform_fan_in(&[out, fan_in], fan_in, &dev)?;
        let b = builder.init.uniform_fan_in(&[out], fan_in, &dev)?;
        let params = &mut builder.params;
        Ok(Self {
            weight: params
                .add(format!("{name}.weight"), w, Role::Weight)?
                .as_tensor()
                .clone(),
            bias: params
                .add(format!("{name}.bias"), b, Role::Weight)?
                .as_tensor()
                .clone(),
        })
    }

    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        // Parameters follow the input's dtype (bf16 inference keeps f32 weights).
        let (w, b) = (
            self.weight.to_dtype(x.dtype())?,
            self.bias.to_dtype(x.dtype())?,
        );
        x.matmul(&w.t()?)?.broadcast_add(&b)
    }
}

impl candle_nn::Module for Linear {
    fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        Linear::forward(self, xs)
    }
}
