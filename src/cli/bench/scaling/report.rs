//! The scaling report: what the runs measured (`Report`, saved as report.json so the tables and
//! plots can be rendered again without measuring) and its markdown tables.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use octet_trainer::dist::CommStats;
use octet_trainer::Precision;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    pub commit: String,
    pub command: String,
    pub model: String,
    pub images: usize,
    pub protocol: String,
    pub peak_busbw_gbs: BTreeMap<usize, f64>,
    pub timings: Vec<Timing>,
    pub accuracy: Vec<Accuracy>,
}

/// One timing run: `gpus` ranks, `batch` per rank, in `precision`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Timing {
    pub gpus: usize,
    pub batch: usize,
    /// Reports written before bf16 was measured hold f32 runs only.
    #[serde(default)]
    pub precision: Precision,
    pub images: usize,
    pub epoch_s: Option<f64>,
    pub img_per_s: Option<f64>,
    pub steps: Option<usize>,
    /// Mean over ranks.
    pub compute_s: Option<f64>,
    /// Slowest rank's all-reduce transfer time.
    pub comm_s: Option<f64>,
    /// Longest wait of a rank for the others at the all-reduces (load imbalance).
    #[serde(default)]
    pub wait_s: Option<f64>,
    /// Longest time a rank's compute waited for all-reduce results: what backward did not
    /// hide (reports from before the overlap lack it).
    #[serde(default)]
    pub exposed_s: Option<f64>,
    pub data_s: Option<f64>,
    pub busbw_gbs: Option<f64>,
    pub oom: bool,
    pub error: Option<String>,
    pub peer_epoch_s: Option<f64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Accuracy {
    pub name: String,
    pub gpus: usize,
    pub batch_per_gpu: usize,
    pub global_batch: usize,
    pub lr: Option<f64>,
    pub warmup_epochs: f64,
    pub epochs: usize,
    pub test_accuracy: Option<f64>,
    pub train_s: Option<f64>,
    pub error: Option<String>,
}

impl Report {
    /// The GPU counts measured, ascending.
    pub fn gpus(&self) -> Vec<usize> {
        distinct(self.timings.iter().map(|t| t.gpus))
    }

    /// The batch sizes per GPU measured, ascending.
    pub fn batches(&self) -> Vec<usize> {
        distinct(self.timings.iter().map(|t| t.batch))
    }

    /// The precisions measured, f32 first.
    pub fn precisions(&self) -> Vec<Precision> {
        Precision::ALL
            .into_iter()
            .filter(|&p| self.timings.iter().any(|t| t.precision == p))
            .collect()
    }

    /// The run on `gpus` GPUs at `batch` per GPU in `precision`.
    pub fn timing(&self, gpus: usize, batch: usize, precision: Precision) -> Option<&Timing> {
        self.timings
            .iter()
            .find(|t| t.gpus == gpus && t.batch == batch && t.precision == precision)
    }
}

impl Timing {
    /// Milliseconds per step.
    fn step_ms(&self) -> Option<f64> {
        self.epoch_s
            .zip(self.steps)
            .map(|(e, n)| 1e3 * e / n.max(1) as f64)
    }

    /// The epoch time, or why there is none.
    fn epoch_cell(&self) -> String {
        match self.epoch_s {
            Some(v) => format!("{v:.3}"),
            None if self.oom => "OOM".into(),
            None => "failed".into(),
        }
    }
}

fn distinct(items: impl Iterator<Item = usize>) -> Vec<usize> {
    let mut v: Vec<usize> = items.collect();
    v.sort_unstable();
    v.dedup();
    v
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map(|v| format!("{v:.digits$}"))
        .unwrap_or_else(|| "–".into())
}

fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    a.zip(b).filter(|(_, b)| *b > 0.0).map(|(a, b)| a / b)
}

/// The markdown tables of the report.
pub fn markdown(r: &Report) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# Scaling report: {}\n", r.model);
    let _ = writeln!(
        s,
        "commit `{}`; {} images per epoch; {}.\n\n`{}`\n",
        r.commit, r.images, r.protocol, r.command
    );
    one_gpu(&mut s, r);
    speed_up(&mut s, r);
    compute_vs_communication(&mut s, r);
    bandwidth(&mut s, r);
    accuracy(&mut s, r);
    s
}

/// Section 1: epoch time per batch size on one GPU, beside the peer's.
fn one_gpu(s: &mut String, r: &Report) {
    let _ = writeln!(s, "## 1. Epoch time vs batch size, 1 GPU\n");
    let _ = writeln!(
        s,
        "| precision | batch | octet s | img/s | PyTorch s | octet / PyTorch |"
    );
    let _ = writeln!(s, "|---|---:|---:|---:|---:|---:|");
    for p in r.precisions() {
        for b in r.batches() {
            if let Some(t) = r.timing(1, b, p) {
                let _ = writeln!(
                    s,
                    "| {p} | {b} | {} | {} | {} | {} |",
                    t.epoch_cell(),
                    opt(t.img_per_s, 0),
                    opt(t.peer_epoch_s, 3),
                    opt(ratio(t.epoch_s, t.peer_epoch_s), 2)
                );
            }
        }
    }
}

/// Section 2: speed-up and efficiency per GPU count, octet's and the peer's.
fn speed_up(s: &mut String, r: &Report) {
    let _ = writeln!(
        s,
        "\n## 2. Speed-up per GPU count (strong scaling: fixed images per epoch; the weak-scaling \
         view is the per-step time at the same batch per GPU)\n"
    );
    let _ = writeln!(
        s,
        "| precision | batch/GPU | GPUs | epoch s | speed-up | efficiency | step ms | weak-scaling eff. | PyTorch DDP s | PyTorch speed-up | octet / PyTorch |"
    );
    let _ = writeln!(s, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for t in runs(r, |_| true) {
        let (g, b, p) = (t.gpus, t.batch, t.precision);
        let base = r.timing(1, b, p);
        let sp = ratio(base.and_then(|x| x.epoch_s), t.epoch_s);
        let psp = ratio(base.and_then(|x| x.peer_epoch_s), t.peer_epoch_s);
        let weak = ratio(base.and_then(Timing::step_ms), t.step_ms());
        let _ = writeln!(
            s,
            "| {p} | {b} | {g} | {} | {} | {} | {} | {} | {} | {} | {} |",
            t.epoch_cell(),
            opt(sp, 2),
            opt(sp.map(|x| 100.0 * x / g as f64), 0) + "%",
            opt(t.step_ms(), 2),
            opt(weak.map(|x| 100.0 * x), 0) + "%",
            opt(t.peer_epoch_s, 3),
            opt(psp, 2),
            opt(ratio(t.epoch_s, t.peer_epoch_s), 2)
        );
    }
}

/// The runs of the GPU counts `gpus` keeps, precision-major, then by batch and GPU count (each
/// precision's scaling reads top to bottom).
fn runs(r: &Report, gpus: impl Fn(usize) -> bool) -> Vec<&Timing> {
    let counts = r.gpus();
    let batches = r.batches();
    r.precisions()
        .into_iter()
        .flat_map(|p| batches.iter().map(move |&b| (p, b)))
        .flat_map(|(p, b)| counts.iter().map(move |&g| (g, b, p)))
        .filter(|&(g, _, _)| gpus(g))
        .filter_map(|(g, b, p)| r.timing(g, b, p))
        .collect()
}

/// The runs that finished, in the order of `runs`.
fn finished(r: &Report, gpus: impl Fn(usize) -> bool) -> Vec<&Timing> {
    let mut v = runs(r, gpus);
    v.retain(|t| t.epoch_s.is_some());
    v
}

/// Section 3: where the step time goes.
fn compute_vs_communication(s: &mut String, r: &Report) {
    let _ = writeln!(
        s,
        "\n## 3. Compute vs communication (epoch 2, measured with CUDA events: the all-reduce \
         transfer, and apart from it the wait for the slowest rank, absorbed by a one-float \
         all-reduce just before; both run on a communication stream, each bucket started \
         during backward. Exposed = how long compute waited for the results, the part \
         backward did not hide; compute = step time minus that)\n"
    );
    let _ = writeln!(s, "| precision | batch/GPU | GPUs | compute s (mean of ranks) | all-reduce s (slowest rank) | all-reduce share | waiting for peers s (longest) | exposed s (longest) | hidden | data wait s | octet / PyTorch |");
    let _ = writeln!(s, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for t in finished(r, |_| true) {
        let share = ratio(t.comm_s, t.epoch_s).map(|x| 100.0 * x);
        let hidden = match (t.comm_s, t.wait_s, t.exposed_s) {
            (Some(c), Some(w), Some(e)) => CommStats {
                seconds: c,
                wait_s: w,
                exposed_s: e,
                ..Default::default()
            }
            .hidden_share()
            .map(|h| format!("{:.0}%", 100.0 * h)),
            _ => None,
        };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {}% | {} | {} | {} | {} | {} |",
            t.precision,
            t.batch,
            t.gpus,
            opt(t.compute_s, 3),
            opt(t.comm_s, 3),
            opt(share, 1),
            opt(t.wait_s, 3),
            opt(t.exposed_s, 3),
            hidden.as_deref().unwrap_or("–"),
            opt(t.data_s, 3),
            opt(ratio(t.epoch_s, t.peer_epoch_s), 2)
        );
    }
}

/// Section 4: the gradient all-reduce's bandwidth against the measured peak.
fn bandwidth(s: &mut String, r: &Report) {
    let _ = writeln!(s, "\n## 4. Bandwidth utilisation (gradient all-reduce busbw / peak busbw of `octet bench allreduce`)\n");
    let _ = writeln!(
        s,
        "| precision | batch/GPU | GPUs | busbw GB/s | peak GB/s | utilisation |"
    );
    let _ = writeln!(s, "|---|---:|---:|---:|---:|---:|");
    for t in finished(r, |g| g > 1) {
        let peak = r.peak_busbw_gbs.get(&t.gpus).copied();
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {}% |",
            t.precision,
            t.batch,
            t.gpus,
            opt(t.busbw_gbs, 1),
            opt(peak, 1),
            opt(ratio(t.busbw_gbs, peak).map(|x| 100.0 * x), 0)
        );
    }
}

/// Section 5 (when accuracy runs were made): small against large batch.
fn accuracy(s: &mut String, r: &Report) {
    let Some(first) = r.accuracy.first() else {
        return;
    };
    let _ = writeln!(s, "\n## 5. Test accuracy after {} epochs\n", first.epochs);
    let _ = writeln!(s, "| run | GPUs | batch/GPU | global batch | peak lr | warm-up epochs | test accuracy | train s |");
    let _ = writeln!(s, "|---|---:|---:|---:|---:|---:|---:|---:|");
    for a in &r.accuracy {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            a.name,
            a.gpus,
            a.batch_per_gpu,
            a.global_batch,
            opt(a.lr, 3),
            a.warmup_epochs,
            a.test_accuracy
                .map(|x| format!("{:.2}%", 100.0 * x))
                .unwrap_or_else(|| a.error.clone().unwrap_or_else(|| "–".into())),
            opt(a.train_s, 1)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(g: usize, b: usize, p: Precision, s: f64, peer: f64) -> Timing {
        Timing {
            gpus: g,
            batch: b,
            precision: p,
            images: 1000,
            epoch_s: Some(s),
            img_per_s: Some(1000.0 / s),
            steps: Some(1000 / (b * g)),
            compute_s: Some(s * 0.9),
            comm_s: Some(s * 0.1),
            wait_s: Some(0.0),
            exposed_s: Some(s * 0.05),
            data_s: Some(0.0),
            busbw_gbs: Some(100.0),
            oom: false,
            error: None,
            peer_epoch_s: Some(peer),
        }
    }

    fn report(timings: Vec<Timing>) -> Report {
        Report {
            commit: "c".into(),
            command: "octet bench scaling".into(),
            model: "resnet18".into(),
            images: 1000,
            protocol: "p".into(),
            peak_busbw_gbs: BTreeMap::from([(2, 200.0)]),
            timings,
            accuracy: vec![],
        }
    }

    #[test]
    fn report_tables_hold_speed_ups_ratios_and_utilisation() {
        let f32 = Precision::F32;
        let md = markdown(&report(vec![
            t(1, 100, f32, 4.0, 2.0),
            t(2, 100, f32, 2.5, 1.0),
        ]));
        // speed-up 4/2.5 = 1.60, efficiency 80%, PyTorch speed-up 2.00, ratio 2.5/1 = 2.50
        assert!(
            md.contains("| f32 | 100 | 2 | 2.500 | 1.60 | 80% |"),
            "{md}"
        );
        assert!(md.contains("| 1.000 | 2.00 | 2.50 |"), "{md}");
        // 100 of 200 GB/s
        assert!(
            md.contains("| f32 | 100 | 2 | 100.0 | 200.0 | 50% |"),
            "{md}"
        );
        // 1 GPU: octet 4 s vs PyTorch 2 s
        assert!(
            md.contains("| f32 | 100 | 4.000 | 250 | 2.000 | 2.00 |"),
            "{md}"
        );
        // compute 90%, all-reduce 10% of the epoch, half of it exposed, ratio 2.50
        assert!(
            md.contains(
                "| f32 | 100 | 2 | 2.250 | 0.250 | 10.0% | 0.000 | 0.125 | 50% | 0.000 | 2.50 |"
            ),
            "{md}"
        );
    }

    #[test]
    fn each_precision_is_measured_against_its_own_one_gpu_run_and_peer() {
        let (f32, bf16) = (Precision::F32, Precision::Bf16);
        // bf16 listed first: the tables still put f32 first.
        let r = report(vec![
            t(1, 100, bf16, 2.0, 2.5),
            t(2, 100, bf16, 1.25, 1.0),
            t(1, 100, f32, 4.0, 2.0),
            t(2, 100, f32, 2.0, 1.0),
        ]);
        assert_eq!(r.precisions(), [f32, bf16]);
        let md = markdown(&r);
        assert!(
            md.contains("| f32 | 100 | 4.000 | 250 | 2.000 | 2.00 |"),
            "{md}"
        );
        assert!(
            md.contains("| bf16 | 100 | 2.000 | 500 | 2.500 | 0.80 |"),
            "{md}"
        );
        // bf16: speed-up 2/1.25 = 1.60 against bf16's 1 GPU, not f32's; peer 2.5/1 = 2.50.
        assert!(
            md.contains("| f32 | 100 | 2 | 2.000 | 2.00 | 100% |"),
            "{md}"
        );
        assert!(
            md.contains("| bf16 | 100 | 2 | 1.250 | 1.60 | 80% |"),
            "{md}"
        );
        assert!(md.contains("| 1.000 | 2.50 | 1.25 |"), "{md}");
        let f = md.find("| f32 | 100 | 2 |").unwrap();
        assert!(f < md.find("| bf16 | 100 | 2 |").unwrap(), "{md}");
    }
}
