//! The built-in networks, one file each, as [`NetSpec`] descriptions. Adding one: a file
//! here returning its description, and its [`ModelKind`] variant (name, help line).

mod ds_cnn;
mod lenet;
mod mobilenet;
mod resnet;

pub use mobilenet::{mobilenet_v1, mobilenet_v2};

use crate::spec::NetSpec;
use crate::ModelKind;

/// `mobilenet-v1`'s width multiplier: MLPerf Tiny's visual wake words model's.
pub const MOBILENET_V1_WIDTH: f32 = 0.25;
/// `mobilenet-v2`'s width multiplier: the smallest of the paper's.
pub const MOBILENET_V2_WIDTH: f32 = 0.35;

impl ModelKind {
    /// The network's description.
    pub fn spec(self) -> NetSpec {
        match self {
            ModelKind::LeNet => lenet::lenet(),
            ModelKind::ResNet18 => resnet::resnet18(),
            ModelKind::ResNet8 => resnet::resnet8(),
            ModelKind::MobileNetV1 => mobilenet_v1(MOBILENET_V1_WIDTH),
            ModelKind::MobileNetV2 => mobilenet_v2(MOBILENET_V2_WIDTH),
            ModelKind::DsCnn => ds_cnn::ds_cnn(),
        }
    }
}
