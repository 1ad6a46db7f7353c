//! A model lowered and observed on its calibration images once, then quantized for any
//! method, weight scheme and symmetry without running the model again: `--calibration best`
//! and the ablation's second weight scheme reuse the one observation.

use crate::calibrate::{choose, observe, Observed, TensorCalibration};
use crate::engine::Engine;
use crate::graph::Graph;
use crate::lower::{lower, Input};
use crate::plan::{plan_model, ArenaPlan};
use crate::qmodel::{quantize_model, QModel};
use crate::reference::{Executor, FakeQuant};
use crate::report::{LayerRow, Report};
use crate::sqnr::sqnr_db;
use crate::write::write;
use crate::{check_images, ExportError, ExportOptions, Exported, Result};

/// The lowered graph and its calibration statistics.
pub struct Calibrated<'a> {
    model_name: String,
    classes: usize,
    graph: Graph,
    observed: Observed,
    /// The calibration images observed (the first `opts.calibration_images` given).
    pixels: &'a [u8],
    images: usize,
    engine: &'a Engine<'a>,
}

/// An int8 model and what it was made from.
struct Quantized {
    model: QModel,
    plan: ArenaPlan,
    bytes: Vec<u8>,
    calibration: Vec<Option<TensorCalibration>>,
}

impl<'a> Calibrated<'a> {
    /// Lowers `input` and observes every activation on the first `opts.calibration_images` of
    /// `calib_images_u8_nchw` (u8 pixels, planar, `n × C × H × W`) on `engine`'s device.
    pub fn new(
        input: &Input,
        calib_images_u8_nchw: &'a [u8],
        opts: &ExportOptions,
        engine: &'a Engine<'a>,
    ) -> Result<Self> {
        let graph = lower(input)?;
        let avail = check_images(&graph, calib_images_u8_nchw, "calibration images")?;
        let images = avail.min(opts.calibration_images.max(1));
        let pixels = &calib_images_u8_nchw[..images * graph.tensors[graph.input].shape.len()];
        let float = Executor::on(&graph, &FakeQuant::default(), &engine.device)?;
        let batch = engine.float_batch(opts.batch);
        let observed = observe(&float, graph.tensors.len(), pixels, batch, engine.progress)?;
        Ok(Calibrated {
            model_name: input.model.to_string(),
            classes: input.classes,
            graph,
            observed,
            pixels,
            images,
            engine,
        })
    }

    /// Quantizes, plans and writes for `opts` (its calibration images are those observed),
    /// checked by the runtime's parser.
    fn quantize(&self, opts: &ExportOptions) -> Result<Quantized> {
        let (acts, calibration) = choose(&self.graph, &self.observed, opts);
        let model = quantize_model(&self.graph, &acts, opts.weights, opts.rounding)?;
        let plan = plan_model(&model);
        let bytes = write(&model, &plan)?;
        // Nothing is handed out that the runtime would refuse (a disagreement between the
        // writer and the reader's checks is a bug, reported as such rather than written).
        octet_runtime::Model::parse(&bytes).map_err(|e| {
            ExportError::Runtime(format!(
                "the exported model fails the runtime's validation ({e}): an exporter bug"
            ))
        })?;
        Ok(Quantized {
            model,
            plan,
            bytes,
            calibration,
        })
    }

    /// The `.o8` bytes for `opts`, without the per-layer measurements of [`Calibrated::export`].
    pub fn bytes(&self, opts: &ExportOptions) -> Result<Vec<u8>> {
        Ok(self.quantize(opts)?.bytes)
    }

    /// The export for `opts`, with its report (per-layer SQNR measured on the first
    /// `opts.sqnr_images` calibration images).
    pub fn export(&self, opts: &ExportOptions) -> Result<Exported> {
        let Quantized {
            model,
            plan,
            bytes,
            calibration,
        } = self.quantize(opts)?;
        let g = &self.graph;
        let len = g.tensors[g.input].shape.len();
        let n_sqnr = self.images.min(opts.sqnr_images.max(1));
        let float = Executor::on(g, &FakeQuant::default(), &self.engine.device)?;
        let sqnr = sqnr_db(
            g,
            &model,
            &float,
            &self.pixels[..n_sqnr * len],
            opts.batch.max(1),
            self.engine.progress,
        )?;
        let layers = model
            .ops
            .iter()
            .map(|op| {
                let observed = calibration[op.output]
                    .as_ref()
                    .map_or((0.0, 0.0), |c| c.stats.range());
                LayerRow::new(&model, op, observed, sqnr[op.output])
            })
            .collect();
        let report = Report {
            model: self.model_name.clone(),
            calibration: opts.calibration,
            weights: opts.weights,
            symmetric_activations: opts.symmetric_activations,
            calibration_images: self.images,
            sqnr_images: n_sqnr,
            file_bytes: bytes.len(),
            arena_bytes: plan.arena_bytes,
            activation_bytes: model.tensors.iter().map(|t| t.shape.len()).sum(),
            weight_bytes: model
                .ops
                .iter()
                .filter_map(|o| o.weights.as_ref())
                .map(|w| w.q.len())
                .sum(),
            layers,
        };
        Ok(Exported {
            bytes,
            report,
            graph: g.clone(),
            model,
            plan,
            calibration,
            classes: self.classes,
        })
    }
}
