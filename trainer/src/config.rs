//! `TrainConfig`: everything that decides the result of a run, checked before any work and
//! stored in every checkpoint.

use octet_models::spec::NetSpec;
use octet_models::{Model, OpsConfig};
use serde::{Deserialize, Serialize};

use crate::choice::named_choice;
use crate::dist::{BnMode, BucketTail, GradCompress, ReduceConfig};
use crate::optim::Schedule;
use crate::{Precision, Result, TrainError};

/// Everything that decides the result of a run. Stored in every checkpoint, so `--resume`
/// continues exactly the run that was interrupted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainConfig {
    /// The network's name: a built-in one, or a described one's (see `net`).
    pub model: String,
    /// A user's network description (`--model net.toml`); `None` for the built-in networks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub net: Option<NetSpec>,
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
    /// Whether the last gradient buckets are small: this invocation's flag (the results do
    /// not depend on it), not stored in checkpoints.
    #[serde(skip)]
    pub bucket_tail: BucketTail,
    /// What the gradient all-reduce sends (bf16 halves the bytes and changes the sums).
    #[serde(default)]
    pub grad_compress: GradCompress,
    /// Whether gradient all-reduces start during backward: this invocation's flag (the
    /// results do not depend on it), not stored in checkpoints.
    #[serde(skip, default = "yes")]
    pub overlap: bool,
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
fn yes() -> bool {
    true
}
fn default_bucket_mb() -> f64 {
    ReduceConfig::default().bucket_mb
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

named_choice!(LrScaling, "--lr-scaling", {
    None => "none": "--lr as given, whatever the batch",
    Linear => "linear": "--lr × global batch / --base-batch (use with --warmup-epochs)",
});

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

    /// The network this configuration trains.
    pub fn model(&self) -> Result<Model> {
        Ok(Model::from_record(&self.model, self.net.as_ref())?)
    }

    /// The lab recipe: SGD lr 0.1, momentum 0.9, weight decay 5e-4, cosine, augmentation on.
    pub fn new(model: impl Into<Model>, data: &str) -> Self {
        let model = model.into();
        Self {
            model: model.to_string(),
            net: model.described().cloned(),
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
            bucket_tail: BucketTail::Auto,
            grad_compress: GradCompress::None,
            overlap: true,
            bn: BnMode::Local,
            lr_scaling: LrScaling::None,
            base_batch: default_base_batch(),
            precision: Precision::F32,
            ops: OpsConfig::default(),
        }
    }

    /// How gradients are all-reduced in a data-parallel run.
    pub fn reduce(&self) -> ReduceConfig {
        ReduceConfig {
            bucket_mb: self.bucket_mb,
            tail: self.bucket_tail,
            overlap: self.overlap,
            compress: self.grad_compress,
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
