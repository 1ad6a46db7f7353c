//! The scaling report's PNG plots: epoch time against batch size, and speed-up against GPU
//! count, octet solid and the PyTorch peer dashed; one panel per precision, stacked, so f32 and
//! bf16 share a picture but not a scale (bf16 epochs are much shorter).

use std::path::Path;

use octet_trainer::Precision;
use plotters::style::RGBColor;

use super::report::{Report, Timing};
use crate::cli::plot::{charts, colour, Axes, Series};

/// A number a timing run gives (octet's epoch time, or the peer's).
type Measure = fn(&Timing) -> Option<f64>;

const OCTET: Measure = |t| t.epoch_s;
const PEER: Measure = |t| t.peer_epoch_s;

/// octet's line (solid) and the peer's (dashed) in one colour, the points of each from `pts`.
fn octet_and_peer(
    label: &str,
    colour: RGBColor,
    pts: impl Fn(Measure) -> Vec<(f64, f64)>,
) -> [Series; 2] {
    [
        Series::new(format!("octet {label}"), colour, false, pts(OCTET)),
        Series::new(format!("PyTorch {label}"), colour, true, pts(PEER)),
    ]
}

/// Epoch time against log2(batch per GPU), a line per GPU count, of the runs in `p`.
fn epoch_time(r: &Report, p: Precision) -> Vec<Series> {
    let mut time = Vec::new();
    for (i, g) in r.gpus().into_iter().enumerate() {
        time.extend(octet_and_peer(&format!("{g} GPU"), colour(i), |f| {
            r.timings
                .iter()
                .filter(|t| t.gpus == g && t.precision == p)
                .filter_map(|t| f(t).map(|s| ((t.batch as f64).log2(), s)))
                .collect()
        }));
    }
    time
}

/// Speed-up over the same batch and precision on 1 GPU, a line per batch, and the ideal.
fn speed_up(r: &Report, p: Precision) -> Vec<Series> {
    let mut speed = Vec::new();
    for (i, b) in r.batches().into_iter().enumerate() {
        speed.extend(octet_and_peer(&format!("b{b}"), colour(i), |f| {
            let Some(b1) = r.timing(1, b, p).and_then(f) else {
                return Vec::new();
            };
            r.timings
                .iter()
                .filter(|t| t.batch == b && t.precision == p)
                .filter_map(|t| f(t).map(|s| (t.gpus as f64, b1 / s)))
                .collect()
        }));
    }
    let ideal = r.gpus().iter().map(|&g| (g as f64, g as f64)).collect();
    speed.push(Series::new(
        "ideal (dashed)".into(),
        RGBColor(128, 128, 128),
        true,
        ideal,
    ));
    speed
}

/// Draws one panel per precision of `r` into `path`, titled "MODEL, PRECISION: `what`".
fn per_precision(
    r: &Report,
    path: &Path,
    what: &str,
    (x, y): (&str, &str),
    series: fn(&Report, Precision) -> Vec<Series>,
) -> anyhow::Result<()> {
    let precisions = r.precisions();
    let titles: Vec<String> = precisions
        .iter()
        .map(|p| format!("{}, {p}: {what}", r.model))
        .collect();
    let axes: Vec<Axes> = titles.iter().map(|t| Axes::new(t, x, y)).collect();
    let lines: Vec<Vec<Series>> = precisions.iter().map(|&p| series(r, p)).collect();
    let panels: Vec<(&Axes, &[Series])> =
        axes.iter().zip(&lines).map(|(a, s)| (a, &s[..])).collect();
    charts(path, 560, &panels)
}

/// Writes epoch_time.png and speedup.png to `dir`.
pub fn plots(r: &Report, dir: &Path) -> anyhow::Result<()> {
    per_precision(
        r,
        &dir.join("epoch_time.png"),
        "epoch time vs batch per GPU",
        ("log2(batch per GPU)", "epoch s"),
        epoch_time,
    )?;
    per_precision(
        r,
        &dir.join("speedup.png"),
        "speed-up vs GPUs (fixed images per epoch)",
        ("GPUs", "speed-up"),
        speed_up,
    )
}
