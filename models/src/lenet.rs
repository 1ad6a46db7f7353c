use candle_core::{Result, Tensor};

use octet_train_ops::permute::{nchw, nhwc};

use crate::activations::nchw_f32;
use crate::builder::LayerBuilder;
use crate::{Conv2d, Conv2dConfig, Linear, Network, NetworkParts};

/// The lab's LeNet-style CNN for 32×32 inputs: conv 5×5→6, max-pool 2, conv 5×5→16,
/// max-pool 2, fc 400→120→84→classes, ReLU between.
pub struct LeNet {
    conv1: Conv2d,
    conv2: Conv2d,
    fc1: Linear,
    fc2: Linear,
    fc3: Linear,
    parts: NetworkParts,
}

impl LeNet {
    /// The network for `cin`-channel images and `classes` classes.
    pub(crate) fn new(mut lb: LayerBuilder, cin: usize, classes: usize) -> crate::Result<Self> {
        let b = &mut lb;
        let conv = Conv2dConfig::default();
        let conv1 = Conv2d::new(b, "conv1", (cin, 6), 5, conv)?;
        let conv2 = Conv2d::new(b, "conv2", (6, 16), 5, conv)?;
        let fc1 = Linear::new(b, "fc1", 400, 120)?;
        let fc2 = Linear::new(b, "fc2", 120, 84)?;
        let fc3 = Linear::new(b, "fc3", 84, classes)?;
        Ok(Self {
            conv1,
            conv2,
            fc1,
            fc2,
            fc3,
            parts: lb.finish(),
        })
    }
}

impl Network for LeNet {
    fn forward(&self, x: &Tensor, _train: bool) -> Result<Tensor> {
        let x = if self.parts.activations.channels_last() {
            // The convolutions channels-last; max pooling is candle's NCHW op (small tensors),
            // and the second pool's NCHW output flattens in PyTorch's (c, h, w) order, so fc1's
            // weights mean the same in either format.
            let x = self.parts.activations.enter(x)?;
            let x = self
                .parts
                .ops
                .relu(&self.conv1.forward_channels_last(&x)?)?;
            let x = nhwc(&nchw(&x)?.max_pool2d(2)?)?;
            let x = self
                .parts
                .ops
                .relu(&self.conv2.forward_channels_last(&x)?)?;
            nchw_f32(&x)?.max_pool2d(2)?
        } else {
            let x = self
                .parts
                .ops
                .relu(&self.conv1.forward(x)?)?
                .max_pool2d(2)?;
            self.parts
                .ops
                .relu(&self.conv2.forward(&x)?)?
                .max_pool2d(2)?
        };
        let x = x.flatten_from(1)?;
        let x = self.parts.ops.relu(&self.fc1.forward(&x)?)?;
        let x = self.parts.ops.relu(&self.fc2.forward(&x)?)?;
        self.fc3.forward(&x)
    }

    fn parts(&self) -> &NetworkParts {
        &self.parts
    }
}
