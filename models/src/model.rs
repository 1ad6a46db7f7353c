//! What `--model` names: a built-in network, or a user's description file.

use std::fmt;
use std::path::Path;

use crate::spec::{self, NetSpec};
use crate::{ModelError, ModelKind};

/// A network to build: built in, or described by the user (its name and description, which
/// checkpoints carry so that `eval`, `export` and `--resume` need nothing else).
#[derive(Debug, Clone, PartialEq)]
pub enum Model {
    Builtin(ModelKind),
    Described { name: String, spec: NetSpec },
}

impl Model {
    /// A built-in network's name (any case, `-`/`_` ignored), or the path of a `.toml` or
    /// `.json` description (named after the file).
    pub fn parse(arg: &str) -> Result<Self, ModelError> {
        let path = Path::new(arg);
        if !Self::names_file(arg) {
            // `mobilenet-v1:0.5`: a built-in network at another width, recorded as described.
            if let Some((name, width)) = arg.split_once(':') {
                let kind: ModelKind = name.parse()?;
                let bad = || ModelError::UnknownModel(format!("{arg} (width: a number in (0, 4])"));
                let w: f32 = width.parse().map_err(|_| bad())?;
                if !(w > 0.0 && w <= 4.0) {
                    return Err(bad());
                }
                let spec = kind.at_width(w).ok_or_else(|| {
                    ModelError::UnknownModel(format!("{arg} ({kind} has no width multiplier)"))
                })?;
                let name = format!("{kind}-{width}");
                return Ok(Model::Described { name, spec });
            }
            return Ok(Model::Builtin(arg.parse()?));
        }
        let spec = spec::read_file(path)?;
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| arg.to_string());
        Ok(Model::Described { name, spec })
    }

    /// Whether `--model arg` names a description file (`.toml`, `.json`) rather than a
    /// built-in network.
    pub fn names_file(arg: &str) -> bool {
        Path::new(arg)
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("toml") || e.eq_ignore_ascii_case("json"))
    }

    /// A name and, for a described network, its description: as a checkpoint records them.
    pub fn from_record(name: &str, spec: Option<&NetSpec>) -> Result<Self, ModelError> {
        match spec {
            Some(spec) => Ok(Model::Described {
                name: name.to_string(),
                spec: spec.clone(),
            }),
            None => Ok(Model::Builtin(name.parse()?)),
        }
    }

    pub fn name(&self) -> &str {
        match self {
            Model::Builtin(k) => k.name(),
            Model::Described { name, .. } => name,
        }
    }

    pub fn kind(&self) -> Option<ModelKind> {
        match self {
            Model::Builtin(k) => Some(*k),
            Model::Described { .. } => None,
        }
    }

    pub fn spec(&self) -> NetSpec {
        match self {
            Model::Builtin(k) => k.spec(),
            Model::Described { spec, .. } => spec.clone(),
        }
    }

    /// The description a checkpoint must carry: none for a built-in network.
    pub fn described(&self) -> Option<&NetSpec> {
        match self {
            Model::Builtin(_) => None,
            Model::Described { spec, .. } => Some(spec),
        }
    }
}

impl From<ModelKind> for Model {
    fn from(k: ModelKind) -> Self {
        Model::Builtin(k)
    }
}

impl From<&Model> for Model {
    fn from(m: &Model) -> Self {
        m.clone()
    }
}

impl fmt::Display for Model {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// `--help` text of a `--model` flag: `lead`, then the built-in names with their help.
pub fn model_help(lead: &str) -> String {
    let mut s = format!(
        "{lead}\n\nA built-in network, or a description file (.toml or .json; the README has an \
         example):\n"
    );
    for k in ModelKind::all() {
        s.push_str(&format!("\n- {}: {}", k.name(), k.help()));
    }
    s
}
