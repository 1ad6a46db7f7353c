//! `octet bench infer`: int8 against float, on CPU and GPU, for the peer models' shapes (3×32×32
//! LeNet and ResNet-18, random weights: speed only, as `shared/peers/peer_torch_infer.py`).
//! Batch-1 latency and throughput at larger batches, median of timed runs after a warm-up:
//! the int8 runtime on CPU (all cores) and on CUDA, candle f32 on CPU and CUDA, candle bf16 on
//! CUDA (NCHW, cuDNN bf16 convolutions, weights cast from f32 in each forward). GPU float rows
//! time the forward of a batch already on the device, as the peer does; the int8 CUDA rows time
//! `CudaModel::run` from host pixels to host logits (upload and download included), and the
//! `int8-cuda-on-device` rows the same model on a batch already on the device
//! (`CudaModel::run_loaded`), like the float rows.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use candle_core::{Device, Tensor};
use clap::Args;
use octet_export::speed_model;
use octet_models::{build, ModelKind, Network};
use octet_runtime::parallel::run_parallel;
use octet_runtime::{Kernels, Model};
use octet_trainer::atomic::write_atomic;
use octet_trainer::data::Normalization;
use octet_trainer::Normalizer;
use rand::{Rng, SeedableRng};
use serde_json::Value;

mod report;

use crate::cli::common::at_least_one;
use crate::cli::values::{self, Forms};
use octet_trainer::device::DeviceSpec;
use report::{markdown, plot, Row};

/// `--device`: a device as `--device` names one, or `none` (`None`).
fn gpu_or_none() -> Forms<Option<DeviceSpec>> {
    Forms::new(&["cuda", "none"], |s| match s {
        "none" => Ok(None),
        _ => values::parse_device_spec(s).map(Some),
    })
}

#[derive(Args)]
pub struct InferBench {
    /// Models to time, comma-separated (3×32×32 inputs, random weights) [default: resnet18,lenet;
    /// none when --files is given].
    #[arg(long, value_enum, ignore_case = true, value_delimiter = ',')]
    models: Option<Vec<ModelKind>>,
    /// Int8 model files to time, comma-separated: .o8, or .tflite (imported as `octet import`
    /// does), on seeded random inputs of each model's input (int8 rows only).
    #[arg(long, value_delimiter = ',')]
    files: Vec<PathBuf>,
    /// Batch sizes of the GPU rows (1 is the latency row).
    #[arg(long, default_value = "1,256,1024,4096", value_delimiter = ',', value_parser = at_least_one)]
    batch_sizes: Vec<usize>,
    /// Batch sizes of the CPU rows.
    #[arg(long, default_value = "1,256", value_delimiter = ',', value_parser = at_least_one)]
    cpu_batch_sizes: Vec<usize>,
    /// cuda or cuda:N for the GPU rows; `none` for CPU rows only.
    #[arg(long, default_value = "cuda", value_parser = gpu_or_none())]
    // Spelled out so that clap takes the whole `Option` from the parser (`none` → `None`)
    // instead of treating the flag as optional.
    device: ::std::option::Option<DeviceSpec>,
    /// Timed runs per row (batch 1 takes ten times as many).
    #[arg(long, default_value_t = 20, value_parser = at_least_one)]
    iters: usize,
    /// PyTorch peer rows (the JSON of peer_torch_infer.py --json) to report beside octet's.
    #[arg(long)]
    peer: Option<PathBuf>,
    /// Directory for report.md, report.json and throughput.png.
    #[arg(long, default_value = "bench/out/infer")]
    out: PathBuf,
}

fn pixels(n: usize, seed: u64) -> Vec<u8> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    (0..n * 3 * 32 * 32).map(|_| rng.random()).collect()
}

/// A random-weight float model on the CPU and its int8 export (calibrated on random images).
fn models(kind: ModelKind) -> anyhow::Result<(Box<dyn Network>, Vec<u8>)> {
    Ok(speed_model(kind, 0, &pixels(32, 1))?)
}

/// Median seconds of `iters` calls of `f` after `warm` untimed ones.
fn median(
    warm: usize,
    iters: usize,
    mut f: impl FnMut() -> anyhow::Result<()>,
) -> anyhow::Result<f64> {
    for _ in 0..warm {
        f()?;
    }
    let mut t = Vec::with_capacity(iters);
    for _ in 0..iters {
        let s = Instant::now();
        f()?;
        t.push(s.elapsed().as_secs_f64());
    }
    t.sort_by(f64::total_cmp);
    Ok(t[t.len() / 2])
}

fn row(model: &str, engine: &str, batch: usize, secs: f64, device_bytes: Option<usize>) -> Row {
    let r = Row {
        model: model.into(),
        engine: engine.into(),
        batch,
        ms: secs * 1e3,
        img_per_s: batch as f64 / secs,
        device_bytes,
    };
    eprintln!(
        "{model:<9} {engine:<12} batch {batch:>5}: {:>9.3} ms  {:>10.0} img/s",
        r.ms, r.img_per_s
    );
    r
}

/// Normalised float input for candle, as the exporter folds it into the int8 model.
fn float_input(px: &[u8], n: usize, dev: &Device) -> candle_core::Result<Tensor> {
    Normalizer::new(&Normalization::cifar10(), dev)?.apply(&Tensor::from_slice(
        px,
        (n, 3, 32, 32),
        dev,
    )?)
}

pub fn run(a: InferBench) -> anyhow::Result<()> {
    std::fs::create_dir_all(&a.out)
        .with_context(|| format!("cannot create {}", a.out.display()))?;
    let gpu = a.device.map(DeviceSpec::open).transpose()?;
    // Read the peer first: a bad path should fail before minutes of measuring.
    let peer: Vec<Value> = match &a.peer {
        Some(p) => serde_json::from_slice(
            &std::fs::read(p).with_context(|| format!("cannot read {}", p.display()))?,
        )?,
        None => Vec::new(),
    };
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut rows = Vec::new();
    for f in &a.files {
        file_rows(&a, f, threads, gpu.is_some(), &mut rows)?;
    }
    let default_models = if a.files.is_empty() {
        vec![ModelKind::RESNET18, ModelKind::LENET]
    } else {
        Vec::new()
    };
    for &kind in a.models.as_ref().unwrap_or(&default_models) {
        let (net, bytes) = models(kind)?;
        let model = Model::parse(&bytes)?;
        let mut table = vec![octet_runtime::PreparedOp::EMPTY; model.num_ops()];
        let mut packed = vec![0u8; model.packed_bytes(Kernels::Auto)?];
        let model = model.prepare_packed(&mut table, &mut packed, Kernels::Auto)?;
        let name = kind.to_string();
        let iters = |b: usize| if b == 1 { 10 * a.iters } else { a.iters };
        for &b in &a.cpu_batch_sizes {
            let px = pixels(b, 7);
            rows.push(int8_cpu_row(&model, &name, &px, iters(b), threads)?);
            let x = float_input(&px, b, &Device::Cpu)?;
            let s = median(1, iters(b).min(20), || {
                net.forward(&x, false)?;
                Ok(())
            })?;
            rows.push(row(&name, "f32-cpu", b, s, None));
        }
        let Some(dev) = &gpu else { continue };
        let gnet = build(kind, 3, 10, 0, dev)?;
        for &b in &a.batch_sizes {
            let px = pixels(b, 7);
            let x = float_input(&px, b, dev)?;
            // bf16: activations in bf16, weights cast per forward, cuDNN bf16 convolutions.
            for (dtype, engine) in [
                (candle_core::DType::F32, "f32-cuda"),
                (candle_core::DType::BF16, "bf16-cuda"),
            ] {
                let x = x.to_dtype(dtype)?;
                let s = median(3, iters(b), || {
                    gnet.forward(&x, false)?;
                    dev.synchronize()?;
                    Ok(())
                })?;
                rows.push(row(&name, engine, b, s, None));
            }
            #[cfg(feature = "cuda")]
            cuda_int8(&model, &name, b, &px, iters(b), &mut rows)?;
        }
    }
    let md = markdown(&rows, &peer);
    let json = serde_json::json!({
        "bench": "infer", "commit": crate::cli::common::COMMIT,
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "cpu_threads": threads, "rows": rows, "peer": peer,
    });
    write_atomic(
        &a.out.join("report.json"),
        serde_json::to_string_pretty(&json)?.as_bytes(),
    )?;
    write_atomic(&a.out.join("report.md"), md.as_bytes())?;
    plot(&rows, &peer, &a.out)?;
    println!("{md}");
    Ok(())
}

/// The int8 CPU row of `model` on the batch `px`: the runtime on `threads` threads, the median
/// of `iters` (at most 50) runs after two.
fn int8_cpu_row(
    model: &Model,
    name: &str,
    px: &[u8],
    iters: usize,
    threads: usize,
) -> anyhow::Result<Row> {
    let b = px.len() / model.input_len().max(1);
    let mut arena = crate::cli::common::arena_for(model, octet_runtime::Kernels::Auto, b, threads)?;
    let s = median(2, iters.min(50), || {
        run_parallel(model, px, &mut arena, threads)?;
        Ok(())
    })?;
    Ok(row(name, "int8-cpu", b, s, None))
}

/// The int8 rows of a model file (`--files`): the CPU runtime on all cores at each
/// `--cpu-batch-sizes`, and the CUDA path at each `--batch-sizes` where a GPU is given (a model
/// the CUDA path refuses gets a line saying why, no row).
fn file_rows(
    a: &InferBench,
    path: &std::path::Path,
    threads: usize,
    gpu: bool,
    rows: &mut Vec<Row>,
) -> anyhow::Result<()> {
    let (bytes, _) = crate::cli::import::model_bytes(path)?;
    let model = Model::parse(&bytes).with_context(|| format!("{}", path.display()))?;
    let mut table = vec![octet_runtime::PreparedOp::EMPTY; model.num_ops()];
    let mut packed = vec![0u8; model.packed_bytes(Kernels::Auto)?];
    let model = model.prepare_packed(&mut table, &mut packed, Kernels::Auto)?;
    let name = path.file_stem().map_or_else(
        || path.display().to_string(),
        |s| s.to_string_lossy().into(),
    );
    let inputs = |n: usize| -> Vec<u8> {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        (0..n * model.input_len()).map(|_| rng.random()).collect()
    };
    let iters = |b: usize| if b == 1 { 10 * a.iters } else { a.iters };
    for &b in &a.cpu_batch_sizes {
        rows.push(int8_cpu_row(&model, &name, &inputs(b), iters(b), threads)?);
    }
    if !gpu {
        return Ok(());
    }
    #[cfg(feature = "cuda")]
    for &b in &a.batch_sizes {
        if let Err(e) = cuda_int8(&model, &name, b, &inputs(b), iters(b), rows) {
            eprintln!("{name}: no CUDA rows: {e}");
            break;
        }
    }
    Ok(())
}

/// The int8 CUDA rows: host to host, and on a batch already on the device.
#[cfg(feature = "cuda")]
fn cuda_int8(
    model: &Model,
    name: &str,
    b: usize,
    px: &[u8],
    iters: usize,
    rows: &mut Vec<Row>,
) -> anyhow::Result<()> {
    let mut cm = octet_runtime::cuda::CudaModel::new(model, 0, b)
        .map_err(|e| anyhow::anyhow!("int8 CUDA path: {e}"))?;
    let mut out = vec![0i8; b * model.output_len()];
    let s = median(3, iters, || {
        cm.run_into(px, &mut out)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        Ok(())
    })?;
    rows.push(row(name, "int8-cuda", b, s, Some(cm.device_bytes())));
    cm.load(px).map_err(|e| anyhow::anyhow!("{e}"))?;
    let s = median(3, iters, || {
        cm.run_loaded().map_err(|e| anyhow::anyhow!("{e}"))?;
        Ok(())
    })?;
    rows.push(row(
        name,
        "int8-cuda-on-device",
        b,
        s,
        Some(cm.device_bytes()),
    ));
    Ok(())
}
