//! Data parallelism across processes: who this process is in the job ([`DistEnv`], from
//! torchrun's or Slurm's variables), how the processes find each other ([`share_bytes`]), how
//! gradients are grouped for all-reduce ([`BucketPlan`]), the collectives (NCCL on GPUs, threads on CPU) and the synchronous SGD
//! built on them ([`DataParallel`]).

mod bucket;
pub mod collective;
pub mod data_parallel;
mod env;
#[cfg(feature = "nccl")]
pub mod nccl;
mod rendezvous;
mod slurm;
pub mod sync_bn;
#[cfg_attr(not(feature = "nccl"), allow(dead_code))]
mod watchdog;

pub use bucket::{Bucket, BucketPlan, Member, DEFAULT_BUCKET_BYTES, FIRST_BUCKET_BYTES};
pub use collective::{thread_group, Collective, CommStats, Finished, InFlight, Solo, ThreadRank};
pub use data_parallel::{
    tail_pays, BnMode, BucketTail, DataParallel, GradCompress, ReduceConfig, Reducer, Schedule,
};
pub use env::{
    free_local_port, gpu_of, launched_at, restarts, DistEnv, Origin, RankVars, LAUNCHED_AT_VAR,
    MAX_RESTARTS_VAR, RESTART_COUNT_VAR,
};
pub use rendezvous::{barrier, listen_addrs, share_bytes, PROTOCOL_VERSION};
pub use slurm::first_host;
pub use watchdog::aborting;

use std::sync::Arc;
use std::time::Duration;

use candle_core::Device;

/// The collective of this process: NCCL when `env` names more than one rank, else one rank
/// alone. `timeout` bounds the rendezvous, `watchdog` how long a collective may stay unfinished
/// before the rank gives up on its peers.
pub fn connect(
    env: Option<&DistEnv>,
    dev: &Device,
    timeout: Duration,
    watchdog: Duration,
) -> crate::Result<Arc<dyn Collective>> {
    let Some(env) = env.filter(|e| e.world > 1) else {
        return Ok(Arc::new(Solo));
    };
    #[cfg(feature = "nccl")]
    {
        Ok(Arc::new(nccl::Nccl::init(env, dev, timeout, watchdog)?))
    }
    #[cfg(not(feature = "nccl"))]
    {
        let _ = (dev, timeout, watchdog);
        Err(crate::TrainError::Dist(format!(
            "WORLD_SIZE={} asks for {} ranks, but this octet was built without NCCL: rebuild \
             with `cargo build --release --features nccl`",
            env.world, env.world
        )))
    }
}
