//! `octet launch`: one process per GPU on this machine, supervised as one job — if one
//! rank fails the others are stopped (SIGTERM, then SIGKILL after a grace period), and either
//! all are started again (`--max-restarts`) or the launcher exits with the failing rank's
//! code. With several machines (`--nnodes`), one launcher runs on each and starts its share of
//! the global ranks (torchrun's static rendezvous). Unix only: it relies on process groups and
//! signals.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use anyhow::Context;
use octet_trainer::dist::{LAUNCHED_AT_VAR, MAX_RESTARTS_VAR, RESTART_COUNT_VAR};

/// What to start and how.
#[derive(Debug, Clone)]
pub struct Spec {
    pub program: PathBuf,
    pub args: Vec<OsString>,
    /// Processes on this machine, local ranks `0..procs`.
    pub procs: usize,
    /// Machines in the job, each running `procs` ranks.
    pub nnodes: usize,
    /// This machine's place, `0..nnodes`: its ranks are `node_rank·procs + i`.
    pub node_rank: usize,
    pub master_addr: String,
    pub master_port: u16,
    /// How long ranks get between SIGTERM and SIGKILL.
    pub grace: Duration,
    /// How many times the ranks are started again after a failure.
    pub max_restarts: usize,
    /// When the launcher started, in milliseconds since the Unix epoch.
    pub launched_at_ms: u128,
}

impl Spec {
    /// Ranks in the whole job.
    pub fn world(&self) -> usize {
        self.nnodes * self.procs
    }

    /// The global rank of local rank `local`.
    pub fn global_rank(&self, local: usize) -> usize {
        self.node_rank * self.procs + local
    }

    /// The variables each rank gets, torchrun's names and meanings, for local rank `local` of
    /// the job's `restart`-th start.
    pub fn rank_env(&self, local: usize, restart: usize) -> Vec<(&'static str, String)> {
        vec![
            ("RANK", self.global_rank(local).to_string()),
            ("WORLD_SIZE", self.world().to_string()),
            ("LOCAL_RANK", local.to_string()),
            ("LOCAL_WORLD_SIZE", self.procs.to_string()),
            ("GROUP_RANK", self.node_rank.to_string()),
            ("GROUP_WORLD_SIZE", self.nnodes.to_string()),
            ("MASTER_ADDR", self.master_addr.clone()),
            ("MASTER_PORT", self.master_port.to_string()),
            (RESTART_COUNT_VAR, restart.to_string()),
            (MAX_RESTARTS_VAR, self.max_restarts.to_string()),
            (LAUNCHED_AT_VAR, self.launched_at_ms.to_string()),
        ]
    }
}

const POLL: Duration = Duration::from_millis(20);

/// How one start of the ranks ended.
enum Ending {
    /// Every rank exited 0.
    Done,
    /// The launcher was asked to stop (128 + signal).
    Interrupted(u8),
    /// `rank` (global) failed first, with this exit code and description.
    Failed { rank: usize, code: u8, what: String },
}

/// Starts this machine's `spec.procs` ranks, each with the variables of [`Spec::rank_env`]
/// (and `NCCL_NVLS_ENABLE=0` unless set) on top of the launcher's own environment, and
/// supervises them until all have exited; on a failure, starts them all again up to
/// `spec.max_restarts` times. Global rank 0 writes to the launcher's stdout and stderr
/// directly; the other ranks' lines go to stderr prefixed `[rank i] `, so the launcher's
/// stdout is exactly rank 0's.
///
/// Returns the launcher's exit code: the last failing rank's code (128 + signal for a rank
/// killed by a signal), 128 + signal when the launcher itself was interrupted, else 0.
pub fn launch(spec: &Spec) -> anyhow::Result<u8> {
    anyhow::ensure!(spec.procs >= 1, "--gpus must be at least 1");
    anyhow::ensure!(
        spec.node_rank < spec.nnodes,
        "--node-rank {} is not below --nnodes {}: nodes are numbered 0..{}",
        spec.node_rank,
        spec.nnodes,
        spec.nnodes - 1
    );
    announce(spec);
    signals::install()?;
    let seen = signals::count();
    let mut restart = 0;
    loop {
        match start_and_supervise(spec, restart, seen)? {
            Ending::Done => return Ok(0),
            Ending::Interrupted(code) => return Ok(code),
            Ending::Failed { rank, code, what } => {
                // Never restart what the user asked to stop.
                if restart < spec.max_restarts && signals::count() == seen {
                    restart += 1;
                    eprintln!(
                        "octet launch: restart {restart} of {}: rank {rank} failed ({what}); \
                         starting ranks {} again",
                        spec.max_restarts,
                        rank_range(spec)
                    );
                    continue;
                }
                if spec.max_restarts > 0 {
                    eprintln!("octet launch: all {} restarts used", spec.max_restarts);
                }
                eprintln!("octet launch: exiting with code {code}: rank {rank} failed first");
                return Ok(code);
            }
        }
    }
}

/// The launcher's first line: what runs where.
fn announce(spec: &Spec) {
    let nodes = if spec.nnodes > 1 {
        format!(
            " (node {} of {}: ranks {} of {})",
            spec.node_rank,
            spec.nnodes,
            rank_range(spec),
            spec.world()
        )
    } else {
        String::new()
    };
    let restarts = if spec.max_restarts > 0 {
        format!(", up to {} restarts", spec.max_restarts)
    } else {
        String::new()
    };
    eprintln!(
        "octet launch: {} ranks of {}{nodes}, MASTER_ADDR={} MASTER_PORT={}{restarts}",
        spec.procs,
        spec.program.display(),
        spec.master_addr,
        spec.master_port,
    );
}

/// `4..7`, the global ranks of this machine, for messages.
fn rank_range(spec: &Spec) -> String {
    let (first, last) = (spec.global_rank(0), spec.global_rank(spec.procs - 1));
    if first == last {
        first.to_string()
    } else {
        format!("{first}..{last}")
    }
}

fn start_and_supervise(spec: &Spec, restart: usize, seen: usize) -> anyhow::Result<Ending> {
    let mut ranks: Vec<Option<Child>> = Vec::with_capacity(spec.procs);
    let mut relays = Vec::new();
    for local in 0..spec.procs {
        let rank = spec.global_rank(local);
        match spawn(spec, local, restart) {
            Ok(mut child) => {
                relays.extend(child.stdout.take().map(|o| relay(o, rank)));
                relays.extend(child.stderr.take().map(|e| relay(e, rank)));
                ranks.push(Some(child));
            }
            Err(e) => {
                signal_all(&ranks, libc::SIGKILL);
                for c in ranks.iter_mut().flatten() {
                    let _ = c.wait();
                }
                return Err(e).with_context(|| {
                    format!("cannot start rank {rank}: {}", spec.program.display())
                });
            }
        }
    }
    let ending = supervise(spec, &mut ranks, seen);
    // Pipes close when the ranks' process groups are gone; do not wait forever on a
    // grandchild that escaped its group and kept one open.
    let until = Instant::now() + Duration::from_secs(1);
    while relays.iter().any(|r| !r.is_finished()) && Instant::now() < until {
        thread::sleep(Duration::from_millis(10));
    }
    Ok(ending)
}

fn spawn(spec: &Spec, local: usize, restart: usize) -> std::io::Result<Child> {
    let mut cmd = Command::new(&spec.program);
    cmd.args(&spec.args)
        .envs(spec.rank_env(local, restart))
        // Ranks run in their own process groups, where reading the terminal would stop them.
        .stdin(Stdio::null())
        // Its own group, so stopping a rank also stops what it started (shells, workers).
        .process_group(0);
    if std::env::var_os("NCCL_NVLS_ENABLE").is_none() {
        // NVLink SHARP (multicast) is unavailable on many hosts and NCCL fails hard on it.
        cmd.env("NCCL_NVLS_ENABLE", "0");
    }
    if spec.global_rank(local) > 0 {
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    }
    #[cfg(target_os = "linux")]
    {
        let launcher = std::process::id() as libc::pid_t;
        // SAFETY: only async-signal-safe calls (prctl, getppid) between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                // If the launcher dies, even by SIGKILL, the rank is told to stop: no orphans.
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::getppid() != launcher {
                    return Err(std::io::Error::other("the launcher exited"));
                }
                Ok(())
            });
        }
    }
    cmd.spawn()
}

/// Copies a rank's output line by line to stderr behind `[rank i] `.
fn relay(src: impl Read + Send + 'static, rank: usize) -> JoinHandle<()> {
    thread::spawn(move || {
        let prefix = format!("[rank {rank}] ");
        let mut src = BufReader::new(src);
        let mut line = Vec::new();
        loop {
            line.clear();
            match src.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            if !line.ends_with(b"\n") {
                line.push(b'\n');
            }
            let mut err = std::io::stderr().lock();
            let _ = err
                .write_all(prefix.as_bytes())
                .and_then(|()| err.write_all(&line));
        }
    })
}

/// Sends `sig` to the process group of every rank still running.
fn signal_all(ranks: &[Option<Child>], sig: libc::c_int) {
    for c in ranks.iter().flatten() {
        let pid = c.id() as libc::pid_t;
        // SAFETY: plain syscalls. The rank is not reaped yet, so its pid, which is also its
        // group id, still names it and nothing else.
        unsafe {
            if libc::kill(-pid, sig) != 0 {
                libc::kill(pid, sig);
            }
        }
    }
}

/// The global ranks of the children still running, for messages.
fn running(spec: &Spec, ranks: &[Option<Child>]) -> String {
    ranks
        .iter()
        .enumerate()
        .filter(|(_, c)| c.is_some())
        .map(|(i, _)| spec.global_rank(i).to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// 128 + signal for a rank killed by a signal, as shells report it.
fn exit_code(st: ExitStatus) -> u8 {
    match (st.code(), st.signal()) {
        (Some(c), _) => (c & 0xff) as u8,
        (None, Some(sig)) => 128u8.wrapping_add(sig as u8),
        (None, None) => 1,
    }
}

fn describe(st: ExitStatus) -> String {
    match (st.code(), st.signal()) {
        (Some(c), _) => format!("exit code {c}"),
        (None, Some(sig)) => format!("killed by signal {sig} ({})", signals::name(sig)),
        _ => st.to_string(),
    }
}

fn supervise(spec: &Spec, ranks: &mut [Option<Child>], mut seen: usize) -> Ending {
    let grace = spec.grace;
    let mut first: Option<(usize, u8, String)> = None;
    let mut interrupted: Option<i32> = None;
    let mut stopping_since: Option<Instant> = None;
    let mut killed = false;
    loop {
        if signals::count() != seen {
            seen = signals::count();
            let sig = signals::last();
            if interrupted.is_none() && !killed {
                interrupted = Some(sig);
                eprintln!(
                    "octet launch: {} received, stopping ranks {} (again to kill at once)",
                    signals::name(sig),
                    running(spec, ranks)
                );
                signal_all(
                    ranks,
                    if sig == libc::SIGINT {
                        sig
                    } else {
                        libc::SIGTERM
                    },
                );
                stopping_since.get_or_insert_with(Instant::now);
            } else if !killed {
                eprintln!("octet launch: killing ranks {}", running(spec, ranks));
                signal_all(ranks, libc::SIGKILL);
                killed = true;
            }
        }
        for (local, slot) in ranks.iter_mut().enumerate() {
            let Some(child) = slot else { continue };
            let rank = spec.global_rank(local);
            let status = match child.try_wait() {
                Ok(s) => s,
                Err(e) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    *slot = None;
                    eprintln!("octet launch: cannot watch rank {rank}: {e}");
                    first.get_or_insert((rank, 1, format!("cannot watch it: {e}")));
                    continue;
                }
            };
            let Some(st) = status else { continue };
            *slot = None;
            if st.success() || first.is_some() || interrupted.is_some() {
                continue;
            }
            let what = describe(st);
            eprintln!("octet launch: rank {rank} failed first ({what}); stopping the other ranks");
            first = Some((rank, exit_code(st), what));
        }
        if first.is_some() && stopping_since.is_none() && ranks.iter().any(Option::is_some) {
            signal_all(ranks, libc::SIGTERM);
            stopping_since = Some(Instant::now());
        }
        if ranks.iter().all(Option::is_none) {
            break;
        }
        if let Some(t) = stopping_since {
            if !killed && t.elapsed() >= grace {
                eprintln!(
                    "octet launch: ranks {} still running {grace:?} after SIGTERM: killing them",
                    running(spec, ranks)
                );
                signal_all(ranks, libc::SIGKILL);
                killed = true;
            }
        }
        thread::sleep(POLL);
    }
    match (first, interrupted) {
        (Some((rank, code, what)), _) => Ending::Failed { rank, code, what },
        (None, Some(sig)) => Ending::Interrupted(128u8.wrapping_add(sig as u8)),
        (None, None) => Ending::Done,
    }
}

/// Termination requests to the launcher (Ctrl-C, `kill`, a closed terminal), recorded by a
/// handler that only stores numbers and read by the supervision loop.
mod signals {
    use super::*;

    static LAST: AtomicI32 = AtomicI32::new(0);
    static COUNT: AtomicUsize = AtomicUsize::new(0);

    extern "C" fn on_signal(sig: libc::c_int) {
        LAST.store(sig, Ordering::SeqCst);
        COUNT.fetch_add(1, Ordering::SeqCst);
    }

    pub fn install() -> anyhow::Result<()> {
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            // SAFETY: the handler touches atomics only, which is async-signal-safe.
            let r = unsafe {
                let mut act: libc::sigaction = std::mem::zeroed();
                act.sa_sigaction = on_signal as *const () as libc::sighandler_t;
                act.sa_flags = libc::SA_RESTART;
                libc::sigemptyset(&mut act.sa_mask);
                libc::sigaction(sig, &act, std::ptr::null_mut())
            };
            anyhow::ensure!(
                r == 0,
                "cannot handle signal {sig}: {}",
                std::io::Error::last_os_error()
            );
        }
        Ok(())
    }

    pub fn count() -> usize {
        COUNT.load(Ordering::SeqCst)
    }

    pub fn last() -> i32 {
        LAST.load(Ordering::SeqCst)
    }

    pub fn name(sig: i32) -> &'static str {
        match sig {
            libc::SIGINT => "SIGINT",
            libc::SIGTERM => "SIGTERM",
            libc::SIGHUP => "SIGHUP",
            libc::SIGKILL => "SIGKILL",
            libc::SIGSEGV => "SIGSEGV",
            libc::SIGABRT => "SIGABRT",
            libc::SIGBUS => "SIGBUS",
            libc::SIGFPE => "SIGFPE",
            libc::SIGILL => "SIGILL",
            libc::SIGPIPE => "SIGPIPE",
            _ => "signal",
        }
    }
}
