//! All-reduce bus bandwidth across message sizes, the way nccl-tests and the PyTorch peer
//! (`peer_allreduce.py`) measure it: out-of-place f32 sums, warm-up, then the host clock
//! around a synchronised loop; algbw = bytes / time, busbw = algbw · 2(n−1)/n.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use candle_core::{DType, Tensor};
use clap::Args;
use octet_trainer::atomic::write_atomic;
use octet_trainer::device::DeviceSpec;
use octet_trainer::dist::{self, collective::busbw_factor, DistEnv};
use serde::Serialize;

#[derive(Args)]
pub struct AllreduceBench {
    /// Message sizes in bytes (44695848 is ResNet-18's gradient).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1024,65536,1048576,4194304,16777216,44695848,67108864,268435456"
    )]
    sizes: Vec<usize>,
    /// Timed iterations per size (a quarter of them for sizes of 128 MiB and more).
    #[arg(long, default_value_t = 40, value_parser = crate::cli::common::at_least_one)]
    iters: usize,
    /// Untimed all-reduces per size before the timed ones.
    #[arg(long, default_value_t = 5)]
    warmup: usize,
    /// Rank 0 writes the rows as JSON here.
    #[arg(long)]
    out: Option<PathBuf>,
    /// One JSON line per size on stdout.
    #[arg(long)]
    json: bool,
    /// Seconds to wait for the other ranks.
    #[arg(long, default_value_t = 120)]
    dist_timeout: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub bytes: usize,
    pub us: f64,
    pub algbw_gbs: f64,
    pub busbw_gbs: f64,
}

pub fn run(a: AllreduceBench) -> anyhow::Result<()> {
    let env = DistEnv::from_env()?.filter(|e| e.world > 1).context(
        "bench allreduce needs several ranks: run it as `octet launch --gpus N -- bench allreduce`",
    )?;
    if env.rank == 0 {
        eprintln!("octet bench allreduce: {}", env.describe());
    }
    let dev = DeviceSpec::Cuda(env.gpu).open()?;
    let t = Duration::from_secs(a.dist_timeout);
    let coll = dist::connect(Some(&env), &dev, t, t)?;
    let world = coll.world();
    let mut rows = Vec::new();
    if env.rank == 0 && !a.json {
        println!("all-reduce, {world} ranks");
        println!(
            "{:>12} {:>10} {:>11} {:>11}",
            "bytes", "time us", "algbw GB/s", "busbw GB/s"
        );
    }
    for &bytes in &a.sizes {
        let n = (bytes / 4).max(1);
        let x = Tensor::ones(n, DType::F32, &dev)?;
        for _ in 0..a.warmup {
            coll.all_reduce_sum(&x)?;
        }
        dev.synchronize()?;
        // A small all-reduce lines the ranks up so the clock starts together.
        coll.all_reduce_sum(&Tensor::ones(1, DType::F32, &dev)?)?;
        dev.synchronize()?;
        let iters = if bytes >= 128 << 20 {
            (a.iters / 4).max(1)
        } else {
            a.iters
        };
        let start = Instant::now();
        for _ in 0..iters {
            coll.all_reduce_sum(&x)?;
        }
        dev.synchronize()?;
        let dt = start.elapsed().as_secs_f64() / iters as f64;
        let _ = coll.take_stats()?;
        let alg = 4.0 * n as f64 / dt / 1e9;
        let row = Row {
            bytes: 4 * n,
            us: dt * 1e6,
            algbw_gbs: alg,
            busbw_gbs: alg * busbw_factor(world),
        };
        if env.rank == 0 {
            if a.json {
                println!("{}", serde_json::to_string(&row)?);
            } else {
                println!(
                    "{:>12} {:>10.1} {:>11.1} {:>11.1}",
                    row.bytes, row.us, row.algbw_gbs, row.busbw_gbs
                );
            }
        }
        rows.push(row);
    }
    if env.rank == 0 {
        let peak = rows.iter().map(|r| r.busbw_gbs).fold(0.0, f64::max);
        if !a.json {
            println!("peak busbw {peak:.1} GB/s");
        }
        if let Some(p) = &a.out {
            let v = serde_json::json!({
                "bench": "allreduce", "commit": crate::cli::common::COMMIT, "world": world,
                "peak_busbw_gbs": peak, "rows": rows,
            });
            write_atomic(p, serde_json::to_string_pretty(&v)?.as_bytes())?;
        }
    }
    Ok(())
}
