//! How to run (as opposed to what to compute, `TrainConfig`) and what a run returns.

use std::path::PathBuf;

use candle_core::Device;

use crate::metrics::EpochRecord;

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
