use super::{Builtin, Describe};
use crate::spec::{Layer, NetSpec, Node};
use crate::ModelKind;

impl ModelKind {
    pub const MOBILENET_V1: ModelKind = ModelKind(&Builtin {
        name: "mobilenet-v1",
        aliases: &["mobilenetv1", "mobilenet_v1"],
        help: "MobileNetV1 (MLPerf Tiny's VWW): 13 depthwise-separable blocks, ReLU6",
        rank: 40,
        // MLPerf Tiny's visual wake words model's width.
        spec: Describe::Width {
            default: 0.25,
            at: mobilenet_v1,
        },
        epochs: None,
    });
    pub const MOBILENET_V2: ModelKind = ModelKind(&Builtin {
        name: "mobilenet-v2",
        aliases: &["mobilenetv2", "mobilenet_v2"],
        help: "MobileNetV2: 17 inverted residual blocks, ReLU6",
        rank: 50,
        // The smallest of the paper's widths.
        spec: Describe::Width {
            default: 0.35,
            at: mobilenet_v2,
        },
        epochs: None,
    });
}

pub(crate) const BUILTINS: &[ModelKind] = &[ModelKind::MOBILENET_V1, ModelKind::MOBILENET_V2];

/// `channels` scaled by the width multiplier, at least 8.
fn scaled(channels: usize, width: f32) -> usize {
    ((channels as f32 * width).round() as usize).max(8)
}

fn conv(out: usize, kernel: usize, stride: usize) -> Layer {
    Layer::Conv {
        out,
        kernel,
        stride,
        padding: kernel / 2,
        bias: false,
    }
}

fn depthwise(stride: usize) -> Layer {
    Layer::DepthwiseConv {
        multiplier: 1,
        kernel: 3,
        stride,
        padding: 1,
        bias: false,
    }
}

/// `name` (a convolution) followed by `{name}_bn` and, if `act`, `{name}_relu` (ReLU6).
fn unit(l: &mut Vec<Node>, name: &str, layer: Layer, act: bool) {
    l.push(Node::new(name, layer));
    l.push(Node::new(format!("{name}_bn"), Layer::BatchNorm));
    if act {
        l.push(Node::new(format!("{name}_relu"), Layer::Relu6));
    }
}

fn head(mut l: Vec<Node>) -> NetSpec {
    l.push(Node::new("pool", Layer::GlobalAvgPool));
    l.push(Node::new("flatten", Layer::Flatten));
    l.push(Node::new("classifier", Layer::Linear { out: None }));
    NetSpec::new(l)
}

/// MobileNetV1 (Howard et al. 2017) at `width`: a 3×3 stem, 13 depthwise-separable blocks
/// (depthwise 3×3 and pointwise 1×1 convolutions, each with batch norm and ReLU6), global
/// average pooling, a classifier. For small images the stem has stride 1, so 32×32 inputs
/// end at 2×2 after the four stride-2 blocks (MLPerf Tiny's visual wake words runs it at
/// width 0.25 on 96×96).
fn mobilenet_v1(width: f32) -> NetSpec {
    let mut l = Vec::new();
    unit(&mut l, "stem", conv(scaled(32, width), 3, 1), true);
    let blocks = [
        (64, 1),
        (128, 2),
        (128, 1),
        (256, 2),
        (256, 1),
        (512, 2),
        (512, 1),
        (512, 1),
        (512, 1),
        (512, 1),
        (512, 1),
        (1024, 2),
        (1024, 1),
    ];
    for (i, (out, stride)) in blocks.into_iter().enumerate() {
        unit(
            &mut l,
            &format!("block{}.dw", i + 1),
            depthwise(stride),
            true,
        );
        let pw = conv(scaled(out, width), 1, 1);
        unit(&mut l, &format!("block{}.pw", i + 1), pw, true);
    }
    head(l)
}

/// MobileNetV2 (Sandler et al. 2018) at `width`: a 3×3 stem, 17 inverted residual blocks
/// (1×1 expansion, depthwise 3×3, linear 1×1 projection; a residual add where the shape
/// stays), a 1×1 convolution to 1280 channels, global average pooling, a classifier. For
/// small images the stem and the second stage have stride 1 (the usual CIFAR variant).
fn mobilenet_v2(width: f32) -> NetSpec {
    let mut l = Vec::new();
    let mut cin = scaled(32, width);
    unit(&mut l, "stem", conv(cin, 3, 1), true);
    // (expansion, channels, blocks, first stride)
    let stages = [
        (1, 16, 1, 1),
        (6, 24, 2, 1),
        (6, 32, 3, 2),
        (6, 64, 4, 2),
        (6, 96, 3, 1),
        (6, 160, 3, 2),
        (6, 320, 1, 1),
    ];
    let mut b = 0;
    for (t, c, n, s) in stages {
        let cout = scaled(c, width);
        for i in 0..n {
            b += 1;
            let stride = if i == 0 { s } else { 1 };
            let input = l.last().expect("the stem comes first").name.clone();
            let name = format!("block{b}");
            if t != 1 {
                unit(&mut l, &format!("{name}.expand"), conv(cin * t, 1, 1), true);
            }
            unit(&mut l, &format!("{name}.dw"), depthwise(stride), true);
            unit(&mut l, &format!("{name}.project"), conv(cout, 1, 1), false);
            if stride == 1 && cin == cout {
                let add = Layer::Add { with: input };
                l.push(Node::new(format!("{name}.add"), add));
            }
            cin = cout;
        }
    }
    unit(
        &mut l,
        "last",
        conv(scaled(1280, width.max(1.0)), 1, 1),
        true,
    );
    head(l)
}
