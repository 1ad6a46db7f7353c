//! `octet bench scaling`: the lab's multi-GPU tables in one run. Every number comes from a
//! real training run launched here (`octet launch --gpus N -- train …`), read from rank 0's
//! `--json` lines: epoch 2 of a 2-epoch run on synthetic CIFAR-shaped data (epoch 1 warms up),
//! per-rank compute and all-reduce times (CUDA events), and the all-reduce peak measured by
//! `octet bench allreduce` on the same GPUs. Each precision, batch size and GPU count is one run,
//! matched with the PyTorch peer's row of the same model, GPUs, batch and precision.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context;
use clap::Args;
use octet_models::ModelKind;
use octet_trainer::atomic::write_atomic;
use octet_trainer::data::DataSource;
use octet_trainer::Precision;
use serde_json::Value;

mod figures;
mod report;

use crate::cli::common::at_least_one;
use crate::cli::values;
use report::{markdown, Accuracy, Report, Timing};

#[derive(Args)]
pub struct ScalingBench {
    /// GPU counts to measure.
    #[arg(long, value_delimiter = ',', default_value = "1,2", value_parser = at_least_one)]
    gpus: Vec<usize>,
    /// Model of the timing runs.
    #[arg(long, value_enum, ignore_case = true, default_value_t = ModelKind::RESNET18)]
    model: ModelKind,
    /// Batch sizes per GPU.
    #[arg(long, value_delimiter = ',', default_value = "32,128,512", value_parser = at_least_one)]
    batch_sizes: Vec<usize>,
    /// Arithmetic of the timing runs (train --precision), each measured at every batch size
    /// and GPU count; bf16 rows are compared with the peer's bf16 autocast + channels_last rows.
    #[arg(long, value_delimiter = ',', ignore_case = true, default_value = "f32")]
    precisions: Vec<Precision>,
    /// Images per epoch of the timing runs, shared by the GPUs (fixed total work: strong
    /// scaling). The lab uses 50,000.
    #[arg(long, default_value_t = 50_000, value_parser = at_least_one)]
    images: usize,
    /// Data of the accuracy runs (e.g. fashion-mnist:DIR); without it they are skipped.
    #[arg(long, value_parser = values::data())]
    accuracy_data: Option<DataSource>,
    /// Model of the accuracy runs [default: --model].
    #[arg(long, ignore_case = true)]
    accuracy_model: Option<ModelKind>,
    /// Epochs of each accuracy run.
    #[arg(long, default_value_t = 5, value_parser = at_least_one)]
    accuracy_epochs: usize,
    /// The small global batch of the accuracy comparison, and the base of linear scaling.
    #[arg(long, default_value_t = 128, value_parser = at_least_one)]
    base_batch: usize,
    /// PyTorch peer results (`peer_torch_<n>gpu.json` from shared/peers/peer_torch.py) to
    /// report beside octet's, with ratios.
    #[arg(long)]
    peer: Vec<PathBuf>,
    /// Directory for report.md, report.json and the PNG plots.
    #[arg(long, default_value = "bench/out/scaling")]
    out: PathBuf,
    /// Measure nothing: rewrite report.md and the plots from this report.json.
    #[arg(long)]
    render: Option<PathBuf>,
    /// Keep what --out's report.json (same commit, model and images) already holds: its
    /// finished timing runs, all-reduce peaks and accuracy runs, and measure only the rest. The
    /// report is saved after every run, so a sweep cut short goes on where it stopped.
    #[arg(long)]
    reuse: bool,
}

pub fn run(a: ScalingBench) -> anyhow::Result<()> {
    std::fs::create_dir_all(&a.out)
        .with_context(|| format!("cannot create {}", a.out.display()))?;
    if let Some(path) = &a.render {
        let report: Report = serde_json::from_slice(
            &std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?,
        )
        .with_context(|| format!("{} is not a scaling report", path.display()))?;
        return write_report(&report, &a.out);
    }
    let runs = a.out.join("runs");
    let exe = std::env::current_exe()?;
    let peer = read_peers(&a.peer)?;
    let kept = if a.reuse { previous(&a)? } else { None };
    let mut report = Report {
        commit: crate::cli::common::COMMIT.into(),
        command: std::env::args().collect::<Vec<_>>().join(" "),
        model: a.model.to_string(),
        images: a.images,
        protocol: "synthetic CIFAR-shaped data, batch per GPU, images per epoch shared by the \
                   GPUs; epoch 1 warm-up, epoch 2 timed (h2d, forward, backward, all-reduce, \
                   update) from a barrier of all ranks, as the PyTorch peer times it; f32 rows \
                   may use TF32 convolutions (both sides' default), bf16 rows are mixed \
                   precision (bf16 channels-last activations, f32 weights; the peer's autocast + \
                   channels_last)"
            .into(),
        peak_busbw_gbs: allreduce_peaks(&a, &exe, kept.as_ref())?,
        timings: Vec::new(),
        accuracy: Vec::new(),
    };

    for p in Precision::ALL
        .into_iter()
        .filter(|p| a.precisions.contains(p))
    {
        for &b in &a.batch_sizes {
            for &g in &a.gpus {
                let old = kept.as_ref().and_then(|r| r.timing(g, b, p));
                let mut t = match old.filter(|t| t.epoch_s.is_some() || t.oom) {
                    Some(t) => {
                        eprintln!("{} {p} b{b}/GPU on {g} GPU(s): kept from --out", a.model);
                        t.clone()
                    }
                    None => {
                        let dir = runs.join(format!("{p}-g{g}-b{b}"));
                        timing_run(&a, &exe, (g, b, p), &dir)?
                    }
                };
                t.peer_epoch_s = peer.get(&(a.model.to_string(), g, b, p)).copied();
                report.timings.push(t);
                save(&report, &a.out)?;
            }
        }
    }

    let old = kept.map(|r| r.accuracy).unwrap_or_default();
    report.accuracy = match &a.accuracy_data {
        Some(_) if !old.is_empty() && old.iter().all(|r| r.test_accuracy.is_some()) => old,
        Some(data) => accuracy_runs(&a, &exe, &data.to_string(), &runs)?,
        None => Vec::new(),
    };
    save(&report, &a.out)?;
    write_report(&report, &a.out)
}

/// Writes report.json (after every run, so a sweep cut short keeps what it measured).
fn save(report: &Report, out: &Path) -> anyhow::Result<()> {
    write_atomic(
        &out.join("report.json"),
        serde_json::to_string_pretty(report)?.as_bytes(),
    )?;
    Ok(())
}

/// --reuse: the report already in --out, if it was measured by this commit on the same model
/// and images (another would mix builds or protocols in one table).
fn previous(a: &ScalingBench) -> anyhow::Result<Option<Report>> {
    let path = a.out.join("report.json");
    let Ok(bytes) = std::fs::read(&path) else {
        return Ok(None);
    };
    let r: Report = serde_json::from_slice(&bytes)
        .with_context(|| format!("{} is not a scaling report", path.display()))?;
    let same = r.commit == crate::cli::common::COMMIT
        && r.model == a.model.to_string()
        && r.images == a.images;
    if !same {
        eprintln!(
            "--reuse: {} is of commit {}, {} on {} images; measuring everything again",
            path.display(),
            r.commit,
            r.model,
            r.images
        );
    }
    Ok(same.then_some(r))
}

/// GPU count → peak all-reduce busbw (GB/s) of `octet bench allreduce`, for each count > 1;
/// those of `kept` are not measured again.
fn allreduce_peaks(
    a: &ScalingBench,
    exe: &Path,
    kept: Option<&Report>,
) -> anyhow::Result<BTreeMap<usize, f64>> {
    let mut peaks = BTreeMap::new();
    for &g in a.gpus.iter().filter(|&&g| g > 1) {
        if let Some(&peak) = kept.and_then(|r| r.peak_busbw_gbs.get(&g)) {
            peaks.insert(g, peak);
            continue;
        }
        let file = a.out.join(format!("allreduce_{g}gpu.json"));
        let mut cmd = launch(exe, g);
        cmd.args(["bench", "allreduce", "--json", "--out"])
            .arg(&file);
        let (ok, _, err) = output(cmd)?;
        anyhow::ensure!(ok, "bench allreduce on {g} GPUs failed:\n{err}");
        let v: Value = serde_json::from_slice(&std::fs::read(&file)?)?;
        let peak = v["peak_busbw_gbs"].as_f64().unwrap_or(0.0);
        eprintln!("all-reduce peak on {g} GPUs: {peak:.1} GB/s busbw");
        peaks.insert(g, peak);
    }
    Ok(peaks)
}

/// One 2-epoch timing run on `g` GPUs at batch `b` per GPU in precision `p`, into `dir`; a
/// failed run (out of memory, say) is a row that says so, not an error.
fn timing_run(
    a: &ScalingBench,
    exe: &Path,
    (g, b, p): (usize, usize, Precision),
    dir: &Path,
) -> anyhow::Result<Timing> {
    let mut cmd = launch(exe, g);
    cmd.args([
        "train",
        "--model",
        a.model.name(),
        "--device",
        "cuda",
        "--json",
    ])
    .args(["--data", &format!("synthetic:{}:0", a.images)])
    .args(["--epochs", "2", "--schedule", "constant", "--no-augment"])
    .args(["--precision", p.name()])
    .args(["--batch-size", &b.to_string(), "--out"])
    .arg(dir);
    let (ok, out, err) = output(cmd)?;
    let mut t = Timing {
        gpus: g,
        batch: b,
        precision: p,
        images: a.images,
        ..Timing::default()
    };
    let epochs = epoch_lines(&out);
    match epochs.get(1).filter(|_| ok) {
        Some(e) => fill(&mut t, e, epochs[0]["step"].as_u64()),
        None => {
            t.oom = err.contains("does not fit in GPU memory")
                || err.contains("beyond what cuDNN accepts");
            t.error = Some(last_error(&err));
        }
    }
    let _ = std::fs::remove_file(dir.join(octet_trainer::checkpoint::LAST_FILE));
    eprintln!(
        "{} {p} b{b}/GPU on {g} GPU(s): {}",
        a.model,
        t.epoch_s
            .map(|s| format!("epoch {s:.3} s"))
            .unwrap_or_else(|| format!("failed: {}", t.error.as_deref().unwrap_or("?")))
    );
    Ok(t)
}

fn write_report(report: &Report, out: &Path) -> anyhow::Result<()> {
    let md = markdown(report);
    write_atomic(&out.join("report.md"), md.as_bytes())?;
    figures::plots(report, out)?;
    println!("{md}");
    eprintln!(
        "wrote {}/report.{{md,json}}, epoch_time.png and speedup.png",
        out.display()
    );
    Ok(())
}

fn launch(exe: &Path, gpus: usize) -> Command {
    let mut c = Command::new(exe);
    c.args(["launch", "--gpus", &gpus.to_string(), "--"]);
    c
}

/// Runs `cmd` to the end: (success, stdout, stderr).
fn output(mut cmd: Command) -> anyhow::Result<(bool, String, String)> {
    let o = cmd.output().context("cannot start octet launch")?;
    Ok((
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    ))
}

fn epoch_lines(stdout: &str) -> Vec<Value> {
    stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l.trim()).ok())
        .filter(|v| v["event"] == "epoch")
        .collect()
}

fn last_error(stderr: &str) -> String {
    stderr
        .lines()
        .rev()
        .find(|l| l.contains("error"))
        .unwrap_or("the run failed")
        .trim()
        .to_string()
}

fn fill(t: &mut Timing, e: &Value, steps_before: Option<u64>) {
    let f = |v: &Value| v.as_f64();
    let times = &e["times"];
    t.epoch_s = f(&times["train_s"]);
    t.img_per_s = f(&e["images_per_s"]);
    t.steps = e["step"]
        .as_u64()
        .zip(steps_before)
        .map(|(a, b)| (a - b) as usize);
    t.data_s = f(&times["data_s"]);
    match e["ranks"].as_array().filter(|r| !r.is_empty()) {
        Some(ranks) => {
            let col = |k: &str| {
                ranks
                    .iter()
                    .filter_map(|r| r[k].as_f64())
                    .collect::<Vec<_>>()
            };
            let compute = col("compute_s");
            t.compute_s = Some(compute.iter().sum::<f64>() / compute.len().max(1) as f64);
            t.comm_s = col("comm_s").into_iter().reduce(f64::max);
            t.wait_s = col("comm_wait_s").into_iter().reduce(f64::max);
            t.exposed_s = col("comm_exposed_s").into_iter().reduce(f64::max);
            t.busbw_gbs = col("busbw_gbs").into_iter().reduce(f64::min);
        }
        None => {
            t.compute_s = f(&times["compute_s"]);
            t.comm_s = Some(0.0);
            t.wait_s = Some(0.0);
            t.exposed_s = Some(0.0);
        }
    }
}

fn accuracy_runs(
    a: &ScalingBench,
    exe: &Path,
    data: &str,
    runs: &Path,
) -> anyhow::Result<Vec<Accuracy>> {
    let g = a.gpus.iter().copied().max().unwrap_or(1);
    let large = a.batch_sizes.iter().copied().max().unwrap_or(512);
    let small = (a.base_batch / g).max(1);
    let model = a.accuracy_model.unwrap_or(a.model).to_string();
    let plans = [
        ("small batch", small, false),
        ("large batch", large, false),
        ("large batch, linear lr + warm-up", large, true),
    ];
    let mut rows = Vec::new();
    for (name, b, scaled) in plans {
        let dir = runs.join(format!(
            "accuracy-b{b}{}",
            if scaled { "-linear" } else { "" }
        ));
        let mut cmd = launch(exe, g);
        cmd.args([
            "train", "--model", &model, "--data", data, "--device", "cuda", "--json",
        ])
        .args(["--epochs", &a.accuracy_epochs.to_string()])
        .args(["--batch-size", &b.to_string(), "--out"])
        .arg(&dir);
        let warmup = if scaled { 1.0 } else { 0.0 };
        if scaled {
            cmd.args(["--lr-scaling", "linear", "--warmup-epochs", "1"])
                .args(["--base-batch", &a.base_batch.to_string()]);
        }
        let (ok, out, err) = output(cmd)?;
        let epochs = epoch_lines(&out);
        let last = epochs.last().filter(|_| ok);
        let row = Accuracy {
            name: name.into(),
            gpus: g,
            batch_per_gpu: b,
            global_batch: b * g,
            // Planned peak: the default --lr 0.1, scaled by global batch / base batch.
            lr: Some(if scaled {
                0.1 * (b * g) as f64 / a.base_batch as f64
            } else {
                0.1
            }),
            warmup_epochs: warmup,
            epochs: a.accuracy_epochs,
            test_accuracy: last.and_then(|e| e["test_accuracy"].as_f64()),
            train_s: Some(
                epochs
                    .iter()
                    .filter_map(|e| e["times"]["train_s"].as_f64())
                    .sum(),
            ),
            error: (!ok).then(|| last_error(&err)),
        };
        eprintln!(
            "{model} {name}: {}",
            row.test_accuracy
                .map(|x| format!("test {:.2}%", 100.0 * x))
                .unwrap_or_else(|| format!("failed: {}", row.error.as_deref().unwrap_or("?")))
        );
        let _ = std::fs::remove_file(dir.join(octet_trainer::checkpoint::LAST_FILE));
        rows.push(row);
    }
    Ok(rows)
}

/// What a peer row is matched on: model, GPUs, batch per GPU, precision.
type PeerKey = (String, usize, usize, Precision);

/// Epoch-2 seconds of the peer's rows (`amp_bf16: true` is its bf16); rows without a time
/// (out of memory) are left out.
fn read_peers(files: &[PathBuf]) -> anyhow::Result<HashMap<PeerKey, f64>> {
    let mut m = HashMap::new();
    for f in files {
        let v: Value = serde_json::from_slice(
            &std::fs::read(f)
                .with_context(|| format!("cannot read peer results {}", f.display()))?,
        )
        .with_context(|| format!("{} is not the peer's JSON", f.display()))?;
        for r in v["rows"].as_array().into_iter().flatten() {
            let p = match r["amp_bf16"].as_bool() {
                Some(true) => Precision::Bf16,
                _ => Precision::F32,
            };
            if let (Some(model), Some(g), Some(b), Some(s)) = (
                r["model"].as_str(),
                r["gpus"].as_u64(),
                r["batch_per_gpu"].as_u64(),
                r["epoch2_s"].as_f64(),
            ) {
                m.insert((model.to_string(), g as usize, b as usize, p), s);
            }
        }
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epoch_lines_skip_non_json_output() {
        let out =
            "octet train: …\n{\"event\":\"epoch\",\"epoch\":1}\nnoise\n{\"event\":\"done\"}\n";
        assert_eq!(epoch_lines(out).len(), 1);
    }

    #[test]
    fn peer_rows_are_keyed_by_precision() {
        let dir = tempfile::tempdir().unwrap();
        let rows = |g: u64, f32_s: f64, bf16_s: f64| {
            serde_json::json!({ "torch": "2.x", "rows": [
                { "model": "resnet18", "gpus": g, "batch_per_gpu": 128, "amp_bf16": false,
                  "channels_last": false, "epoch2_s": f32_s },
                { "model": "resnet18", "gpus": g, "batch_per_gpu": 128, "amp_bf16": true,
                  "channels_last": true, "epoch2_s": bf16_s },
                { "model": "resnet18", "gpus": g, "batch_per_gpu": 512, "amp_bf16": true,
                  "channels_last": true, "oom": true },
            ]})
        };
        let files: Vec<PathBuf> = [(1, 3.0, 1.5), (2, 1.6, 0.9)]
            .iter()
            .map(|&(g, a, b)| {
                let f = dir.path().join(format!("peer_torch_{g}gpu.json"));
                std::fs::write(&f, rows(g, a, b).to_string()).unwrap();
                f
            })
            .collect();
        let m = read_peers(&files).unwrap();
        let at = |g, b, p| m.get(&("resnet18".to_string(), g, b, p)).copied();
        assert_eq!(at(1, 128, Precision::F32), Some(3.0));
        assert_eq!(at(1, 128, Precision::Bf16), Some(1.5));
        assert_eq!(at(2, 128, Precision::F32), Some(1.6));
        assert_eq!(at(2, 128, Precision::Bf16), Some(0.9));
        // Out of memory: no time, no row.
        assert_eq!(at(1, 512, Precision::Bf16), None);
        assert_eq!(m.len(), 4);
    }
}
