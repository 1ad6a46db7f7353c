//! `octet ranks`: a job's ranks meet without GPUs or data, so a launch (srun, `octet launch
//! --nnodes`, torchrun) can be checked in seconds before a long run is queued.

use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use octet_trainer::dist::{barrier, DistEnv, RankVars};

#[derive(Args)]
#[command(after_help = "Examples:\n  \
    octet launch --gpus 4 -- ranks\n  \
    srun --nodes 2 --ntasks-per-node 4 octet ranks\n  \
    octet launch --gpus 8 --nnodes 2 --node-rank 1 --master-addr 10.0.0.1 -- ranks --json")]
pub struct RanksArgs {
    /// Seconds to wait for the other ranks.
    #[arg(long, default_value_t = 60, value_name = "SECONDS")]
    dist_timeout: u64,
    /// One JSON line per rank on stdout instead of text.
    #[arg(long)]
    json: bool,
}

pub fn run(a: RanksArgs) -> anyhow::Result<()> {
    let env = DistEnv::from_env()?.context(
        "no job around this process: start it with `octet launch --gpus N -- ranks`, as srun \
         tasks, or with RANK and WORLD_SIZE set",
    )?;
    // On stderr even with --json: where the job's places came from is the first thing to know.
    if env.is_main() {
        eprintln!("octet ranks: {}", env.describe());
    }
    let start = Instant::now();
    barrier(&env, Duration::from_secs(a.dist_timeout))?;
    let waited = start.elapsed().as_secs_f64();
    let host = host_name();
    if a.json {
        let line = serde_json::json!({
            "rank": env.rank,
            "world": env.world,
            "local_rank": env.local_rank,
            "gpu": env.gpu,
            "host": host,
            "master": format!("{}:{}", env.master_addr, env.master_port),
            "variables": match env.origin.ranks {
                RankVars::Torchrun => "torchrun",
                RankVars::Slurm => "slurm",
            },
            "waited_s": waited,
        });
        println!("{line}");
    } else {
        println!(
            "rank {}/{} on {host}: local rank {}, GPU {}; all {} ranks met at {}:{} after {waited:.2} s",
            env.rank,
            env.world,
            env.local_rank,
            env.gpu,
            env.world,
            env.master_addr,
            env.master_port
        );
    }
    Ok(())
}

/// This machine's name, as ranks on other machines would report it.
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_else(|_| "?".into())
}
