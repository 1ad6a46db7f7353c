//! Per-epoch measurements: what `--json` prints and `metrics.csv` holds.

use std::fmt::Write as _;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::atomic::write_atomic;
use crate::Result;

/// Where an epoch's wall time went, in seconds. `h2d_s`, `compute_s` and the communication
/// times are device time (CUDA events; host clock on the CPU), not launch time; steps run
/// asynchronously, so the phases can add up to less than `train_s` when the host is the
/// bottleneck.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct EpochTimes {
    /// Waiting for the loader (augmentation and batching run ahead on a thread).
    pub data_s: f64,
    /// Copying the batch to the device.
    pub h2d_s: f64,
    /// Forward, backward and optimiser step.
    pub compute_s: f64,
    /// Evaluating the test set.
    pub eval_s: f64,
    /// The whole training epoch, evaluation excluded.
    pub train_s: f64,
    /// Gradient all-reduce transfers, device-timed with CUDA events on the communication
    /// stream, where they run beside backward.
    #[serde(default)]
    pub comm_s: f64,
    /// Waiting at each all-reduce for the slowest rank to arrive (load imbalance).
    #[serde(default)]
    pub comm_wait_s: f64,
    /// How long compute waited for all-reduce results: the part of `comm_s + comm_wait_s`
    /// that backward did not hide; `compute_s` excludes it.
    #[serde(default)]
    pub comm_exposed_s: f64,
    /// Bytes this rank all-reduced.
    #[serde(default)]
    pub comm_bytes: u64,
    /// nccl-tests bus bandwidth of those all-reduces, GB/s.
    #[serde(default)]
    pub busbw_gbs: f64,
}

impl EpochTimes {
    /// The share of the all-reduces' time (transfer and waiting for peers) that backward hid.
    pub fn comm_hidden_share(&self) -> Option<f64> {
        crate::dist::CommStats {
            seconds: self.comm_s,
            wait_s: self.comm_wait_s,
            exposed_s: self.comm_exposed_s,
            ..Default::default()
        }
        .hidden_share()
    }
}

/// One rank's share of an epoch in a data-parallel run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct RankTimes {
    pub rank: usize,
    pub data_s: f64,
    pub h2d_s: f64,
    pub compute_s: f64,
    pub comm_s: f64,
    #[serde(default)]
    pub comm_wait_s: f64,
    #[serde(default)]
    pub comm_exposed_s: f64,
    pub comm_bytes: u64,
    pub busbw_gbs: f64,
    pub train_s: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EpochRecord {
    /// 1-based.
    pub epoch: usize,
    /// Optimiser steps taken so far.
    pub step: usize,
    pub lr: f64,
    pub train_loss: f64,
    pub train_accuracy: f64,
    pub test_loss: Option<f64>,
    pub test_accuracy: Option<f64>,
    pub images: usize,
    pub images_per_s: f64,
    pub times: EpochTimes,
    /// Ranks that trained the epoch.
    #[serde(default = "one")]
    pub world: usize,
    /// Per-rank times (data-parallel runs only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ranks: Vec<RankTimes>,
    /// Set on the epoch after which `--bucket-tail auto` chose (this invocation's second):
    /// whether the last gradient buckets are small from the next epoch on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bucket_tail: Option<bool>,
}

fn one() -> usize {
    1
}

const HEADER: &str = "epoch,step,lr,train_loss,train_accuracy,test_loss,test_accuracy,images,images_per_s,data_s,h2d_s,compute_s,eval_s,train_s,comm_s,comm_wait_s,comm_exposed_s,comm_bytes,busbw_gbs,world";

/// Rewrites the CSV with every record (atomically, so it is never half-written).
pub fn write_csv(path: &Path, records: &[EpochRecord]) -> Result<()> {
    let mut s = String::from(HEADER);
    s.push('\n');
    let opt = |v: Option<f64>| v.map(|v| format!("{v:.6}")).unwrap_or_default();
    for r in records {
        let t = &r.times;
        let _ = writeln!(
            s,
            "{},{},{:.6e},{:.6},{:.6},{},{},{},{:.1},{:.4},{:.4},{:.4},{:.4},{:.4},{:.4},{:.4},{:.4},{},{:.2},{}",
            r.epoch,
            r.step,
            r.lr,
            r.train_loss,
            r.train_accuracy,
            opt(r.test_loss),
            opt(r.test_accuracy),
            r.images,
            r.images_per_s,
            t.data_s,
            t.h2d_s,
            t.compute_s,
            t.eval_s,
            t.train_s,
            t.comm_s,
            t.comm_wait_s,
            t.comm_exposed_s,
            t.comm_bytes,
            t.busbw_gbs,
            r.world
        );
    }
    write_atomic(path, s.as_bytes())
}
