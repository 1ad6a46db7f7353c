use super::resnet::{resnet, Shortcut};
use super::{Builtin, Describe};
use crate::spec::{Layer, NetSpec};
use crate::ModelKind;

impl ModelKind {
    pub const RESNET20: ModelKind = ModelKind(&Builtin {
        name: "resnet20",
        aliases: &["resnet-20", "resnet_20"],
        help: "He et al.'s CIFAR ResNet-20: 3×3 stem, 9 basic blocks (16, 32, 64 filters)",
        // After ResNet-8, its smaller sibling.
        rank: 35,
        spec: Describe::Fixed(resnet20),
        epochs: None,
    });
}

pub(crate) const BUILTINS: &[ModelKind] = &[ModelKind::RESNET20];

/// The CIFAR ResNet-20 of He et al. 2016 (section 4.2, n = 3): 3×3 stem of 16, three stages
/// of three basic blocks (16, 32, 64 filters; stride 2 entering stages 2 and 3), global
/// average pool, linear. Where the shape changes the shortcut is a 1×1 convolution with batch
/// norm (the paper's option B; its CIFAR runs pad with zeros, option A, which has no weights).
/// 272,474 trained parameters with 3 input channels and 10 classes.
fn resnet20() -> NetSpec {
    resnet(
        16,
        &[(16, 1), (32, 2), (64, 2)],
        3,
        Shortcut::ConvBn,
        Layer::GlobalAvgPool,
    )
}
