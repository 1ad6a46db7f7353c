use std::path::PathBuf;
use std::time::Instant;

use clap::Args;
use octet_trainer::data::{self, DataSource};
use octet_trainer::device::DeviceSpec;

use super::common::{accuracy, argmax, at_least_one, cores, first, read, run_o8_with};
use super::import::model_bytes;
use super::values;

#[derive(Args)]
pub struct RunArgs {
    /// An int8 model: an .o8 (`octet export`, `octet import`) or a .tflite (imported on the fly).
    model: PathBuf,
    /// Raw input tensors instead of a data set: one input after another, each in the model's
    /// input type and layout (`octet inspect` shows them: int8 H×W×C for an imported int8
    /// model, u8 pixels for octet's own); the outputs go to --logits. For models whose inputs
    /// are not images.
    #[arg(long, conflicts_with_all = ["images", "predictions"])]
    inputs: Option<PathBuf>,
    /// Labelled data to run on (its test split): auto, bundled, fashion-mnist[:DIR],
    /// cifar10:DIR, synthetic[:TRAIN[:TEST[:SEED]]].
    #[arg(long, short, default_value = "auto", value_parser = values::data())]
    data: DataSource,
    /// Images to run (0: the whole test split).
    #[arg(long, default_value_t = 0)]
    images: usize,
    /// Worker threads [default: the machine's cores]. Fewer images than threads: each image
    /// is split between them (large models).
    #[arg(long, value_parser = at_least_one)]
    threads: Option<usize>,
    /// Kernel set (all give the same bytes; one this CPU lacks is an error).
    #[arg(long, value_enum, default_value_t = octet_runtime::Kernels::Auto)]
    kernels: octet_runtime::Kernels,
    /// cpu (the int8 runtime on --threads cores) or cuda / cuda:N (its CUDA path, the same
    /// output bytes; needs a build with `--features cuda`).
    #[arg(long, default_value = "cpu", value_parser = super::values::device())]
    device: DeviceSpec,
    /// Also write one predicted class per line to this file.
    #[arg(long)]
    predictions: Option<PathBuf>,
    /// Also write the raw int8 outputs to this file: inputs × outputs bytes, one row per input
    /// in order (to compare with another runtime byte for byte).
    #[arg(long)]
    logits: Option<PathBuf>,
    /// One JSON object on stdout instead of text.
    #[arg(long)]
    json: bool,
}

/// Runs an int8 model with the runtime over a data set (accuracy and speed) or over raw inputs
/// (`--inputs`: outputs and speed).
pub fn run(a: RunArgs) -> anyhow::Result<()> {
    // A build without CUDA says so before any data is read.
    a.device.check_built()?;
    let (bytes, _) = model_bytes(&a.model)?;
    let model = octet_runtime::Model::parse(&bytes)
        .map_err(|e| anyhow::anyhow!("{}: invalid .o8 model: {e}", a.model.display()))?;
    if let Some(inputs) = &a.inputs {
        return run_raw(&a, inputs, &bytes, &model);
    }
    let split = data::load(&a.data)?;
    let (c, h, w) = model.input_shape();
    anyhow::ensure!(
        (c, h, w) == (split.test.channels, split.test.height, split.test.width),
        "the model takes {c}×{h}×{w} images, {} has {}×{}×{}",
        split.name,
        split.test.channels,
        split.test.height,
        split.test.width
    );
    let classes = model.output_len();
    let (images, labels) = first(&split.test, a.images);
    let images = &in_model_layout(&model, images, &a.model)?;
    let threads = a.threads.unwrap_or_else(cores);
    let timed = execute(&a, &bytes, &model, images, threads)?;
    let (logits, secs) = (timed.logits, timed.secs);
    let acc = accuracy(&logits, classes, labels);
    if let Some(p) = &a.predictions {
        let text: String = logits
            .chunks(classes)
            .map(|r| format!("{}\n", argmax(r)))
            .collect();
        octet_trainer::atomic::write_atomic(p, text.as_bytes())?;
    }
    write_outputs(&a, &logits)?;
    let n = labels.len();
    if a.json {
        println!(
            "{}",
            serde_json::json!({"model": a.model, "data": split.name, "images": n, "accuracy": acc,
            "seconds": secs, "images_per_s": n as f64 / secs, "device": a.device.to_string(),
            "threads": timed.threads, "kernels": timed.kernels, "engine": timed.engine})
        );
    } else {
        println!(
            "{} on {} test ({n} images): int8 accuracy {:.2}%, {:.0} images/s on {} ({})",
            a.model.display(),
            split.name,
            100.0 * acc,
            n as f64 / secs,
            a.device,
            timed.engine
        );
    }
    Ok(())
}

/// The model's outputs for `inputs` (a whole number of inputs) on the CPU (`--threads`,
/// `--kernels`) or the GPU, timed.
fn execute(
    a: &RunArgs,
    bytes: &[u8],
    model: &octet_runtime::Model,
    inputs: &[u8],
    threads: usize,
) -> anyhow::Result<Timed> {
    Ok(match a.device {
        DeviceSpec::Cpu => {
            let kernels = a
                .kernels
                .resolved_name()
                .map_err(|e| anyhow::anyhow!("--kernels {}: {e}", a.kernels.name()))?;
            let start = Instant::now();
            let logits = run_o8_with(bytes, a.kernels, inputs, threads)?;
            Timed {
                logits,
                secs: start.elapsed().as_secs_f64(),
                engine: format!("{threads} thread(s), {kernels} kernels"),
                threads: Some(threads),
                kernels: Some(kernels),
            }
        }
        DeviceSpec::Cuda(ordinal) => on_gpu(model, inputs, ordinal)?,
    })
}

/// Data-set images (planar u8 C×H×W) as the model takes them: as they are for octet's own
/// models, transposed to H×W×C for a u8 H×W×C input (an imported TFLite model with a uint8
/// input); an int8-input model is an error that points to `--inputs`.
fn in_model_layout<'i>(
    model: &octet_runtime::Model,
    images: &'i [u8],
    path: &std::path::Path,
) -> anyhow::Result<std::borrow::Cow<'i, [u8]>> {
    use octet_runtime::format::InputEncoding;
    let (c, h, w) = model.input_shape();
    match model.input_encoding() {
        InputEncoding::PixelsU8Chw => Ok(images.into()),
        InputEncoding::U8Hwc if c == 1 => Ok(images.into()),
        InputEncoding::U8Hwc => {
            let mut hwc = vec![0u8; images.len()];
            for (src, dst) in images
                .chunks_exact(c * h * w)
                .zip(hwc.chunks_exact_mut(c * h * w))
            {
                for (ch, plane) in src.chunks_exact(h * w).enumerate() {
                    for (i, &p) in plane.iter().enumerate() {
                        dst[i * c + ch] = p;
                    }
                }
            }
            Ok(hwc.into())
        }
        InputEncoding::I8Hwc => anyhow::bail!(
            "{} takes int8 tensors (scale {}, zero point {}), not images: pass them with \
             --inputs FILE (one {h}×{w}×{c} int8 tensor after another)",
            path.display(),
            model.input_scale(),
            model.input_zero_point()
        ),
    }
}

/// `--inputs`: every input of the raw file through the model; the outputs to `--logits`.
fn run_raw(
    a: &RunArgs,
    path: &std::path::Path,
    bytes: &[u8],
    model: &octet_runtime::Model,
) -> anyhow::Result<()> {
    let inputs = read(path)?;
    let n_in = model.input_len();
    anyhow::ensure!(
        !inputs.is_empty() && inputs.len().is_multiple_of(n_in),
        "{}: {} bytes is not a whole, non-zero number of the model's {n_in}-byte inputs \
         ({} per input: `octet inspect {}` shows the input's shape and type)",
        path.display(),
        inputs.len(),
        n_in,
        a.model.display()
    );
    let n = inputs.len() / n_in;
    let threads = a.threads.unwrap_or_else(cores);
    let timed = execute(a, bytes, model, &inputs, threads)?;
    write_outputs(a, &timed.logits)?;
    if a.json {
        println!(
            "{}",
            serde_json::json!({"model": a.model, "inputs": n, "outputs_per_input": model.output_len(),
            "output_scale": model.output_scale(), "output_zero_point": model.output_zero_point(),
            "logits": a.logits, "seconds": timed.secs, "inputs_per_s": n as f64 / timed.secs,
            "device": a.device.to_string(), "threads": timed.threads, "kernels": timed.kernels,
            "engine": timed.engine})
        );
    } else {
        println!(
            "{}: {n} inputs of {} → {} outputs each (scale {}, zero point {}){}, {:.0} inputs/s on {} ({})",
            a.model.display(),
            path.display(),
            model.output_len(),
            model.output_scale(),
            model.output_zero_point(),
            a.logits.as_ref().map_or(String::new(), |p| format!(" written to {}", p.display())),
            n as f64 / timed.secs,
            a.device,
            timed.engine
        );
    }
    Ok(())
}

/// `--logits`: the raw int8 outputs, atomically.
fn write_outputs(a: &RunArgs, logits: &[i8]) -> anyhow::Result<()> {
    if let Some(p) = &a.logits {
        let raw: Vec<u8> = logits.iter().map(|&v| v as u8).collect();
        octet_trainer::atomic::write_atomic(p, &raw)?;
    }
    Ok(())
}

/// Logits of a run, the seconds it was timed for and what ran it.
struct Timed {
    logits: Vec<i8>,
    secs: f64,
    engine: String,
    /// CPU threads and kernel set (`None` on a GPU).
    threads: Option<usize>,
    kernels: Option<&'static str>,
}

/// Images per call of the CUDA path (its planned maximum batch).
#[cfg(feature = "cuda")]
const GPU_BATCH: usize = 4096;

/// The int8 CUDA path on GPU `ordinal`: timed from host pixels to host logits over every
/// image, after one untimed batch (kernel load, first graph capture, buffers touched).
#[cfg(feature = "cuda")]
fn on_gpu(model: &octet_runtime::Model, images: &[u8], ordinal: usize) -> anyhow::Result<Timed> {
    let n = images.len() / model.input_len().max(1);
    let gpu_err = |e: octet_runtime::cuda::CudaError| {
        anyhow::anyhow!(
            "--device cuda:{ordinal}: {e}. Is a GPU present and the driver loaded? --device cpu \
             runs the same model on the CPU"
        )
    };
    let mut g = octet_runtime::cuda::CudaModel::new(model, ordinal, n.clamp(1, GPU_BATCH))
        .map_err(gpu_err)?;
    g.run(&images[..g.max_batch() * g.input_len()])
        .map_err(gpu_err)?;
    let start = Instant::now();
    let logits = g.run_all(images).map_err(gpu_err)?;
    Ok(Timed {
        logits,
        secs: start.elapsed().as_secs_f64(),
        engine: format!(
            "int8 CUDA, batches of {}, host to host after a warm-up batch",
            g.max_batch()
        ),
        threads: None,
        kernels: None,
    })
}

/// Without the `cuda` feature: the error that names the build flag.
#[cfg(not(feature = "cuda"))]
fn on_gpu(_: &octet_runtime::Model, _: &[u8], ordinal: usize) -> anyhow::Result<Timed> {
    Err(octet_trainer::TrainError::NoCuda(format!("cuda:{ordinal}")).into())
}
