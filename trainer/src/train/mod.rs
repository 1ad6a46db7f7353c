//! The training loop on one device, or on one rank of a data-parallel job.
//!
//! `Trainer` (here) builds or resumes the model and runs epochs; each epoch (`epoch.rs`) is a
//! pass of steps (`step.rs`), its times (`timing.rs`) and the test-set evaluation (`eval.rs`).

mod epoch;
mod eval;
mod options;
mod progress;
mod step;
mod timing;

use std::sync::Arc;

use candle_core::Device;
use octet_models::{Model, Network, NetworkConfig};

use crate::checkpoint::{self, Checkpoint, CheckpointMeta};
use crate::data::{DataSplit, Dataset, Sampler};
use crate::dist::{BnMode, Collective, DataParallel, Solo};
use crate::metrics::EpochRecord;
use crate::optim::{LrPlan, Sgd};
use crate::saver::Saver;
use crate::{Normalizer, Result, TrainError};

pub use crate::config::{LrScaling, TrainConfig};
pub use options::{RunOptions, Summary};

/// A model, its optimiser and its data on one device.
pub struct Trainer {
    cfg: TrainConfig,
    arch: Model,
    model: Box<dyn Network>,
    opt: Sgd,
    plan: LrPlan,
    data: DataSplit,
    train: Arc<Dataset>,
    norm: Normalizer,
    dev: Device,
    dp: DataParallel,
    /// Epochs and optimiser steps done, this run and the ones it resumed.
    epoch: usize,
    step: usize,
    history: Vec<EpochRecord>,
    saver: Saver,
}

/// Where a run starts: at zero, or where its checkpoint left off.
#[derive(Default)]
struct Progress {
    epoch: usize,
    step: usize,
    history: Vec<EpochRecord>,
}

/// Every rank must continue from the same epoch and step, or they would run different numbers
/// of steps and the job would hang. Ranks that read different checkpoints (on several machines,
/// a `--out` that is not on a shared file system) all fail with the reason instead.
fn same_start_everywhere(coll: &dyn Collective, at: &Progress, dev: &Device) -> Result<()> {
    if coll.world() == 1 {
        return Ok(());
    }
    // f32 on purpose: every collective handles it; epochs and steps stay far below 2^24.
    let mine = [at.epoch as f32, at.step as f32];
    let root = coll.broadcast(&candle_core::Tensor::new(&mine[..], dev)?, 0)?;
    let root = root.to_vec1::<f32>()?;
    let differs = f32::from(root != mine);
    let ranks_differing = coll
        .all_reduce_sum(&candle_core::Tensor::new(&[differs][..], dev)?)?
        .to_vec1::<f32>()?[0];
    if ranks_differing > 0.0 {
        return Err(TrainError::Dist(format!(
            "{ranks_differing} rank(s) resumed from another point than rank 0 (this is rank {}: \
             epoch {} step {}, rank 0: epoch {} step {}): every rank must read the same \
             checkpoint; on several machines put --out and --resume on a file system all of \
             them share",
            coll.rank(),
            at.epoch,
            at.step,
            root[0],
            root[1]
        )));
    }
    Ok(())
}

impl Trainer {
    /// A fresh model, or the state of `resume` (model, buffers, momentum, epoch and step).
    pub fn new(
        cfg: TrainConfig,
        data: DataSplit,
        dev: &Device,
        resume: Option<&Checkpoint>,
    ) -> Result<Self> {
        Self::with_collective(cfg, data, dev, resume, Arc::new(Solo))
    }

    /// One rank of a data-parallel job over `coll`: every rank builds the same model, rank 0's
    /// parameters are broadcast, each rank trains on its share of every epoch.
    pub fn with_collective(
        cfg: TrainConfig,
        data: DataSplit,
        dev: &Device,
        resume: Option<&Checkpoint>,
        coll: Arc<dyn Collective>,
    ) -> Result<Self> {
        cfg.validate()?;
        let arch = cfg.model()?;
        let ds = &data.train;
        if ds.is_empty() {
            return Err(TrainError::Config("the training set is empty".into()));
        }
        let act = cfg.precision.activations();
        let net = NetworkConfig {
            activations: act,
            ops: cfg.ops,
        };
        let model = octet_models::build_with(&arch, ds.channels, ds.classes, cfg.seed, dev, &net)?;
        let opt = Sgd::new(model.params(), cfg.momentum, cfg.weight_decay)?;
        let world = coll.world();
        let per_rank = Sampler::new(ds.len(), true, cfg.seed)
            .with_rank(coll.rank(), world)?
            .num_samples();
        let steps_per_epoch = per_rank.div_ceil(cfg.batch_size).div_ceil(cfg.accumulate);
        let plan = LrPlan::new(
            cfg.effective_lr(world),
            cfg.schedule,
            cfg.warmup_epochs,
            steps_per_epoch,
            cfg.epochs,
        );
        let at = match resume {
            Some(ck) => restore(ck, &arch, model.as_ref(), &opt, steps_per_epoch)?,
            None => Progress::default(),
        };
        if cfg.bn == BnMode::Sync && world > 1 {
            let sync = Arc::new(crate::dist::sync_bn::RankSum::new(coll.clone()));
            model.params().set_stats_sync(Some(sync));
        }
        same_start_everywhere(coll.as_ref(), &at, dev)?;
        let dp = DataParallel::new(coll, model.params(), cfg.reduce());
        dp.broadcast_params(model.params())?;
        Ok(Self {
            norm: Normalizer::new(&data.norm, dev)?,
            train: Arc::new(data.train.clone()),
            cfg,
            arch,
            model,
            opt,
            plan,
            data,
            dev: dev.clone(),
            dp,
            epoch: at.epoch,
            step: at.step,
            history: at.history,
            saver: Saver::default(),
        })
    }

    /// Starts from the weights and batch-norm statistics of `ck` instead of random ones
    /// (`octet train --init`: fine-tuning a model trained elsewhere); the optimiser, epochs
    /// and schedule start afresh. Every tensor is checked against the model first.
    pub fn init_from(&mut self, ck: &Checkpoint) -> Result<()> {
        if self.epoch > 0 {
            return Err(TrainError::Config(
                "--init starts a new run from a model's weights; this run already has epochs: \
                 continue it with --resume alone"
                    .into(),
            ));
        }
        ck.validate()?;
        let held = ck.model(Some(&self.arch))?;
        if held != self.arch {
            return Err(TrainError::Config(format!(
                "--init {} holds a {held} model, the run trains {}: pass --model {held}",
                ck.path.display(),
                self.arch
            )));
        }
        ck.restore_model(self.model.params())?;
        // Every rank read the same file; rank 0's copy is what all train from, as at start.
        Ok(self.dp.broadcast_params(self.model.params())?)
    }

    /// Every finished epoch's record, the resumed run's included: what `metrics.csv` holds.
    pub fn history(&self) -> &[EpochRecord] {
        &self.history
    }

    pub fn model(&self) -> &dyn Network {
        self.model.as_ref()
    }

    pub fn epochs_done(&self) -> usize {
        self.epoch
    }

    /// Runs the remaining epochs, calling `on_epoch` after each one.
    pub fn run(
        &mut self,
        opts: &RunOptions,
        on_epoch: &mut dyn FnMut(&EpochRecord),
    ) -> Result<Summary> {
        let mut records = Vec::new();
        let mut ckpt = None;
        let mut ran = 0;
        while self.epoch < self.cfg.epochs && opts.stop_after.is_none_or(|n| ran < n) {
            let rec = self.train_epoch(opts)?;
            self.epoch += 1;
            ran += 1;
            self.history.push(rec.clone());
            if let Some(dir) = opts.out.as_ref().filter(|_| self.dp.rank() == 0) {
                // Written on a thread while the next epoch runs (`saver.rs`).
                let path = dir.join(checkpoint::LAST_FILE);
                let snap = checkpoint::snapshot(
                    self.model.params(),
                    Some(&self.opt),
                    &self.meta(&opts.commit),
                )?;
                self.saver.submit(
                    snap,
                    path.clone(),
                    self.history.clone(),
                    dir.join("metrics.csv"),
                )?;
                ckpt = Some(path);
            }
            on_epoch(&rec);
            records.push(rec);
        }
        self.saver.wait()?;
        Ok(Summary {
            records,
            checkpoint: ckpt,
            epochs_done: self.epoch,
        })
    }

    fn meta(&self, commit: &str) -> CheckpointMeta {
        CheckpointMeta {
            format: checkpoint::FORMAT.into(),
            model: self.arch.to_string(),
            in_channels: self.train.channels,
            classes: self.train.classes,
            dataset: self.data.name.clone(),
            normalization: self.data.norm.clone(),
            epoch: self.epoch,
            step: self.step,
            config: self.cfg.clone(),
            commit: commit.into(),
            history: self.history.clone(),
        }
    }
}

/// The model, momentum, epoch and history of `ck`, which must hold an `arch` model.
fn restore(
    ck: &Checkpoint,
    arch: &Model,
    model: &dyn Network,
    opt: &Sgd,
    steps_per_epoch: usize,
) -> Result<Progress> {
    ck.validate()?;
    if let Some(m) = &ck.meta {
        if ck.model(None).ok().as_ref() != Some(arch) {
            return Err(TrainError::Config(format!(
                "the configuration trains {arch}, the checkpoint {} holds {}",
                ck.path.display(),
                m.model
            )));
        }
    }
    ck.restore_model(model.params())?;
    ck.restore_optimizer(opt)?;
    Ok(match &ck.meta {
        // A different number of ranks changes the steps per epoch: restart the step count
        // where this epoch begins so the schedule continues at the same epoch.
        Some(m) => Progress {
            epoch: m.epoch,
            step: m.epoch * steps_per_epoch,
            history: m.history.clone(),
        },
        None => Progress::default(),
    })
}
