//! `curves.png` beside `metrics.csv`: loss and accuracy per epoch and, for runs on several
//! GPUs, images/s, drawn from the same epoch records as the CSV through the line-chart helper
//! (`plot.rs`). Drawn here rather than in the trainer, which stays free of plotting: the
//! command gets every record through its per-epoch callback.

use std::path::{Path, PathBuf};
use std::thread::JoinHandle;

use octet_trainer::metrics::EpochRecord;

use super::plot::{charts, colour, Axes, Series};

/// The picture's name in the run directory.
pub const FILE: &str = "curves.png";

/// Height of each chart of the picture, in pixels.
const PANEL_HEIGHT: u32 = 400;

/// `(epoch, value)` for every record whose value is there and finite (a chart has no place
/// for NaN, and an epoch without a test set has no test accuracy).
fn points(records: &[EpochRecord], value: impl Fn(&EpochRecord) -> Option<f64>) -> Vec<(f64, f64)> {
    records
        .iter()
        .filter_map(|r| Some((r.epoch as f64, value(r)?)))
        .filter(|p| p.1.is_finite())
        .collect()
}

/// The charts of `records`: loss, accuracy, and images/s when any epoch ran on several GPUs.
fn panels(records: &[EpochRecord]) -> Vec<(Axes<'static>, Vec<Series>)> {
    let line = |i: usize, name: &str, pts: Vec<(f64, f64)>| {
        Series::new(name.to_string(), colour(i), false, pts)
    };
    let pct = |v: f64| 100.0 * v;
    let mut out = vec![
        (
            Axes::new("loss", "epoch", "cross-entropy"),
            vec![
                line(0, "train", points(records, |r| Some(r.train_loss))),
                line(1, "test", points(records, |r| r.test_loss)),
            ],
        ),
        (
            Axes::new("accuracy", "epoch", "%"),
            vec![
                line(0, "train", points(records, |r| Some(pct(r.train_accuracy)))),
                line(1, "test", points(records, |r| r.test_accuracy.map(pct))),
            ],
        ),
    ];
    if records.iter().any(|r| r.world > 1) {
        out.push((
            Axes::new("training speed", "epoch", "images/s"),
            vec![
                line(2, "all GPUs", points(records, |r| Some(r.images_per_s))),
                line(
                    3,
                    "per GPU",
                    points(records, |r| Some(r.images_per_s / r.world as f64)),
                ),
            ],
        ));
    }
    for (_, series) in &mut out {
        series.retain(|s| !s.points.is_empty());
    }
    out
}

/// Draws `records` into `path` (replacing it whole).
pub fn draw(path: &Path, records: &[EpochRecord]) -> anyhow::Result<()> {
    let panels = panels(records);
    let refs: Vec<(&Axes, &[Series])> = panels.iter().map(|(a, s)| (a, s.as_slice())).collect();
    charts(path, PANEL_HEIGHT, &refs)
}

/// Redraws the curves after every epoch on a thread, so a data-parallel job's other ranks do
/// not wait for rank 0 to draw. A picture that cannot be drawn is reported, not fatal: the
/// checkpoint and `metrics.csv` matter more than their plot.
pub struct Curves {
    path: PathBuf,
    records: Vec<EpochRecord>,
    drawing: Option<JoinHandle<anyhow::Result<()>>>,
}

impl Curves {
    /// Curves in `dir`, starting with the epochs a resumed run has done.
    pub fn new(dir: &Path, history: &[EpochRecord]) -> Self {
        Self {
            path: dir.join(FILE),
            records: history.to_vec(),
            drawing: None,
        }
    }

    /// Adds an epoch and starts redrawing (after the previous drawing is done).
    pub fn push(&mut self, record: &EpochRecord) {
        self.wait();
        self.records.push(record.clone());
        let (path, records) = (self.path.clone(), self.records.clone());
        self.drawing = Some(std::thread::spawn(move || draw(&path, &records)));
    }

    /// Waits for the drawing in flight; says on stderr if it failed.
    pub fn wait(&mut self) {
        let failed = match self.drawing.take().map(JoinHandle::join) {
            None | Some(Ok(Ok(()))) => return,
            Some(Ok(Err(e))) => e.to_string(),
            Some(Err(_)) => "the drawing thread panicked".into(),
        };
        eprintln!(
            "octet train: {} not written ({failed}); metrics.csv holds the same figures",
            self.path.display()
        );
    }
}

impl Drop for Curves {
    fn drop(&mut self) {
        self.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use octet_trainer::metrics::EpochTimes;

    fn record(epoch: usize, world: usize, test: Option<f64>) -> EpochRecord {
        EpochRecord {
            epoch,
            step: 10 * epoch,
            lr: 0.1,
            train_loss: 2.0 / epoch as f64,
            train_accuracy: 0.5 + 0.1 * epoch as f64,
            test_loss: test.map(|a| 1.0 - a),
            test_accuracy: test,
            images: 640,
            images_per_s: 1000.0 * world as f64,
            times: EpochTimes::default(),
            world,
            ranks: Vec::new(),
            bucket_tail: None,
        }
    }

    fn names(p: &[(Axes, Vec<Series>)]) -> Vec<(String, Vec<String>)> {
        p.iter()
            .map(|(a, s)| {
                (
                    a.title.to_string(),
                    s.iter().map(|s| s.name.clone()).collect(),
                )
            })
            .collect()
    }

    #[test]
    fn one_epoch_gives_loss_and_accuracy_points() {
        let p = panels(&[record(1, 1, Some(0.7))]);
        assert_eq!(
            names(&p),
            [
                ("loss".to_string(), vec!["train".to_string(), "test".into()]),
                ("accuracy".into(), vec!["train".into(), "test".into()]),
            ]
        );
        assert_eq!(p[0].1[0].points, [(1.0, 2.0)]);
        assert_eq!(p[1].1[1].points, [(1.0, 70.0)]);
    }

    #[test]
    fn missing_and_non_finite_values_are_left_out_and_several_gpus_add_speed() {
        let mut bad = record(2, 2, Some(0.8));
        bad.test_loss = Some(f64::NAN);
        let p = panels(&[record(1, 2, None), bad, record(3, 2, Some(0.9))]);
        assert_eq!(p.len(), 3);
        assert_eq!(p[0].1[1].points, [(3.0, 1.0 - 0.9)]);
        assert_eq!(p[1].1[1].points.len(), 2);
        assert_eq!(
            p[2].1[1].points,
            [(1.0, 1000.0), (2.0, 1000.0), (3.0, 1000.0)]
        );
        for (_, series) in &p {
            assert!(series
                .iter()
                .flat_map(|s| &s.points)
                .all(|q| q.1.is_finite()));
        }
    }

    #[test]
    fn draws_a_png_of_one_chart_per_panel() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE);
        for (records, panels) in [
            (vec![record(1, 1, Some(0.7))], 2),
            (vec![record(1, 4, Some(0.7)), record(2, 4, Some(0.8))], 3),
        ] {
            draw(&path, &records).unwrap();
            let png = std::fs::read(&path).unwrap();
            assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"));
            let height = u32::from_be_bytes(png[20..24].try_into().unwrap());
            assert_eq!(height, panels * PANEL_HEIGHT);
        }
        // Only the picture: no temporary left beside it.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
