use std::fmt;
use std::hash::{Hash, Hasher};
use std::str::FromStr;
use std::sync::LazyLock;

use crate::spec::NetSpec;
use crate::zoo::{self, Builtin, Describe};
use crate::ModelError;

/// A built-in network: a handle onto its [`Builtin`] entry, declared in its file of
/// [`zoo`]. Two handles are equal when they name the same network.
#[derive(Clone, Copy)]
pub struct ModelKind(pub(crate) &'static Builtin);

impl ModelKind {
    /// Every built-in network, by [`Builtin::rank`], then name.
    pub fn all() -> &'static [ModelKind] {
        static ALL: LazyLock<Vec<ModelKind>> = LazyLock::new(|| {
            let mut all: Vec<_> = zoo::builtins().collect();
            all.sort_by_key(|k| (k.0.rank, k.0.name));
            all
        });
        &ALL
    }

    /// What `--model` takes and checkpoints record.
    pub fn name(self) -> &'static str {
        self.0.name
    }

    /// Other spellings `--model` takes.
    pub fn aliases(self) -> &'static [&'static str] {
        self.0.aliases
    }

    /// One line for `--help`.
    pub fn help(self) -> String {
        match self.0.spec {
            Describe::Fixed(_) => self.0.help.to_string(),
            Describe::Width { default, .. } => {
                let name = self.0.name;
                format!("{}; width {default} ({name}:W for width W)", self.0.help)
            }
        }
    }

    /// The network's description.
    pub fn spec(self) -> NetSpec {
        match self.0.spec {
            Describe::Fixed(spec) => spec(),
            Describe::Width { default, at } => at(default),
        }
    }

    /// The default width multiplier of a network that has one.
    pub fn width(self) -> Option<f32> {
        match self.0.spec {
            Describe::Fixed(_) => None,
            Describe::Width { default, .. } => Some(default),
        }
    }

    /// The description at width multiplier `width`, for a network that has one.
    pub fn at_width(self, width: f32) -> Option<NetSpec> {
        match self.0.spec {
            Describe::Fixed(_) => None,
            Describe::Width { at, .. } => Some(at(width)),
        }
    }

    /// A fresh `octet train`'s epochs, where this network's differ from the usual.
    pub fn epochs(self) -> Option<usize> {
        self.0.epochs
    }
}

impl PartialEq for ModelKind {
    fn eq(&self, other: &Self) -> bool {
        self.name() == other.name()
    }
}

impl Eq for ModelKind {}

impl Hash for ModelKind {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.name().hash(state);
    }
}

impl fmt::Debug for ModelKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ModelKind").field(&self.name()).finish()
    }
}

/// `--model`: `--help` lists the names with their help; clap accepts them and their aliases
/// in any case (with `ignore_case`), as `FromStr` does.
#[cfg(feature = "clap")]
impl clap::ValueEnum for ModelKind {
    fn value_variants<'a>() -> &'a [Self] {
        Self::all()
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        let pv = clap::builder::PossibleValue::new(self.name()).help(self.help());
        Some(pv.aliases(self.aliases().iter().copied()))
    }
}

impl fmt::Display for ModelKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A name as `FromStr` compares it: lower case, without `-` and `_`.
fn normalize(s: &str) -> String {
    s.to_ascii_lowercase().replace(['-', '_'], "")
}

impl FromStr for ModelKind {
    type Err = ModelError;

    fn from_str(s: &str) -> Result<Self, ModelError> {
        let want = normalize(s);
        let names = |k: &ModelKind| std::iter::once(k.name()).chain(k.aliases().iter().copied());
        Self::all()
            .iter()
            .find(|k| names(k).any(|n| normalize(n) == want))
            .copied()
            .ok_or_else(|| ModelError::UnknownModel(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_and_rejects_unknown() {
        let resnet18 = "ResNet-18".parse::<ModelKind>().unwrap();
        assert_eq!(resnet18, ModelKind::RESNET18);
        assert_eq!("lenet".parse::<ModelKind>().unwrap(), ModelKind::LENET);
        let err = "vgg16".parse::<ModelKind>().unwrap_err().to_string();
        assert!(err.contains("vgg16") && err.contains("resnet18"), "{err}");
    }

    /// No two built-ins share a name or alias, even as `FromStr` compares them, and each
    /// parses back to its network.
    #[test]
    fn names_and_aliases_are_unique_and_parse_back() {
        let mut seen = std::collections::HashMap::new();
        for &k in ModelKind::all() {
            for name in std::iter::once(k.name()).chain(k.aliases().iter().copied()) {
                let owner = *seen.entry(normalize(name)).or_insert(k);
                assert_eq!(owner, k, "{name} ({k}) is also {owner}'s");
                assert_eq!(name.parse::<ModelKind>().unwrap(), k, "{name}");
                assert_eq!(name.to_uppercase().parse::<ModelKind>().unwrap(), k);
            }
        }
    }

    /// The networks of the first files, in the order `--help` has always listed them.
    #[test]
    fn ranks_keep_the_first_networks_order() {
        let names: Vec<_> = ModelKind::all().iter().map(|k| k.name()).collect();
        let first = [
            "lenet",
            "resnet18",
            "resnet8",
            "mobilenet-v1",
            "mobilenet-v2",
            "ds-cnn",
        ];
        let kept: Vec<_> = names.iter().filter(|n| first.contains(n)).collect();
        assert_eq!(kept, first.iter().collect::<Vec<_>>());
    }

    /// Every name clap accepts parses to the same kind through `FromStr`.
    #[cfg(feature = "clap")]
    #[test]
    fn clap_names_agree_with_from_str() {
        use clap::ValueEnum;
        for &k in ModelKind::all() {
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
