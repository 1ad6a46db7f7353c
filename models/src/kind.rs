use std::fmt;
use std::str::FromStr;

use crate::ModelError;

/// The architectures octet knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ModelKind {
    LeNet,
    ResNet18,
    ResNet8,
    MobileNetV1,
    MobileNetV2,
    DsCnn,
}

impl ModelKind {
    pub const ALL: [ModelKind; 6] = [
        ModelKind::LeNet,
        ModelKind::ResNet18,
        ModelKind::ResNet8,
        ModelKind::MobileNetV1,
        ModelKind::MobileNetV2,
        ModelKind::DsCnn,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ModelKind::LeNet => "lenet",
            ModelKind::ResNet18 => "resnet18",
            ModelKind::ResNet8 => "resnet8",
            ModelKind::MobileNetV1 => "mobilenet-v1",
            ModelKind::MobileNetV2 => "mobilenet-v2",
            ModelKind::DsCnn => "ds-cnn",
        }
    }

    /// One line for `--help`.
    pub fn help(self) -> &'static str {
        match self {
            ModelKind::LeNet => "LeNet-5: two 5×5 convolutions and three fully connected layers",
            ModelKind::ResNet18 => "ResNet-18 for small images: 3×3 stem, 8 basic blocks",
            ModelKind::ResNet8 => {
                "MLPerf Tiny's ResNet-8: 3×3 stem, 3 basic blocks (16, 32, 64 filters)"
            }
            ModelKind::MobileNetV1 => {
                "MobileNetV1, width 0.25 (MLPerf Tiny's VWW; mobilenet-v1:W for width W): 13 \
                 depthwise-separable blocks, ReLU6"
            }
            ModelKind::MobileNetV2 => {
                "MobileNetV2, width 0.35 (mobilenet-v2:W for width W): 17 inverted residual \
                 blocks, ReLU6"
            }
            ModelKind::DsCnn => {
                "MLPerf Tiny's keyword-spotting DS-CNN shape: 64-channel stem, 4 \
                 depthwise-separable blocks"
            }
        }
    }
}

/// `--model`: `--help` lists the names with their help; clap accepts them in any case (with
/// `ignore_case`) and `resnet-18`/`resnet_18` as aliases, as `FromStr` does.
#[cfg(feature = "clap")]
impl clap::ValueEnum for ModelKind {
    fn value_variants<'a>() -> &'a [Self] {
        &Self::ALL
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        let pv = clap::builder::PossibleValue::new(self.name()).help(self.help());
        Some(match self {
            ModelKind::LeNet => pv.alias("le-net"),
            ModelKind::ResNet18 => pv.aliases(["resnet-18", "resnet_18"]),
            ModelKind::ResNet8 => pv.aliases(["resnet-8", "resnet_8"]),
            ModelKind::MobileNetV1 => pv.aliases(["mobilenetv1", "mobilenet_v1"]),
            ModelKind::MobileNetV2 => pv.aliases(["mobilenetv2", "mobilenet_v2"]),
            ModelKind::DsCnn => pv.aliases(["dscnn", "ds_cnn"]),
        })
    }
}

impl fmt::Display for ModelKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ModelKind {
    type Err = ModelError;

    fn from_str(s: &str) -> Result<Self, ModelError> {
        match s.to_ascii_lowercase().replace(['-', '_'], "").as_str() {
            "lenet" => Ok(ModelKind::LeNet),
            "resnet18" => Ok(ModelKind::ResNet18),
            "resnet8" => Ok(ModelKind::ResNet8),
            "mobilenetv1" => Ok(ModelKind::MobileNetV1),
            "mobilenetv2" => Ok(ModelKind::MobileNetV2),
            "dscnn" => Ok(ModelKind::DsCnn),
            _ => Err(ModelError::UnknownModel(s.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_and_rejects_unknown() {
        assert_eq!(
            "ResNet-18".parse::<ModelKind>().unwrap(),
            ModelKind::ResNet18
        );
        assert_eq!("lenet".parse::<ModelKind>().unwrap(), ModelKind::LeNet);
        let err = "vgg16".parse::<ModelKind>().unwrap_err().to_string();
        assert!(err.contains("vgg16") && err.contains("resnet18"), "{err}");
    }

    /// Every name clap accepts parses to the same kind through `FromStr`.
    #[cfg(feature = "clap")]
    #[test]
    fn clap_names_agree_with_from_str() {
        use clap::ValueEnum;
        for k in ModelKind::ALL {
            let pv = k.to_possible_value().unwrap();
            for name in pv.get_name_and_aliases() {
                assert_eq!(name.parse::<ModelKind>().unwrap(), k, "{name}");
                assert_eq!(
                    <ModelKind as ValueEnum>::from_str(name, true),
                    Ok(k),
                    "{name}"
                );
            }
        }
    }
}
