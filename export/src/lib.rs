//! Float checkpoint → int8 `.o8` model.
//!
//! [`export`] lowers LeNet or ResNet-18 to a folded float graph (batch norm and the input
//! normalisation folded into the convs, ReLU fused), calibrates every activation on sample
//! images, quantizes per the int8 contract of DESIGN.md, plans the arena and writes the bytes of
//! runtime/FORMAT.md. One step per file, in that order: `lower`, `fold`, `calibrate`, `qmodel`
//! (with `quantize`), `plan`, `write`, then `sqnr` and `report`. The file layout and the
//! requantization arithmetic are the runtime's own (`octet_runtime::format`,
//! `octet_runtime::requant`), never a second copy. [`ablation`] measures what each quantization
//! step costs on a labelled test set, the last row through the runtime itself;
//! [`write_histograms`] plots each layer. [`tflite::to_tflite`] converts a `.o8` to a `.tflite`
//! of the same integer model.

mod calibrate;
mod calibrated;
mod engine;
mod error;
mod fold;
mod graph;
mod int8;
mod lower;
mod plan;
mod plot;
mod progress;
mod qmodel;
mod quantize;
mod reference;
mod report;
mod speed;
mod sqnr;
pub mod tflite;
mod write;

pub use calibrate::{
    choose, choose_range, observe, Calibration, Histogram, Observed, Stats, TensorCalibration, BINS,
};
pub use calibrated::Calibrated;
pub use engine::Engine;
pub use error::{ExportError, Result};
pub use fold::{fold_batch_norm, fold_input_normalization, BatchNorm, BN_EPS};
pub use graph::{FloatOp, Graph, OpKind, Shape3, TensorInfo};
pub use int8::run_int8;
pub use lower::{lower, Input};
pub use plan::{plan, plan_model, plan_tensors, ArenaPlan, Buffer, ALIGN};
pub use plot::{register_font, write_histograms};
pub use progress::{summary, Phase, Phases, Progress, Quiet};
pub use qmodel::{quantize_model, QModel, QOp, QTensor};
pub use quantize::{
    add_multipliers, multiplier_value, quantize_weight, quantize_weights, softmax_params,
    tflite_add_multipliers, QParams, QuantizedWeights, WeightScheme, TFLITE_ADD_LEFT_SHIFT,
};
pub use reference::{argmax_rows, fake_quantize, Executor, FakeQuant};
pub use report::{Ablation, AblationRow, LayerRow, Report};
pub use speed::{speed_model, speed_model_normalized, CIFAR_MEAN, CIFAR_STD};
pub use sqnr::sqnr_db;
pub use write::{encode, o8_model, write, O8Model, O8Op, O8Tensor};

use serde::Serialize;

/// The rounding an export records unless told otherwise: TensorFlow Lite's double rounding, so
/// that the `.o8` and its `.tflite` give the same bytes in octet, stock TFLite Micro and CMSIS-NN
/// (bench/NOTES_tflite.md says why).
pub const DEFAULT_ROUNDING: octet_runtime::Rounding = octet_runtime::Rounding::Double;

/// How to quantize.
#[derive(Debug, Clone, Serialize)]
pub struct ExportOptions {
    pub calibration: Calibration,
    pub weights: WeightScheme,
    /// Zero point 0 for every activation instead of a fitted one.
    pub symmetric_activations: bool,
    /// Calibrate on at most this many of the given images.
    pub calibration_images: usize,
    /// Per-layer SQNR is measured on at most this many of the calibration images.
    pub sqnr_images: usize,
    /// Images per batch in the float executor.
    pub batch: usize,
    /// How the model's requantizations round (recorded in the file).
    #[serde(serialize_with = "rounding_name")]
    pub rounding: octet_runtime::Rounding,
}

/// A rounding as reports spell it (`single`, `double`).
fn rounding_name<S: serde::Serializer>(
    r: &octet_runtime::Rounding,
    s: S,
) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str(r.name())
}

impl Default for ExportOptions {
    fn default() -> Self {
        Self {
            calibration: Calibration::default(),
            weights: WeightScheme::PerChannel,
            symmetric_activations: false,
            calibration_images: 1024,
            sqnr_images: 256,
            batch: 64,
            rounding: DEFAULT_ROUNDING,
        }
    }
}

/// The result of [`export`].
#[derive(Debug, Clone)]
pub struct Exported {
    /// The `.o8` file.
    pub bytes: Vec<u8>,
    pub report: Report,
    pub graph: Graph,
    pub model: QModel,
    pub plan: ArenaPlan,
    /// Per tensor; `None` for the input (fixed parameters).
    pub calibration: Vec<Option<TensorCalibration>>,
    pub classes: usize,
}

pub(crate) fn check_images(graph: &Graph, pixels: &[u8], what: &str) -> Result<usize> {
    let len = graph.tensors[graph.input].shape.len();
    if pixels.is_empty() || pixels.len() / len * len != pixels.len() {
        return Err(ExportError::BadInput(format!(
            "{what}: {} bytes is not a whole, non-zero number of {} images",
            pixels.len(),
            graph.tensors[graph.input].shape
        )));
    }
    Ok(pixels.len() / len)
}

/// Exports the float model `input` to int8, calibrating on `calib_images_u8_nchw` (u8 pixels,
/// planar, `n × C × H × W`) on the CPU: lower, calibrate, quantize, plan, write, then measure.
pub fn export(
    input: &Input,
    calib_images_u8_nchw: &[u8],
    opts: &ExportOptions,
) -> Result<Exported> {
    Calibrated::new(input, calib_images_u8_nchw, opts, &Engine::cpu())?.export(opts)
}

fn score(name: &str, engine: &str, pred: &[usize], labels: &[u8], float: &[usize]) -> AblationRow {
    let correct = pred
        .iter()
        .zip(labels)
        .filter(|(p, l)| **p == **l as usize)
        .count();
    let agree = pred.iter().zip(float).filter(|(a, b)| a == b).count();
    let total = pred.len();
    AblationRow {
        name: name.into(),
        engine: engine.into(),
        correct,
        total,
        accuracy: correct as f64 / total.max(1) as f64,
        agreement_with_float: agree as f64 / total.max(1) as f64,
    }
}

/// Accuracy on a labelled test set of: the float model; int8 weights only; int8 weights and
/// activations (both simulated by the float executor); and the int8 model with int32 biases as
/// the runtime runs it from `exported.bytes`; then each of `others` (name, `.o8` bytes), also
/// run by the runtime — another weight scheme or calibration beside the chosen one.
/// `on_row` sees each row as soon as it is measured (a ResNet-18 row takes minutes on a CPU).
/// On the CPU; [`ablation_on`] takes a device and a progress listener.
pub fn ablation(
    exported: &Exported,
    others: &[(&str, &[u8])],
    test_images_u8_nchw: &[u8],
    labels: &[u8],
    batch: usize,
    on_row: &mut dyn FnMut(&AblationRow),
) -> Result<Ablation> {
    let test = (test_images_u8_nchw, labels);
    ablation_on(exported, others, test, batch, &Engine::cpu(), on_row)
}

/// [`ablation`] on `engine`: the reference rows on its candle device, the runtime rows on the
/// runtime's CPU or CUDA path (the same bytes either way); each row is a progress phase.
pub fn ablation_on(
    exported: &Exported,
    others: &[(&str, &[u8])],
    (test_images_u8_nchw, labels): (&[u8], &[u8]),
    batch: usize,
    engine: &Engine,
    on_row: &mut dyn FnMut(&AblationRow),
) -> Result<Ablation> {
    let g = &exported.graph;
    let n = check_images(g, test_images_u8_nchw, "test images")?;
    if labels.len() != n {
        return Err(ExportError::BadInput(format!(
            "{} labels for {n} images",
            labels.len()
        )));
    }
    let classes = exported.classes;
    let reference = |name: &str, fq: FakeQuant| -> Result<Vec<usize>> {
        engine.progress.phase(name, n);
        let logits = Executor::on(g, &fq, &engine.device)?.run_all_counted(
            test_images_u8_nchw,
            engine.float_batch(batch),
            &mut |_, _| Ok(()),
            engine.progress,
        )?;
        Ok(argmax_rows(&logits, classes))
    };
    let runtime = |name: &str, bytes: &[u8]| -> Result<Vec<usize>> {
        engine.progress.phase(name, n);
        let logits = engine.int8_logits(bytes, test_images_u8_nchw, batch)?;
        Ok(argmax_rows(&logits, classes))
    };
    let mut rows = Vec::new();
    let mut push = |row: AblationRow| {
        on_row(&row);
        rows.push(row);
    };
    let float = reference(ROW_FLOAT, FakeQuant::default())?;
    push(score(ROW_FLOAT, "reference", &float, labels, &float));
    let weights = Some(exported.model.dequantized_weights(g));
    let w_only = reference(
        ROW_WEIGHTS,
        FakeQuant {
            weights: weights.clone(),
            ..Default::default()
        },
    )?;
    push(score(ROW_WEIGHTS, "reference", &w_only, labels, &float));
    let fq = FakeQuant {
        weights,
        biases: None,
        activations: Some(exported.model.qparams()),
    };
    let w_act = reference(ROW_ACTIVATIONS, fq)?;
    push(score(ROW_ACTIVATIONS, "reference", &w_act, labels, &float));
    let int8 = runtime(ROW_INT8, &exported.bytes)?;
    push(score(ROW_INT8, "runtime", &int8, labels, &float));
    for (name, bytes) in others {
        push(score(
            name,
            "runtime",
            &runtime(name, bytes)?,
            labels,
            &float,
        ));
    }
    Ok(Ablation { rows })
}

/// The ablation's rows, in order.
const ROW_FLOAT: &str = "float";
const ROW_WEIGHTS: &str = "int8 weights";
const ROW_ACTIVATIONS: &str = "int8 weights + activations";
const ROW_INT8: &str = "int8 weights + activations + bias";

/// The int8 logits of the `.o8` bytes as `octet_runtime` computes them (`n × classes`), on
/// every core: each thread runs whole images with its own arena, so the bytes are those of the
/// single-threaded reference.
pub fn runtime_logits(bytes: &[u8], pixels: &[u8], batch: usize) -> Result<Vec<i8>> {
    runtime_logits_counted(bytes, pixels, batch, &Quiet)
}

/// [`runtime_logits`], telling `progress` of each batch done.
pub fn runtime_logits_counted(
    bytes: &[u8],
    pixels: &[u8],
    batch: usize,
    progress: &dyn Progress,
) -> Result<Vec<i8>> {
    let model = octet_runtime::Model::parse(bytes)
        .map_err(|e| ExportError::Runtime(format!("parse: {e:?}")))?;
    let mut table = vec![octet_runtime::PreparedOp::EMPTY; model.num_ops()];
    let model = model
        .prepare(&mut table)
        .map_err(|e| ExportError::Runtime(format!("prepare: {e:?}")))?;
    let len = model.input_len();
    if pixels.is_empty() || pixels.len() / len * len != pixels.len() {
        return Err(ExportError::BadInput(format!(
            "{} pixel bytes for images of {len}",
            pixels.len()
        )));
    }
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let batch = batch.max(threads);
    let mut arena = vec![
        0u8;
        octet_runtime::parallel::arena_bytes_parallel(
            &model,
            octet_runtime::Kernels::Auto,
            batch,
            threads
        )
    ];
    let mut out = Vec::with_capacity(pixels.len() / len * model.output_len());
    for chunk in pixels.chunks(batch * len) {
        let logits = octet_runtime::parallel::run_parallel(&model, chunk, &mut arena, threads)
            .map_err(|e| ExportError::Runtime(format!("run: {e}")))?;
        out.extend_from_slice(logits);
        progress.advance(chunk.len() / len);
    }
    Ok(out)
}
