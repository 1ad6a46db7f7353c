use super::{Builtin, Describe};
use crate::spec::{Layer, NetSpec, Node};
use crate::ModelKind;

impl ModelKind {
    pub const RESNET18: ModelKind = ModelKind(&Builtin {
        name: "resnet18",
        aliases: &["resnet-18", "resnet_18"],
        help: "ResNet-18 for small images: 3×3 stem, 8 basic blocks",
        rank: 20,
        spec: Describe::Fixed(resnet18),
        // 11 M parameters: an epoch takes long, and 10 reach the lab's accuracy.
        epochs: Some(10),
    });
    pub const RESNET8: ModelKind = ModelKind(&Builtin {
        name: "resnet8",
        aliases: &["resnet-8", "resnet_8"],
        help: "MLPerf Tiny's ResNet-8: 3×3 stem, 3 basic blocks (16, 32, 64 filters)",
        rank: 30,
        spec: Describe::Fixed(resnet8),
        epochs: None,
    });
}

pub(crate) const BUILTINS: &[ModelKind] = &[ModelKind::RESNET18, ModelKind::RESNET8];

/// ResNet-18, CIFAR variant: 3×3 stem, four stages of two basic blocks (64, 128, 256, 512),
/// average pool 4, linear. 11,173,962 trained parameters with 3 input channels.
fn resnet18() -> NetSpec {
    resnet(
        64,
        &[(64, 1), (128, 2), (256, 2), (512, 2)],
        2,
        Shortcut::ConvBn,
        Layer::AvgPool {
            kernel: 4,
            stride: None,
        },
    )
}

/// MLPerf Tiny's image-classification ResNet-8: 3×3 stem of 16, three stages of one basic
/// block (16, 32, 64), 1×1 convolution shortcuts with a bias, global average pool, linear.
fn resnet8() -> NetSpec {
    resnet(
        16,
        &[(16, 1), (32, 2), (64, 2)],
        1,
        Shortcut::ConvBias,
        Layer::GlobalAvgPool,
    )
}

/// How a block whose shape changes projects its input.
#[derive(Clone, Copy)]
pub(crate) enum Shortcut {
    /// 1×1 convolution and batch norm (`shortcut.0`, `shortcut.1`), as the CIFAR ResNets.
    ConvBn,
    /// 1×1 convolution with a bias (`shortcut`), as MLPerf Tiny's Keras ResNet-8.
    ConvBias,
}

fn conv(out: usize, kernel: usize, stride: usize, bias: bool) -> Layer {
    Layer::Conv {
        out,
        kernel,
        stride,
        padding: kernel / 2,
        bias,
    }
}

/// Stem (conv, batch norm, ReLU), `stages` of `blocks` basic blocks (`layer{s}.{b}`), `pool`,
/// flatten, classifier (`linear`). The other ResNet files build on it.
pub(crate) fn resnet(
    stem: usize,
    stages: &[(usize, usize)],
    blocks: usize,
    shortcut: Shortcut,
    pool: Layer,
) -> NetSpec {
    let mut l = vec![
        Node::new("conv1", conv(stem, 3, 1, false)),
        Node::new("bn1", Layer::BatchNorm),
        Node::new("relu", Layer::Relu),
    ];
    let mut cin = stem;
    for (s, &(cout, stride)) in stages.iter().enumerate() {
        for b in 0..blocks {
            let stride = if b == 0 { stride } else { 1 };
            let name = format!("layer{}.{b}", s + 1);
            basic_block(&mut l, &name, (cin, cout, stride), shortcut);
            cin = cout;
        }
    }
    l.push(Node::new("avgpool", pool));
    l.push(Node::new("flatten", Layer::Flatten));
    l.push(Node::new("linear", Layer::Linear { out: None }));
    NetSpec::new(l)
}

/// Two 3×3 convolutions with batch norm, and an identity or 1×1-convolution shortcut, in
/// PyTorch's registration order: conv1, bn1, conv2, bn2, shortcut.
fn basic_block(
    l: &mut Vec<Node>,
    name: &str,
    (cin, cout, stride): (usize, usize, usize),
    shortcut: Shortcut,
) {
    let block_input = l.last().expect("a block follows the stem").name.clone();
    let n = |part: &str| format!("{name}.{part}");
    l.extend([
        Node::new(n("conv1"), conv(cout, 3, stride, false)),
        Node::new(n("bn1"), Layer::BatchNorm),
        Node::new(n("relu1"), Layer::Relu),
        Node::new(n("conv2"), conv(cout, 3, 1, false)),
        Node::new(n("bn2"), Layer::BatchNorm),
    ]);
    let short = if stride == 1 && cin == cout {
        block_input
    } else {
        match shortcut {
            Shortcut::ConvBn => {
                l.push(Node::new(n("shortcut.0"), conv(cout, 1, stride, false)).from(&block_input));
                l.push(Node::new(n("shortcut.1"), Layer::BatchNorm));
                n("shortcut.1")
            }
            Shortcut::ConvBias => {
                l.push(Node::new(n("shortcut"), conv(cout, 1, stride, true)).from(&block_input));
                n("shortcut")
            }
        }
    };
    l.push(Node::new(n("add"), Layer::Add { with: short }).from(n("bn2")));
    l.push(Node::new(n("relu"), Layer::Relu));
}
