use super::{Builtin, Describe};
use crate::spec::{Layer, NetSpec, Node};
use crate::ModelKind;

impl ModelKind {
    pub const DS_CNN: ModelKind = ModelKind(&Builtin {
        name: "ds-cnn",
        aliases: &["dscnn", "ds_cnn"],
        help: "MLPerf Tiny's keyword-spotting DS-CNN shape: 64-channel stem, 4 \
               depthwise-separable blocks",
        rank: 60,
        spec: Describe::Fixed(ds_cnn),
        epochs: None,
    });
}

pub(crate) const BUILTINS: &[ModelKind] = &[ModelKind::DS_CNN];

/// MLPerf Tiny's keyword-spotting DS-CNN shape: a 64-channel first convolution with stride 2
/// (MLPerf's is 10×4 on 49×10 spectrograms; 3×3 here, for images), four depthwise-separable
/// blocks of 64 channels (depthwise 3×3 and pointwise 1×1, each with batch norm and ReLU),
/// global average pooling, a classifier. (MLPerf trains with dropout 0.2 before the pooling;
/// the description has no dropout.)
fn ds_cnn() -> NetSpec {
    let conv_bn_relu = |l: &mut Vec<Node>, name: &str, layer: Layer| {
        l.push(Node::new(name, layer));
        l.push(Node::new(format!("{name}_bn"), Layer::BatchNorm));
        l.push(Node::new(format!("{name}_relu"), Layer::Relu));
    };
    let mut l = Vec::new();
    let stem = Layer::Conv {
        out: 64,
        kernel: 3,
        stride: 2,
        padding: 1,
        bias: true,
    };
    conv_bn_relu(&mut l, "stem", stem);
    for i in 1..=4 {
        let dw = Layer::DepthwiseConv {
            multiplier: 1,
            kernel: 3,
            stride: 1,
            padding: 1,
            bias: true,
        };
        conv_bn_relu(&mut l, &format!("block{i}.dw"), dw);
        let pw = Layer::Conv {
            out: 64,
            kernel: 1,
            stride: 1,
            padding: 0,
            bias: true,
        };
        conv_bn_relu(&mut l, &format!("block{i}.pw"), pw);
    }
    l.push(Node::new("pool", Layer::GlobalAvgPool));
    l.push(Node::new("flatten", Layer::Flatten));
    l.push(Node::new("classifier", Layer::Linear { out: None }));
    NetSpec::new(l)
}
