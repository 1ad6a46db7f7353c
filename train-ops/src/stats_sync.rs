//! Synchronised batch norm's one need from a data-parallel job: sums of batch statistics over
//! all ranks. The trainer implements it over NCCL; the ops know nothing of NCCL.

use candle_core::{Result, Tensor};

/// Element-wise sum over ranks whose gradient is the sum over ranks of the gradients.
pub trait StatsSync: Send + Sync {
    fn sum(&self, t: &Tensor) -> Result<Tensor>;
}
