use candle_core::{Device, Result, Tensor};

use crate::activations::nchw_f32;
use crate::init::Init;
use crate::ops::{add_relu, relu};
use crate::{Activations, BatchNorm2d, Conv2d, Linear, Network, Params};

/// Two 3×3 convolutions with batch norm and an identity or 1×1-conv shortcut.
struct BasicBlock {
    conv1: Conv2d,
    bn1: BatchNorm2d,
    conv2: Conv2d,
    bn2: BatchNorm2d,
    shortcut: Option<(Conv2d, BatchNorm2d)>,
}

impl BasicBlock {
    fn new(
        p: &mut Params,
        name: &str,
        cin: usize,
        cout: usize,
        stride: usize,
        init: &mut Init,
        dev: &Device,
    ) -> crate::Result<Self> {
        // Registration order follows PyTorch's state_dict: conv1, bn1, conv2, bn2, shortcut.
        let conv1 = Conv2d::new(
            p,
            &format!("{name}.conv1"),
            cin,
            cout,
            3,
            stride,
            1,
            false,
            init,
            dev,
        )?;
        let bn1 = BatchNorm2d::new(p, &format!("{name}.bn1"), cout, dev)?;
        let conv2 = Conv2d::new(
            p,
            &format!("{name}.conv2"),
            cout,
            cout,
            3,
            1,
            1,
            false,
            init,
            dev,
        )?;
        let bn2 = BatchNorm2d::new(p, &format!("{name}.bn2"), cout, dev)?;
        let shortcut = if stride != 1 || cin != cout {
            Some((
                Conv2d::new(
                    p,
                    &format!("{name}.shortcut.0"),
                    cin,
                    cout,
                    1,
                    stride,
                    0,
                    false,
                    init,
                    dev,
                )?,
                BatchNorm2d::new(p, &format!("{name}.shortcut.1"), cout, dev)?,
            ))
        } else {
            None
        };
        Ok(Self {
            conv1,
            bn1,
            conv2,
            bn2,
            shortcut,
        })
    }

    fn forward(&self, x: &Tensor, train: bool) -> Result<Tensor> {
        let out = relu(&self.bn1.forward(&self.conv1.forward(x)?, train)?)?;
        let out = self.bn2.forward(&self.conv2.forward(&out)?, train)?;
        let short = match &self.shortcut {
            Some((conv, bn)) => bn.forward(&conv.forward(x)?, train)?,
            None => x.clone(),
        };
        add_relu(&out, &short)
    }

    /// The same block on channels-last activations, the first ReLU fused into bn1.
    fn forward_channels_last(&self, x: &Tensor, train: bool) -> Result<Tensor> {
        let out = self.conv1.forward_channels_last(x)?;
        let out = self.bn1.forward_channels_last(&out, train, true)?;
        let out = self.conv2.forward_channels_last(&out)?;
        let out = self.bn2.forward_channels_last(&out, train, false)?;
        let short = match &self.shortcut {
            Some((conv, bn)) => {
                bn.forward_channels_last(&conv.forward_channels_last(x)?, train, false)?
            }
            None => x.clone(),
        };
        add_relu(&out, &short)
    }
}

/// ResNet-18, CIFAR variant: 3×3 stem, four stages of two BasicBlocks (64, 128, 256, 512),
/// average pool 4, linear. 11,173,962 trained parameters with 3 input channels.
pub struct ResNet18 {
    conv1: Conv2d,
    bn1: BatchNorm2d,
    blocks: Vec<BasicBlock>,
    linear: Linear,
    params: Params,
    act: Activations,
}

impl ResNet18 {
    pub(crate) fn new(
        in_channels: usize,
        classes: usize,
        init: &mut Init,
        dev: &Device,
        act: Activations,
    ) -> crate::Result<Self> {
        let mut p = Params::new(dev);
        let conv1 = Conv2d::new(&mut p, "conv1", in_channels, 64, 3, 1, 1, false, init, dev)?;
        let bn1 = BatchNorm2d::new(&mut p, "bn1", 64, dev)?;
        let mut blocks = Vec::new();
        let mut cin = 64;
        for (stage, (cout, stride)) in [(64, 1), (128, 2), (256, 2), (512, 2)]
            .into_iter()
            .enumerate()
        {
            for (i, s) in [stride, 1].into_iter().enumerate() {
                let name = format!("layer{}.{i}", stage + 1);
                blocks.push(BasicBlock::new(&mut p, &name, cin, cout, s, init, dev)?);
                cin = cout;
            }
        }
        let linear = Linear::new(&mut p, "linear", 512, classes, init, dev)?;
        Ok(Self {
            conv1,
            bn1,
            blocks,
            linear,
            params: p,
            act,
        })
    }
}

impl Network for ResNet18 {
    fn forward(&self, x: &Tensor, train: bool) -> Result<Tensor> {
        if self.act.channels_last() {
            let x = self.act.enter(x)?;
            let x = self.conv1.forward_channels_last(&x)?;
            let mut x = self.bn1.forward_channels_last(&x, train, true)?;
            for b in &self.blocks {
                x = b.forward_channels_last(&x, train)?;
            }
            // Pooling and the classifier in f32 on NCHW: a few kilobytes a batch.
            let x = nchw_f32(&x)?.avg_pool2d(4)?.flatten_from(1)?;
            return self.linear.forward(&x);
        }
        let mut x = relu(&self.bn1.forward(&self.conv1.forward(x)?, train)?)?;
        for b in &self.blocks {
            x = b.forward(&x, train)?;
        }
        let x = x.avg_pool2d(4)?.flatten_from(1)?;
        self.linear.forward(&x)
    }

    fn params(&self) -> &Params {
        &self.params
    }

    fn activations(&self) -> Activations {
        self.act
    }
}
