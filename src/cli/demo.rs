use std::path::PathBuf;
use std::time::Instant;

use clap::Args;
use octet_export::{export, ExportOptions};
use octet_models::ModelKind;
use octet_trainer::atomic::write_atomic;
use octet_trainer::data::Sampler;
use octet_trainer::data::{self, DataSource};
use octet_trainer::device::DeviceSpec;
use octet_trainer::eval::evaluate;
use octet_trainer::train::{RunOptions, TrainConfig, Trainer};
use octet_trainer::Normalizer;

use super::common::{accuracy, at_least_one, cores, open_trained, run_o8, COMMIT};

#[derive(Args)]
pub struct DemoArgs {
    /// Training epochs.
    #[arg(long, default_value_t = 8, value_parser = at_least_one)]
    epochs: usize,
    /// Where to train: cpu, cuda or cuda:N (export and the comparison run on the CPU).
    #[arg(long, default_value = "cpu", value_parser = super::values::device())]
    device: DeviceSpec,
    /// Directory for the checkpoint, metrics.csv and the .o8 model.
    #[arg(long, default_value = "runs/demo")]
    out: PathBuf,
    /// One JSON line per epoch and a final `demo` line on stdout instead of text.
    #[arg(long)]
    json: bool,
}

/// Trains LeNet on the bundled Fashion-MNIST subset, exports it to int8 and compares float and
/// int8 accuracy and speed on the test split.
pub fn run(a: DemoArgs) -> anyhow::Result<()> {
    let split = data::load(&DataSource::Bundled)?;
    let mut cfg = TrainConfig::new(ModelKind::LENET, &DataSource::Bundled.to_string());
    cfg.epochs = a.epochs;
    // Eight epochs over 6,000 images are few steps: unaugmented data converges faster.
    cfg.augment = false;
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
    let device = a.device.open()?;
    super::train::prepare_run_dir(&a.out)?;
    let start = Instant::now();
    let mut trainer = Trainer::new(cfg.clone(), split, &device, None)?;
    let opts = RunOptions {
        out: Some(a.out.clone()),
        progress: !a.json,
        commit: COMMIT.into(),
        ..RunOptions::new(device)
    };
    let json = a.json;
    let summary = trainer.run(&opts, &mut |r| {
        super::train::print_epoch(r, cfg.epochs, json)
    })?;
    let Some(ckpt) = summary.checkpoint else {
        anyhow::bail!("training wrote no checkpoint");
    };

    // Export to int8 and compare with the float model on the same test images.
    let t = open_trained(&ckpt, None, None)?;
    let input = t.export_input();
    let order = Sampler::new(t.split.train.len(), true, 0).indices(0);
    let calib = t.split.train.subset(&order[..order.len().min(1024)]);
    let exported = export(&input, &calib.images, &ExportOptions::default())?;
    let o8 = ckpt.with_extension("o8");
    write_atomic(&o8, &exported.bytes)?;

    let test = &t.split.test;
    let dev = DeviceSpec::Cpu.open()?;
    let model = octet_models::build(&t.model, t.in_channels, t.classes, 0, &dev)?;
    t.ck.restore_model(model.params())?;
    let clock = Instant::now();
    let float = evaluate(
        model.as_ref(),
        test,
        &Normalizer::new(&t.norm, &dev)?,
        250,
        &dev,
    )?;
    let float_s = clock.elapsed().as_secs_f64();
    let clock = Instant::now();
    let logits = run_o8(&exported.bytes, &test.images, cores())?;
    let int8_s = clock.elapsed().as_secs_f64();
    let int8 = accuracy(&logits, t.classes, &test.labels);
    let n = test.len() as f64;
    if json {
        println!(
            "{}",
            serde_json::json!({"event": "demo", "float_test_accuracy": float.accuracy, "int8_test_accuracy": int8,
                "float_images_per_s": n / float_s, "int8_images_per_s": n / int8_s, "test_images": test.len(),
                "checkpoint": ckpt, "o8": o8, "o8_bytes": exported.bytes.len(), "seconds": start.elapsed().as_secs_f64()})
        );
    } else {
        println!("\n{} test images, CPU:", test.len());
        println!(
            "  LeNet float test accuracy: {:.2}%  ({:.0} images/s, candle f32)",
            100.0 * float.accuracy,
            n / float_s
        );
        println!(
            "  LeNet int8 test accuracy:  {:.2}%  ({:.0} images/s, octet runtime, {} threads)",
            100.0 * int8,
            n / int8_s,
            cores()
        );
        println!(
            "checkpoint {} and int8 model {} ({} bytes); took {:.1} s. Next: octet inspect {}",
            ckpt.display(),
            o8.display(),
            exported.bytes.len(),
            start.elapsed().as_secs_f64(),
            o8.display()
        );
    }
    Ok(())
}
