//! Synchronous data-parallel SGD on top of a [`Collective`]: the same initial parameters on
//! every rank, gradients averaged over ranks in flat buckets issued in the same order
//! everywhere (last layers first, as PyTorch DDP does), each bucket's all-reduce started
//! during backward as soon as its last gradient is done ([`Reducer`]), and helpers for the
//! epoch's sums.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

use candle_core::backprop::GradStore;
use candle_core::{DType, Result, Tensor, TensorId, Var};
use octet_models::{Param, Params, Role};
use serde::{Deserialize, Serialize};

use super::collective::{Collective, InFlight};
use super::{BucketPlan, FIRST_BUCKET_BYTES};
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

/// What goes over the wire for the gradient all-reduce.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GradCompress {
    /// f32 gradients summed in f32.
    #[default]
    None,
    /// Each bucket cast to bf16, summed in bf16, cast back and averaged in f32: half the
    /// bytes (PyTorch DDP's `bf16_compress_hook`).
    Bf16,
}

named_choice!(GradCompress, "--grad-compress", {
    None => "none": "f32 gradients all-reduced as they are",
    Bf16 => "bf16": "gradients all-reduced as bf16 (half the bytes), averaged back in f32",
});

/// Whether the last gradient buckets (the first layers', done at the end of backward) are
/// small: see [`BucketPlan::new`] and [`tail_pays`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BucketTail {
    /// Chosen from the second epoch's compute and all-reduce times ([`tail_pays`]).
    #[default]
    Auto,
    On,
    Off,
}

named_choice!(BucketTail, "--bucket-tail", {
    Auto => "auto": "small last buckets when backward outlasts the all-reduce (measured in the second epoch)",
    On => "on": "the last buckets grow from 1/16 of --bucket-mb, doubling: less all-reduce left after backward",
    Off => "off": "every bucket --bucket-mb but the first (PyTorch DDP's plan)",
});

/// Whether small last buckets pay, from one epoch's backward-and-step time and all-reduce
/// time (transfer and waiting for peers) on the slowest rank, both measured with DDP's plan,
/// whose last bucket holds `last_share` of the gradient. That bucket holds the first layers'
/// gradients, done only when backward ends, so its transfer is what nothing hides: with it a
/// step's all-reduce ends about `max(C, B + last_share·C)` after backward starts (C the
/// all-reduce, B backward, about two thirds of the compute), with small last buckets about
/// `max(1.1·C, B)`, the more, smaller transfers costing some 10% (4–18% measured). So the
/// tail pays when `B > (1.1 − last_share)·C`. (Two H200s as two nodes over sockets,
/// ResNet-18, `last_share` 0.56: f32 batch 512 per GPU went from 1.30–1.48 s to 1.02–1.27 s an
/// epoch with the tail; bf16 batch 512 and both precisions at batch 128 lost 4–18%.)
pub fn tail_pays(compute_s: f64, comm_s: f64, last_share: f64) -> bool {
    compute_s * 2.0 / 3.0 > (1.1 - last_share) * comm_s
}

/// How a run's gradients are all-reduced.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReduceConfig {
    /// Bucket cap, MiB (`--bucket-mb`).
    pub bucket_mb: f64,
    pub tail: BucketTail,
    /// Whether a bucket's all-reduce starts during backward, as soon as its last gradient
    /// is done (else every bucket goes out after backward, in one launch).
    pub overlap: bool,
    pub compress: GradCompress,
}

impl Default for ReduceConfig {
    fn default() -> Self {
        Self {
            bucket_mb: super::DEFAULT_BUCKET_BYTES as f64 / MIB,
            tail: BucketTail::Auto,
            overlap: true,
            compress: GradCompress::None,
        }
    }
}

const MIB: f64 = 1024.0 * 1024.0;

pub struct DataParallel {
    coll: Arc<dyn Collective>,
    cfg: ReduceConfig,
    plan: Plan,
    /// Whether the plan has small last buckets; `None` while `--bucket-tail auto` has not
    /// chosen yet (DDP's plan meanwhile).
    tail: Option<bool>,
    /// Epochs [`DataParallel::choose_tail`] has seen.
    epochs_seen: usize,
    /// Trainable parameters in model order; bucket members index into it.
    vars: Vec<Var>,
    /// Each trainable parameter's index in `vars`.
    index_of: HashMap<TensorId, usize>,
}

/// The bucket plan and, for each parameter, its bucket.
struct Plan {
    buckets: BucketPlan,
    bucket_of: Vec<Option<usize>>,
}

impl Plan {
    fn new(numels: &[usize], cfg: &ReduceConfig, tail: bool) -> Plan {
        let cap = (cfg.bucket_mb * MIB).max(4.0) as usize;
        let tail_bytes = if tail { cap / 16 } else { 0 };
        let buckets = BucketPlan::new(numels, FIRST_BUCKET_BYTES, cap, tail_bytes, 4);
        Plan {
            bucket_of: buckets.bucket_of(numels.len()),
            buckets,
        }
    }
}

impl DataParallel {
    pub fn new(coll: Arc<dyn Collective>, params: &Params, cfg: ReduceConfig) -> Self {
        let vars: Vec<Var> = params.trainable().map(|p| p.var.clone()).collect();
        let numels: Vec<usize> = vars.iter().map(|v| v.elem_count()).collect();
        let index_of = vars.iter().enumerate().map(|(i, v)| (v.id(), i)).collect();
        let tail = match cfg.tail {
            BucketTail::Auto => None,
            BucketTail::On => Some(true),
            BucketTail::Off => Some(false),
        };
        Self {
            plan: Plan::new(&numels, &cfg, tail == Some(true)),
            tail,
            epochs_seen: 0,
            coll,
            cfg,
            vars,
            index_of,
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
        self.plan.buckets.buckets.len()
    }

    /// With `--bucket-tail auto`, after each epoch: after this invocation's second, chooses
    /// the plan from that epoch's compute and all-reduce seconds ([`tail_pays`]) and returns
    /// the choice; `None` otherwise (the first epoch's figures hold the warm-up: cuDNN's
    /// plans, NCCL's connections, and ran at 1.5–14× the second's compute on two H200s), when
    /// the flag chose, or with one rank. Pass figures every rank has alike (summed or
    /// gathered), so every rank makes the same plan.
    pub fn choose_tail(&mut self, compute_s: f64, comm_s: f64) -> Option<bool> {
        self.epochs_seen += 1;
        if self.tail.is_some() || self.world() == 1 || self.epochs_seen < 2 {
            return None;
        }
        let buckets = &self.plan.buckets;
        let last = buckets.buckets.last().map_or(0, |b| b.numel);
        let last_share = last as f64 / buckets.total_numel().max(1) as f64;
        let tail = tail_pays(compute_s, comm_s, last_share);
        self.tail = Some(tail);
        if tail {
            let numels: Vec<usize> = self.vars.iter().map(|v| v.elem_count()).collect();
            self.plan = Plan::new(&numels, &self.cfg, true);
        }
        Some(tail)
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

    /// Whether a step's all-reduce should start during its backward pass
    /// ([`DataParallel::reducer`] as candle's gradient hook).
    pub fn overlaps(&self) -> bool {
        self.cfg.overlap && self.world() > 1
    }

    /// Replaces every gradient by its mean over ranks, all buckets after backward. A
    /// parameter without a gradient counts as zero, so every rank's buckets have the same
    /// layout.
    pub fn average_grads(&self, grads: &mut GradStore) -> Result<()> {
        if self.world() == 1 {
            return Ok(());
        }
        self.reducer(None).finish(grads)
    }

    /// The all-reduce of one step's gradients, fed gradient by gradient
    /// ([`Reducer::ready`], candle's backward hook) and ended by [`Reducer::finish`].
    /// `earlier` holds the gradients of the step's earlier micro-batches, added to this one's
    /// before they go out.
    pub fn reducer(&self, earlier: Option<GradStore>) -> Reducer<'_> {
        Reducer {
            dp: self,
            grads: vec![None; self.vars.len()],
            reported: vec![false; self.vars.len()],
            schedule: Schedule::new(&self.plan.buckets),
            inflight: Vec::new(),
            earlier,
        }
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

/// When each bucket may go out: in plan order only, so every rank issues the same
/// collectives in the same order whatever order its gradients finish in; a bucket goes out
/// once all its members are done and every bucket before it has gone.
#[derive(Debug, Clone)]
pub struct Schedule {
    /// Members of each bucket not yet done.
    missing: Vec<usize>,
    /// The first bucket not yet issued.
    next: usize,
}

impl Schedule {
    pub fn new(plan: &BucketPlan) -> Self {
        Self {
            missing: plan.buckets.iter().map(|b| b.members.len()).collect(),
            next: 0,
        }
    }

    /// One member of `bucket` is done; returns the buckets that may go out now.
    pub fn done(&mut self, bucket: usize) -> Range<usize> {
        if let Some(m) = self.missing.get_mut(bucket) {
            *m = m.saturating_sub(1);
        }
        let from = self.next;
        while self.missing.get(self.next) == Some(&0) {
            self.next += 1;
        }
        from..self.next
    }

    /// Backward is over: every bucket not yet issued, whatever it still misses.
    pub fn rest(&mut self) -> Range<usize> {
        let from = self.next;
        self.next = self.missing.len();
        from..self.next
    }
}

/// One step's gradient all-reduce: gradients arrive one by one from candle's backward hook
/// ([`Reducer::ready`]); each bucket is packed and its all-reduce started as soon as the
/// [`Schedule`] lets it; [`Reducer::finish`] sends the rest and puts the means in the store.
pub struct Reducer<'a> {
    dp: &'a DataParallel,
    /// The finished gradients not yet packed, by parameter index.
    grads: Vec<Option<Tensor>>,
    /// Which parameters' gradients the hook has reported.
    reported: Vec<bool>,
    schedule: Schedule,
    /// The buckets sent so far, with their collectives.
    inflight: Vec<(Range<usize>, Box<dyn InFlight>)>,
    earlier: Option<GradStore>,
}

impl Reducer<'_> {
    /// Backward's hook: `var`'s gradient `grad` is final. Tensors that are not trainable
    /// parameters of the model are ignored.
    pub fn ready(&mut self, var: &Tensor, grad: &Tensor) -> Result<()> {
        let Some(&i) = self.dp.index_of.get(&var.id()) else {
            return Ok(());
        };
        if std::mem::replace(&mut self.reported[i], true) {
            return Ok(());
        }
        self.grads[i] = Some(self.with_earlier(i, Some(grad.clone()))?);
        if let Some(b) = self.dp.plan.bucket_of[i] {
            let go = self.schedule.done(b);
            if !go.is_empty() {
                self.send(go, None)?;
            }
        }
        Ok(())
    }

    /// This micro-batch's gradient of parameter `i` plus the earlier micro-batches'.
    fn with_earlier(&self, i: usize, grad: Option<Tensor>) -> Result<Tensor> {
        let v = &self.dp.vars[i];
        let before = self.earlier.as_ref().and_then(|e| e.get(v.as_tensor()));
        match (grad, before) {
            (Some(g), Some(e)) => e + g,
            (Some(g), None) => Ok(g),
            (None, Some(e)) => Ok(e.clone()),
            (None, None) => Tensor::zeros(v.shape(), v.dtype(), v.device()),
        }
    }

    /// Packs buckets `range` into flat buffers and starts their all-reduce (one launch).
    /// Gradients the hook did not report come from `store`, or count as zero.
    fn send(&mut self, range: Range<usize>, store: Option<&GradStore>) -> Result<()> {
        let mut flats = Vec::with_capacity(range.len());
        for b in range.clone() {
            let bucket = &self.dp.plan.buckets.buckets[b];
            let mut parts = Vec::with_capacity(bucket.members.len());
            for m in &bucket.members {
                let g = match self.grads[m.index].take() {
                    Some(g) => g,
                    None => {
                        let v = &self.dp.vars[m.index];
                        let g = store.and_then(|s| s.get(v.as_tensor())).cloned();
                        self.with_earlier(m.index, g)?
                    }
                };
                parts.push(g.flatten_all()?);
            }
            let flat = Tensor::cat(&parts, 0)?;
            flats.push(match self.dp.cfg.compress {
                GradCompress::None => flat,
                GradCompress::Bf16 => flat.to_dtype(DType::BF16)?,
            });
        }
        let started = self.dp.coll.all_reduce_start(&flats)?;
        self.inflight.push((range, started));
        Ok(())
    }

    /// Sends the buckets still held back, waits for every bucket's sum and replaces each
    /// gradient in `grads` by its mean over ranks.
    pub fn finish(mut self, grads: &mut GradStore) -> Result<()> {
        let rest = self.schedule.rest();
        if !rest.is_empty() {
            self.send(rest, Some(grads))?;
        }
        let world = self.dp.world() as f64;
        for (range, started) in std::mem::take(&mut self.inflight) {
            for (b, sum) in range.zip(started.wait()?) {
                let mean = (sum.to_dtype(DType::F32)? / world)?;
                for m in &self.dp.plan.buckets.buckets[b].members {
                    let v = &self.dp.vars[m.index];
                    let g = mean.narrow(0, m.offset, m.numel)?.reshape(v.shape())?;
                    grads.insert(v.as_tensor(), g);
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;
    use proptest::prelude::*;

    proptest! {
        /// Whatever order the gradients finish in, buckets go out in plan order, each once,
        /// none before all its members are done (but at the end of backward).
        #[test]
        fn buckets_go_out_in_plan_order(numels in proptest::collection::vec(1usize..300, 1..40),
                                        cap in 1usize..2000, first in 1usize..2000,
                                        tail in 0usize..500,
                                        done in proptest::collection::vec(any::<prop::sample::Index>(), 0..40)) {
            let plan = BucketPlan::new(&numels, first, cap, tail, 4);
            let bucket_of = plan.bucket_of(numels.len());
            let mut sched = Schedule::new(&plan);
            let mut left: Vec<usize> = (0..numels.len()).collect();
            let mut finished = vec![false; numels.len()];
            let mut issued = Vec::new();
            for pick in done {
                if left.is_empty() {
                    break;
                }
                let i = left.remove(pick.index(left.len()));
                finished[i] = true;
                for b in sched.done(bucket_of[i].unwrap()) {
                    let members = &plan.buckets[b].members;
                    prop_assert!(members.iter().all(|m| finished[m.index]), "bucket {} early", b);
                    issued.push(b);
                }
            }
            issued.extend(sched.rest());
            prop_assert_eq!(issued, (0..plan.buckets.len()).collect::<Vec<_>>());
            prop_assert!(sched.rest().is_empty());
        }
    }

    #[test]
    fn small_last_buckets_only_where_backward_outlasts_the_all_reduce() {
        // Per step on two H200s over sockets (ResNet-18, last bucket 56%): f32 batch 512
        // computes ~20 ms against an 11.5–17 ms all-reduce; bf16 batch 512 ~8.7 ms; f32
        // batch 128 ~7.3 ms against ~13.7 ms.
        assert!(tail_pays(20.0, 11.5, 0.56));
        assert!(tail_pays(20.0, 17.0, 0.56));
        assert!(!tail_pays(8.7, 11.5, 0.56));
        assert!(!tail_pays(7.3, 13.7, 0.56));
        // One bucket in all: its transfer is all exposed whatever the compute.
        assert!(tail_pays(1.0, 1.0, 1.0));
        assert!(!tail_pays(0.0, 1.0, 0.56));
    }

    /// candle's hook reports each variable once, with the gradient backward ends up with
    /// (the sum of both uses of a variable used twice), before variables used earlier.
    #[test]
    fn the_hook_sees_each_final_gradient_once() -> Result<()> {
        let dev = Device::Cpu;
        let w1 = Var::new(&[1f32, 2.0], &dev)?;
        let w2 = Var::new(&[3f32, -1.0], &dev)?;
        let x = Tensor::new(&[0.5f32, 4.0], &dev)?;
        // w1 feeds two branches, w2 only the later one.
        let h = (w1.as_tensor() * &x)?;
        let y = ((&h * w2.as_tensor())? + (&h * w1.as_tensor())?)?.sum_all()?;
        let mut seen: Vec<(TensorId, Vec<f32>)> = Vec::new();
        let mut ready = |v: &Tensor, g: &Tensor| -> Result<()> {
            seen.push((v.id(), g.to_vec1::<f32>()?));
            Ok(())
        };
        let grads = y.backward_hooked(None, Some(&mut ready))?;
        assert_eq!(seen.len(), 2);
        assert_eq!(seen[0].0, w2.id());
        assert_eq!(seen[1].0, w1.id());
        for (id, g) in &seen {
            let stored = grads.get_id(*id).unwrap().to_vec1::<f32>()?;
            assert_eq!(g, &stored);
        }
        // y = Σ w1·x·w2 + w1²·x, so dy/dw1 = x·w2 + 2·w1·x.
        assert_eq!(
            seen[1].1,
            vec![0.5 * 3.0 + 2.0 * 0.5, -4.0 + 2.0 * 2.0 * 4.0]
        );
        Ok(())
    }
}
