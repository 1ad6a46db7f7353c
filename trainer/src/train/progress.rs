//! The terminal progress bar of an epoch (rank 0, interactive runs only).

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressStyle};

use crate::readback::Tally;

/// A bar over `len` batches, hidden unless `enabled` and stderr is a terminal.
pub(super) fn bar(enabled: bool, len: u64, epoch: usize, epochs: usize) -> ProgressBar {
    if !enabled || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template(
            "epoch {prefix} [{bar:30}] {pos}/{len} {per_sec} eta {eta} {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> "),
    );
    bar.set_prefix(format!("{epoch}/{epochs}"));
    bar
}

/// Moves `bar` to `batches` done, showing the loss and accuracy read back so far.
pub(super) fn show(bar: &ProgressBar, batches: usize, tally: &Tally) {
    bar.set_position(batches as u64);
    bar.set_message(format!(
        "loss {:.4} acc {:.2}%",
        tally.mean_loss(),
        100.0 * tally.accuracy()
    ));
}
