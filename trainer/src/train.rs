//! The training loop on one device.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use candle_core::backprop::GradStore;
use candle_core::{DType, Device, Tensor};
use indicatif::{ProgressBar, ProgressStyle};
use octet_models::{ModelKind, Network, NetworkConfig, OpsConfig};
use serde::{Deserialize, Serialize};

use crate::checkpoint::{self, Checkpoint, CheckpointMeta};
use crate::data::{Augment, DataSplit, Loader, Sampler};
use crate::device::sync;
use crate::dist::data_parallel::accumulate;
use crate::dist::{BnMode, Collective, DataParallel, Solo};
use crate::eval::evaluate_shard;
use crate::metrics::{EpochRecord, EpochTimes, RankTimes};
use crate::optim::{LrPlan, Schedule, Sgd};
use crate::saver::Saver;
use crate::step_clock::{Phase, StepClock};
use crate::upload::Uploader;
use crate::{Normalizer, Precision, Result, TrainError};

/// Everything that decides the result of a run. Stored in every checkpoint, so `--resume`
/// continues exactly the run that was interrupted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainConfig {
    pub model: String,
    pub data: String,
    pub epochs: usize,
    pub batch_size: usize,
    pub eval_batch_size: usize,
    pub lr: f64,
    pub momentum: f64,
    pub weight_decay: f64,
    pub schedule: Schedule,
    pub warmup_epochs: f64,
    pub seed: u64,
    pub augment: bool,
    /// Evaluate the test set after every epoch (otherwise after the last only).
    pub eval_every_epoch: bool,
    /// Micro-batches whose gradients add up before one synchronisation and step.
    #[serde(default = "one")]
    pub accumulate: usize,
    /// Gradient all-reduce bucket size, MiB.
    #[serde(default = "default_bucket_mb")]
    pub bucket_mb: f64,
    #[serde(default)]
    pub bn: BnMode,
    /// `linear`: the learning rate is `lr` × global batch / `base_batch` (Goyal et al.).
    #[serde(default)]
    pub lr_scaling: LrScaling,
    #[serde(default = "default_base_batch")]
    pub base_batch: usize,
    /// f32, or bf16 channels-last activations (checkpoints from before this field are f32).
    #[serde(default)]
    pub precision: Precision,
    /// Which training ops run (fast CUDA ops, TF32): this invocation's flags, not stored in
    /// checkpoints.
    #[serde(skip)]
    pub ops: OpsConfig,
}

fn one() -> usize {
    1
}
fn default_bucket_mb() -> f64 {
    25.0
}
fn default_base_batch() -> usize {
    128
}

/// How the learning rate follows the global batch (batch per rank × ranks × accumulation).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LrScaling {
    #[default]
    None,
    Linear,
}

impl std::str::FromStr for LrScaling {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "none" => Ok(Self::None),
            "linear" => Ok(Self::Linear),
            _ => Err(format!("--lr-scaling {s}: expected none or linear")),
        }
    }
}

impl TrainConfig {
    /// The global batch of one optimiser step on `world` ranks.
    pub fn global_batch(&self, world: usize) -> usize {
        self.batch_size * world * self.accumulate
    }

    /// The peak learning rate on `world` ranks.
    pub fn effective_lr(&self, world: usize) -> f64 {
        match self.lr_scaling {
            LrScaling::None => self.lr,
            LrScaling::Linear => {
                crate::optim::scaled_lr(self.lr, self.global_batch(world), self.base_batch)
            }
        }
    }
}

impl TrainConfig {
    /// The lab recipe: SGD lr 0.1, momentum 0.9, weight decay 5e-4, cosine, augmentation on.
    pub fn new(model: ModelKind, data: &str) -> Self {
        Self {
            model: model.to_string(),
            data: data.to_string(),
            epochs: 15,
            batch_size: 128,
            eval_batch_size: 1000,
            lr: 0.1,
            momentum: 0.9,
            weight_decay: 5e-4,
            schedule: Schedule::Cosine,
            warmup_epochs: 0.0,
            seed: 0,
            augment: true,
            eval_every_epoch: true,
            accumulate: 1,
            bucket_mb: default_bucket_mb(),
            bn: BnMode::Local,
            lr_scaling: LrScaling::None,
            base_batch: default_base_batch(),
            precision: Precision::F32,
            ops: OpsConfig::default(),
        }
    }

    /// Every setting usable, and storable: checked before any work (a NaN or infinite value
    /// would also be written into the checkpoint as JSON null, which nothing can read back).
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(TrainError::Config(m));
        if self.epochs == 0 {
            return bad("--epochs must be at least 1".into());
        }
        if self.batch_size == 0 || self.eval_batch_size == 0 || self.base_batch == 0 {
            return bad("batch sizes must be at least 1".into());
        }
        if self.accumulate == 0 {
            return bad("--accumulate must be at least 1".into());
        }
        if !(self.bucket_mb.is_finite() && self.bucket_mb > 0.0) {
            return bad(format!(
                "--bucket-mb must be positive, got {}",
                self.bucket_mb
            ));
        }
        if !(self.lr.is_finite() && self.lr > 0.0) {
            return bad(format!("--lr must be a positive number, got {}", self.lr));
        }
        let non_negative = |v: f64| v.is_finite() && v >= 0.0;
        if !(0.0..1.0).contains(&self.momentum)
            || !non_negative(self.weight_decay)
            || !non_negative(self.warmup_epochs)
        {
            return bad("momentum must be in [0, 1); weight decay and warm-up must be ≥ 0".into());
        }
        if let Schedule::Step { every, gamma } = self.schedule {
            if every == 0 {
                return bad("--step-every must be at least 1 (epochs between rate steps)".into());
            }
            if !(gamma.is_finite() && gamma > 0.0) {
                return bad(format!(
                    "--gamma must be a finite number above 0 (0.1 divides the rate by 10 every \
                     --step-every epochs), got {gamma}"
                ));
            }
            let steps = i32::try_from(self.epochs.saturating_sub(1) / every).unwrap_or(i32::MAX);
            let last = self.lr * gamma.powi(steps);
            if !last.is_finite() {
                return bad(format!(
                    "--gamma {gamma} every {every} epoch(s) over {} epochs takes the learning \
                     rate to {last}: use a --gamma at most 1",
                    self.epochs
                ));
            }
        }
        Ok(())
    }
}

/// How to run, as opposed to what to compute.
pub struct RunOptions {
    pub device: Device,
    /// Directory for `last.safetensors` and `metrics.csv`; `None` writes nothing (benchmarks).
    pub out: Option<PathBuf>,
    /// Stop after this many epochs of this invocation (resume later with `--resume`).
    pub stop_after: Option<usize>,
    pub progress: bool,
    /// Commit recorded in checkpoints.
    pub commit: String,
    /// Batches the loader thread prepares ahead.
    pub prefetch: usize,
    /// Directory for per-step timelines of every rank and epoch (`timeline.rs`).
    pub timeline: Option<PathBuf>,
}

impl RunOptions {
    pub fn new(device: Device) -> Self {
        Self {
            device,
            out: None,
            stop_after: None,
            progress: false,
            commit: "unknown".into(),
            prefetch: 4,
            timeline: None,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Summary {
    pub records: Vec<EpochRecord>,
    pub checkpoint: Option<PathBuf>,
    /// Epochs completed in total (this run and the ones it resumed).
    pub epochs_done: usize,
}

/// A model, its optimiser and its data on one device.
pub struct Trainer {
    cfg: TrainConfig,
    kind: ModelKind,
    model: Box<dyn Network>,
    opt: Sgd,
    plan: LrPlan,
    data: DataSplit,
    train: Arc<crate::data::Dataset>,
    norm: Normalizer,
    dev: Device,
    dp: DataParallel,
    epoch: usize,
    step: usize,
    history: Vec<EpochRecord>,
    saver: Saver,
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
        let kind: ModelKind = cfg.model.parse()?;
        let ds = &data.train;
        if ds.is_empty() {
            return Err(TrainError::Config("the training set is empty".into()));
        }
        let act = cfg.precision.activations();
        let net = NetworkConfig {
            activations: act,
            ops: cfg.ops,
        };
        let model = octet_models::build_with(kind, ds.channels, ds.classes, cfg.seed, dev, &net)?;
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
        let (mut epoch, mut step, mut history) = (0, 0, Vec::new());
        if let Some(ck) = resume {
            ck.validate()?;
            if let Some(m) = &ck.meta {
                if m.model.parse::<ModelKind>().ok() != Some(kind) {
                    return Err(TrainError::Config(format!(
                        "the configuration trains {kind}, the checkpoint {} holds {}",
                        ck.path.display(),
                        m.model
                    )));
                }
            }
            ck.restore_model(model.params())?;
            ck.restore_optimizer(&opt)?;
            if let Some(m) = &ck.meta {
                (epoch, history) = (m.epoch, m.history.clone());
                // A different number of ranks changes the steps per epoch: restart the step
                // count where this epoch begins so the schedule continues at the same epoch.
                step = epoch * steps_per_epoch;
            }
        }
        if cfg.bn == BnMode::Sync && world > 1 {
            let sync = Arc::new(crate::dist::sync_bn::RankSum::new(coll.clone()));
            model.params().set_stats_sync(Some(sync));
        }
        let dp = DataParallel::new(coll, model.params(), cfg.bucket_mb);
        dp.broadcast_params(model.params())?;
        Ok(Self {
            norm: Normalizer::new(&data.norm, dev)?,
            train: Arc::new(data.train.clone()),
            cfg,
            kind,
            model,
            opt,
            plan,
            data,
            dev: dev.clone(),
            dp,
            epoch,
            step,
            history,
            saver: Saver::default(),
        })
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
                let path = dir.join("last.safetensors");
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
            model: self.kind.to_string(),
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

    fn train_epoch(&mut self, opts: &RunOptions) -> Result<EpochRecord> {
        let cfg = &self.cfg;
        let ds = &self.train;
        let (rank, world) = (self.dp.rank(), self.dp.world());
        let sampler = Sampler::new(ds.len(), true, cfg.seed).with_rank(rank, world)?;
        let augment = cfg.augment.then(Augment::standard);
        let mut loader = Loader::new(
            ds.clone(),
            cfg.batch_size,
            &sampler,
            self.epoch as u64,
            augment,
            cfg.seed,
            opts.prefetch,
        );
        let batches = loader.num_batches();
        let bar = progress_bar(
            opts.progress && rank == 0,
            batches as u64,
            self.epoch + 1,
            cfg.epochs,
        );
        let vars: Vec<candle_core::Var> = self
            .model
            .params()
            .trainable()
            .map(|p| p.var.clone())
            .collect();
        // Every rank starts the epoch's clock together, as the PyTorch peer does
        // (`synchronize(); barrier()`): whatever rank 0 did after the last epoch (copying the
        // checkpoint to the host, evaluation) belongs to no epoch.
        self.dp.barrier(&self.dev)?;
        let _ = self.dp.collective().take_stats()?;
        let mut times = EpochTimes::default();
        let mut clock = match opts.timeline {
            Some(_) => StepClock::with_timeline(&self.dev)?,
            None => StepClock::new(&self.dev),
        };
        let mut uploader = Uploader::new();
        let mut tally = Tally::default();
        let mut lr = self.plan.lr(self.step);
        let mut pending: Option<GradStore> = None;
        let mut micro = 0;
        let start = Instant::now();
        for index in 0.. {
            let t = Instant::now();
            let Some(batch) = loader.next() else { break };
            times.data_s += t.elapsed().as_secs_f64();

            // Nothing below waits for the device: steps queue up behind each other, and the
            // loss is read back every few steps (`Tally`), so the GPU never idles while the
            // host prepares the next launch.
            clock.start()?;
            let n = batch.len;
            let shape = (n, ds.channels, ds.height, ds.width);
            let (x, y) = uploader
                .upload(batch.images, batch.labels, shape, &self.dev)
                .map_err(|e| TrainError::from_step(e, cfg.batch_size))?;
            clock.end(Phase::H2d)?;

            micro += 1;
            let last_micro = micro == cfg.accumulate || index + 1 == batches;
            let (grads, loss, ok) = forward_backward(
                self.model.as_ref(),
                &self.norm,
                &x,
                &y,
                1.0 / cfg.accumulate as f64,
            )
            .map_err(|e| TrainError::from_step(e, cfg.batch_size))?;
            let mut grads = match pending.take() {
                Some(mut acc) => {
                    accumulate(&mut acc, grads, &vars)?;
                    acc
                }
                None => grads,
            };
            if last_micro {
                lr = self.plan.lr(self.step);
                let mut update = || -> candle_core::Result<()> {
                    self.dp.average_grads(&mut grads)?;
                    self.opt.step(&grads, lr)
                };
                update().map_err(|e| TrainError::from_step(e, cfg.batch_size))?;
                self.step += 1;
                micro = 0;
            } else {
                pending = Some(grads);
            }
            clock.end(Phase::Compute)?;
            tally.push(loss, ok, n, self.step);
            if tally.queued() >= READBACK_STEPS || index + 1 == batches {
                if let Err(e) = tally.read() {
                    bar.abandon();
                    return Err(e.at(self.epoch + 1, cfg.batch_size));
                }
                bar.set_position(index as u64 + 1);
                bar.set_message(format!(
                    "loss {:.4} acc {:.2}%",
                    tally.loss_sum / tally.seen.max(1) as f64,
                    100.0 * tally.correct as f64 / tally.seen.max(1) as f64
                ));
            }
        }
        sync(&self.dev)?;
        times.train_s = start.elapsed().as_secs_f64();
        times.h2d_s = clock.seconds(Phase::H2d)?;
        times.compute_s = clock.seconds(Phase::Compute)?;
        bar.finish_and_clear();
        let (loss_sum, correct, seen) = (tally.loss_sum, tally.correct, tally.seen);

        if let (Some(dir), Some(steps)) = (&opts.timeline, clock.timeline()?) {
            let comm = self.dp.collective().timeline()?;
            crate::timeline::write(dir, rank, self.epoch + 1, &steps, &comm)?;
        }
        // Device-timed all-reduce traffic of this rank; the compute phase above includes it.
        let comm = self.dp.collective().take_stats()?;
        times.comm_s = comm.seconds;
        times.comm_wait_s = comm.wait_s;
        times.compute_s = (times.compute_s - comm.seconds - comm.wait_s).max(0.0);
        times.comm_bytes = comm.bytes;
        let ranks = if world > 1 {
            let mine = [
                times.data_s,
                times.h2d_s,
                times.compute_s,
                times.comm_s,
                comm.bytes as f64,
                times.train_s,
                times.comm_wait_s,
            ];
            self.dp
                .gather(&mine, &self.dev)?
                .into_iter()
                .enumerate()
                .map(|(rank, v)| RankTimes {
                    rank,
                    data_s: v[0],
                    h2d_s: v[1],
                    compute_s: v[2],
                    comm_s: v[3],
                    comm_wait_s: v[6],
                    comm_bytes: v[4] as u64,
                    train_s: v[5],
                    busbw_gbs: crate::dist::CommStats {
                        calls: 0,
                        bytes: v[4] as u64,
                        seconds: v[3],
                        wait_s: v[6],
                    }
                    .busbw_gbs(world),
                })
                .collect()
        } else {
            Vec::new()
        };
        times.busbw_gbs = comm.busbw_gbs(world);
        let totals = self
            .dp
            .sum(&[loss_sum, correct as f64, seen as f64], &self.dev)?;
        let (loss_sum, correct, seen) = (totals[0], totals[1], totals[2] as usize);
        // The epoch lasts as long as its slowest rank.
        if let Some(slowest) = ranks.iter().map(|r| r.train_s).reduce(f64::max) {
            times.train_s = slowest;
        }
        if cfg.bn == BnMode::Broadcast {
            self.dp.broadcast_buffers(self.model.params())?;
        }

        let last = self.epoch + 1 == cfg.epochs;
        let test = if (cfg.eval_every_epoch || last) && !self.data.test.is_empty() {
            let t = Instant::now();
            let r = evaluate_shard(
                self.model.as_ref(),
                &self.data.test,
                &self.norm,
                cfg.eval_batch_size,
                &self.dev,
                (rank, world),
            )?;
            let s = self.dp.sum(
                &[r.loss * r.images as f64, r.correct as f64, r.images as f64],
                &self.dev,
            )?;
            times.eval_s = t.elapsed().as_secs_f64();
            Some((s[0] / s[2].max(1.0), s[1] / s[2].max(1.0)))
        } else {
            None
        };
        Ok(EpochRecord {
            epoch: self.epoch + 1,
            step: self.step,
            lr,
            train_loss: loss_sum / seen.max(1) as f64,
            train_accuracy: correct / seen.max(1) as f64,
            test_loss: test.map(|r| r.0),
            test_accuracy: test.map(|r| r.1),
            images: seen,
            images_per_s: seen as f64 / times.train_s.max(1e-9),
            times,
            world,
            ranks,
        })
    }
}

/// Forward and backward of one (micro-)batch, the loss scaled by `scale` before backward;
/// returns the gradients and, still on the device, the batch's mean loss and correct count.
fn forward_backward(
    model: &dyn Network,
    norm: &Normalizer,
    x: &Tensor,
    y: &Tensor,
    scale: f64,
) -> candle_core::Result<(GradStore, Tensor, Tensor)> {
    let logits = model.forward(&norm.apply(x)?, true)?;
    let loss = candle_nn::loss::cross_entropy(&logits, y)?;
    let grads = if scale == 1.0 {
        model.ops().backward(&loss)?
    } else {
        model.ops().backward(&(&loss * scale)?)?
    };
    let ok = logits.argmax(1)?.eq(y)?.to_dtype(DType::F32)?.sum_all()?;
    Ok((grads, loss.detach(), ok))
}

/// Steps queued between two read-backs of the loss: each read-back waits for the device, so
/// this bounds how far the host runs ahead and how late a non-finite loss is noticed.
pub(crate) const READBACK_STEPS: usize = 20;

/// Losses and correct counts of the steps since the last read-back, on the device.
#[derive(Default)]
struct Tally {
    queued: Vec<(Tensor, Tensor, usize, usize)>,
    loss_sum: f64,
    correct: usize,
    seen: usize,
}

impl Tally {
    fn push(&mut self, loss: Tensor, ok: Tensor, n: usize, step: usize) {
        self.queued.push((loss, ok, n, step));
    }

    fn queued(&self) -> usize {
        self.queued.len()
    }

    /// Reads the queued values back in one transfer; a non-finite loss is an error naming
    /// its step.
    fn read(&mut self) -> std::result::Result<(), NonFinite> {
        let queued = std::mem::take(&mut self.queued);
        if queued.is_empty() {
            return Ok(());
        }
        let both: Vec<Tensor> = queued
            .iter()
            .flat_map(|(l, ok, ..)| [l.reshape(1), ok.reshape(1)])
            .collect::<candle_core::Result<_>>()
            .map_err(NonFinite::Device)?;
        let values = Tensor::cat(&both, 0)
            .and_then(|t| {
                crate::device::wait_idle(t.device())?;
                t.to_vec1::<f32>()
            })
            .map_err(NonFinite::Device)?;
        for ((_, _, n, step), v) in queued.iter().zip(values.chunks(2)) {
            if !v[0].is_finite() {
                return Err(NonFinite::Loss {
                    step: *step,
                    value: v[0],
                });
            }
            self.loss_sum += v[0] as f64 * *n as f64;
            self.correct += v[1] as usize;
            self.seen += n;
        }
        Ok(())
    }
}

enum NonFinite {
    Device(candle_core::Error),
    Loss { step: usize, value: f32 },
}

impl NonFinite {
    fn at(self, epoch: usize, batch_size: usize) -> TrainError {
        match self {
            NonFinite::Device(e) => TrainError::from_step(e, batch_size),
            NonFinite::Loss { step, value } => TrainError::NonFiniteLoss { epoch, step, value },
        }
    }
}

fn progress_bar(enabled: bool, len: u64, epoch: usize, epochs: usize) -> ProgressBar {
    if !enabled || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template(
            "epoch {prefix} [{bar:30}] {pos}/{len} {per_sec} eta {eta} {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> "),
    );
    bar.set_prefix(format!("{epoch}/{epochs}"));
    bar
}
