use std::path::PathBuf;

use clap::Args;
use octet_models::ModelKind;
use octet_trainer::atomic::write_atomic;
use octet_trainer::data::{self, DataSource};
use octet_trainer::device::DeviceSpec;
use octet_trainer::optim::Schedule;
use octet_trainer::train::{RunOptions, TrainConfig, Trainer};
use octet_trainer::{Precision, TrainError};
use serde::Serialize;

use crate::cli::common::at_least_one;

#[derive(Args)]
pub struct TrainBench {
    /// Models to time, comma-separated.
    #[arg(long, value_enum, ignore_case = true, default_values_t = ModelKind::all().to_vec(), value_delimiter = ',')]
    models: Vec<ModelKind>,
    /// Batch sizes to time, comma-separated (a size that runs out of memory ends the list).
    #[arg(long, default_value = "32,128,512,2048", value_delimiter = ',', value_parser = at_least_one)]
    batch_sizes: Vec<usize>,
    /// Precisions to time, comma-separated.
    #[arg(long, value_enum, ignore_case = true, default_values_t = [Precision::F32], value_delimiter = ',')]
    precision: Vec<Precision>,
    /// Images per epoch (the lab uses CIFAR-10's 50,000).
    #[arg(long, default_value_t = 50_000, value_parser = at_least_one)]
    images: usize,
    /// cpu, cuda or cuda:N.
    #[arg(long, default_value = "cuda", value_parser = crate::cli::values::device())]
    device: DeviceSpec,
    /// Also write the rows as JSON to this file.
    #[arg(long)]
    out: Option<PathBuf>,
    /// One JSON line per measurement on stdout.
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct Row {
    model: String,
    precision: String,
    batch: usize,
    images: usize,
    epoch1_s: Option<f64>,
    epoch2_s: Option<f64>,
    img_per_s: Option<f64>,
    data_s: Option<f64>,
    h2d_s: Option<f64>,
    compute_s: Option<f64>,
    oom: bool,
    error: Option<String>,
}

pub fn run(a: TrainBench) -> anyhow::Result<()> {
    let device = a.device.open()?;
    let split = data::load(&DataSource::Synthetic {
        train: a.images,
        test: 0,
        seed: 0,
    })?;
    let mut rows = Vec::new();
    if !a.json {
        println!(
            "{:<9} {:>5} {:>6} {:>9} {:>9} {:>10} {:>7} {:>7} {:>9}",
            "model",
            "prec",
            "batch",
            "epoch1 s",
            "epoch2 s",
            "img/s",
            "data s",
            "h2d s",
            "compute s"
        );
    }
    let runs = a
        .models
        .iter()
        .flat_map(|&m| a.precision.iter().map(move |&p| (m, p)));
    for (kind, precision) in runs {
        for &batch in &a.batch_sizes {
            let mut cfg = TrainConfig::new(kind, "synthetic");
            cfg.precision = precision;
            cfg.epochs = 2;
            cfg.batch_size = batch;
            cfg.schedule = Schedule::Constant;
            cfg.augment = false;
            cfg.eval_every_epoch = false;
            let result = Trainer::new(cfg, split.clone(), &device, None)
                .and_then(|mut t| t.run(&RunOptions::new(device.clone()), &mut |_| {}));
            let mut row = Row {
                model: kind.to_string(),
                precision: precision.to_string(),
                batch,
                images: a.images,
                epoch1_s: None,
                epoch2_s: None,
                img_per_s: None,
                data_s: None,
                h2d_s: None,
                compute_s: None,
                oom: false,
                error: None,
            };
            let stop = match result {
                Ok(s) => {
                    let (e1, e2) = (&s.records[0], &s.records[1]);
                    row.epoch1_s = Some(e1.times.train_s);
                    row.epoch2_s = Some(e2.times.train_s);
                    row.img_per_s = Some(e2.images_per_s);
                    row.data_s = Some(e2.times.data_s);
                    row.h2d_s = Some(e2.times.h2d_s);
                    row.compute_s = Some(e2.times.compute_s);
                    false
                }
                Err(
                    TrainError::OutOfMemory { detail, .. }
                    | TrainError::BatchTooLarge { detail, .. },
                ) => {
                    row.oom = true;
                    row.error = Some(detail);
                    true
                }
                Err(e) => return Err(e.into()),
            };
            if a.json {
                println!("{}", serde_json::to_string(&row)?);
            } else {
                let f =
                    |v: Option<f64>| v.map(|v| format!("{v:.3}")).unwrap_or_else(|| "OOM".into());
                println!(
                    "{:<9} {:>5} {:>6} {:>9} {:>9} {:>10} {:>7} {:>7} {:>9}",
                    row.model,
                    row.precision,
                    batch,
                    f(row.epoch1_s),
                    f(row.epoch2_s),
                    row.img_per_s
                        .map(|v| format!("{v:.0}"))
                        .unwrap_or_else(|| "-".into()),
                    f(row.data_s),
                    f(row.h2d_s),
                    f(row.compute_s)
                );
            }
            rows.push(row);
            save(&a, &rows)?;
            if stop {
                break;
            }
        }
    }
    Ok(())
}

/// Rewrites the results file after every row, so a run cut short keeps what it measured.
fn save(a: &TrainBench, rows: &[Row]) -> anyhow::Result<()> {
    if let Some(path) = &a.out {
        let v = serde_json::json!({
            "bench": "train", "commit": crate::cli::common::COMMIT, "device": a.device.to_string(),
            "command": std::env::args().collect::<Vec<_>>().join(" "),
            "protocol": "synthetic CIFAR-shaped data, epoch 1 warm-up, epoch 2 timed, no augmentation; precision per row (f32: NCHW, TF32 convolutions; bf16: bf16 channels-last activations, f32 master weights)",
            "rows": rows,
        });
        write_atomic(path, serde_json::to_string_pretty(&v)?.as_bytes())?;
    }
    Ok(())
}
