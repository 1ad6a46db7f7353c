use candle_core::{Device, Result, Tensor};

use crate::init::Init;
use crate::{Params, Role};

/// Fully connected layer, weight `(out, in)` as in PyTorch.
#[derive(Debug, Clone)]
pub struct Linear {
    weight: Tensor,
    bias: Tensor,
}

impl Linear {
    pub(crate) fn new(
        params: &mut Params,
        name: &str,
        fan_in: usize,
        out: usize,
        init: &mut Init,
        dev: &Device,
    ) -> crate::Result<Self> {
        let w = init.uniform_fan_in(&[out, fan_in], fan_in, dev)?;
        let b = init.uniform_fan_in(&[out], fan_in, dev)?;
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
