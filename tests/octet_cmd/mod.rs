//! The `octet` binary run as a user runs it, for the end-to-end tests (one copy for every test
//! file that drives the command line).

use std::process::{Command, Output};

/// Runs the `octet` this package built with `args`.
pub fn octet(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_octet"))
        .args(args)
        .output()
        .expect("run octet")
}

/// What a run printed, stdout then stderr.
pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}
