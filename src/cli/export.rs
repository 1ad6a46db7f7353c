use std::path::PathBuf;
use std::time::Instant;

use clap::Args;
use octet_export::{
    ablation, export, write_histograms, Ablation, Calibration, ExportOptions, Exported, Input,
    WeightScheme,
};
use octet_models::ModelKind;
use octet_trainer::atomic::write_atomic;
use octet_trainer::data::{DataSource, Dataset, Sampler};

use super::common::{accuracy, at_least_one, first, open_trained, run_o8, Trained};
use super::values::{self, CalibrationChoice};
use super::convert::{summary, write_tflite, Format};

#[derive(Args)]
pub struct ExportArgs {
    /// Float checkpoint: octet's, or a PyTorch state_dict (a torch.save .pth, or
    /// safetensors) with --model.
    checkpoint: PathBuf,
    /// The .o8 file to write [default: the checkpoint's name with .o8].
    #[arg(long, short)]
    out: Option<PathBuf>,
    /// Architecture, for checkpoints without octet metadata [default: the one the
    /// checkpoint's metadata names].
    #[arg(long, short, ignore_case = true)]
    model: Option<ModelKind>,
    /// Data for calibration (training split) and the report (test split): auto, bundled,
    /// fashion-mnist[:DIR], cifar10:DIR, synthetic[:TRAIN[:TEST[:SEED]]]
    /// [default: the checkpoint's data set].
    #[arg(long, short, value_parser = values::data())]
    data: Option<DataSource>,
    /// minmax, percentile[:P] (P default 99.99, 50 < P ≤ 100), mse, entropy, or best (each
    /// tried, the one with the highest int8 accuracy on held-out training images kept).
    #[arg(long, default_value = "percentile", value_parser = values::calibration())]
    calibration: CalibrationChoice,
    /// How weights get their scales.
    #[arg(long, value_enum, default_value_t = WeightScheme::default())]
    weights: WeightScheme,
    /// Zero point 0 for activations instead of a fitted one.
    #[arg(long)]
    symmetric_activations: bool,
    /// Training images to calibrate on (a seeded random sample).
    #[arg(long, default_value_t = 1024, value_parser = at_least_one)]
    calibration_images: usize,
    /// Test images for the ablation report (0: the whole test split).
    #[arg(long, default_value_t = 0)]
    test_images: usize,
    /// Model files to write: o8, tflite (the same int8 model for TFLite and TFLite Micro, at
    /// <out> with .tflite) or both.
    #[arg(long, value_enum, default_value_t = Format::O8)]
    format: Format,
    /// Directory for report.json, report.md and the histograms [default: <out>.report].
    #[arg(long)]
    report: Option<PathBuf>,
    /// Skip the PNG histograms.
    #[arg(long)]
    no_plots: bool,
    /// Threads for the int8 runtime [default: the machine's cores].
    #[arg(long, value_parser = at_least_one)]
    threads: Option<usize>,
    /// The report as one JSON object on stdout instead of text.
    #[arg(long)]
    json: bool,
}

/// One export: the arguments, the checkpoint, where the outputs go and the calibration sample.
struct Session<'a> {
    a: &'a ExportArgs,
    t: &'a Trained,
    input: Input<'a>,
    out: PathBuf,
    report_dir: PathBuf,
    /// Calibration images: a seeded random sample of the training split, never the test split.
    calib: Dataset,
    threads: usize,
    start: Instant,
}

impl Session<'_> {
    fn say(&self, m: String) {
        if !self.a.json {
            eprintln!("{m}");
        }
    }

    fn export(&self, opts: &ExportOptions) -> anyhow::Result<Exported> {
        Ok(export(&self.input, &self.calib.images, opts)?)
    }
}

/// The .o8 file and the report directory, checked before calibrating rather than after.
fn destinations(a: &ExportArgs) -> anyhow::Result<(PathBuf, PathBuf)> {
    let out = a
        .out
        .clone()
        .unwrap_or_else(|| a.checkpoint.with_extension("o8"));
    let report_dir = a.report.clone().unwrap_or_else(|| {
        let mut s = out.clone().into_os_string();
        s.push(".report");
        PathBuf::from(s)
    });
    anyhow::ensure!(
        !out.is_dir(),
        "--out {} is a directory: name the .o8 file to write",
        out.display()
    );
    anyhow::ensure!(
        !report_dir.exists() || report_dir.is_dir(),
        "the report directory {} exists and is not a directory: pass --report DIR",
        report_dir.display()
    );
    Ok((out, report_dir))
}

pub fn run(a: ExportArgs) -> anyhow::Result<()> {
    let start = Instant::now();
    let t = open_trained(&a.checkpoint, a.model, a.data.as_ref())?;
    let (out, report_dir) = destinations(&a)?;
    // Calibration and held-out images: a seeded sample of the training split, never the test split.
    let order = Sampler::new(t.split.train.len(), true, 0).indices(0);
    let n_cal = a.calibration_images.min(order.len()).max(1);
    let s = Session {
        a: &a,
        t: &t,
        input: t.export_input(),
        out,
        report_dir,
        calib: t.split.train.subset(&order[..n_cal]),
        threads: a.threads.unwrap_or_else(super::common::cores),
        start,
    };
    let held_out = t
        .split
        .train
        .subset(&order[n_cal..(n_cal + 1000).min(order.len())]);
    let mut opts = ExportOptions {
        weights: a.weights,
        symmetric_activations: a.symmetric_activations,
        calibration_images: n_cal,
        ..ExportOptions::default()
    };
    let mut tried = Vec::new();
    opts.calibration = match a.calibration {
        CalibrationChoice::Method(c) => c,
        CalibrationChoice::Best => best_calibration(&s, &opts, &held_out, &mut tried)?,
    };
    s.say(format!(
        "exporting {} ({}) with {} calibration on {n_cal} images, {:?} weights",
        t.kind,
        a.checkpoint.display(),
        opts.calibration,
        opts.weights
    ));
    let exported = s.export(&opts)?;
    if a.format != Format::Tflite {
        write_atomic(&s.out, &exported.bytes)?;
    }
    if a.format != Format::O8 {
        let path = s.out.with_extension("tflite");
        s.say(summary(&path, &write_tflite(&exported.bytes, &path)?));
    }
    let abl = evaluate(&s, &exported, &opts)?;
    write_report(&s, &exported, &abl, &tried)
}

/// `--calibration best`: every method tried, the one with the highest int8 accuracy on
/// `held_out` kept; what each scored goes to `tried`.
fn best_calibration(
    s: &Session,
    opts: &ExportOptions,
    held_out: &Dataset,
    tried: &mut Vec<serde_json::Value>,
) -> anyhow::Result<Calibration> {
    anyhow::ensure!(
        !held_out.is_empty(),
        "--calibration best needs training images beyond the calibration sample"
    );
    let mut best = (f64::MIN, Calibration::default());
    for c in [
        Calibration::MinMax,
        Calibration::Percentile(99.99),
        Calibration::Mse,
        Calibration::Entropy,
    ] {
        let e = s.export(&ExportOptions {
            calibration: c,
            ..opts.clone()
        })?;
        let acc = accuracy(
            &run_o8(&e.bytes, &held_out.images, s.threads)?,
            s.t.classes,
            &held_out.labels,
        );
        s.say(format!(
            "calibration {c}: int8 accuracy {:.2}% on {} held-out training images",
            100.0 * acc,
            held_out.len()
        ));
        tried.push(serde_json::json!({"calibration": c.to_string(), "held_out_accuracy": acc}));
        if acc > best.0 {
            best = (acc, c);
        }
    }
    Ok(best.1)
}

/// The ablation on the test split, with the other weight scheme beside the chosen one.
fn evaluate(s: &Session, exported: &Exported, opts: &ExportOptions) -> anyhow::Result<Ablation> {
    let (images, labels) = first(&s.t.split.test, s.a.test_images);
    s.say(format!(
        "evaluating on {} test images (float, fake-quantized, then the int8 runtime)",
        labels.len()
    ));
    // The lab's per-tensor scheme (or per-channel, if that was asked for) beside it.
    let other = match opts.weights {
        WeightScheme::PerChannel => WeightScheme::PerTensor,
        WeightScheme::PerTensor => WeightScheme::PerChannel,
    };
    let alt = s.export(&ExportOptions {
        weights: other,
        ..opts.clone()
    })?;
    let alt_name = format!("int8 weights + activations + bias, {other} weights");
    let others = [(alt_name.as_str(), alt.bytes.as_slice())];
    Ok(ablation(exported, &others, images, labels, 64, &mut |r| {
        s.say(format!(
            "  {:<55} {:>6.2}%  ({})",
            r.name,
            100.0 * r.accuracy,
            r.engine
        ))
    })?)
}

fn write_report(
    s: &Session,
    exported: &Exported,
    abl: &Ablation,
    tried: &[serde_json::Value],
) -> anyhow::Result<()> {
    let (a, t, dir, out) = (s.a, s.t, s.report_dir.as_path(), s.out.as_path());
    std::fs::create_dir_all(dir)?;
    let plots = if a.no_plots {
        Vec::new()
    } else {
        write_histograms(exported, &dir.join("histograms"))?
    };
    let json = serde_json::json!({
        "checkpoint": a.checkpoint, "model": t.kind.to_string(), "data": t.split.name,
        "o8": out, "o8_bytes": exported.bytes.len(), "commit": super::common::COMMIT,
        "calibration_search": tried, "report": exported.report, "ablation": abl,
        "histograms": plots, "seconds": s.start.elapsed().as_secs_f64(),
    });
    write_atomic(
        &dir.join("report.json"),
        serde_json::to_string_pretty(&json)?.as_bytes(),
    )?;
    let md = format!(
        "# int8 export of {}\n\n{} on {}; `.o8` {} bytes, arena {} bytes.\n\n## Ablation\n\n{}\n## Layers\n\n{}",
        a.checkpoint.display(),
        t.kind,
        t.split.name,
        exported.bytes.len(),
        exported.report.arena_bytes,
        abl.to_markdown(),
        exported.report.to_markdown()
    );
    write_atomic(&dir.join("report.md"), md.as_bytes())?;
    if a.json {
        println!("{json}");
    } else {
        println!("{}", abl.to_markdown());
        println!(
            "wrote {} ({} bytes) and {}/report.{{md,json}}{}",
            out.display(),
            exported.bytes.len(),
            dir.display(),
            if plots.is_empty() {
                String::new()
            } else {
                format!(" with {} histograms", plots.len())
            }
        );
    }
    Ok(())
}
