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

/// Runs `octet`, which must succeed; its output. (Not every test file needs it.)
#[allow(dead_code)]
pub fn octet_ok(args: &[&str]) -> Output {
    let o = octet(args);
    assert!(o.status.success(), "octet {args:?}:\n{}", text(&o));
    o
}

/// Runs `octet … --json`, which must succeed; the JSON of its last line of stdout.
#[allow(dead_code)]
pub fn octet_json(args: &[&str]) -> serde_json::Value {
    let o = octet_ok(args);
    let out = String::from_utf8_lossy(&o.stdout);
    serde_json::from_str(out.lines().last().unwrap_or_default()).unwrap()
}
