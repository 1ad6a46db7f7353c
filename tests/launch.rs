//! `octet launch` supervising `/bin/sh` ranks: environment, output, exit codes, stopping.
#![cfg(unix)]

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// `octet launch <launch_args> --program /bin/sh -- -c <script>`.
fn launch_cmd(launch_args: &[&str], script: &str) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_octet"));
    c.arg("launch")
        .args(launch_args)
        .args(["--program", "/bin/sh", "--", "-c", script]);
    c
}

fn launch(launch_args: &[&str], script: &str) -> (Output, Duration) {
    let start = Instant::now();
    let o = launch_cmd(launch_args, script).output().expect("run octet");
    (o, start.elapsed())
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Launches a job that must end within 10 s with exit `code`, every one of `says` on stderr.
fn ends_promptly(launch_args: &[&str], script: &str, code: i32, says: &[&str]) {
    let (o, took) = launch(launch_args, script);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(code), "{err}");
    assert!(took < Duration::from_secs(10), "{took:?}");
    for s in says {
        assert!(err.contains(s), "no {s:?} in:\n{err}");
    }
}

const SHOW_ENV: &str = "echo \"R=$RANK W=$WORLD_SIZE L=$LOCAL_RANK LW=$LOCAL_WORLD_SIZE \
                        A=$MASTER_ADDR P=$MASTER_PORT N=$NCCL_NVLS_ENABLE\"";

#[test]
fn every_rank_sees_its_environment() {
    let (o, _) = launch(
        &[
            "--gpus",
            "3",
            "--master-addr",
            "10.1.2.3",
            "--master-port",
            "23456",
        ],
        SHOW_ENV,
    );
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}{err}");
    // Rank 0 alone on stdout, unprefixed; the others prefixed on stderr.
    assert_eq!(out, "R=0 W=3 L=0 LW=3 A=10.1.2.3 P=23456 N=0\n");
    for r in 1..3 {
        let line = format!("[rank {r}] R={r} W=3 L={r} LW=3 A=10.1.2.3 P=23456 N=0\n");
        assert!(err.contains(&line), "{err}");
    }
    assert!(!err.contains("[rank 0]"), "{err}");
}

#[test]
fn default_port_is_free_and_shared_and_nvls_setting_is_kept() {
    let o = launch_cmd(&["--gpus", "2"], SHOW_ENV)
        .env("NCCL_NVLS_ENABLE", "1")
        .output()
        .unwrap();
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}{err}");
    let port = |s: &str| -> u16 {
        let p = s.split("P=").nth(1).unwrap();
        p[..p.find(' ').unwrap()].parse().unwrap()
    };
    let p0 = port(&out);
    assert!(
        p0 > 0 && err.contains(&format!("MASTER_PORT={p0}")),
        "{err}"
    );
    let r1 = err.lines().find(|l| l.starts_with("[rank 1]")).unwrap();
    assert_eq!(port(r1), p0);
    assert!(out.contains("A=127.0.0.1") && out.contains("N=1") && r1.contains("N=1"));
}

#[test]
fn all_ranks_succeeding_exits_0() {
    let (o, _) = launch(&["--gpus", "4"], "test \"$RANK\" -lt 4");
    assert_eq!(o.status.code(), Some(0), "{:?}", text(&o));
}

#[test]
fn failing_rank_code_propagates_and_others_stop_promptly() {
    ends_promptly(
        &["--gpus", "3"],
        "if [ \"$RANK\" = 1 ]; then sleep 0.2; exit 7; fi; sleep 60",
        7,
        &[
            "rank 1 failed first (exit code 7)",
            "exiting with code 7: rank 1 failed first",
        ],
    );
}

#[test]
fn rank_ignoring_sigterm_is_killed_after_the_grace_period() {
    ends_promptly(
        &["--gpus", "2", "--grace", "0.5"],
        "if [ \"$RANK\" = 0 ]; then sleep 0.2; exit 3; fi; trap '' TERM; sleep 60",
        3,
        &["ranks 1 still running"],
    );
}

#[test]
fn signal_killed_rank_maps_to_128_plus_signal() {
    ends_promptly(
        &["--gpus", "2"],
        "if [ \"$RANK\" = 1 ]; then kill -KILL $$; fi; sleep 60",
        128 + 9,
        &["rank 1 failed first (killed by signal 9 (SIGKILL))"],
    );
}

#[test]
fn program_that_cannot_start_is_an_error() {
    let o = Command::new(env!("CARGO_BIN_EXE_octet"))
        .args(["launch", "--gpus", "2", "--program", "/no/such/program"])
        .output()
        .unwrap();
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        err.contains("cannot start rank 0: /no/such/program"),
        "{err}"
    );
}

#[test]
fn help_explains_the_environment() {
    let o = Command::new(env!("CARGO_BIN_EXE_octet"))
        .args(["launch", "--help"])
        .output()
        .unwrap();
    let (out, _) = text(&o);
    assert!(o.status.success());
    for s in [
        "--gpus",
        "--master-port",
        "--grace",
        "RANK",
        "[rank i]",
        "128 + signal",
    ] {
        assert!(out.contains(s), "{s} missing from:\n{out}");
    }
}

/// A 2-rank job whose ranks write their pids to `dir`, then sleep.
fn sleeping_job(dir: &Path) -> Command {
    let script = format!("echo $$ > {}/$RANK.pid; exec sleep 60", dir.display());
    let mut c = launch_cmd(&["--gpus", "2"], &script);
    c.stdout(Stdio::null()).stderr(Stdio::piped());
    c
}

/// The ranks' pids once both have started (kills `launcher` if they do not).
fn rank_pids(dir: &Path, launcher: &mut Child) -> Vec<i32> {
    let start = Instant::now();
    loop {
        let pids: Vec<i32> = (0..2)
            .filter_map(|r| std::fs::read_to_string(dir.join(format!("{r}.pid"))).ok())
            .filter_map(|s| s.trim().parse().ok())
            .collect();
        if pids.len() == 2 {
            return pids;
        }
        if start.elapsed() > Duration::from_secs(10) {
            let _ = launcher.kill();
            let _ = launcher.wait();
            panic!("ranks did not start");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn kill(sig: &str, pid: u32) {
    assert!(Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap()
        .success());
}

fn alive(pid: i32) -> bool {
    // `kill -0` would also see zombies; /proc/PID/stat's state field tells them apart.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            !s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
        .unwrap_or(false)
}

fn wait_gone(pids: &[i32]) {
    let start = Instant::now();
    while pids.iter().any(|&p| alive(p)) {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "ranks {pids:?} still alive"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn interrupt_stops_every_rank_and_exits_130() {
    let dir = tempfile::tempdir().unwrap();
    let mut launcher = sleeping_job(dir.path()).spawn().unwrap();
    let pids = rank_pids(dir.path(), &mut launcher);
    let start = Instant::now();
    kill("-INT", launcher.id());
    let o = launcher.wait_with_output().unwrap();
    assert!(start.elapsed() < Duration::from_secs(5));
    assert_eq!(o.status.code(), Some(130));
    assert!(String::from_utf8_lossy(&o.stderr).contains("SIGINT received, stopping ranks 0, 1"));
    wait_gone(&pids);
}

#[cfg(target_os = "linux")]
#[test]
fn killed_launcher_leaves_no_orphans() {
    let dir = tempfile::tempdir().unwrap();
    let mut launcher = sleeping_job(dir.path()).spawn().unwrap();
    let pids = rank_pids(dir.path(), &mut launcher);
    kill("-KILL", launcher.id());
    launcher.wait().unwrap();
    wait_gone(&pids);
}
