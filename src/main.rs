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
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
