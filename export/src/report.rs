//! What the export did, layer by layer, and the accuracy ablation, as serde structs and
//! Markdown.

use serde::Serialize;

use crate::calibrate::Calibration;
use crate::graph::Shape3;
use crate::qmodel::{QModel, QOp};
use crate::quantize::WeightScheme;

/// One op of the int8 model.
#[derive(Debug, Clone, Serialize)]
pub struct LayerRow {
    pub name: String,
    pub kind: String,
    pub inputs: Vec<Shape3>,
    pub output: Shape3,
    /// (min, max) of the weight scales; `None` for ops without weights.
    pub weight_scale: Option<(f32, f32)>,
    /// Observed (min, max) of the float activation on the calibration images.
    pub observed: (f32, f32),
    /// The real range the int8 codes cover.
    pub clip: (f32, f32),
    pub scale: f32,
    pub zero_point: i32,
    /// (min, max) of the real requantization multipliers.
    pub multiplier: Option<(f64, f64)>,
    /// (min, max) of the encoded shifts (for add: the right shift n).
    pub shift: Option<(i32, i32)>,
    /// 10·log10(Σ f² / Σ (f − q)²) of the simulated int8 activation against the float one.
    pub sqnr_db: f64,
}

/// (min, max) of `v`; `None` when empty.
fn span<T: Copy + PartialOrd>(v: &[T]) -> Option<(T, T)> {
    v.iter().fold(None, |acc, &x| {
        Some(acc.map_or((x, x), |(a, b): (T, T)| {
            (if x < a { x } else { a }, if x > b { x } else { b })
        }))
    })
}

impl LayerRow {
    /// `op`'s row: shapes, parameters and multipliers from the int8 model, the range
    /// calibration `observed` and the SQNR of its output.
    pub fn new(model: &QModel, op: &QOp, observed: (f32, f32), sqnr_db: f64) -> Self {
        let t = &model.tensors[op.output];
        LayerRow {
            name: op.name.clone(),
            kind: op.kind.name().into(),
            inputs: op.inputs.iter().map(|&i| model.tensors[i].shape).collect(),
            output: t.shape,
            weight_scale: op.weights.as_ref().and_then(|w| span(&w.scales)),
            observed,
            clip: t.qparams.range(),
            scale: t.qparams.scale,
            zero_point: t.qparams.zero_point,
            multiplier: span(&op.effective),
            shift: span(&op.shifts),
            sqnr_db,
        }
    }
}

/// The export's report.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub model: String,
    pub calibration: Calibration,
    pub weights: WeightScheme,
    pub symmetric_activations: bool,
    pub calibration_images: usize,
    pub sqnr_images: usize,
    pub file_bytes: usize,
    pub arena_bytes: usize,
    /// Sum of every activation tensor's bytes: what the arena would take without reuse.
    pub activation_bytes: usize,
    pub weight_bytes: usize,
    pub layers: Vec<LayerRow>,
}

fn fmt_range<T: std::fmt::Display + PartialEq>(
    r: Option<(T, T)>,
    f: impl Fn(&T) -> String,
) -> String {
    match r {
        None => "–".into(),
        Some((a, b)) if a == b => f(&a),
        Some((a, b)) => format!("{} … {}", f(&a), f(&b)),
    }
}

impl Report {
    pub fn to_markdown(&self) -> String {
        let mut s = format!(
            "# int8 export: {}\n\ncalibration {} on {} images, weights {:?}, activations {}; \
             file {} B, arena {} B (activations without reuse {} B), weights {} B; \
             SQNR on {} images.\n\n",
            self.model,
            self.calibration,
            self.calibration_images,
            self.weights,
            if self.symmetric_activations {
                "symmetric"
            } else {
                "asymmetric"
            },
            self.file_bytes,
            self.arena_bytes,
            self.activation_bytes,
            self.weight_bytes,
            self.sqnr_images,
        );
        s += "| layer | op | in | out | weight scale | observed | clip | scale | zp | multiplier | shift | SQNR dB |\n";
        s += "|---|---|---|---|---|---|---|---|---|---|---|---|\n";
        for l in &self.layers {
            let ins: Vec<String> = l.inputs.iter().map(|x| x.to_string()).collect();
            s += &format!(
                "| {} | {} | {} | {} | {} | {:.3} … {:.3} | {:.3} … {:.3} | {:.3e} | {} | {} | {} | {:.1} |\n",
                l.name,
                l.kind,
                ins.join(" + "),
                l.output,
                fmt_range(l.weight_scale, |x| format!("{x:.2e}")),
                l.observed.0,
                l.observed.1,
                l.clip.0,
                l.clip.1,
                l.scale,
                l.zero_point,
                fmt_range(l.multiplier, |x| format!("{x:.3e}")),
                fmt_range(l.shift, |x| x.to_string()),
                l.sqnr_db,
            );
        }
        s
    }
}

/// One configuration evaluated on the labelled test set.
#[derive(Debug, Clone, Serialize)]
pub struct AblationRow {
    pub name: String,
    /// Who computed it: `reference` (float executor, fake-quantized) or `runtime`.
    pub engine: String,
    pub correct: usize,
    pub total: usize,
    pub accuracy: f64,
    /// Fraction of images whose prediction equals the float model's.
    pub agreement_with_float: f64,
}

/// The lab's ablation: float; int8 weights; + activations; + bias (the runtime itself).
#[derive(Debug, Clone, Serialize)]
pub struct Ablation {
    pub rows: Vec<AblationRow>,
}

impl Ablation {
    pub fn to_markdown(&self) -> String {
        let mut s = String::from("| configuration | engine | accuracy | correct | agreement with float |\n|---|---|---|---|---|\n");
        for r in &self.rows {
            s += &format!(
                "| {} | {} | {:.2} % | {}/{} | {:.2} % |\n",
                r.name,
                r.engine,
                100.0 * r.accuracy,
                r.correct,
                r.total,
                100.0 * r.agreement_with_float
            );
        }
        s
    }
}
