//! The rank environment: the variables `torchrun` and `octet launch` set (`RANK`,
//! `WORLD_SIZE`, …), or failing those the ones Slurm's `srun` sets (`slurm.rs`).

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::slurm;
use crate::{Result, TrainError};

/// This process's place in a data-parallel job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DistEnv {
    /// Global rank, `0..world`.
    pub rank: usize,
    /// Number of processes in the job.
    pub world: usize,
    /// Rank on this machine.
    pub local_rank: usize,
    /// CUDA ordinal of this rank's GPU among those `CUDA_VISIBLE_DEVICES` leaves visible.
    pub gpu: usize,
    /// Where rank 0 listens for the rendezvous.
    pub master_addr: String,
    pub master_port: u16,
    /// Which variables gave these values, for the job's first line and for error hints.
    pub origin: Origin,
}

/// Which variables a [`DistEnv`] came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Origin {
    pub ranks: RankVars,
    /// The variable that named the rendezvous host (`MASTER_ADDR`, a Slurm node list), or
    /// "default".
    pub addr: &'static str,
    /// How the port was chosen: `MASTER_PORT`, derived from `SLURM_JOB_ID`, or "default".
    pub port: &'static str,
}

/// The family of variables that gave rank, world size and local rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RankVars {
    /// `RANK`, `WORLD_SIZE`, `LOCAL_RANK`: torchrun, `octet launch`, or set by hand.
    Torchrun,
    /// `SLURM_PROCID`, `SLURM_NTASKS`, `SLURM_LOCALID`: a task started by `srun`.
    Slurm,
}

/// torchrun's defaults.
pub(super) const DEFAULT_ADDR: &str = "127.0.0.1";
pub(super) const DEFAULT_PORT: u16 = 29500;

/// How many times the launcher has restarted this job's ranks (torchrun's name, so scripts
/// written for torchrun read it too). Set by `octet launch`; unset means 0.
pub const RESTART_COUNT_VAR: &str = "TORCHELASTIC_RESTART_COUNT";
/// The most restarts the launcher allows (torchrun's name).
pub const MAX_RESTARTS_VAR: &str = "TORCHELASTIC_MAX_RESTARTS";
/// When `octet launch` first started the job's ranks (milliseconds since the Unix epoch): a
/// restarted rank resumes only from a checkpoint written since, never from an older run's.
pub const LAUNCHED_AT_VAR: &str = "OCTET_LAUNCHED_AT_MS";

impl DistEnv {
    /// Reads the rank variables from the process environment; see [`DistEnv::from_vars`].
    pub fn from_env() -> Result<Option<DistEnv>> {
        Self::from_vars(|k| std::env::var(k).ok())
    }

    /// `None` when neither `WORLD_SIZE` nor `SLURM_PROCID` is set (a plain single-process run).
    ///
    /// With `WORLD_SIZE`, `RANK` is required; `LOCAL_RANK` defaults to `RANK`, `MASTER_ADDR` to
    /// 127.0.0.1 and `MASTER_PORT` to 29500 (torchrun's defaults). Without it, an `srun` task
    /// takes its place from Slurm's variables (see `slurm.rs`); `MASTER_ADDR`/`MASTER_PORT`
    /// still win when set. A variable set to the empty string counts as unset, as `VAR= cmd`
    /// is the shell's way to clear one.
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<Option<DistEnv>> {
        let var = |k: &str| {
            get(k)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        let ranks = match var("WORLD_SIZE") {
            Some(world) => torchrun_ranks(&var, &world)?,
            None => match slurm::ranks(&var)? {
                Some(r) => r,
                None => return Ok(None),
            },
        };
        let (rank, world, local_rank, kind) = ranks;
        let names = kind.names();
        if rank >= world {
            return Err(bad(format!(
                "{} {rank} is not below {} {world}: ranks run from 0 to {}",
                names[0],
                names[1],
                world - 1
            )));
        }
        if local_rank >= world {
            return Err(bad(format!(
                "{} {local_rank} is not below {} {world}",
                names[2], names[1]
            )));
        }
        // MASTER_ADDR and MASTER_PORT win; Slurm's are read only in their absence.
        let slurm = kind == RankVars::Slurm;
        let (master_addr, addr_from) = match var("MASTER_ADDR") {
            Some(a) => (a, "MASTER_ADDR"),
            None if slurm => slurm::master_host(&var)?,
            None => (DEFAULT_ADDR.into(), "default"),
        };
        let (master_port, port_from) = match var("MASTER_PORT") {
            Some(p) => (number::<u16>("MASTER_PORT", &p)?, "MASTER_PORT"),
            None => match slurm.then(|| slurm::port(&var)).transpose()?.flatten() {
                Some(p) => (p, slurm::PORT_ORIGIN),
                None => (DEFAULT_PORT, "default"),
            },
        };
        if master_port == 0 {
            return Err(bad(
                "MASTER_PORT is 0: the other ranks need a fixed port to reach rank 0 (1..65535)",
            ));
        }
        // CUDA_VISIBLE_DEVICES="" hides every GPU, so it is read as given, not as unset.
        let gpu = gpu_of(local_rank, get("CUDA_VISIBLE_DEVICES").as_deref())?;
        Ok(Some(DistEnv {
            rank,
            world,
            local_rank,
            gpu,
            master_addr,
            master_port,
            origin: Origin {
                ranks: kind,
                addr: addr_from,
                port: port_from,
            },
        }))
    }

    /// A job of one: rank 0 of 1 on the default address.
    pub fn single() -> DistEnv {
        DistEnv {
            rank: 0,
            world: 1,
            local_rank: 0,
            gpu: 0,
            master_addr: DEFAULT_ADDR.into(),
            master_port: DEFAULT_PORT,
            origin: Origin {
                ranks: RankVars::Torchrun,
                addr: "default",
                port: "default",
            },
        }
    }

    /// Rank 0 logs, evaluates and writes checkpoints; the others stay quiet.
    pub fn is_main(&self) -> bool {
        self.rank == 0
    }

    /// What rank 0 prints first: where the ranks and the rendezvous came from.
    pub fn describe(&self) -> String {
        let ranks = match self.origin.ranks {
            RankVars::Torchrun => "RANK, WORLD_SIZE, LOCAL_RANK (torchrun or octet launch)",
            RankVars::Slurm => "Slurm's SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID",
        };
        format!(
            "{} ranks from {ranks}; rendezvous {}:{} (host from {}, port from {})",
            self.world, self.master_addr, self.master_port, self.origin.addr, self.origin.port
        )
    }

    /// Advice added to a rendezvous that timed out, for the way this job was started.
    pub(super) fn start_hint(&self) -> &'static str {
        match self.origin.ranks {
            RankVars::Slurm => {
                " Under Slurm every rank is an srun task: in an sbatch script run \
                 `srun octet train …` (one task per GPU), not `octet train …` alone."
            }
            RankVars::Torchrun => "",
        }
    }
}

impl RankVars {
    /// The variables of rank, world size and local rank, for messages.
    fn names(self) -> [&'static str; 3] {
        match self {
            RankVars::Torchrun => ["RANK", "WORLD_SIZE", "LOCAL_RANK"],
            RankVars::Slurm => ["SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"],
        }
    }
}

impl fmt::Display for DistEnv {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "rank {}/{} (local {}, GPU {}), rendezvous {}:{}",
            self.rank, self.world, self.local_rank, self.gpu, self.master_addr, self.master_port
        )
    }
}

/// (rank, world, local rank, which variables).
pub(super) type Ranks = (usize, usize, usize, RankVars);

fn torchrun_ranks(var: &impl Fn(&str) -> Option<String>, world: &str) -> Result<Ranks> {
    let world: usize = number("WORLD_SIZE", world)?;
    if world == 0 {
        return Err(bad("WORLD_SIZE is 0: a job needs at least one process"));
    }
    let rank: usize = match var("RANK") {
        Some(r) => number("RANK", &r)?,
        None => {
            return Err(bad(format!(
                "WORLD_SIZE is {world} but RANK is not set: every process of a distributed \
                 job needs its RANK (0..{world})"
            )))
        }
    };
    let local_rank = match var("LOCAL_RANK") {
        Some(r) => number("LOCAL_RANK", &r)?,
        None => rank,
    };
    Ok((rank, world, local_rank, RankVars::Torchrun))
}

/// The CUDA ordinal of local rank `local_rank`, given `CUDA_VISIBLE_DEVICES`: the local rank
/// when all of the node's GPUs are visible (torchrun, `octet launch`, Slurm without GPU
/// binding), 0 when exactly one is (Slurm's `--gpus-per-task=1`, a per-rank wrapper).
pub fn gpu_of(local_rank: usize, visible: Option<&str>) -> Result<usize> {
    let Some(list) = visible else {
        return Ok(local_rank);
    };
    let n = list.split(',').filter(|d| !d.trim().is_empty()).count();
    match n {
        0 => Err(bad(format!(
            "CUDA_VISIBLE_DEVICES='{list}' hides every GPU from this rank: unset it, or give \
             each rank a GPU (Slurm: --gpus-per-task=1)"
        ))),
        1 => Ok(0),
        n if local_rank < n => Ok(local_rank),
        n => Err(bad(format!(
            "local rank {local_rank} has no GPU of its own: CUDA_VISIBLE_DEVICES='{list}' \
             leaves {n} GPUs visible. Start at most {n} ranks on this node, or give each rank \
             one GPU (Slurm: --gpus-per-task=1)"
        ))),
    }
}

/// (restarts so far, restarts allowed) from [`RESTART_COUNT_VAR`] and [`MAX_RESTARTS_VAR`];
/// unset means 0 (not started by a launcher that restarts).
pub fn restarts(get: impl Fn(&str) -> Option<String>) -> Result<(usize, usize)> {
    let count = |name: &str| match get(name).map(|v| v.trim().to_string()) {
        Some(v) if !v.is_empty() => number(name, &v),
        _ => Ok(0),
    };
    Ok((count(RESTART_COUNT_VAR)?, count(MAX_RESTARTS_VAR)?))
}

/// When `octet launch` started the job, from [`LAUNCHED_AT_VAR`]; `None` under another
/// launcher.
pub fn launched_at(get: impl Fn(&str) -> Option<String>) -> Result<Option<SystemTime>> {
    match get(LAUNCHED_AT_VAR).map(|v| v.trim().to_string()) {
        Some(ms) if !ms.is_empty() => Ok(Some(
            UNIX_EPOCH + Duration::from_millis(number(LAUNCHED_AT_VAR, &ms)?),
        )),
        _ => Ok(None),
    }
}

/// A port on 127.0.0.1 that nothing listens on now, for a rendezvous on this machine (`octet
/// launch` without `--master-port`, tests). Another process may take it before rank 0 binds.
pub fn free_local_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind((DEFAULT_ADDR, 0))?
        .local_addr()?
        .port())
}

pub(super) fn bad(msg: impl Into<String>) -> TrainError {
    TrainError::Dist(msg.into())
}

pub(super) fn number<T: std::str::FromStr>(name: &str, value: &str) -> Result<T> {
    value.parse().map_err(|_| {
        let what = if name.ends_with("_PORT") {
            "a port number (1..65535)"
        } else {
            "a non-negative integer"
        };
        bad(format!("{name}='{value}' is not {what}"))
    })
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    pub(crate) fn env(pairs: &[(&str, &str)]) -> Result<Option<DistEnv>> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        DistEnv::from_vars(move |k| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()))
    }

    #[test]
    fn unset_world_is_single_process() {
        assert_eq!(env(&[]).unwrap(), None);
        assert_eq!(env(&[("RANK", "3")]).unwrap(), None);
        assert_eq!(env(&[("WORLD_SIZE", "")]).unwrap(), None);
    }

    #[test]
    fn defaults_follow_torchrun() {
        let e = env(&[("WORLD_SIZE", "4"), ("RANK", "2")]).unwrap().unwrap();
        assert_eq!(
            e,
            DistEnv {
                rank: 2,
                world: 4,
                local_rank: 2,
                gpu: 2,
                master_addr: "127.0.0.1".into(),
                master_port: 29500,
                origin: Origin {
                    ranks: RankVars::Torchrun,
                    addr: "default",
                    port: "default"
                }
            }
        );
        assert!(!e.is_main());
        assert!(DistEnv::single().is_main());
        assert_eq!(DistEnv::single().world, 1);
    }

    #[test]
    fn reads_every_variable() {
        let e = env(&[
            ("WORLD_SIZE", "16"),
            ("RANK", "9"),
            ("LOCAL_RANK", "1"),
            ("MASTER_ADDR", "node07"),
            ("MASTER_PORT", " 12345 "),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(
            (
                e.rank,
                e.world,
                e.local_rank,
                e.master_addr.as_str(),
                e.master_port
            ),
            (9, 16, 1, "node07", 12345)
        );
        assert_eq!(
            e.to_string(),
            "rank 9/16 (local 1, GPU 1), rendezvous node07:12345"
        );
        assert_eq!(
            e.describe(),
            "16 ranks from RANK, WORLD_SIZE, LOCAL_RANK (torchrun or octet launch); rendezvous \
             node07:12345 (host from MASTER_ADDR, port from MASTER_PORT)"
        );
        assert_eq!(e.start_hint(), "");
    }

    /// Variables as (name, value).
    pub(crate) type Vars<'a> = &'a [(&'a str, &'a str)];

    /// Each case is refused with a [`TrainError::Dist`] naming what is wrong.
    pub(crate) fn refused(cases: &[(Vars, &[&str])]) {
        for (vars, expected) in cases {
            let e = env(vars).unwrap_err();
            assert!(matches!(e, TrainError::Dist(_)), "{vars:?}: {e:?}");
            let e = e.to_string();
            for part in *expected {
                assert!(e.contains(part), "{vars:?}: {e}");
            }
        }
    }

    #[test]
    fn errors_name_the_variable() {
        refused(&[
            (
                &[("WORLD_SIZE", "four"), ("RANK", "0")],
                &["WORLD_SIZE='four'"],
            ),
            (&[("WORLD_SIZE", "4"), ("RANK", "-1")], &["RANK='-1'"]),
            (
                &[("WORLD_SIZE", "4"), ("RANK", "1"), ("LOCAL_RANK", "x")],
                &["LOCAL_RANK='x'"],
            ),
            (
                &[("WORLD_SIZE", "4"), ("RANK", "1"), ("MASTER_PORT", "70000")],
                &["MASTER_PORT='70000'", "port"],
            ),
            (
                &[("WORLD_SIZE", "4"), ("RANK", "1"), ("MASTER_PORT", "0")],
                &["MASTER_PORT is 0"],
            ),
            (&[("WORLD_SIZE", "4")], &["RANK is not set"]),
            (
                &[("WORLD_SIZE", "4"), ("RANK", "4")],
                &["RANK 4 is not below WORLD_SIZE 4"],
            ),
            (&[("WORLD_SIZE", "0"), ("RANK", "0")], &["WORLD_SIZE is 0"]),
            (
                &[("WORLD_SIZE", "2"), ("RANK", "1"), ("LOCAL_RANK", "2")],
                &["LOCAL_RANK 2"],
            ),
            (
                &[
                    ("WORLD_SIZE", "2"),
                    ("RANK", "1"),
                    ("CUDA_VISIBLE_DEVICES", ""),
                ],
                &["CUDA_VISIBLE_DEVICES=''", "hides every GPU"],
            ),
        ]);
    }

    /// The GPU follows the local rank among the visible GPUs, or is the only visible one.
    #[test]
    fn gpu_follows_the_local_rank_and_cuda_visible_devices() {
        assert_eq!(gpu_of(3, None).unwrap(), 3);
        assert_eq!(gpu_of(3, Some("5")).unwrap(), 0);
        assert_eq!(gpu_of(0, Some("GPU-8a1c")).unwrap(), 0);
        assert_eq!(gpu_of(2, Some("4,5,6,7")).unwrap(), 2);
        assert_eq!(gpu_of(1, Some(" 0 , 1 ")).unwrap(), 1);
        let e = gpu_of(2, Some("0,1")).unwrap_err().to_string();
        assert!(
            e.contains("local rank 2") && e.contains("2 GPUs visible"),
            "{e}"
        );
        assert!(gpu_of(0, Some(" , ")).is_err());
        let e = env(&[
            ("WORLD_SIZE", "8"),
            ("RANK", "5"),
            ("LOCAL_RANK", "1"),
            ("CUDA_VISIBLE_DEVICES", "3"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!((e.local_rank, e.gpu), (1, 0));
    }

    #[test]
    fn restarts_default_to_0() {
        let get = |count: &'static str, max: &'static str| {
            move |k: &str| match k {
                RESTART_COUNT_VAR => Some(count.to_string()),
                MAX_RESTARTS_VAR => Some(max.to_string()),
                _ => None,
            }
        };
        assert_eq!(restarts(|_: &str| None).unwrap(), (0, 0));
        assert_eq!(restarts(get("", " ")).unwrap(), (0, 0));
        assert_eq!(restarts(get(" 2 ", "3")).unwrap(), (2, 3));
        let e = restarts(get("x", "3")).unwrap_err().to_string();
        assert!(e.contains("TORCHELASTIC_RESTART_COUNT='x'"), "{e}");
        let e = restarts(get("1", "-1")).unwrap_err().to_string();
        assert!(e.contains("TORCHELASTIC_MAX_RESTARTS='-1'"), "{e}");
    }
}
