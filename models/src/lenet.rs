use candle_core::{Device, Result, Tensor};

use crate::init::Init;
use crate::ops::relu;
use crate::{Conv2d, Linear, Network, Params};

/// The lab's LeNet-style CNN for 32×32 inputs: conv 5×5→6, max-pool 2, conv 5×5→16,
/// max-pool 2, fc 400→120→84→classes, ReLU between.
pub struct LeNet {
    conv1: Conv2d,
    conv2: Conv2d,
    fc1: Linear,
    fc2: Linear,
    fc3: Linear,
    params: Params,
}

impl LeNet {
    pub(crate) fn new(
        in_channels: usize,
        classes: usize,
        init: &mut Init,
        dev: &Device,
    ) -> crate::Result<Self> {
        let mut p = Params::new(dev);
        Ok(Self {
            conv1: Conv2d::new(&mut p, "conv1", in_channels, 6, 5, 1, 0, true, init, dev)?,
            conv2: Conv2d::new(&mut p, "conv2", 6, 16, 5, 1, 0, true, init, dev)?,
            fc1: Linear::new(&mut p, "fc1", 400, 120, init, dev)?,
            fc2: Linear::new(&mut p, "fc2", 120, 84, init, dev)?,
            fc3: Linear::new(&mut p, "fc3", 84, classes, init, dev)?,
            params: p,
        })
    }
}

impl Network for LeNet {
    fn forward(&self, x: &Tensor, _train: bool) -> Result<Tensor> {
        let x = relu(&self.conv1.forward(x)?)?.max_pool2d(2)?;
        let x = relu(&self.conv2.forward(&x)?)?.max_pool2d(2)?;
        let x = x.flatten_from(1)?;
        let x = relu(&self.fc1.forward(&x)?)?;
        let x = relu(&self.fc2.forward(&x)?)?;
        self.fc3.forward(&x)
    }

    fn params(&self) -> &Params {
        &self.params
    }
}
