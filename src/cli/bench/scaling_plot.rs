//! The scaling report's PNG plots: epoch time against batch size, and speed-up against GPU
//! count, octet solid and the PyTorch peer dashed. Text uses the DejaVu Sans Mono that the
//! exporter bundles (`octet_export::register_font`), so no system font is needed.

use std::path::Path;

use plotters::prelude::*;

use super::scaling::{Report, Timing};

pub(super) type Series = (String, RGBColor, bool, Vec<(f64, f64)>);

pub fn plots(r: &Report, dir: &Path) -> anyhow::Result<()> {
    octet_export::register_font()?;
    let mut gpus: Vec<usize> = r.timings.iter().map(|t| t.gpus).collect();
    gpus.sort_unstable();
    gpus.dedup();
    let mut batches: Vec<usize> = r.timings.iter().map(|t| t.batch).collect();
    batches.sort_unstable();
    batches.dedup();
    let colour = |i: usize| Palette99::pick(i).to_rgba();
    let rgb = |c: RGBAColor| RGBColor(c.0, c.1, c.2);

    let mut time = Vec::new();
    for (i, &g) in gpus.iter().enumerate() {
        let pts = |f: &dyn Fn(&Timing) -> Option<f64>| -> Vec<(f64, f64)> {
            r.timings
                .iter()
                .filter(|t| t.gpus == g)
                .filter_map(|t| f(t).map(|s| ((t.batch as f64).log2(), s)))
                .collect()
        };
        time.push((
            format!("octet {g} GPU"),
            rgb(colour(i)),
            false,
            pts(&|t| t.epoch_s),
        ));
        time.push((
            format!("PyTorch {g} GPU"),
            rgb(colour(i)),
            true,
            pts(&|t| t.peer_epoch_s),
        ));
    }
    chart(
        &dir.join("epoch_time.png"),
        &format!("{}: epoch time vs batch per GPU", r.model),
        "log2(batch per GPU)",
        "epoch s",
        &time,
    )?;

    let mut speed = Vec::new();
    for (i, &b) in batches.iter().enumerate() {
        let base = |f: &dyn Fn(&Timing) -> Option<f64>| {
            r.timings
                .iter()
                .find(|t| t.gpus == 1 && t.batch == b)
                .and_then(f)
        };
        let pts = |f: &dyn Fn(&Timing) -> Option<f64>| -> Vec<(f64, f64)> {
            let Some(b1) = base(f) else { return Vec::new() };
            r.timings
                .iter()
                .filter(|t| t.batch == b)
                .filter_map(|t| f(t).map(|s| (t.gpus as f64, b1 / s)))
                .collect()
        };
        speed.push((
            format!("octet b{b}"),
            rgb(colour(i)),
            false,
            pts(&|t| t.epoch_s),
        ));
        speed.push((
            format!("PyTorch b{b}"),
            rgb(colour(i)),
            true,
            pts(&|t| t.peer_epoch_s),
        ));
    }
    let ideal: Vec<(f64, f64)> = gpus.iter().map(|&g| (g as f64, g as f64)).collect();
    speed.push((
        "ideal (dashed)".into(),
        RGBColor(128, 128, 128),
        true,
        ideal,
    ));
    chart(
        &dir.join("speedup.png"),
        &format!("{}: speed-up vs GPUs (fixed images per epoch)", r.model),
        "GPUs",
        "speed-up",
        &speed,
    )
}

pub(super) fn chart(
    path: &Path,
    title: &str,
    x: &str,
    y: &str,
    series: &[Series],
) -> anyhow::Result<()> {
    let all: Vec<(f64, f64)> = series.iter().flat_map(|s| s.3.iter().copied()).collect();
    if all.is_empty() {
        return Ok(());
    }
    let (x0, x1) = all
        .iter()
        .fold((f64::MAX, f64::MIN), |a, p| (a.0.min(p.0), a.1.max(p.0)));
    let y1 = all.iter().fold(0f64, |a, p| a.max(p.1)) * 1.1;
    let pad = ((x1 - x0) * 0.05).max(0.1);
    // plotters picks the encoder from the extension, so the temporary name ends in .png.
    let tmp = path.with_extension("tmp.png");
    {
        let root = BitMapBackend::new(&tmp, (900, 560)).into_drawing_area();
        let err = |e: &dyn std::fmt::Display| anyhow::anyhow!("plot {}: {e}", path.display());
        root.fill(&WHITE).map_err(|e| err(&e))?;
        let mut c = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d((x0 - pad)..(x1 + pad), 0.0..y1.max(1e-9))
            .map_err(|e| err(&e))?;
        c.configure_mesh()
            .x_desc(x)
            .y_desc(y)
            .label_style(("sans-serif", 14))
            .draw()
            .map_err(|e| err(&e))?;
        for (name, col, dashed, pts) in series.iter().filter(|s| !s.3.is_empty()) {
            let style = ShapeStyle::from(col).stroke_width(2);
            if *dashed {
                c.draw_series(DashedLineSeries::new(pts.iter().copied(), 6, 4, style))
                    .map_err(|e| err(&e))?
                    .label(name.clone())
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], style));
            } else {
                c.draw_series(LineSeries::new(pts.iter().copied(), style))
                    .map_err(|e| err(&e))?
                    .label(name.clone())
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], style));
                c.draw_series(pts.iter().map(|&p| Circle::new(p, 3, col.filled())))
                    .map_err(|e| err(&e))?;
            }
        }
        c.configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .label_font(("sans-serif", 13))
            .draw()
            .map_err(|e| err(&e))?;
        root.present().map_err(|e| err(&e))?;
    }
    std::fs::rename(&tmp, path)?;
    Ok(())
}
