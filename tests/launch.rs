//! `octet launch` supervising `/bin/sh` ranks: environment, output, exit codes, stopping,
//! restarts, and several launchers forming one job (`--nnodes`) on 127.0.0.1.
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
const SHOW_NODE_ENV: &str = "echo \"R=$RANK W=$WORLD_SIZE L=$LOCAL_RANK LW=$LOCAL_WORLD_SIZE \
                             G=$GROUP_RANK GW=$GROUP_WORLD_SIZE RC=$TORCHELASTIC_RESTART_COUNT \
                             MR=$TORCHELASTIC_MAX_RESTARTS IF=$NCCL_SOCKET_IFNAME\"";

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

/// Node 1 of 3 with 2 GPUs runs global ranks 2 and 3 of 6, all on stderr (rank 0 is
/// elsewhere), with torchrun's group variables; NCCL's socket variables pass through.
#[test]
fn a_node_runs_its_share_of_the_global_ranks() {
    let o = launch_cmd(
        &[
            "--gpus",
            "2",
            "--nnodes",
            "3",
            "--node-rank",
            "1",
            "--master-addr",
            "10.1.2.3",
            "--master-port",
            "23456",
        ],
        SHOW_NODE_ENV,
    )
    .env("NCCL_SOCKET_IFNAME", "=eth9")
    .output()
    .unwrap();
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}{err}");
    assert_eq!(out, "", "global rank 0 runs on node 0");
    assert!(err.contains("node 1 of 3: ranks 2..3 of 6"), "{err}");
    for (global, local) in [(2, 0), (3, 1)] {
        let line =
            format!("[rank {global}] R={global} W=6 L={local} LW=2 G=1 GW=3 RC=0 MR=0 IF==eth9\n");
        assert!(err.contains(&line), "{line:?} not in\n{err}");
    }
    // Several machines agree on torchrun's port when none is given.
    let o = launch_cmd(
        &["--gpus", "1", "--nnodes", "2", "--master-addr", "10.1.2.3"],
        "echo P=$MASTER_PORT",
    )
    .output()
    .unwrap();
    assert_eq!(text(&o).0, "P=29500\n");
}

#[test]
fn several_nodes_need_an_address_and_a_valid_node_rank() {
    let (o, _) = launch(&["--gpus", "2", "--nnodes", "2"], "true");
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1));
    assert!(err.contains("--nnodes 2 needs --master-addr"), "{err}");
    let (o, _) = launch(
        &[
            "--gpus",
            "2",
            "--nnodes",
            "2",
            "--node-rank",
            "2",
            "--master-addr",
            "h",
        ],
        "true",
    );
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        err.contains("--node-rank 2 is not below --nnodes 2"),
        "{err}"
    );
}

/// Two launchers on this machine, `--nnodes 2`, form one job of 4 ranks: the rendezvous
/// completes across them and every rank reports its global place.
#[test]
fn two_node_launch_on_localhost_completes_the_rendezvous() {
    let port = octet_trainer::dist::free_local_port().unwrap().to_string();
    let node = |r: &str| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_octet"));
        c.args(["launch", "--gpus", "2", "--nnodes", "2", "--node-rank", r])
            .args(["--master-addr", "127.0.0.1", "--master-port", &port])
            .args(["--", "ranks", "--json", "--dist-timeout", "20"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c.spawn().unwrap()
    };
    // Node 1 first: its ranks wait for rank 0 to listen.
    let n1 = node("1");
    std::thread::sleep(Duration::from_millis(200));
    let n0 = node("0");
    let (o0, o1) = (
        n0.wait_with_output().unwrap(),
        n1.wait_with_output().unwrap(),
    );
    let ((out0, err0), (out1, err1)) = (text(&o0), text(&o1));
    assert!(o0.status.success(), "{out0}{err0}");
    assert!(o1.status.success(), "{out1}{err1}");
    let rank0: serde_json::Value = serde_json::from_str(out0.trim()).unwrap();
    assert_eq!(
        (rank0["rank"].as_u64(), rank0["world"].as_u64()),
        (Some(0), Some(4))
    );
    assert!(
        err0.contains("octet ranks: 4 ranks from RANK, WORLD_SIZE, LOCAL_RANK"),
        "{err0}"
    );
    assert!(err0.contains("[rank 1] {\"gpu\":1"), "{err0}");
    for (global, local) in [(2, 0), (3, 1)] {
        let line = err1
            .lines()
            .find_map(|l| l.strip_prefix(&format!("[rank {global}] ")))
            .unwrap_or_else(|| panic!("no rank {global} in {err1}"));
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["local_rank"], local);
        assert_eq!(v["world"], 4);
        assert_eq!(v["master"], format!("127.0.0.1:{port}"));
    }
}

/// A rank failing on the first start only: the launcher stops the others, starts all again
/// with TORCHELASTIC_RESTART_COUNT=1, and they complete a real rendezvous on the same port.
#[test]
fn a_failed_start_is_restarted_and_the_job_completes() {
    let script = format!(
        "if [ \"$TORCHELASTIC_RESTART_COUNT\" = 0 ] && [ \"$RANK\" = 1 ]; then exit 3; fi; \
         exec {} ranks --json --dist-timeout 20",
        env!("CARGO_BIN_EXE_octet")
    );
    let (o, took) = launch(&["--gpus", "3", "--max-restarts", "2"], &script);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}{err}");
    assert!(took < Duration::from_secs(15), "{took:?}");
    assert!(
        err.contains("restart 1 of 2: rank 1 failed (exit code 3); starting ranks 0..2 again"),
        "{err}"
    );
    assert!(!err.contains("restart 2 of 2"), "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["world"], 3);
}

#[test]
fn when_restarts_are_used_up_the_failing_code_is_the_exit_code() {
    ends_promptly(
        &["--gpus", "2", "--max-restarts", "2"],
        "echo start $TORCHELASTIC_RESTART_COUNT >&2; if [ \"$RANK\" = 1 ]; then exit 5; fi; \
         sleep 60",
        5,
        &[
            "[rank 1] start 0",
            "restart 1 of 2: rank 1 failed (exit code 5)",
            "start 2",
            "all 2 restarts used",
            "exiting with code 5: rank 1 failed first",
        ],
    );
}

/// Ctrl-C is never answered with a restart.
#[test]
fn an_interrupted_job_is_not_restarted() {
    let dir = tempfile::tempdir().unwrap();
    let script = format!(
        "echo $$ > {}/$RANK.pid; exec sleep 60",
        dir.path().display()
    );
    let mut c = launch_cmd(&["--gpus", "2", "--max-restarts", "3"], &script);
    let mut launcher = c
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pids = rank_pids(dir.path(), &mut launcher);
    kill("-INT", launcher.id());
    let o = launcher.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(130));
    assert!(!String::from_utf8_lossy(&o.stderr).contains("restart 1"));
    wait_gone(&pids);
}

/// `octet train` under `--max-restarts`: a run that dies after epoch 1 is started again and
/// resumes from its epoch-1 checkpoint (on the CPU, one rank, so no GPU is needed).
#[test]
fn a_restarted_training_run_resumes_from_its_last_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let train_for = |epochs: usize| {
        format!(
            "{} train --model lenet --data synthetic:256:64 --epochs {epochs} --batch-size 64 \
             --json --no-plots --out {}",
            env!("CARGO_BIN_EXE_octet"),
            out.display()
        )
    };
    let train = train_for(3);
    // The first start finishes epoch 1 and then dies, as a crashing rank would.
    let script = format!(
        "if [ \"$TORCHELASTIC_RESTART_COUNT\" = 0 ]; then {train} --stop-after 1; exit 9; fi; \
         exec {train}"
    );
    let (o, _) = launch(&["--gpus", "1", "--max-restarts", "1"], &script);
    let (out_text, err) = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out_text}{err}");
    assert!(
        err.contains("restart 1 of 1: rank 0 failed (exit code 9)"),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "restart 1 of 1: resuming from {} (after epoch 1)",
            out.join("last.safetensors").display()
        )),
        "{err}"
    );
    let epochs: Vec<i64> = out_text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok()?["epoch"].as_i64())
        .collect();
    assert_eq!(
        epochs,
        [1, 2, 3],
        "epoch 1 once, then 2 and 3 after the restart"
    );
    let csv = std::fs::read_to_string(out.join("metrics.csv")).unwrap();
    assert_eq!(csv.lines().count(), 4, "{csv}");

    // A new job into the same directory that fails before its first checkpoint starts again
    // from scratch: the older run's checkpoint is not this job's.
    let fresh = train_for(4);
    let script = format!(
        "if [ \"$TORCHELASTIC_RESTART_COUNT\" = 0 ]; then exit 4; fi; exec {fresh} --stop-after 1"
    );
    let (o, _) = launch(&["--gpus", "1", "--max-restarts", "1"], &script);
    let (out_text, err) = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out_text}{err}");
    assert!(err.contains("predates this job, not resumed"), "{err}");
    let epochs: Vec<i64> = out_text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok()?["epoch"].as_i64())
        .collect();
    assert_eq!(epochs, [1]);
}
