//! Line charts as PNG, for the bench reports and the training curves: plain series of points
//! in, one picture out (one chart, or several stacked). It knows nothing of any report, so
//! every report draws through it and it imports none of them.
//! Text uses the DejaVu Sans Mono that the exporter bundles (`octet_export::register_font`),
//! so no system font is needed.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;

/// One line of a chart.
pub struct Series {
    pub name: String,
    pub colour: RGBColor,
    /// Dashed lines (a peer, an ideal) are drawn without point marks.
    pub dashed: bool,
    pub points: Vec<(f64, f64)>,
}

impl Series {
    pub fn new(name: String, colour: RGBColor, dashed: bool, points: Vec<(f64, f64)>) -> Self {
        Self {
            name,
            colour,
            dashed,
            points,
        }
    }
}

/// The `i`-th colour of a palette of well-separated colours.
pub fn colour(i: usize) -> RGBColor {
    let c = Palette99::pick(i).to_rgba();
    RGBColor(c.0, c.1, c.2)
}

/// A chart's title and axis labels.
pub struct Axes<'a> {
    pub title: &'a str,
    pub x: &'a str,
    pub y: &'a str,
}

impl<'a> Axes<'a> {
    pub fn new(title: &'a str, x: &'a str, y: &'a str) -> Self {
        Self { title, x, y }
    }
}

/// Draws `series` to `path` (y from 0); nothing is written when no series has a point.
pub fn chart(path: &Path, axes: &Axes, series: &[Series]) -> anyhow::Result<()> {
    charts(path, 560, &[(axes, series)])
}

/// Draws each `(axes, series)` panel as a chart of `panel_height` pixels, stacked top to
/// bottom, into one PNG at `path`, written beside it and renamed over it (a reader never sees
/// half a picture); nothing is written when no series has a point.
pub fn charts(path: &Path, panel_height: u32, panels: &[(&Axes, &[Series])]) -> anyhow::Result<()> {
    octet_export::register_font()?;
    let has_points = |s: &[Series]| s.iter().any(|s| !s.points.is_empty());
    if !panels.iter().any(|(_, s)| has_points(s)) {
        return Ok(());
    }
    // plotters picks the encoder from the extension, so the temporary name ends in .png.
    let tmp = path.with_extension(format!("{}.tmp.png", std::process::id()));
    let drawn = (|| {
        let height = panel_height * panels.len() as u32;
        let root = BitMapBackend::new(&tmp, (900, height)).into_drawing_area();
        let err = |e: &dyn std::fmt::Display| anyhow::anyhow!("plot {}: {e}", path.display());
        root.fill(&WHITE).map_err(|e| err(&e))?;
        let areas = root.split_evenly((panels.len(), 1));
        for (area, (axes, series)) in areas.iter().zip(panels) {
            panel(area, axes, series).map_err(|e| err(&e))?;
        }
        root.present().map_err(|e| err(&e))?;
        std::fs::rename(&tmp, path)
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))
    })();
    if drawn.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    drawn
}

type DrawResult<T> =
    Result<T, DrawingAreaErrorKind<<BitMapBackend<'static> as DrawingBackend>::ErrorType>>;

/// One chart of `series` (y from 0) filling `area`.
fn panel(
    area: &DrawingArea<BitMapBackend, Shift>,
    axes: &Axes,
    series: &[Series],
) -> DrawResult<()> {
    let all: Vec<(f64, f64)> = series
        .iter()
        .flat_map(|s| s.points.iter().copied())
        .collect();
    if all.is_empty() {
        return Ok(());
    }
    let (x0, x1) = all
        .iter()
        .fold((f64::MAX, f64::MIN), |a, p| (a.0.min(p.0), a.1.max(p.0)));
    let y1 = all.iter().fold(0f64, |a, p| a.max(p.1)) * 1.1;
    let pad = ((x1 - x0) * 0.05).max(0.1);
    let mut c = ChartBuilder::on(area)
        .caption(axes.title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d((x0 - pad)..(x1 + pad), 0.0..y1.max(1e-9))?;
    c.configure_mesh()
        .x_desc(axes.x)
        .y_desc(axes.y)
        .label_style(("sans-serif", 14))
        .draw()?;
    for s in series.iter().filter(|s| !s.points.is_empty()) {
        let style = ShapeStyle::from(&s.colour).stroke_width(2);
        let pts = s.points.iter().copied();
        let drawn = if s.dashed {
            c.draw_series(DashedLineSeries::new(pts, 6, 4, style))
        } else {
            c.draw_series(LineSeries::new(pts, style))
        };
        drawn?
            .label(s.name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], style));
        if !s.dashed {
            c.draw_series(
                s.points
                    .iter()
                    .map(|&p| Circle::new(p, 3, s.colour.filled())),
            )?;
        }
    }
    c.configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .label_font(("sans-serif", 13))
        .draw()
}
