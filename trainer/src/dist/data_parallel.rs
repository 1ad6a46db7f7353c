//! Synchronous data-parallel SGD on top of a [`Collective`]: the same initial parameters on
//! every rank, gradients averaged over ranks in flat buckets issued in the same order
//! everywhere (last layers first, as PyTorch DDP does), and helpers for the epoch's sums.

use std::sync::Arc;

use candle_core::backprop::GradStore;
use candle_core::{Result, Tensor, Var};
use octet_models::{Param, Params, Role};
use serde::{Deserialize, Serialize};

use super::collective::Collective;
use super::BucketPlan;
use crate::choice::named_choice;

/// What batch-norm running statistics do across ranks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BnMode {
    /// Each rank keeps its own; rank 0's are the ones saved (PyTorch DDP without buffer
    /// broadcast).
    #[default]
    Local,
    /// Rank 0's are copied to every rank after each epoch, before evaluation.
    Broadcast,
    /// SyncBatchNorm: batch statistics summed over all ranks in the forward pass (and their
    /// gradients in backward), so every rank normalises with the global batch's statistics.
    Sync,
}

named_choice!(BnMode, "--bn", {
    Local => "local": "each rank its own statistics; rank 0's running ones are saved",
    Broadcast => "broadcast": "rank 0's running statistics copied to all ranks after every epoch",
    Sync => "sync": "SyncBatchNorm: statistics of the global batch, all-reduced in the forward pass",
});

pub struct DataParallel {
    coll: Arc<dyn Collective>,
    plan: BucketPlan,
    /// Trainable parameters in model order; bucket members index into it.
    vars: Vec<Var>,
}

impl DataParallel {
    pub fn new(coll: Arc<dyn Collective>, params: &Params, bucket_mb: f64) -> Self {
        let vars: Vec<Var> = params.trainable().map(|p| p.var.clone()).collect();
        let numels: Vec<usize> = vars.iter().map(|v| v.elem_count()).collect();
        let bytes = (bucket_mb * 1024.0 * 1024.0).max(4.0) as usize;
        Self {
            plan: BucketPlan::new(&numels, bytes, 4),
            coll,
            vars,
        }
    }

    pub fn collective(&self) -> &dyn Collective {
        self.coll.as_ref()
    }

    pub fn world(&self) -> usize {
        self.coll.world()
    }

    pub fn rank(&self) -> usize {
        self.coll.rank()
    }

    pub fn num_buckets(&self) -> usize {
        self.plan.buckets.len()
    }

    /// Rank 0's weights and buffers on every rank (and so identical models everywhere).
    pub fn broadcast_params(&self, params: &Params) -> Result<()> {
        self.broadcast_from_0(params.iter())
    }

    /// Rank 0's batch-norm running statistics on every rank.
    pub fn broadcast_buffers(&self, params: &Params) -> Result<()> {
        self.broadcast_from_0(params.iter().filter(|p| p.role == Role::Buffer))
    }

    fn broadcast_from_0<'a>(&self, params: impl Iterator<Item = &'a Param>) -> Result<()> {
        if self.world() == 1 {
            return Ok(());
        }
        for p in params {
            p.var.set(&self.coll.broadcast(p.var.as_tensor(), 0)?)?;
        }
        Ok(())
    }

    /// Replaces every gradient by its mean over ranks. A parameter without a gradient counts
    /// as zero, so every rank's buckets have the same layout.
    pub fn average_grads(&self, grads: &mut GradStore) -> Result<()> {
        let world = self.world();
        if world == 1 {
            return Ok(());
        }
        // Every bucket is packed first and all of them go out together: all-reduces start
        // after backward (candle's autograd has no per-gradient hook to overlap them with),
        // so one grouped launch moves them at the bandwidth of one large message.
        let flats = self
            .plan
            .buckets
            .iter()
            .map(|bucket| {
                let parts = bucket
                    .members
                    .iter()
                    .map(|m| {
                        let v = &self.vars[m.index];
                        match grads.get(v.as_tensor()) {
                            Some(g) => g.flatten_all(),
                            None => Tensor::zeros(m.numel, v.dtype(), v.device()),
                        }
                    })
                    .collect::<Result<Vec<_>>>()?;
                Tensor::cat(&parts, 0)
            })
            .collect::<Result<Vec<_>>>()?;
        let sums = self.coll.all_reduce_sum_many(&flats)?;
        for (bucket, sum) in self.plan.buckets.iter().zip(sums) {
            let mean = (sum / world as f64)?;
            for m in &bucket.members {
                let v = &self.vars[m.index];
                let g = mean.narrow(0, m.offset, m.numel)?.reshape(v.shape())?;
                grads.insert(v.as_tensor(), g);
            }
        }
        Ok(())
    }

    /// Element-wise sums over ranks of a few host numbers (epoch loss, counts, times).
    pub fn sum(&self, v: &[f64], dev: &candle_core::Device) -> Result<Vec<f64>> {
        if self.world() == 1 {
            return Ok(v.to_vec());
        }
        // f32 on the wire: counts stay exact below 2^24, sums of losses to ~1e-7.
        let t = Tensor::from_vec(
            v.iter().map(|&x| x as f32).collect::<Vec<_>>(),
            v.len(),
            dev,
        )?;
        let s = self.coll.all_reduce_sum(&t)?;
        crate::device::wait_idle(dev)?;
        let s = s.to_vec1::<f32>()?;
        Ok(s.into_iter().map(f64::from).collect())
    }

    /// Returns once every rank has reached it and this rank's device has finished its work.
    pub fn barrier(&self, dev: &candle_core::Device) -> Result<()> {
        self.sum(&[0.0], dev).map(|_| ())
    }

    /// Every rank's `v`, in rank order (an all-gather built from one all-reduce).
    pub fn gather(&self, v: &[f64], dev: &candle_core::Device) -> Result<Vec<Vec<f64>>> {
        let (w, r, n) = (self.world(), self.rank(), v.len());
        let mut all = vec![0f64; w * n];
        all[r * n..(r + 1) * n].copy_from_slice(v);
        let s = self.sum(&all, dev)?;
        Ok(s.chunks(n.max(1)).map(<[f64]>::to_vec).collect())
    }
}
