//! When a rank should give up on its peers: the decision of the NCCL watchdog (`nccl.rs`),
//! kept apart from the threads and device calls that gather its inputs so it is tested
//! without GPUs. The judge reads host-side facts only, so it cannot block where the rank is
//! blocked (inside the driver or NCCL).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Set once this process's watchdog has decided to abort: the errors the abort then causes
/// on other threads (a failed CUDA call) are consequences, and the watchdog reports the cause.
static ABORTING: AtomicBool = AtomicBool::new(false);

/// Whether the watchdog is aborting this process (it then exits it itself).
pub fn aborting() -> bool {
    ABORTING.load(Ordering::SeqCst)
}

pub(crate) fn begin_abort() {
    ABORTING.store(true, Ordering::SeqCst);
}

/// What the host side of a rank knows at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HostState {
    /// How long the host has been inside an NCCL call, if it is in one.
    pub inside_call: Option<Duration>,
    /// Time since the host last entered or left a collective.
    pub since_collective: Duration,
    /// Whether a collective it queued is not yet known to have finished.
    pub unfinished: bool,
}

/// Why this rank must stop, or `None` while it looks healthy. `poller` is what the thread
/// that queries events and NCCL's error state found, if anything.
pub(crate) fn judge(s: HostState, poller: Option<&str>, timeout: Duration) -> Option<String> {
    let blocked_in_call = s.inside_call.is_some_and(|t| t > timeout);
    // Queued work never finishes and the host has not come back to a collective since: it
    // is blocked on the device (a copy, a full launch queue) behind that collective.
    let blocked_behind = s.unfinished && s.since_collective > timeout;
    if blocked_in_call || blocked_behind {
        Some(stuck_message(timeout))
    } else {
        poller.map(str::to_string)
    }
}

/// The error for a collective that does not finish.
pub(crate) fn stuck_message(timeout: Duration) -> String {
    format!(
        "a collective has not finished in {} s: another rank has probably died or stopped \
         (raise --dist-timeout if steps are really this slow)",
        timeout.as_secs()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_secs(20);

    fn state(inside: Option<u64>, since: u64, unfinished: bool) -> HostState {
        HostState {
            inside_call: inside.map(Duration::from_secs),
            since_collective: Duration::from_secs(since),
            unfinished,
        }
    }

    #[test]
    fn a_healthy_rank_is_left_alone() {
        // Between steps, in a long evaluation, or after a long compile with nothing queued.
        assert_eq!(judge(state(None, 1, true), None, T), None);
        assert_eq!(judge(state(None, 600, false), None, T), None);
        assert_eq!(judge(state(Some(5), 5, true), None, T), None);
    }

    #[test]
    fn a_host_blocked_in_nccl_or_behind_a_collective_is_stuck() {
        let stuck = Some(stuck_message(T));
        assert_eq!(judge(state(Some(21), 21, true), None, T), stuck);
        assert_eq!(judge(state(None, 21, true), None, T), stuck);
        assert!(stuck_message(T).contains("20 s"));
    }

    #[test]
    fn the_pollers_finding_is_reported_when_the_host_looks_fine() {
        let why = "NCCL reported an asynchronous error";
        assert_eq!(
            judge(state(None, 1, true), Some(why), T).as_deref(),
            Some(why)
        );
        // A stuck host wins: its message names the timeout the user can raise.
        assert_eq!(
            judge(state(None, 30, true), Some(why), T),
            Some(stuck_message(T))
        );
    }
}
