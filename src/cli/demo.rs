use std::path::PathBuf;
use std::time::Instant;

use clap::Args;
use octet_models::ModelKind;
use octet_trainer::data::{self, DataSource};
use octet_trainer::device::parse_device;
use octet_trainer::train::{RunOptions, TrainConfig, Trainer};

#[derive(Args)]
pub struct DemoArgs {
    #[arg(long, default_value_t = 8)]
    epochs: usize,
    #[arg(long, default_value = "cpu")]
    device: String,
    #[arg(long, default_value = "runs/demo")]
    out: PathBuf,
    #[arg(long)]
    json: bool,
}

/// Trains LeNet on the bundled Fashion-MNIST subset and reports test accuracy.
pub fn run(a: DemoArgs) -> anyhow::Result<()> {
    let split = data::load(&DataSource::Bundled)?;
    let mut cfg = TrainConfig::new(ModelKind::LeNet, &DataSource::Bundled.to_string());
    cfg.epochs = a.epochs;
    cfg.lr = 0.05;
    if !a.json {
        eprintln!(
            "octet demo: LeNet on the bundled Fashion-MNIST subset ({} train / {} test images, {}), {} epochs on {}",
            split.train.len(),
            split.test.len(),
            split.origin,
            cfg.epochs,
            a.device
        );
    }
    let device = parse_device(&a.device)?;
    let start = Instant::now();
    let mut trainer = Trainer::new(cfg.clone(), split, &device, None)?;
    let opts = RunOptions {
        out: Some(a.out.clone()),
        progress: !a.json,
        commit: super::COMMIT.into(),
        ..RunOptions::new(device)
    };
    let json = a.json;
    let summary = trainer.run(&opts, &mut |r| {
        super::train::print_epoch(r, cfg.epochs, json)
    })?;
    let acc = summary
        .records
        .last()
        .and_then(|r| r.test_accuracy)
        .unwrap_or(0.0);
    let secs = start.elapsed().as_secs_f64();
    if json {
        println!(
            "{}",
            serde_json::json!({"event": "demo", "float_test_accuracy": acc, "seconds": secs, "checkpoint": summary.checkpoint})
        );
    } else {
        println!(
            "LeNet float test accuracy: {:.2}% after {} epochs ({secs:.1} s)",
            100.0 * acc,
            cfg.epochs
        );
        if let Some(p) = summary.checkpoint {
            println!(
                "checkpoint: {}  (try: octet inspect {0}; octet eval {0})",
                p.display()
            );
        }
    }
    Ok(())
}
