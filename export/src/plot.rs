//! PNG histograms of each layer's weights and calibration activations, marking the observed
//! min/max, mean ± 3σ and the clip range the int8 codes cover. Text uses the bundled DejaVu
//! Sans Mono (assets/, Bitstream Vera licence) through plotters' `ab_glyph`, so nothing needs
//! system font libraries.

use std::path::{Path, PathBuf};
use std::sync::Once;

use plotters::prelude::*;

use crate::calibrate::Stats;
use crate::graph::{FloatOp, OpKind};
use crate::quantize::QuantizedWeights;
use crate::{ExportError, Exported, Result, TensorCalibration};

const FONT: &[u8] = include_bytes!("../assets/DejaVuSansMono.ttf");
const DISPLAY_BINS: usize = 256;

/// Makes the bundled font plotters' "sans-serif" (once per process), for every plot octet draws.
pub fn register_font() -> Result<()> {
    static ONCE: Once = Once::new();
    let mut ok = true;
    ONCE.call_once(|| {
        ok = plotters::style::register_font("sans-serif", FontStyle::Normal, FONT).is_ok();
    });
    if ok {
        Ok(())
    } else {
        Err(ExportError::Plot("the bundled font does not parse".into()))
    }
}

/// One histogram to draw: `counts` over `[lo, hi]` in equal bins, and the marks.
struct Panel {
    title: String,
    lo: f64,
    hi: f64,
    counts: Vec<u64>,
    min: f64,
    max: f64,
    mean: f64,
    std: f64,
    clip: (f64, f64),
}

impl Panel {
    /// `counts` over `range`, marked with what `seen` observed and the int8 range `clip`.
    fn new(
        title: String,
        range: (f64, f64),
        counts: Vec<u64>,
        seen: &Stats,
        clip: (f64, f64),
    ) -> Self {
        Panel {
            title,
            lo: range.0,
            hi: range.1,
            counts,
            min: seen.min as f64,
            max: seen.max as f64,
            mean: seen.mean(),
            std: seen.std(),
            clip,
        }
    }
}

fn plot_err<E: std::fmt::Display>(e: E) -> ExportError {
    ExportError::Plot(e.to_string())
}

fn draw(panel: &Panel, path: &Path) -> Result<()> {
    let root = BitMapBackend::new(path, (900, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_err)?;
    // Widen the x axis to show every mark.
    let marks = [
        panel.min,
        panel.max,
        panel.mean - 3.0 * panel.std,
        panel.mean + 3.0 * panel.std,
        panel.clip.0,
        panel.clip.1,
    ];
    let x0 = marks.iter().fold(panel.lo, |a, &b| a.min(b));
    let x1 = marks.iter().fold(panel.hi, |a, &b| a.max(b));
    let pad = ((x1 - x0) * 0.02).max(1e-9);
    let (x0, x1) = (x0 - pad, x1 + pad);
    let top = panel.counts.iter().copied().max().unwrap_or(0) as f64 + 1.0;
    let mut chart = ChartBuilder::on(&root)
        .caption(&panel.title, ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(60)
        .build_cartesian_2d(x0..x1, (1f64..top * 2.0).log_scale())
        .map_err(plot_err)?;
    chart
        .configure_mesh()
        .x_desc("value")
        .y_desc("count + 1")
        .label_style(("sans-serif", 13))
        .draw()
        .map_err(plot_err)?;
    let w = (panel.hi - panel.lo) / panel.counts.len().max(1) as f64;
    chart
        .draw_series(
            panel
                .counts
                .iter()
                .enumerate()
                .filter(|(_, &c)| c > 0)
                .map(|(i, &c)| {
                    let a = panel.lo + i as f64 * w;
                    Rectangle::new([(a, 1.0), (a + w, c as f64 + 1.0)], BLUE.mix(0.5).filled())
                }),
        )
        .map_err(plot_err)?;
    let vline = |x: f64| vec![(x, 1.0), (x, top * 2.0)];
    let groups = [
        ("min/max", RED, [panel.min, panel.max]),
        (
            "mean ± 3σ",
            GREEN,
            [panel.mean - 3.0 * panel.std, panel.mean + 3.0 * panel.std],
        ),
        ("int8 range", BLACK, [panel.clip.0, panel.clip.1]),
    ];
    for (label, color, xs) in groups {
        let style = color.stroke_width(2);
        chart
            .draw_series(xs.into_iter().map(|x| PathElement::new(vline(x), style)))
            .map_err(plot_err)?
            .label(label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
    }
    chart
        .configure_series_labels()
        .label_font(("sans-serif", 14))
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(plot_err)?;
    root.present().map_err(plot_err)?;
    Ok(())
}

/// Regroups `counts` into at most [`DISPLAY_BINS`] bars.
fn regroup(counts: &[u64]) -> Vec<u64> {
    let per = counts.len().div_ceil(DISPLAY_BINS).max(1);
    counts.chunks(per).map(|c| c.iter().sum()).collect()
}

/// Writes `NN_<layer>_weights.png` (ops with weights) and `NN_<layer>_activations.png` (every
/// op output) into `dir`, which is created; returns the paths written.
pub fn write_histograms(exported: &Exported, dir: &Path) -> Result<Vec<PathBuf>> {
    register_font()?;
    std::fs::create_dir_all(dir).map_err(|error| ExportError::Io {
        path: dir.to_path_buf(),
        error,
    })?;
    let mut written = Vec::new();
    for (i, (op, q)) in exported
        .graph
        .ops
        .iter()
        .zip(&exported.model.ops)
        .enumerate()
    {
        let stem = format!("{i:02}_{}", op.name.replace(['/', '\\'], "_"));
        let weights = match (op.kind.has_weights(), &q.weights) {
            (true, Some(qw)) => Some(weights_panel(exported, op, qw)),
            _ => None,
        };
        let activations = match exported.calibration.get(op.output) {
            Some(Some(cal)) => Some(activations_panel(exported, op, cal)),
            _ => None,
        };
        for (what, panel) in [("weights", weights), ("activations", activations)] {
            if let Some(panel) = panel {
                let path = dir.join(format!("{stem}_{what}.png"));
                draw(&panel, &path)?;
                written.push(path);
            }
        }
    }
    Ok(written)
}

/// The folded float weights of `op` in [`DISPLAY_BINS`] bins over their range, with the
/// range the int8 weights cover.
fn weights_panel(exported: &Exported, op: &FloatOp, qw: &QuantizedWeights) -> Panel {
    let w = &op.weight;
    let mut seen = Stats::default();
    seen.add(w);
    let (min, max) = (seen.min, seen.max);
    let mut counts = vec![0u64; DISPLAY_BINS];
    let width = ((max - min) as f64).max(1e-12) / DISPLAY_BINS as f64;
    for &x in w {
        counts[(((x - min) as f64 / width) as usize).min(DISPLAY_BINS - 1)] += 1;
    }
    let smax = qw.scales.iter().fold(0f32, |a, &b| a.max(b)) as f64 * 127.0;
    let kind = match op.kind {
        OpKind::Conv2d { .. } => "conv",
        OpKind::DepthwiseConv2d { .. } => "depthwise conv",
        _ => "fc",
    };
    let title = format!(
        "{} {kind} weights (folded), {:?}",
        op.name, exported.report.weights
    );
    Panel::new(
        title,
        (min as f64, max as f64),
        counts,
        &seen,
        (-smax, smax),
    )
}

/// `op`'s output as calibration saw it, with the range its int8 codes cover.
fn activations_panel(exported: &Exported, op: &FloatOp, cal: &TensorCalibration) -> Panel {
    let (a, b) = exported.model.tensors[op.output].qparams.range();
    let title = format!(
        "{} output, {} calibration",
        op.name, exported.report.calibration
    );
    let h = &cal.histogram;
    Panel::new(
        title,
        (h.lo, h.hi),
        regroup(&h.counts),
        &cal.stats,
        (a as f64, b as f64),
    )
}
