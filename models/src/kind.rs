use std::fmt;
use std::str::FromStr;

use crate::ModelError;

/// The architectures octet knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ModelKind {
    LeNet,
    ResNet18,
}

impl ModelKind {
    pub const ALL: [ModelKind; 2] = [ModelKind::LeNet, ModelKind::ResNet18];

    pub fn name(self) -> &'static str {
        match self {
            ModelKind::LeNet => "lenet",
            ModelKind::ResNet18 => "resnet18",
        }
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
}
