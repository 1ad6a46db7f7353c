//! The scaling report's PNG plots: epoch time against batch size, and speed-up against GPU
//! count, octet solid and the PyTorch peer dashed.

use std::path::Path;

use plotters::style::RGBColor;

use super::report::{Report, Timing};
use crate::cli::plot::{chart, colour, Axes, Series};

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

/// Writes epoch_time.png and speedup.png to `dir`.
pub fn plots(r: &Report, dir: &Path) -> anyhow::Result<()> {
    let gpus = r.gpus();
    let mut time = Vec::new();
    for (i, &g) in gpus.iter().enumerate() {
        time.extend(octet_and_peer(&format!("{g} GPU"), colour(i), |f| {
            r.timings
                .iter()
                .filter(|t| t.gpus == g)
                .filter_map(|t| f(t).map(|s| ((t.batch as f64).log2(), s)))
                .collect()
        }));
    }
    let title = format!("{}: epoch time vs batch per GPU", r.model);
    let axes = Axes::new(&title, "log2(batch per GPU)", "epoch s");
    chart(&dir.join("epoch_time.png"), &axes, &time)?;

    let mut speed = Vec::new();
    for (i, b) in r.batches().into_iter().enumerate() {
        speed.extend(octet_and_peer(&format!("b{b}"), colour(i), |f| {
            let Some(b1) = r.timing(1, b).and_then(f) else {
                return Vec::new();
            };
            r.timings
                .iter()
                .filter(|t| t.batch == b)
                .filter_map(|t| f(t).map(|s| (t.gpus as f64, b1 / s)))
                .collect()
        }));
    }
    let ideal = gpus.iter().map(|&g| (g as f64, g as f64)).collect();
    speed.push(Series::new(
        "ideal (dashed)".into(),
        RGBColor(128, 128, 128),
        true,
        ideal,
    ));
    let title = format!("{}: speed-up vs GPUs (fixed images per epoch)", r.model);
    chart(
        &dir.join("speedup.png"),
        &Axes::new(&title, "GPUs", "speed-up"),
        &speed,
    )
}
