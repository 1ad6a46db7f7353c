//! The slot through which the trainer installs a [`StatsSync`] (see `Params::set_stats_sync`)
//! into every batch-norm layer of one model.

use std::sync::{Arc, RwLock};

use octet_train_ops::StatsSync;

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
