use candle_core::{Result, Tensor};

use crate::activations::nchw_f32;
use crate::builder::LayerBuilder;
use crate::{BatchNorm2d, Conv2d, Conv2dConfig, Linear, Network, NetworkParts, OpsConfig};

/// Two 3×3 convolutions with batch norm and an identity or 1×1-conv shortcut.
struct BasicBlock {
    conv1: Conv2d,
    bn1: BatchNorm2d,
    conv2: Conv2d,
    bn2: BatchNorm2d,
    shortcut: Option<(Conv2d, BatchNorm2d)>,
    ops: OpsConfig,
}

impl BasicBlock {
    fn new(
        b: &mut LayerBuilder,
        name: &str,
        (cin, cout): (usize, usize),
        stride: usize,
    ) -> crate::Result<Self> {
        // Registration order follows PyTorch's state_dict: conv1, bn1, conv2, bn2, shortcut.
        let conv3 = |stride| Conv2dConfig {
            stride,
            padding: 1,
            bias: false,
        };
        let conv1 = Conv2d::new(b, &format!("{name}.conv1"), (cin, cout), 3, conv3(stride))?;
        let bn1 = BatchNorm2d::new(b, &format!("{name}.bn1"), cout)?;
        let conv2 = Conv2d::new(b, &format!("{name}.conv2"), (cout, cout), 3, conv3(1))?;
        let bn2 = BatchNorm2d::new(b, &format!("{name}.bn2"), cout)?;
        let shortcut = if stride != 1 || cin != cout {
            let conv1x1 = Conv2dConfig {
                stride,
                padding: 0,
                bias: false,
            };
            Some((
                Conv2d::new(b, &format!("{name}.shortcut.0"), (cin, cout), 1, conv1x1)?,
                BatchNorm2d::new(b, &format!("{name}.shortcut.1"), cout)?,
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
            ops: b.ops,
        })
    }

    fn forward(&self, x: &Tensor, train: bool) -> Result<Tensor> {
        let out = self
            .ops
            .relu(&self.bn1.forward(&self.conv1.forward(x)?, train)?)?;
        let out = self.bn2.forward(&self.conv2.forward(&out)?, train)?;
        let short = match &self.shortcut {
            Some((conv, bn)) => bn.forward(&conv.forward(x)?, train)?,
            None => x.clone(),
        };
        self.ops.add_relu(&out, &short)
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
        self.ops.add_relu(&out, &short)
    }
}

/// ResNet-18, CIFAR variant: 3×3 stem, four stages of two BasicBlocks (64, 128, 256, 512),
/// average pool 4, linear. 11,173,962 trained parameters with 3 input channels.
pub struct ResNet18 {
    conv1: Conv2d,
    bn1: BatchNorm2d,
    blocks: Vec<BasicBlock>,
    linear: Linear,
    parts: NetworkParts,
}

impl ResNet18 {
    /// The network for `cin`-channel images and `classes` classes.
    pub(crate) fn new(mut lb: LayerBuilder, cin: usize, classes: usize) -> crate::Result<Self> {
        let b = &mut lb;
        let stem = Conv2dConfig {
            stride: 1,
            padding: 1,
            bias: false,
        };
        let conv1 = Conv2d::new(b, "conv1", (cin, 64), 3, stem)?;
        let bn1 = BatchNorm2d::new(b, "bn1", 64)?;
        let mut blocks = Vec::new();
        let mut cin = 64;
        for (stage, (cout, stride)) in [(64, 1), (128, 2), (256, 2), (512, 2)]
            .into_iter()
            .enumerate()
        {
            for (i, s) in [stride, 1].into_iter().enumerate() {
                let name = format!("layer{}.{i}", stage + 1);
                blocks.push(BasicBlock::new(b, &name, (cin, cout), s)?);
                cin = cout;
            }
        }
        let linear = Linear::new(b, "linear", 512, classes)?;
        Ok(Self {
            conv1,
            bn1,
            blocks,
            linear,
            parts: lb.finish(),
        })
    }
}

impl Network for ResNet18 {
    fn forward(&self, x: &Tensor, train: bool) -> Result<Tensor> {
        if self.parts.activations.channels_last() {
            let x = self.parts.activations.enter(x)?;
            let x = self.conv1.forward_channels_last(&x)?;
            let mut x = self.bn1.forward_channels_last(&x, train, true)?;
            for b in &self.blocks {
                x = b.forward_channels_last(&x, train)?;
            }
            // Pooling and the classifier in f32 on NCHW: a few kilobytes a batch.
            let x = nchw_f32(&x)?.avg_pool2d(4)?.flatten_from(1)?;
            return self.linear.forward(&x);
        }
        let mut x = self
            .parts
            .ops
            .relu(&self.bn1.forward(&self.conv1.forward(x)?, train)?)?;
        for b in &self.blocks {
            x = b.forward(&x, train)?;
        }
        let x = x.avg_pool2d(4)?.flatten_from(1)?;
        self.linear.forward(&x)
    }

    fn parts(&self) -> &NetworkParts {
        &self.parts
    }
}
