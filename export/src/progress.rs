//! Progress of the exporter's long phases (each calibration pass, the SQNR pass, each ablation
//! row): the [`Progress`] listener the passes tell, and [`Phases`], the listener `octet export`
//! uses: a progress bar with an ETA on stderr while a phase runs (interactive runs only, as
//! `octet train` shows its epochs) and every phase's duration for the report.

use std::cell::RefCell;
use std::io::IsTerminal;
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

/// Told when a phase starts and as its images are done. Methods take `&self` so that one
/// listener can be lent to every pass (implementations keep their state in cells or atomics).
pub trait Progress {
    /// A phase over `images` images begins; the previous one, if any, is over.
    fn phase(&self, name: &str, images: usize);
    /// `images` more images of the current phase are done.
    fn advance(&self, images: usize);
}

/// Hears nothing: the library's default.
pub struct Quiet;

impl Progress for Quiet {
    fn phase(&self, _: &str, _: usize) {}
    fn advance(&self, _: usize) {}
}

/// One finished phase.
#[derive(Debug, Clone, Serialize)]
pub struct Phase {
    pub name: String,
    pub images: usize,
    pub seconds: f64,
}

/// The phase running now and those done.
pub struct Phases {
    show: bool,
    current: RefCell<Option<(Phase, Instant, ProgressBar)>>,
    done: RefCell<Vec<Phase>>,
}

impl Phases {
    /// Bars drawn only when `show` and stderr is a terminal; timings kept either way.
    pub fn new(show: bool) -> Self {
        Phases {
            show: show && std::io::stderr().is_terminal(),
            current: RefCell::new(None),
            done: RefCell::new(Vec::new()),
        }
    }

    /// Prints `line` to stderr above the bar (or plainly when none is drawn).
    pub fn say(&self, line: &str) {
        match &*self.current.borrow() {
            Some((_, _, bar)) => bar.suspend(|| eprintln!("{line}")),
            None => eprintln!("{line}"),
        }
    }

    /// Seconds since the current phase began (0 when none runs).
    pub fn elapsed(&self) -> f64 {
        self.current
            .borrow()
            .as_ref()
            .map_or(0.0, |(_, t, _)| t.elapsed().as_secs_f64())
    }

    /// Ends the current phase; returns every phase in order.
    pub fn finish(&self) -> Vec<Phase> {
        if let Some((mut p, start, bar)) = self.current.borrow_mut().take() {
            bar.finish_and_clear();
            p.seconds = start.elapsed().as_secs_f64();
            self.done.borrow_mut().push(p);
        }
        self.done.borrow().clone()
    }

    fn bar(&self, name: &str, images: usize) -> ProgressBar {
        if !self.show {
            return ProgressBar::hidden();
        }
        let bar = ProgressBar::new(images as u64);
        bar.set_style(
            ProgressStyle::with_template(
                "{prefix:32} [{bar:30}] {pos}/{len} images, {elapsed} elapsed, eta {eta}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        bar.set_prefix(name.to_string());
        bar
    }
}

impl Progress for Phases {
    fn phase(&self, name: &str, images: usize) {
        self.finish();
        let p = Phase {
            name: name.into(),
            images,
            seconds: 0.0,
        };
        *self.current.borrow_mut() = Some((p, Instant::now(), self.bar(name, images)));
    }

    fn advance(&self, images: usize) {
        if let Some((_, _, bar)) = &*self.current.borrow() {
            bar.inc(images as u64);
        }
    }
}

/// `name 12.3 s, …`: the phases' durations on one line.
pub fn summary(phases: &[Phase]) -> String {
    let parts: Vec<String> = phases
        .iter()
        .map(|p| format!("{} {:.1} s", p.name, p.seconds))
        .collect();
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_are_timed_in_order_and_finish_is_idempotent() {
        let p = Phases::new(false);
        assert_eq!(p.elapsed(), 0.0);
        p.phase("a", 10);
        p.advance(10);
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(p.elapsed() >= 0.02);
        p.phase("b", 3);
        let done = p.finish();
        let names: Vec<_> = done.iter().map(|x| (x.name.as_str(), x.images)).collect();
        assert_eq!(names, [("a", 10), ("b", 3)]);
        assert!(done[0].seconds >= 0.02);
        assert_eq!(p.finish().len(), 2);
        assert_eq!(summary(&done[..1]).split(' ').next(), Some("a"));
    }
}
