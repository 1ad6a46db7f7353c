//! `octet`: train small CNNs on CPUs and GPUs, export them to int8, run them anywhere.

mod cli;
#[cfg(unix)]
mod launch;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let args = cli::Cli::parse();
    match cli::run(args) {
        Ok(code) => code,
        Err(e) => {
            // When the distributed watchdog is aborting it has printed why, and this error is
            // what the abort did to the main thread: leave the exit to the watchdog (it waits
            // at most 70 s for a checkpoint write and the abort), and report it only after.
            if octet_trainer::dist::aborting() {
                std::thread::sleep(std::time::Duration::from_secs(120));
            }
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
