//! Ranks started as Slurm's `srun` starts them: no RANK/WORLD_SIZE, only SLURM_* variables.
//! Each task finds its place, rank 0's host (from the node list) and port (from the job id),
//! and all meet; rank 0 says first where its place came from.
#![cfg(unix)]

use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};

const TORCHRUN_VARS: [&str; 5] = [
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
];

/// A job id whose derived port (15000 + id mod 10000) is free on this machine now, another
/// for each call (the tests run side by side).
fn job_id_with_a_free_port() -> (u64, u16) {
    static CALLS: AtomicU64 = AtomicU64::new(0);
    let seed = std::process::id() as u64 + 1_009 * CALLS.fetch_add(1, Ordering::SeqCst);
    (0..10_000u64)
        .map(|i| 20_000 + (seed + i * 7919) % 10_000)
        .find_map(|id| {
            let port = 15_000 + (id % 10_000) as u16;
            TcpListener::bind(("127.0.0.1", port))
                .ok()
                .map(|_| (id, port))
        })
        .expect("no free port in 15000..25000")
}

/// `octet args…` as srun task `procid` of `ntasks` on node `localhost` of `localhost,n[2-3]`.
fn srun_task(args: &[&str], procid: usize, ntasks: usize, job: u64) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_octet"));
    c.args(args);
    for v in TORCHRUN_VARS {
        c.env_remove(v);
    }
    c.env("SLURM_PROCID", procid.to_string())
        .env("SLURM_NTASKS", ntasks.to_string())
        .env("SLURM_LOCALID", procid.to_string())
        .env("SLURM_JOB_NODELIST", "localhost,n[2-3]")
        .env("SLURM_JOB_ID", job.to_string())
        .env_remove("SLURM_STEP_NODELIST")
        .env_remove("CUDA_VISIBLE_DEVICES")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

#[test]
fn srun_tasks_meet_at_the_first_node_and_the_job_port() {
    let (job, port) = job_id_with_a_free_port();
    let tasks: Vec<_> = (0..3)
        .map(|r| {
            srun_task(&["ranks", "--json", "--dist-timeout", "20"], r, 3, job)
                .spawn()
                .unwrap()
        })
        .collect();
    for (r, t) in tasks.into_iter().enumerate() {
        let o = t.wait_with_output().unwrap();
        let (out, err) = (
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr),
        );
        assert!(o.status.success(), "task {r}: {out}{err}");
        let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
        assert_eq!(v["rank"], r);
        assert_eq!(v["world"], 3);
        assert_eq!(v["local_rank"], r);
        assert_eq!(v["variables"], "slurm");
        assert_eq!(v["master"], format!("localhost:{port}"));
        if r == 0 {
            assert_eq!(
                err.lines().next().unwrap(),
                format!(
                    "octet ranks: 3 ranks from Slurm's SLURM_PROCID, SLURM_NTASKS, \
                     SLURM_LOCALID; rendezvous localhost:{port} (host from SLURM_JOB_NODELIST, \
                     port from SLURM_JOB_ID)"
                )
            );
        } else {
            assert!(err.is_empty(), "{err}");
        }
    }
}

/// `octet train` as rank 0 of an srun step says where its place came from before anything
/// else, then what it needs (here: a GPU device).
#[test]
fn train_under_srun_says_first_that_slurm_placed_it() {
    let (job, port) = job_id_with_a_free_port();
    let o = srun_task(
        &["train", "--data", "synthetic:64:0", "--epochs", "1"],
        0,
        2,
        job,
    )
    .output()
    .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    let mut lines = err.lines();
    assert_eq!(
        lines.next().unwrap(),
        format!(
            "octet train: 2 ranks from Slurm's SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID; \
             rendezvous localhost:{port} (host from SLURM_JOB_NODELIST, port from SLURM_JOB_ID)"
        )
    );
    assert!(err.contains("add --device cuda"), "{err}");
}

/// A sole srun task whose partners never come (`octet train` run directly in an sbatch
/// script) is told how Slurm starts ranks.
#[test]
fn a_lonely_srun_rank_is_told_to_use_srun() {
    let (job, _) = job_id_with_a_free_port();
    let o = srun_task(&["ranks", "--dist-timeout", "1"], 0, 2, job)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("rank 1 of 2 never arrived") && err.contains("srun octet train"),
        "{err}"
    );
}
