use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

#[derive(Args)]
#[command(after_help = "Examples:\n  \
    octet launch --gpus 4 -- train --model resnet18 --data cifar10:DIR --device cuda\n  \
    octet launch --gpus 4 --max-restarts 3 -- train --device cuda --out runs/r18\n  \
    # two machines, 8 GPUs each; on node 0 (10.0.0.1) and node 1:\n  \
    octet launch --gpus 8 --nnodes 2 --node-rank 0 --master-addr 10.0.0.1 -- train --device cuda\n  \
    octet launch --gpus 8 --nnodes 2 --node-rank 1 --master-addr 10.0.0.1 -- train --device cuda\n  \
    octet launch --gpus 2 --program ./job.sh -- --flag value")]
pub struct LaunchArgs {
    /// Number of processes on this machine, one per GPU.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    gpus: u16,
    /// Number of machines in the job, each running its own octet launch with the same --gpus.
    #[arg(long, default_value_t = 1, value_name = "M", value_parser = clap::value_parser!(u16).range(1..))]
    nnodes: u16,
    /// This machine's place among the --nnodes, 0..M-1; node 0 runs rank 0.
    #[arg(long, default_value_t = 0, value_name = "R")]
    node_rank: u16,
    /// Address where rank 0 listens for the other ranks: node 0's address as the other
    /// machines reach it [default: 127.0.0.1; required with --nnodes above 1].
    #[arg(long, value_name = "HOST")]
    master_addr: Option<String>,
    /// Port where rank 0 listens [default: a free port on one machine, 29500 with several].
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    master_port: Option<u16>,
    /// When a rank fails, stop all and start them again this many times at most (each
    /// `octet train` resumes from its last checkpoint); then exit with the failing code.
    #[arg(long, default_value_t = 0, value_name = "K")]
    max_restarts: u16,
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

/// torchrun's port when several machines must agree on one without talking first.
const MULTI_NODE_PORT: u16 = 29500;

#[cfg(unix)]
pub fn run(a: LaunchArgs) -> anyhow::Result<ExitCode> {
    use anyhow::Context;

    let program = match a.program {
        Some(p) => p,
        None => std::env::current_exe().context("cannot find the octet executable")?,
    };
    let several = a.nnodes > 1;
    let master_addr = match a.master_addr {
        Some(addr) => addr,
        None if several => anyhow::bail!(
            "--nnodes {} needs --master-addr: the address of node 0 (where rank 0 listens) as \
             the other machines reach it, the same on every machine",
            a.nnodes
        ),
        None => "127.0.0.1".into(),
    };
    let master_port = match a.master_port {
        Some(p) => p,
        None if several => MULTI_NODE_PORT,
        // Free now; a race with another program taking it in between is reported by the
        // rendezvous as "in use".
        None => octet_trainer::dist::free_local_port()
            .context("cannot find a free port for MASTER_PORT: pass --master-port")?,
    };
    let spec = crate::launch::Spec {
        program,
        args: a.args,
        procs: a.gpus.into(),
        nnodes: a.nnodes.into(),
        node_rank: a.node_rank.into(),
        master_addr,
        master_port,
        grace: std::time::Duration::from_secs_f64(a.grace),
        max_restarts: a.max_restarts.into(),
        launched_at_ms: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .context("the system clock is before 1970")?
            .as_millis(),
    };
    Ok(ExitCode::from(crate::launch::launch(&spec)?))
}

#[cfg(not(unix))]
pub fn run(_: LaunchArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("octet launch needs Linux or another Unix (process groups and signals)")
}
