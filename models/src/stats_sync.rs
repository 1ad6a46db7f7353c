//! Synchronised batch norm's one need from a data-parallel job: sums of batch statistics over
//! all ranks. The trainer installs an implementation (see `Params::set_stats_sync`); the models
//! know nothing of NCCL.

use std::sync::{Arc, RwLock};

use candle_core::{Result, Tensor};

/// Element-wise sum over ranks whose gradient is the sum over ranks of the gradients.
pub trait StatsSync: Send + Sync {
    fn sum(&self, t: &Tensor) -> Result<Tensor>;
}

/// Shared by every batch-norm layer of one model.
#[derive(Clone, Default)]
pub(crate) struct StatsSyncSlot(Arc<RwLock<Option<Arc<dyn StatsSync>>>>);

impl std::fmt::Debug for StatsSyncSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.get().is_some() {
            "StatsSync(on)"
        } else {
            "StatsSync(off)"
        })
    }
}

impl StatsSyncSlot {
    pub(crate) fn get(&self) -> Option<Arc<dyn StatsSync>> {
        self.0.read().ok().and_then(|s| s.clone())
    }

    pub(crate) fn set(&self, s: Option<Arc<dyn StatsSync>>) {
        if let Ok(mut slot) = self.0.write() {
            *slot = s;
        }
    }
}
