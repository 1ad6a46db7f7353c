use candle_core::{Device, Result, Tensor};

use crate::activations::{nchw, nchw_f32, nhwc};
use crate::init::Init;
use crate::ops::relu;
use crate::{Activations, Conv2d, Linear, Network, Params};

/// The lab's LeNet-style CNN for 32×32 inputs: conv 5×5→6, max-pool 2, conv 5×5→16,
/// max-pool 2, fc 400→120→84→classes, ReLU between.
pub struct LeNet {
    conv1: Conv2d,
    conv2: Conv2d,
    fc1: Linear,
    fc2: Linear,
    fc3: Linear,
    params: Params,
    act: Activations,
}

impl LeNet {
    pub(crate) fn new(
        in_channels: usize,
        classes: usize,
        init: &mut Init,
        dev: &Device,
        act: Activations,
    ) -> crate::Result<Self> {
        let mut p = Params::new(dev);
        Ok(Self {
            conv1: Conv2d::new(&mut p, "conv1", in_channels, 6, 5, 1, 0, true, init, dev)?,
            conv2: Conv2d::new(&mut p, "conv2", 6, 16, 5, 1, 0, true, init, dev)?,
            fc1: Linear::new(&mut p, "fc1", 400, 120, init, dev)?,
            fc2: Linear::new(&mut p, "fc2", 120, 84, init, dev)?,
            fc3: Linear::new(&mut p, "fc3", 84, classes, init, dev)?,
            params: p,
            act,
        })
    }
}

impl Network for LeNet {
    fn forward(&self, x: &Tensor, _train: bool) -> Result<Tensor> {
        let x = if self.act.channels_last() {
            // The convolutions channels-last; max pooling is candle's NCHW op (small tensors),
            // and the second pool's NCHW output flattens in PyTorch's (c, h, w) order, so fc1's
            // weights mean the same in either format.
            let x = self.act.enter(x)?;
            let x = relu(&self.conv1.forward_channels_last(&x)?)?;
            let x = nhwc(&nchw(&x)?.max_pool2d(2)?)?;
            let x = relu(&self.conv2.forward_channels_last(&x)?)?;
            nchw_f32(&x)?.max_pool2d(2)?
        } else {
            let x = relu(&self.conv1.forward(x)?)?.max_pool2d(2)?;
            relu(&self.conv2.forward(&x)?)?.max_pool2d(2)?
        };
        let x = x.flatten_from(1)?;
        let x = relu(&self.fc1.forward(&x)?)?;
        let x = relu(&self.fc2.forward(&x)?)?;
        self.fc3.forward(&x)
    }

    fn params(&self) -> &Params {
        &self.params
    }

    fn activations(&self) -> Activations {
        self.act
    }
}
