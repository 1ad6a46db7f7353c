use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

#[derive(Args)]
#[command(after_help = "Examples:\n  \
    octet launch --gpus 4 -- train --model resnet18 --data cifar10:DIR --device cuda\n  \
    octet launch --gpus 2 --program ./job.sh -- --flag value")]
pub struct LaunchArgs {
    /// Number of processes, one per GPU.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    gpus: u16,
    /// Address where rank 0 listens for the other ranks.
    #[arg(long, default_value = "127.0.0.1")]
    master_addr: String,
    /// Port where rank 0 listens [default: a free port].
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    master_port: Option<u16>,
    /// Run this program instead of octet (with ARGS), e.g. a script that wraps octet.
    #[arg(long)]
    program: Option<PathBuf>,
    /// Seconds the other ranks get to exit after SIGTERM before they are killed.
    #[arg(long, default_value_t = 10.0, value_name = "SECONDS", value_parser = super::values::non_negative)]
    grace: f64,
    /// Arguments for every rank, after `--` (for octet: a command such as `train ...`).
    #[arg(last = true, value_name = "ARGS", required_unless_present = "program")]
    args: Vec<OsString>,
}

#[cfg(unix)]
pub fn run(a: LaunchArgs) -> anyhow::Result<ExitCode> {
    use anyhow::Context;

    let program = match a.program {
        Some(p) => p,
        None => std::env::current_exe().context("cannot find the octet executable")?,
    };
    let master_port = match a.master_port {
        Some(p) => p,
        // Free now; a race with another program taking it in between is reported by the
        // rendezvous as "in use".
        None => octet_trainer::dist::free_local_port()
            .context("cannot find a free port for MASTER_PORT: pass --master-port")?,
    };
    let spec = crate::launch::Spec {
        program,
        args: a.args,
        procs: a.gpus.into(),
        master_addr: a.master_addr,
        master_port,
        grace: std::time::Duration::from_secs_f64(a.grace),
    };
    eprintln!(
        "octet launch: {} ranks of {}, MASTER_ADDR={} MASTER_PORT={}",
        spec.procs,
        spec.program.display(),
        spec.master_addr,
        spec.master_port
    );
    Ok(ExitCode::from(crate::launch::launch(&spec)?))
}

#[cfg(not(unix))]
pub fn run(_: LaunchArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("octet launch needs Linux or another Unix (process groups and signals)")
}
