//! The rank environment: the variables `torchrun`, Slurm wrappers and `octet launch` set.

use std::fmt;

use crate::{Result, TrainError};

/// This process's place in a data-parallel job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DistEnv {
    /// Global rank, `0..world`.
    pub rank: usize,
    /// Number of processes in the job.
    pub world: usize,
    /// Rank on this machine: which GPU to use.
    pub local_rank: usize,
    /// Where rank 0 listens for the rendezvous.
    pub master_addr: String,
    pub master_port: u16,
}

const DEFAULT_ADDR: &str = "127.0.0.1";
const DEFAULT_PORT: u16 = 29500;

impl DistEnv {
    /// Reads `RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `MASTER_ADDR` and `MASTER_PORT` from the
    /// process environment; see [`DistEnv::from_vars`].
    pub fn from_env() -> Result<Option<DistEnv>> {
        Self::from_vars(|k| std::env::var(k).ok())
    }

    /// `None` when `WORLD_SIZE` is unset (a plain single-process run). Otherwise `RANK` is
    /// required; `LOCAL_RANK` defaults to `RANK`, `MASTER_ADDR` to 127.0.0.1 and
    /// `MASTER_PORT` to 29500 (torchrun's defaults). A variable set to the empty string
    /// counts as unset, as `VAR= cmd` is the shell's way to clear one.
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<Option<DistEnv>> {
        let var = |k: &str| {
            get(k)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        let Some(world) = var("WORLD_SIZE") else {
            return Ok(None);
        };
        let world: usize = number("WORLD_SIZE", &world)?;
        if world == 0 {
            return Err(bad("WORLD_SIZE is 0: a job needs at least one process"));
        }
        let rank: usize = match var("RANK") {
            Some(r) => number("RANK", &r)?,
            None => {
                return Err(bad(format!(
                    "WORLD_SIZE is {world} but RANK is not set: every process of a \
                     distributed job needs its RANK (0..{world})"
                )))
            }
        };
        if rank >= world {
            return Err(bad(format!(
                "RANK {rank} is not below WORLD_SIZE {world}: ranks run from 0 to {}",
                world - 1
            )));
        }
        let local_rank = match var("LOCAL_RANK") {
            Some(r) => number("LOCAL_RANK", &r)?,
            None => rank,
        };
        if local_rank >= world {
            return Err(bad(format!(
                "LOCAL_RANK {local_rank} is not below WORLD_SIZE {world}"
            )));
        }
        let master_port = match var("MASTER_PORT") {
            Some(p) => number::<u16>("MASTER_PORT", &p)?,
            None => DEFAULT_PORT,
        };
        if master_port == 0 {
            return Err(bad(
                "MASTER_PORT is 0: the other ranks need a fixed port to reach rank 0 (1..65535)",
            ));
        }
        Ok(Some(DistEnv {
            rank,
            world,
            local_rank,
            master_addr: var("MASTER_ADDR").unwrap_or_else(|| DEFAULT_ADDR.into()),
            master_port,
        }))
    }

    /// A job of one: rank 0 of 1 on the default address.
    pub fn single() -> DistEnv {
        DistEnv {
            rank: 0,
            world: 1,
            local_rank: 0,
            master_addr: DEFAULT_ADDR.into(),
            master_port: DEFAULT_PORT,
        }
    }

    /// Rank 0 logs, evaluates and writes checkpoints; the others stay quiet.
    pub fn is_main(&self) -> bool {
        self.rank == 0
    }
}

impl fmt::Display for DistEnv {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "rank {}/{} (local {}), rendezvous {}:{}",
            self.rank, self.world, self.local_rank, self.master_addr, self.master_port
        )
    }
}

/// A port on 127.0.0.1 that nothing listens on now, for a rendezvous on this machine (`octet
/// launch` without `--master-port`, tests). Another process may take it before rank 0 binds.
pub fn free_local_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind((DEFAULT_ADDR, 0))?
        .local_addr()?
        .port())
}

fn bad(msg: impl Into<String>) -> TrainError {
    TrainError::Dist(msg.into())
}

fn number<T: std::str::FromStr>(name: &str, value: &str) -> Result<T> {
    value.parse().map_err(|_| {
        let what = if name == "MASTER_PORT" {
            "a port number (1..65535)"
        } else {
            "a non-negative integer"
        };
        bad(format!("{name}='{value}' is not {what}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Result<Option<DistEnv>> {
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
                master_addr: "127.0.0.1".into(),
                master_port: 29500
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
            "rank 9/16 (local 1), rendezvous node07:12345"
        );
    }

    /// Variables as (name, value).
    type Vars<'a> = &'a [(&'a str, &'a str)];

    /// Each wrong environment is refused with a message naming what is wrong.
    #[test]
    fn errors_name_the_variable() {
        let cases: &[(Vars, &[&str])] = &[
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
        ];
        for (vars, expected) in cases {
            let e = env(vars).unwrap_err();
            assert!(matches!(e, TrainError::Dist(_)), "{vars:?}: {e:?}");
            let e = e.to_string();
            for part in *expected {
                assert!(e.contains(part), "{vars:?}: {e}");
            }
        }
    }
}
