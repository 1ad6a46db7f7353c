use super::{Builtin, Describe};
use crate::spec::{Layer, NetSpec, Node};
use crate::ModelKind;

impl ModelKind {
    pub const LENET: ModelKind = ModelKind(&Builtin {
        name: "lenet",
        aliases: &["le-net"],
        help: "LeNet-5: two 5×5 convolutions and three fully connected layers",
        rank: 10,
        spec: Describe::Fixed(lenet),
        epochs: None,
    });
}

pub(crate) const BUILTINS: &[ModelKind] = &[ModelKind::LENET];

/// The lab's LeNet-style CNN: conv 5×5→6, max-pool 2, conv 5×5→16, max-pool 2, fc →120→84→
/// classes, ReLU between (fc1 has 400 inputs on 32×32 images).
fn lenet() -> NetSpec {
    let conv = |out| Layer::Conv {
        out,
        kernel: 5,
        stride: 1,
        padding: 0,
        bias: true,
    };
    let pool = Layer::MaxPool {
        kernel: 2,
        stride: None,
    };
    let fc = |out| Layer::Linear { out };
    NetSpec::new(vec![
        Node::new("conv1", conv(6)),
        Node::new("relu1", Layer::Relu),
        Node::new("pool1", pool.clone()),
        Node::new("conv2", conv(16)),
        Node::new("relu2", Layer::Relu),
        Node::new("pool2", pool),
        Node::new("flatten", Layer::Flatten),
        Node::new("fc1", fc(Some(120))),
        Node::new("relu3", Layer::Relu),
        Node::new("fc2", fc(Some(84))),
        Node::new("relu4", Layer::Relu),
        Node::new("fc3", fc(None)),
    ])
}
