//! Float checkpoints: safetensors with the PyTorch `state_dict` names, the optimizer's momentum
//! under `optim.momentum.*`, and JSON metadata under the `octet` metadata key. PyTorch's own
//! `.pth` files load too (`pth.rs`), without metadata.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use octet_models::{Model, ModelKind, Params};
use serde::{Deserialize, Serialize};

use crate::atomic::write_atomic;
use crate::config::TrainConfig;
use crate::data::Normalization;
use crate::metrics::EpochRecord;
use crate::optim::Sgd;
use crate::pth;
use crate::{Result, TrainError};

pub const FORMAT: &str = "octet-checkpoint/1";
/// The checkpoint a training run keeps in its directory, rewritten after every epoch.
pub const LAST_FILE: &str = "last.safetensors";
const META_KEY: &str = "octet";

/// What a checkpoint says about itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckpointMeta {
    pub format: String,
    pub model: String,
    pub in_channels: usize,
    pub classes: usize,
    pub dataset: String,
    pub normalization: Normalization,
    /// Epochs completed.
    pub epoch: usize,
    /// Optimiser steps completed.
    pub step: usize,
    pub config: TrainConfig,
    pub commit: String,
    pub history: Vec<EpochRecord>,
}

/// A loaded checkpoint: every tensor on the CPU, and the metadata if octet wrote it.
pub struct Checkpoint {
    pub path: PathBuf,
    pub tensors: HashMap<String, Tensor>,
    pub meta: Option<CheckpointMeta>,
}

/// Writes model tensors (weights and buffers), optional momentum and metadata atomically.
pub fn save(path: &Path, params: &Params, opt: Option<&Sgd>, meta: &CheckpointMeta) -> Result<()> {
    snapshot(params, opt, meta)?.write(path)
}

/// A checkpoint's contents copied to the host: what [`save`] writes, taken at one moment so
/// the writing can happen elsewhere (`saver.rs`) while training goes on.
pub struct Snapshot {
    tensors: Vec<(String, Tensor)>,
    meta_json: String,
}

/// Copies the parameters, buffers, momentum and metadata to the host.
pub fn snapshot(params: &Params, opt: Option<&Sgd>, meta: &CheckpointMeta) -> Result<Snapshot> {
    let mut tensors: Vec<(String, Tensor)> = Vec::new();
    for p in params.iter() {
        tensors.push((p.name.clone(), p.var.as_tensor().to_device(&Device::Cpu)?));
    }
    if let Some(opt) = opt {
        for (name, t) in opt.state() {
            tensors.push((name, t.to_device(&Device::Cpu)?));
        }
    }
    let meta_json = serde_json::to_string(meta).map_err(|e| TrainError::Config(e.to_string()))?;
    // JSON has no NaN or infinity (serde writes them as null): metadata that would not read
    // back is refused here rather than written into a checkpoint nothing can open.
    if let Err(e) = serde_json::from_str::<CheckpointMeta>(&meta_json) {
        return Err(TrainError::Config(format!(
            "refusing to write a checkpoint whose metadata would not read back ({e}): a setting \
             or a metric is NaN or infinite; the previous checkpoint is intact"
        )));
    }
    Ok(Snapshot { tensors, meta_json })
}

impl Snapshot {
    /// Serialises to safetensors and writes atomically; refuses (writing nothing) when a
    /// tensor holds NaN or infinity, which [`Checkpoint::validate`] would reject on reading.
    pub fn write(&self, path: &Path) -> Result<()> {
        let refuse = |reason: String| TrainError::Checkpoint {
            path: path.to_path_buf(),
            reason,
        };
        for (name, t) in &self.tensors {
            let scan = non_finite(t).map_err(|e| refuse(format!("tensor '{name}': {e}")))?;
            if let Some(bad) = scan {
                return Err(refuse(format!(
                    "not written: tensor '{name}' {bad} (training diverged); the previous \
                     checkpoint is intact: resume from it with a lower --lr"
                )));
            }
        }
        let info = HashMap::from([(META_KEY.to_string(), self.meta_json.clone())]);
        let tensors = self.tensors.iter().map(|(n, t)| (n.as_str(), t));
        let bytes =
            safetensors::serialize(tensors, Some(info)).map_err(|e| TrainError::Checkpoint {
                path: path.to_path_buf(),
                reason: e.to_string(),
            })?;
        write_atomic(path, &bytes)
    }
}

/// Reads a checkpoint written by octet, or a PyTorch state_dict: saved as safetensors
/// (`save_file(model.state_dict())`) or by `torch.save` (`.pth`, zip format; a checkpoint dict
/// holding the state_dict under `state_dict` or `model` too). The file's first bytes say which,
/// whatever its name. Names saved from a `DataParallel`/DDP model lose their `module.` prefix;
/// f16, bf16 and f64 tensors become f32; channels_last weights are read in their layout.
pub fn load(path: &Path) -> Result<Checkpoint> {
    let bad = |reason: String| TrainError::Checkpoint {
        path: path.to_path_buf(),
        reason,
    };
    let bytes = std::fs::read(path).map_err(|error| TrainError::Io {
        path: path.to_path_buf(),
        error,
    })?;
    let (tensors, meta) = match pth::Container::of(&bytes) {
        pth::Container::Zip => (pth::read(path).map_err(bad)?, None),
        pth::Container::LegacyPickle => {
            return Err(bad(
                "a PyTorch file in the legacy (pre-1.6, non-zip) format, which octet cannot \
                 read: load it in PyTorch and save it again with `torch.save(state_dict, path)` \
                 (zip format, the default since PyTorch 1.6)"
                    .into(),
            ))
        }
        pth::Container::Other => read_safetensors(&bytes).map_err(bad)?,
    };
    Ok(Checkpoint {
        path: path.to_path_buf(),
        tensors: as_state_dict(tensors).map_err(bad)?,
        meta,
    })
}

/// The tensors and octet metadata of a safetensors file.
fn read_safetensors(
    bytes: &[u8],
) -> std::result::Result<(HashMap<String, Tensor>, Option<CheckpointMeta>), String> {
    let (_, header) = safetensors::SafeTensors::read_metadata(bytes).map_err(|e| {
        format!("neither a readable safetensors file ({e}) nor a PyTorch .pth: is it truncated?")
    })?;
    let meta = match header.metadata().as_ref().and_then(|m| m.get(META_KEY)) {
        Some(json) => Some(serde_json::from_str::<CheckpointMeta>(json).map_err(|e| {
            let hint = if e.to_string().contains("invalid type: null, expected f64") {
                " (a number stored as null: an older octet wrote a NaN or infinite setting such \
                 as --gamma inf; such a checkpoint cannot be used: train again)"
            } else {
                ""
            };
            format!("bad octet metadata: {e}{hint}")
        })?),
        None => None,
    };
    let tensors = candle_core::safetensors::load_buffer(bytes, &Device::Cpu)
        .map_err(|e| format!("cannot read tensors: {e}"))?;
    Ok((tensors, meta))
}

/// Prefixes that wrappers add to every name of the model they wrap: `DataParallel` and DDP
/// (`module.`), `torch.compile` (`_orig_mod.`).
const WRAPPER_PREFIXES: [&str; 2] = ["module.", "_orig_mod."];

/// `tensors` under the model's own names, float tensors as f32 (what the models hold).
fn as_state_dict(
    mut tensors: HashMap<String, Tensor>,
) -> std::result::Result<HashMap<String, Tensor>, String> {
    while let Some(prefix) = WRAPPER_PREFIXES
        .into_iter()
        .find(|p| !tensors.is_empty() && tensors.keys().all(|n| n.starts_with(p)))
    {
        tensors = tensors
            .into_iter()
            .map(|(n, t)| (n[prefix.len()..].to_string(), t))
            .collect();
    }
    for (name, t) in tensors.iter_mut() {
        if t.dtype().is_float() && t.dtype() != DType::F32 {
            *t = t
                .to_dtype(DType::F32)
                .map_err(|e| format!("tensor '{name}': {e}"))?;
        }
    }
    Ok(tensors)
}

/// Reads a checkpoint for use (eval, export, `--resume`): [`load`], then [`Checkpoint::validate`].
pub fn load_checked(path: &Path) -> Result<Checkpoint> {
    let ck = load(path)?;
    ck.validate()?;
    Ok(ck)
}

/// Whether a tensor that is not a model parameter belongs in a checkpoint anyway: octet's
/// optimizer state, or PyTorch's batch-norm step counters (`num_batches_tracked`, which no
/// computation here reads).
fn carried(name: &str) -> bool {
    name.starts_with(crate::optim::MOMENTUM_PREFIX) || name.ends_with("num_batches_tracked")
}

/// `None` when every value of `t` is finite (integer tensors always are); else which value is
/// not and how many are not.
fn non_finite(t: &Tensor) -> candle_core::Result<Option<String>> {
    if !t.dtype().is_float() {
        return Ok(None);
    }
    let v = t
        .flatten_all()?
        .to_dtype(candle_core::DType::F32)?
        .to_vec1::<f32>()?;
    let mut bad = v.iter().enumerate().filter(|(_, x)| !x.is_finite());
    Ok(bad.next().map(|(i, x)| {
        format!(
            "holds {x} at element {i} ({} non-finite of {})",
            1 + bad.count(),
            v.len()
        )
    }))
}

impl Checkpoint {
    /// Everything a user of the checkpoint relies on, checked before any work: every float
    /// tensor finite; and, with octet metadata, a known architecture that the tensors and the
    /// run's configuration agree with, its input channels and classes those of the tensors,
    /// and a usable normalisation (one finite mean and positive std per channel).
    pub fn validate(&self) -> Result<()> {
        let bad = |reason: String| TrainError::Checkpoint {
            path: self.path.clone(),
            reason,
        };
        let mut names: Vec<&String> = self.tensors.keys().collect();
        names.sort();
        for name in names {
            let scan = non_finite(&self.tensors[name]);
            if let Some(what) = scan.map_err(|e| bad(format!("tensor '{name}': {e}")))? {
                return Err(bad(format!(
                    "tensor '{name}' {what}: the file is damaged or its training diverged; use \
                     an earlier checkpoint"
                )));
            }
        }
        let Some(m) = &self.meta else {
            return Ok(());
        };
        let model = Model::from_record(&m.model, m.config.net.as_ref())
            .map_err(|e| bad(format!("metadata model: {e}")))?;
        if m.config.model != m.model {
            return Err(bad(format!(
                "metadata says model {} but its training configuration says {}: the metadata \
                 was edited or damaged",
                m.model, m.config.model
            )));
        }
        let (c, classes) = self.io_shape(&model)?;
        if (c, classes) != (m.in_channels, m.classes) {
            return Err(bad(format!(
                "metadata says {} input channel(s) and {} classes, the tensors hold {c} and \
                 {classes}",
                m.in_channels, m.classes
            )));
        }
        m.normalization
            .check(c)
            .map_err(|e| bad(format!("metadata: {e}")))?;
        Ok(())
    }

    /// The architecture: from the metadata (a described network's description included), or
    /// else from `hint` (for PyTorch files).
    pub fn model(&self, hint: Option<&Model>) -> Result<Model> {
        match (&self.meta, hint) {
            (Some(m), _) => Ok(Model::from_record(&m.model, m.config.net.as_ref())?),
            (None, Some(k)) => Ok(k.clone()),
            (None, None) => Err(TrainError::Checkpoint {
                path: self.path.clone(),
                reason: format!(
                    "has no octet metadata (a PyTorch file?), so it does not say which \
                     architecture it holds: name it with --model ({})",
                    (ModelKind::all().iter())
                        .map(|k| k.name())
                        .collect::<Vec<_>>()
                        .join(" or ")
                ),
            }),
        }
    }

    /// Input channels and classes, read off the first and last layer's weights (their names
    /// from the network's description).
    pub fn io_shape(&self, kind: impl Into<Model>) -> Result<(usize, usize)> {
        let kind = kind.into();
        let spec = kind.spec();
        let (Some(stem), Some(classifier)) = (spec.stem(), spec.classifier()) else {
            return Err(TrainError::Config(format!(
                "{kind} has no layer with weights to read its input channels or no classifier"
            )));
        };
        let (first, last) = (format!("{stem}.weight"), format!("{classifier}.weight"));
        let dim = |name: &str, d: usize| -> Result<usize> {
            let t = self
                .tensors
                .get(name)
                .ok_or_else(|| TrainError::Checkpoint {
                    path: self.path.clone(),
                    reason: format!("tensor '{name}' is missing (is this a {kind} checkpoint?)"),
                })?;
            t.dims()
                .get(d)
                .copied()
                .ok_or_else(|| TrainError::Checkpoint {
                    path: self.path.clone(),
                    reason: format!(
                        "tensor '{name}' has shape {:?}, expected rank {}",
                        t.dims(),
                        d + 1
                    ),
                })
        };
        Ok((dim(&first, 1)?, dim(&last, 0)?))
    }

    /// Copies the model tensors into `params`; names the first missing, mis-shaped or
    /// unexpected one (leaving `params` unchanged).
    pub fn restore_model(&self, params: &Params) -> Result<()> {
        let bad = |reason: String| TrainError::Checkpoint {
            path: self.path.clone(),
            reason,
        };
        let mut unexpected: Vec<&String> = (self.tensors.keys())
            .filter(|n| params.get(n).is_none() && !carried(n))
            .collect();
        unexpected.sort();
        params.load(|n| self.tensors.get(n).cloned()).map_err(|e| {
            match (&e, unexpected.first()) {
                // Both missing and foreign names: most likely another naming of the layers.
                (octet_models::ModelError::MissingTensor { .. }, Some(other)) => bad(format!(
                    "{e}, which holds {} tensor(s) the model does not know, such as '{other}': \
                     names from another definition of the architecture?",
                    unexpected.len()
                )),
                _ => bad(e.to_string()),
            }
        })?;
        match unexpected.first() {
            Some(name) => Err(bad(format!(
                "tensor '{name}' is not part of the model ({} of {} tensors are not): is this \
                 a checkpoint of another architecture, or are its names not PyTorch state_dict \
                 names such as 'conv1.weight'?",
                unexpected.len(),
                self.tensors.len()
            ))),
            None => Ok(()),
        }
    }

    /// Checks, before any use, that the tensors are those of a `kind` model: every one there
    /// with its shape, none foreign. For the commands that read the tensors without building
    /// the model (export); the others get the same check from [`Checkpoint::restore_model`].
    pub fn check_model(&self, kind: impl Into<Model>) -> Result<()> {
        let kind = kind.into();
        let (c, classes) = self.io_shape(&kind)?;
        let model = octet_models::build(&kind, c, classes, 0, &Device::Cpu)?;
        self.restore_model(model.params())
    }

    pub fn restore_optimizer(&self, opt: &Sgd) -> Result<()> {
        opt.load_state(|n| self.tensors.get(n).cloned())
            .map_err(|reason| TrainError::Checkpoint {
                path: self.path.clone(),
                reason,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(t: &HashMap<String, Tensor>) -> Vec<&str> {
        let mut n: Vec<&str> = t.keys().map(String::as_str).collect();
        n.sort();
        n
    }

    #[test]
    fn wrapper_prefixes_go_and_floats_become_f32() -> Result<()> {
        let dev = Device::Cpu;
        let wrapped = HashMap::from([
            (
                "module._orig_mod.fc.weight".to_string(),
                Tensor::new(&[1.5f64, -2.0], &dev)?,
            ),
            (
                "module._orig_mod.bn.num_batches_tracked".to_string(),
                Tensor::new(7i64, &dev)?,
            ),
        ]);
        let t = as_state_dict(wrapped).map_err(TrainError::Config)?;
        assert_eq!(names(&t), ["bn.num_batches_tracked", "fc.weight"]);
        assert_eq!(t["fc.weight"].to_vec1::<f32>()?, [1.5, -2.0]);
        assert_eq!(t["bn.num_batches_tracked"].dtype(), DType::I64);

        // A prefix only some names have is a name, not a wrapper.
        let mixed = HashMap::from([
            ("module.a".to_string(), Tensor::new(1f32, &dev)?),
            ("b".to_string(), Tensor::new(1f32, &dev)?),
        ]);
        let t = as_state_dict(mixed).map_err(TrainError::Config)?;
        assert_eq!(names(&t), ["b", "module.a"]);
        Ok(())
    }
}
