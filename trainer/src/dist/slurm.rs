//! A rank's place from Slurm's variables, for tasks started by `srun` (which sets no
//! `RANK`/`WORLD_SIZE`): `SLURM_PROCID`, `SLURM_NTASKS`, `SLURM_LOCALID`; rank 0's host is the
//! first of the step's node list, the port derived from the job id.

use super::env::{bad, number, RankVars, Ranks};
use crate::Result;

/// The node lists to take rank 0's host from, in order: the step's (srun runs rank 0 on its
/// first node), then the job's.
const NODE_LISTS: [&str; 3] = [
    "SLURM_STEP_NODELIST",
    "SLURM_JOB_NODELIST",
    "SLURM_NODELIST",
];

/// The rendezvous port of job `id` is `PORT_BASE + id mod PORT_SPAN`: the same on every rank
/// without any exchange, different for consecutive jobs sharing a first node, and below Linux's
/// ephemeral range (32768–60999) where outgoing connections take their ports.
const PORT_BASE: u16 = 15000;
const PORT_SPAN: u64 = 10000;
/// What `DistEnv::describe` names as the port's origin.
pub(super) const PORT_ORIGIN: &str = "SLURM_JOB_ID";

/// `None` outside an `srun` task (no `SLURM_PROCID`: `salloc`'s shell, a login node).
pub(super) fn ranks(var: &impl Fn(&str) -> Option<String>) -> Result<Option<Ranks>> {
    let Some(rank) = var("SLURM_PROCID") else {
        return Ok(None);
    };
    let rank: usize = number("SLURM_PROCID", &rank)?;
    let need = |name: &str| {
        var(name).ok_or_else(|| {
            bad(format!(
                "SLURM_PROCID is set but {name} is not: start the ranks with srun (one task \
                 per GPU), or set RANK, WORLD_SIZE and LOCAL_RANK"
            ))
        })
    };
    let world: usize = number("SLURM_NTASKS", &need("SLURM_NTASKS")?)?;
    if world == 0 {
        return Err(bad("SLURM_NTASKS is 0: a job needs at least one task"));
    }
    let local: usize = number("SLURM_LOCALID", &need("SLURM_LOCALID")?)?;
    Ok(Some((rank, world, local, RankVars::Slurm)))
}

/// The first host of the first node list set, and that list's name.
pub(super) fn master_host(var: &impl Fn(&str) -> Option<String>) -> Result<(String, &'static str)> {
    let Some((name, list)) = NODE_LISTS.iter().find_map(|&n| Some((n, var(n)?))) else {
        return Err(bad(
            "a Slurm task without a node list (SLURM_STEP_NODELIST, SLURM_JOB_NODELIST): set \
             MASTER_ADDR to the host of rank 0",
        ));
    };
    Ok((first_host(name, &list)?, name))
}

/// The first host of a Slurm host list such as `gpu[01-04,07],login2`.
pub fn first_host(name: &str, list: &str) -> Result<String> {
    let hosts = hostlist_parser::parse(list).map_err(|e| {
        bad(format!(
            "{name}='{list}' is not a Slurm host list ({}): set MASTER_ADDR to the host of \
             rank 0",
            e.to_string().lines().collect::<Vec<_>>().join("; ")
        ))
    })?;
    hosts
        .into_iter()
        .next()
        .ok_or_else(|| bad(format!("{name}='{list}' names no host: set MASTER_ADDR")))
}

/// The port derived from `SLURM_JOB_ID`, `None` when no job id is set.
pub(super) fn port(var: &impl Fn(&str) -> Option<String>) -> Result<Option<u16>> {
    let Some(id) = var("SLURM_JOB_ID").or_else(|| var("SLURM_JOBID")) else {
        return Ok(None);
    };
    let id: u64 = number("SLURM_JOB_ID", &id)?;
    Ok(Some(PORT_BASE + (id % PORT_SPAN) as u16))
}

#[cfg(test)]
mod tests {
    use super::super::env::tests::{env, refused};
    use super::*;

    const SRUN: [(&str, &str); 5] = [
        ("SLURM_PROCID", "5"),
        ("SLURM_NTASKS", "8"),
        ("SLURM_LOCALID", "1"),
        ("SLURM_JOB_NODELIST", "gpu[01-04,07],login2"),
        ("SLURM_JOB_ID", "123456"),
    ];

    fn with(extra: &[(&'static str, &'static str)]) -> Vec<(&'static str, &'static str)> {
        let mut v: Vec<_> = SRUN
            .iter()
            .filter(|(k, _)| !extra.iter().any(|(e, _)| e == k))
            .copied()
            .collect();
        v.extend_from_slice(extra);
        v
    }

    #[test]
    fn an_srun_task_takes_its_place_from_slurm() {
        let e = env(&SRUN).unwrap().unwrap();
        assert_eq!(
            (e.rank, e.world, e.local_rank, e.gpu),
            (5, 8, 1, 1),
            "{e:?}"
        );
        assert_eq!((e.master_addr.as_str(), e.master_port), ("gpu01", 18456));
        assert_eq!(e.origin.ranks, RankVars::Slurm);
        assert_eq!(
            e.describe(),
            "8 ranks from Slurm's SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID; rendezvous \
             gpu01:18456 (host from SLURM_JOB_NODELIST, port from SLURM_JOB_ID)"
        );
        assert!(e.start_hint().contains("srun octet train"));
    }

    #[test]
    fn torchrun_variables_and_master_addr_port_win() {
        let e = env(&with(&[("WORLD_SIZE", "2"), ("RANK", "1")]))
            .unwrap()
            .unwrap();
        assert_eq!(
            (e.rank, e.world, e.origin.ranks),
            (1, 2, RankVars::Torchrun)
        );
        assert_eq!(
            (e.master_addr.as_str(), e.master_port),
            ("127.0.0.1", 29500)
        );
        let e = env(&with(&[
            ("MASTER_ADDR", "10.0.0.9"),
            ("MASTER_PORT", "4000"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!((e.rank, e.origin.ranks), (5, RankVars::Slurm));
        assert_eq!((e.master_addr.as_str(), e.master_port), ("10.0.0.9", 4000));
        assert_eq!(
            (e.origin.addr, e.origin.port),
            ("MASTER_ADDR", "MASTER_PORT")
        );
        // With MASTER_ADDR set, a node list is not needed (nor read).
        let e = env(&with(&[
            ("SLURM_JOB_NODELIST", "bad["),
            ("MASTER_ADDR", "h"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(e.master_addr, "h");
    }

    #[test]
    fn the_step_node_list_comes_first_and_no_job_id_means_the_default_port() {
        let vars: Vec<_> = with(&[("SLURM_STEP_NODELIST", "n[7-8]")])
            .into_iter()
            .filter(|(k, _)| *k != "SLURM_JOB_ID")
            .collect();
        let e = env(&vars).unwrap().unwrap();
        assert_eq!(e.master_addr, "n7");
        assert_eq!(e.origin.addr, "SLURM_STEP_NODELIST");
        assert_eq!((e.master_port, e.origin.port), (29500, "default"));
    }

    #[test]
    fn outside_an_srun_task_is_single_process() {
        // salloc's shell: an allocation, but no task id.
        let vars: Vec<_> = SRUN
            .iter()
            .filter(|(k, _)| *k != "SLURM_PROCID")
            .copied()
            .collect();
        assert_eq!(env(&vars).unwrap(), None);
    }

    #[test]
    fn the_gpu_follows_slurm_localid_and_its_cuda_visible_devices() {
        let e = env(&with(&[("CUDA_VISIBLE_DEVICES", "0,1,2,3")]))
            .unwrap()
            .unwrap();
        assert_eq!(e.gpu, 1);
        // --gpus-per-task=1: Slurm shows each task its own GPU as the only one.
        let e = env(&with(&[("CUDA_VISIBLE_DEVICES", "3")]))
            .unwrap()
            .unwrap();
        assert_eq!(e.gpu, 0);
    }

    #[test]
    fn wrong_slurm_variables_are_named() {
        refused(&[
            (&with(&[("SLURM_PROCID", "x")]), &["SLURM_PROCID='x'"]),
            (
                &with(&[("SLURM_PROCID", "8")]),
                &["SLURM_PROCID 8 is not below SLURM_NTASKS 8"],
            ),
            (&with(&[("SLURM_NTASKS", "0")]), &["SLURM_NTASKS is 0"]),
            (&with(&[("SLURM_LOCALID", "9")]), &["SLURM_LOCALID 9"]),
            (&with(&[("SLURM_JOB_ID", "12a")]), &["SLURM_JOB_ID='12a'"]),
            (
                &with(&[("SLURM_JOB_NODELIST", "gpu[01-")]),
                &["SLURM_JOB_NODELIST='gpu[01-'", "MASTER_ADDR"],
            ),
            (
                &[("SLURM_PROCID", "0"), ("SLURM_LOCALID", "0")],
                &["SLURM_NTASKS is not", "srun"],
            ),
            (
                &[
                    ("SLURM_PROCID", "0"),
                    ("SLURM_NTASKS", "2"),
                    ("SLURM_LOCALID", "0"),
                ],
                &["node list", "MASTER_ADDR"],
            ),
        ]);
    }

    #[test]
    fn host_lists_expand_as_slurm_writes_them() {
        for (list, first) in [
            ("gpu[01-04,07],login2", "gpu01"),
            ("node7", "node7"),
            ("login2,gpu[01-02]", "login2"),
            ("rack[2-3]-n[009-011]", "rack2-n009"),
            ("dgx-a100-[10-12]", "dgx-a100-10"),
            ("10.1.0.[5-6]", "10.1.0.5"),
        ] {
            assert_eq!(first_host("L", list).unwrap(), first, "{list}");
        }
        for bad in ["", "gpu[", "gpu[1-", "a]b", "n[a-b]", "a,,b"] {
            let e = first_host("SLURM_JOB_NODELIST", bad)
                .unwrap_err()
                .to_string();
            assert!(e.contains("not a Slurm host list"), "{bad}: {e}");
        }
    }

    #[test]
    fn the_port_is_the_job_id_modulo_the_span() {
        let p = |id: &'static str| port(&|k: &str| (k == "SLURM_JOB_ID").then(|| id.to_string()));
        assert_eq!(p("1").unwrap(), Some(15001));
        assert_eq!(p("9999").unwrap(), Some(24999));
        assert_eq!(p("10000").unwrap(), Some(15000));
        assert_eq!(p("4294967295").unwrap(), Some(15000 + 7295));
        assert_eq!(port(&|_: &str| None).unwrap(), None);
    }
}
