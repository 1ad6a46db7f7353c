use std::sync::Arc;

use candle_core::{Device, Tensor, Var};

use crate::stats_sync::StatsSyncSlot;
use crate::StatsSync;

use crate::{ModelError, Result};

/// Whether the optimiser trains a tensor or the model only carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Weight,
    /// Batch-norm running statistics: updated in the forward pass, never by the optimiser.
    Buffer,
}

/// One named tensor of a model.
#[derive(Debug, Clone)]
pub struct Param {
    pub name: String,
    pub var: Var,
    pub role: Role,
}

/// The named tensors of a model in registration order (the order of PyTorch's `state_dict`).
#[derive(Debug, Clone)]
pub struct Params {
    list: Vec<Param>,
    device: Device,
    stats_sync: StatsSyncSlot,
}

impl Params {
    pub fn new(device: &Device) -> Self {
        Self {
            list: Vec::new(),
            device: device.clone(),
            stats_sync: StatsSyncSlot::default(),
        }
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Makes every batch-norm layer of the model normalise with statistics summed over ranks
    /// (synchronised batch norm); `None` returns to per-rank statistics.
    pub fn set_stats_sync(&self, sync: Option<Arc<dyn StatsSync>>) {
        self.stats_sync.set(sync);
    }

    pub(crate) fn stats_sync_slot(&self) -> StatsSyncSlot {
        self.stats_sync.clone()
    }

    /// Registers `value` under `name` and returns the variable the layer computes with.
    pub(crate) fn add(&mut self, name: String, value: Tensor, role: Role) -> Result<Var> {
        let var = Var::from_tensor(&value)?;
        self.list.push(Param {
            name,
            var: var.clone(),
            role,
        });
        Ok(var)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Param> {
        self.list.iter()
    }

    pub fn trainable(&self) -> impl Iterator<Item = &Param> {
        self.list.iter().filter(|p| p.role == Role::Weight)
    }

    pub fn get(&self, name: &str) -> Option<&Param> {
        self.list.iter().find(|p| p.name == name)
    }

    /// Number of trained scalars (what PyTorch's `sum(p.numel() for p in parameters())` counts).
    pub fn num_trainable(&self) -> usize {
        self.trainable().map(|p| p.var.elem_count()).sum()
    }

    /// Overwrites every tensor with the one `lookup` returns for its name. All tensors are
    /// checked before any is written, so a bad checkpoint leaves the model unchanged.
    pub fn load(&self, lookup: impl Fn(&str) -> Option<Tensor>) -> Result<()> {
        let mut staged = Vec::with_capacity(self.list.len());
        for p in &self.list {
            let t = lookup(&p.name).ok_or_else(|| ModelError::MissingTensor {
                name: p.name.clone(),
            })?;
            if t.shape() != p.var.shape() {
                return Err(ModelError::ShapeMismatch {
                    name: p.name.clone(),
                    expected: p.var.shape().clone(),
                    found: t.shape().clone(),
                });
            }
            let t = t
                .to_dtype(p.var.dtype())
                .and_then(|t| t.to_device(&self.device))
                .map_err(|source| ModelError::Tensor {
                    name: p.name.clone(),
                    source,
                })?;
            staged.push(t);
        }
        for (p, t) in self.list.iter().zip(staged) {
            p.var.set(&t)?;
        }
        Ok(())
    }
}
