//! Which data set to train on, as named on the command line, and loading it.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use super::bundled::load_bundled;
use super::cifar::load_cifar10;
use super::idx::{has_fashion_mnist, load_fashion_mnist};
use super::synthetic::{synthetic, IMAGE_BYTES};
use super::{DataError, DataSplit, Normalization, Result};

/// Where the Debian/Ubuntu package `dataset-fashion-mnist` installs the data set.
pub const FASHION_MNIST_SYSTEM_DIR: &str = "/usr/share/datasets/fashion-mnist";

const SYNTHETIC_TRAIN: usize = 50_000;
const SYNTHETIC_TEST: usize = 10_000;

/// A data set to load. Parsed from and displayed as the command-line forms `auto`,
/// `bundled`, `fashion-mnist`, `fashion-mnist:DIR`, `cifar10:DIR`, `synthetic`,
/// `synthetic:N`, `synthetic:N:M` and `synthetic:N:M:SEED`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DataSource {
    /// Full Fashion-MNIST from the system directory if it is installed, else the
    /// bundled subset. An installed but damaged copy is an error, not a fallback.
    Auto,
    /// The bundled Fashion-MNIST subset.
    Bundled,
    /// Full Fashion-MNIST from a directory, or from the system directory if `None`.
    FashionMnist(Option<PathBuf>),
    /// CIFAR-10 (binary version) from a directory.
    Cifar10(PathBuf),
    /// Seeded random CIFAR-shaped data.
    Synthetic {
        train: usize,
        test: usize,
        seed: u64,
    },
}

impl DataSource {
    /// The kinds a source names before any `:` (`cifar10` in `cifar10:DIR`), for the command
    /// line's "a similar value exists" hint.
    pub const KINDS: [&'static str; 5] =
        ["auto", "bundled", "fashion-mnist", "cifar10", "synthetic"];
}

impl FromStr for DataSource {
    type Err = DataError;

    fn from_str(s: &str) -> Result<Self> {
        let bad = |reason: &str| DataError::BadSource {
            input: s.to_string(),
            reason: reason.to_string(),
        };
        // Split at the first ':' only, so directories may contain ':'.
        let (kind, arg) = match s.split_once(':') {
            Some((kind, arg)) => (kind, Some(arg)),
            None => (s, None),
        };
        let dir = |arg: Option<&str>| match arg {
            Some(d) if !d.is_empty() => Ok(PathBuf::from(d)),
            _ => Err(bad("the directory is empty")),
        };
        match (kind, arg) {
            ("auto", None) => Ok(Self::Auto),
            ("bundled", None) => Ok(Self::Bundled),
            ("fashion-mnist", None) => Ok(Self::FashionMnist(None)),
            ("fashion-mnist", arg) => Ok(Self::FashionMnist(Some(dir(arg)?))),
            ("cifar10", arg) => Ok(Self::Cifar10(dir(arg)?)),
            ("synthetic", None) => Ok(Self::Synthetic {
                train: SYNTHETIC_TRAIN,
                test: SYNTHETIC_TEST,
                seed: 0,
            }),
            ("synthetic", Some(arg)) => {
                let parts: Vec<&str> = arg.split(':').collect();
                if parts.len() > 3 {
                    return Err(bad("synthetic takes at most N:M:SEED"));
                }
                let number = |i: usize, default: u64| -> Result<u64> {
                    parts.get(i).map_or(Ok(default), |p| {
                        p.parse()
                            .map_err(|_| bad(&format!("{p:?} is not a non-negative integer")))
                    })
                };
                let count = |i: usize, default: usize| -> Result<usize> {
                    usize::try_from(number(i, default as u64)?).map_err(|_| bad("count too large"))
                };
                let train = count(0, SYNTHETIC_TRAIN)?;
                if train == 0 {
                    return Err(bad("the training set needs at least one image"));
                }
                Ok(Self::Synthetic {
                    train,
                    test: count(1, SYNTHETIC_TEST)?,
                    seed: number(2, 0)?,
                })
            }
            _ => Err(bad("unknown source")),
        }
    }
}

impl fmt::Display for DataSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Auto => f.write_str("auto"),
            Self::Bundled => f.write_str("bundled"),
            Self::FashionMnist(None) => f.write_str("fashion-mnist"),
            Self::FashionMnist(Some(dir)) => write!(f, "fashion-mnist:{}", dir.display()),
            Self::Cifar10(dir) => write!(f, "cifar10:{}", dir.display()),
            Self::Synthetic {
                train,
                test,
                seed: 0,
            } => write!(f, "synthetic:{train}:{test}"),
            Self::Synthetic { train, test, seed } => {
                write!(f, "synthetic:{train}:{test}:{seed}")
            }
        }
    }
}

/// Loads the data set `source` names.
pub fn load(source: &DataSource) -> Result<DataSplit> {
    let system = Path::new(FASHION_MNIST_SYSTEM_DIR);
    match source {
        DataSource::Auto if has_fashion_mnist(system) => fashion_mnist(system),
        DataSource::Auto | DataSource::Bundled => load_bundled(),
        DataSource::FashionMnist(dir) => fashion_mnist(dir.as_deref().unwrap_or(system)),
        DataSource::Cifar10(dir) => {
            let (dir, train, test) = load_cifar10(dir)?;
            Ok(DataSplit {
                name: "cifar10".to_string(),
                train,
                test,
                norm: Normalization::cifar10(),
                origin: dir.display().to_string(),
            })
        }
        &DataSource::Synthetic { train, test, seed } => {
            // Refuse sizes whose buffers cannot exist before trying to allocate them.
            if train.max(test).checked_mul(IMAGE_BYTES).is_none() {
                return Err(DataError::Invalid(format!(
                    "synthetic data of {train}/{test} images does not fit in memory"
                )));
            }
            Ok(synthetic(train, test, seed))
        }
    }
}

fn fashion_mnist(dir: &Path) -> Result<DataSplit> {
    let (train, test) = load_fashion_mnist(
        dir,
        "install the Debian/Ubuntu package with `apt-get install dataset-fashion-mnist` \
         or pass `--data DIR` naming a directory that holds the files",
    )?;
    Ok(DataSplit {
        name: "fashion-mnist".to_string(),
        train,
        test,
        norm: Normalization::fashion_mnist(),
        origin: dir.display().to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> DataSource {
        s.parse().unwrap()
    }

    /// Every kind the hint offers is one `FromStr` knows (alone or with a `:` argument).
    #[test]
    fn kinds_are_the_parsers() {
        for k in DataSource::KINDS {
            let known =
                k.parse::<DataSource>().is_ok() || format!("{k}:x").parse::<DataSource>().is_ok();
            assert!(known, "{k}");
        }
        assert!("cifar".parse::<DataSource>().is_err());
    }

    #[test]
    fn parses_every_form() {
        assert_eq!(parse("auto"), DataSource::Auto);
        assert_eq!(parse("bundled"), DataSource::Bundled);
        assert_eq!(parse("fashion-mnist"), DataSource::FashionMnist(None));
        assert_eq!(
            parse("fashion-mnist:/d/f"),
            DataSource::FashionMnist(Some("/d/f".into()))
        );
        assert_eq!(parse("cifar10:C:/x"), DataSource::Cifar10("C:/x".into()));
        let syn = |train, test, seed| DataSource::Synthetic { train, test, seed };
        assert_eq!(parse("synthetic"), syn(50_000, 10_000, 0));
        assert_eq!(parse("synthetic:100"), syn(100, 10_000, 0));
        assert_eq!(parse("synthetic:100:7"), syn(100, 7, 0));
        assert_eq!(parse("synthetic:100:0:9"), syn(100, 0, 9));
    }

    #[test]
    fn rejects_bad_forms() {
        for s in [
            "",
            "cifar10",
            "cifar10:",
            "auto:x",
            "bundled:",
            "synthetic:",
            "synthetic:x",
            "synthetic:0",
            "synthetic:1:2:3:4",
            "synthetic:-1",
            "mnist",
            "CIFAR10:/x",
        ] {
            let err = s.parse::<DataSource>().unwrap_err().to_string();
            assert!(err.contains("accepted: auto, bundled"), "{s:?}: {err}");
        }
    }

    #[test]
    fn synthetic_size_overflow_is_an_error() {
        let source = DataSource::Synthetic {
            train: usize::MAX / 2,
            test: 1,
            seed: 0,
        };
        assert!(matches!(load(&source), Err(DataError::Invalid(_))));
    }
}
