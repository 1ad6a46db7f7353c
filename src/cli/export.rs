use std::path::PathBuf;
use std::time::Instant;

use clap::Args;
use octet_export::{
    ablation_on, summary, write_histograms, Ablation, Calibrated, Calibration, Engine,
    ExportOptions, Exported, Phase, Phases, WeightScheme,
};
use octet_models::Model;
use octet_trainer::atomic::write_atomic;
use octet_trainer::data::{DataSource, Dataset, Sampler};
use octet_trainer::device::DeviceSpec;

use super::common::{accuracy, at_least_one, first, open_trained, run_o8, Trained, MODEL_HELP};
use super::convert::{self, write_tflite, Format};
use super::values::{self, CalibrationChoice};

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
    #[arg(long, short, value_parser = super::values::model(), long_help = octet_models::model_help(MODEL_HELP))]
    model: Option<Model>,
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
    /// The requantization rounding the model records: TFLite's double rounding, so that the
    /// .o8 and its .tflite give the same bytes in octet, stock TFLite Micro and CMSIS-NN; or
    /// octet's single rounding (the bytes of exports before format 3).
    #[arg(long, value_enum, default_value_t = octet_export::DEFAULT_ROUNDING)]
    rounding: octet_runtime::Rounding,
    /// Training images to calibrate on (a seeded random sample).
    #[arg(long, default_value_t = 1024, value_parser = at_least_one)]
    calibration_images: usize,
    /// Test images for the ablation report: the first N of the test split (0: all of it).
    /// Each float row of a ResNet-18 costs about 20 ms per image on a 2-core CPU, hence the
    /// default; on a GPU the whole split takes seconds.
    #[arg(long, default_value_t = DEFAULT_TEST_IMAGES)]
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
    /// cpu, or cuda / cuda:N: calibration and the float ablation rows on that GPU (candle),
    /// the int8 rows on the runtime's CUDA path (needs a build with `--features cuda`).
    #[arg(long, default_value = "cpu", value_parser = values::device())]
    device: DeviceSpec,
    /// The report as one JSON object on stdout instead of text.
    #[arg(long)]
    json: bool,
}

/// `--test-images`' default: 1000 keeps a CPU export of ResNet-18 under 3 minutes on 2 cores
/// (three float passes over them); pass 0 for the whole test split.
const DEFAULT_TEST_IMAGES: usize = 1000;

/// One export: the arguments, the checkpoint, where the outputs go, the observed calibration
/// and where the passes run.
struct Session<'a> {
    a: &'a ExportArgs,
    t: &'a Trained,
    out: PathBuf,
    report_dir: PathBuf,
    /// Observed once on the calibration images (a seeded random sample of the training split,
    /// never the test split); every method and weight scheme is quantized from it.
    cal: Calibrated<'a>,
    engine: &'a Engine<'a>,
    phases: &'a Phases,
    threads: usize,
    start: Instant,
}

impl Session<'_> {
    fn say(&self, m: String) {
        if !self.a.json {
            self.phases.say(&m);
        }
    }

    /// Int8 logits of `bytes` on `images`: `--threads` on the CPU, else the engine's GPU.
    fn int8(&self, bytes: &[u8], images: &[u8]) -> anyhow::Result<Vec<i8>> {
        match self.a.device {
            DeviceSpec::Cpu => run_o8(bytes, images, self.threads),
            DeviceSpec::Cuda(_) => Ok(self.engine.int8_logits(bytes, images, 64)?),
        }
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
    // A build without CUDA, or a GPU that cannot be opened, says so before anything is loaded.
    let device = a.device.open()?;
    let t = open_trained(&a.checkpoint, a.model.as_ref(), a.data.as_ref())?;
    let (out, report_dir) = destinations(&a)?;
    let phases = Phases::new(!a.json);
    let engine = Engine {
        device,
        progress: &phases,
    };
    // Calibration and held-out images: a seeded sample of the training split, never the test split.
    let order = Sampler::new(t.split.train.len(), true, 0).indices(0);
    let n_cal = a.calibration_images.min(order.len()).max(1);
    let calib = t.split.train.subset(&order[..n_cal]);
    let held_out = t
        .split
        .train
        .subset(&order[n_cal..(n_cal + 1000).min(order.len())]);
    let mut opts = ExportOptions {
        weights: a.weights,
        symmetric_activations: a.symmetric_activations,
        calibration_images: n_cal,
        rounding: a.rounding,
        ..ExportOptions::default()
    };
    phases.say(&format!(
        "calibrating {} ({}) on {n_cal} training images on {}",
        t.model,
        a.checkpoint.display(),
        a.device
    ));
    let s = Session {
        a: &a,
        t: &t,
        out,
        report_dir,
        cal: Calibrated::new(&t.export_input(), &calib.images, &opts, &engine)?,
        engine: &engine,
        phases: &phases,
        threads: a.threads.unwrap_or_else(super::common::cores),
        start,
    };
    let mut tried = Vec::new();
    opts.calibration = match a.calibration {
        CalibrationChoice::Method(c) => c,
        CalibrationChoice::Best => best_calibration(&s, &opts, &held_out, &mut tried)?,
    };
    s.say(format!(
        "exporting with {} calibration, {:?} weights",
        opts.calibration, opts.weights
    ));
    let exported = s.cal.export(&opts)?;
    let files = a.format.files(&s.out);
    if let Some(path) = &files.0 {
        write_atomic(path, &exported.bytes)?;
    }
    if let Some(path) = &files.1 {
        s.say(convert::summary(
            path,
            &write_tflite(&exported.bytes, path)?,
        ));
    }
    let abl = evaluate(&s, &exported, &opts)?;
    write_report(&s, &exported, &abl, &tried, &phases.finish(), files)
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
        let bytes = s.cal.bytes(&ExportOptions {
            calibration: c,
            ..opts.clone()
        })?;
        let acc = accuracy(
            &s.int8(&bytes, &held_out.images)?,
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
    let alt = s.cal.bytes(&ExportOptions {
        weights: other,
        ..opts.clone()
    })?;
    let alt_name = format!("int8 weights + activations + bias, {other} weights");
    let others = [(alt_name.as_str(), alt.as_slice())];
    let test = (images, labels);
    Ok(ablation_on(
        exported,
        &others,
        test,
        64,
        s.engine,
        &mut |r| {
            s.say(format!(
                "  {:<55} {:>6.2}%  ({}, {:.1} s)",
                r.name,
                100.0 * r.accuracy,
                r.engine,
                s.phases.elapsed()
            ))
        },
    )?)
}

fn write_report(
    s: &Session,
    exported: &Exported,
    abl: &Ablation,
    tried: &[serde_json::Value],
    phases: &[Phase],
    files: (Option<PathBuf>, Option<PathBuf>),
) -> anyhow::Result<()> {
    let (a, t, dir) = (s.a, s.t, s.report_dir.as_path());
    let (o8, tflite) = files;
    std::fs::create_dir_all(dir)?;
    let plots = if a.no_plots {
        Vec::new()
    } else {
        write_histograms(exported, &dir.join("histograms"))?
    };
    let json = serde_json::json!({
        "checkpoint": a.checkpoint, "model": t.model.to_string(), "data": t.split.name,
        "o8": o8, "tflite": tflite, "o8_bytes": exported.bytes.len(), "commit": super::common::COMMIT,
        "calibration_search": tried, "report": exported.report, "ablation": abl,
        "histograms": plots, "seconds": s.start.elapsed().as_secs_f64(),
        "device": a.device.to_string(), "phases": phases,
    });
    write_atomic(
        &dir.join("report.json"),
        serde_json::to_string_pretty(&json)?.as_bytes(),
    )?;
    let md = format!(
        "# int8 export of {}\n\n{} on {}; `.o8` {} bytes, arena {} bytes.\n\n## Ablation\n\n{}\n## Layers\n\n{}",
        a.checkpoint.display(),
        t.model,
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
            o8.iter()
                .chain(&tflite)
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(" and "),
            exported.bytes.len(),
            dir.display(),
            if plots.is_empty() {
                String::new()
            } else {
                format!(" with {} histograms", plots.len())
            }
        );
        eprintln!(
            "{:.1} s in all on {}: {}",
            s.start.elapsed().as_secs_f64(),
            a.device,
            summary(phases)
        );
    }
    Ok(())
}
