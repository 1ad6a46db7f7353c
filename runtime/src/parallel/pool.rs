//! Worker threads that stay: started on first use, then woken for each call instead of started
//! (starting and joining a thread costs tens of microseconds, 5–8% of a batch-1 ResNet-18 on
//! two cores). Idle workers spin briefly, then sleep. One call uses the pool at a time; a
//! concurrent caller runs on scoped threads of its own.

use core::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Mutex;
use std::time::Duration;

use super::signal::Signal;
use super::MAX_THREADS;
use crate::{Result, RuntimeError};

/// A job: parts 0..n of it run at once, part 0 on the caller.
type Job<'a> = dyn Fn(usize) + Sync + 'a;

struct Pool {
    /// Workers started (each runs part `index + 1` of the jobs that have that many parts),
    /// locked by the call that owns the pool.
    owner: Mutex<usize>,
    /// `epoch << 8 | parts` of the latest job.
    job: Signal,
    /// The latest job: a `*const &Job` on the caller's stack, valid until `pending` is 0.
    func: AtomicPtr<()>,
    /// Workers yet to finish the latest job.
    pending: Signal,
    panicked: AtomicBool,
}

static POOL: Pool = Pool {
    owner: Mutex::new(0),
    job: Signal::new(0),
    func: AtomicPtr::new(core::ptr::null_mut()),
    pending: Signal::new(0),
    panicked: AtomicBool::new(false),
};

/// How long an idle worker spins before it sleeps: covers the gap between back-to-back calls.
const IDLE_SPIN: Duration = Duration::from_micros(200);
/// How long the caller spins for the workers to finish their parts.
const DONE_SPIN: Duration = Duration::from_micros(50);

fn worker(part: usize, mut seen: usize) {
    loop {
        seen = POOL.job.wait_until(IDLE_SPIN, |w| w != seen);
        if part < seen & 0xFF {
            // SAFETY: the caller keeps the job alive until every worker of it has finished
            // (`pending` reaches 0 below), and publishes `func` before `job`.
            let f = unsafe { &*POOL.func.load(Ordering::SeqCst).cast::<&Job>() };
            if catch_unwind(AssertUnwindSafe(|| f(part))).is_err() {
                POOL.panicked.store(true, Ordering::SeqCst);
            }
            if POOL.pending.decrement() == 1 {
                POOL.pending.notify();
            }
        }
    }
}

/// Waits for the workers of the current job, also when the caller's part unwinds.
struct Join;

impl Drop for Join {
    fn drop(&mut self) {
        POOL.pending.wait_until(DONE_SPIN, |w| w == 0);
    }
}

/// Runs `f(part)` for parts 0..n (n ≤ [`MAX_THREADS`]) at once, part 0 on this thread, on the
/// pool's workers; `None` when another call has the pool (or a worker cannot start).
fn run_pooled(n: usize, f: &Job) -> Option<bool> {
    let mut started = match POOL.owner.try_lock() {
        Ok(g) => g,
        Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
        Err(std::sync::TryLockError::WouldBlock) => return None,
    };
    while *started + 1 < n {
        let (part, seen) = (*started + 1, POOL.job.load());
        std::thread::Builder::new()
            .name(format!("octet-runtime-{part}"))
            .spawn(move || worker(part, seen))
            .ok()?;
        *started += 1;
    }
    POOL.panicked.store(false, Ordering::SeqCst);
    POOL.pending.store_quiet(n - 1);
    let f: &Job = f;
    POOL.func
        .store((&f as *const &Job).cast_mut().cast(), Ordering::SeqCst);
    let epoch = (POOL.job.load() >> 8).wrapping_add(1);
    POOL.job.store(epoch << 8 | n);
    let join = Join;
    f(0);
    drop(join);
    Some(!POOL.panicked.load(Ordering::SeqCst))
}

/// Runs `worker(part, area)` for parts 0..t, part 0 on this thread, each with its own
/// `area_len`-byte slice of `areas` (which holds at least `t` of them); the first error wins.
pub(super) fn on_threads(
    areas: &mut [u8],
    area_len: usize,
    t: usize,
    worker: &(dyn Fn(usize, &mut [u8]) -> Result<()> + Sync),
) -> Result<()> {
    if t == 0 || t > MAX_THREADS || areas.len() / area_len.max(1) < t {
        return Err(RuntimeError::BadThreads);
    }
    let base = super::SharedPtr(areas.as_mut_ptr());
    let first_error = Mutex::new(Ok(()));
    let part = |p: usize| {
        // SAFETY: parts are distinct, so their `area_len`-byte slices (within `areas`,
        // checked above) are disjoint.
        let area =
            unsafe { core::slice::from_raw_parts_mut(base.get().add(p * area_len), area_len) };
        if let Err(e) = worker(p, area) {
            let mut first = first_error.lock().unwrap_or_else(|e| e.into_inner());
            if first.is_ok() {
                *first = Err(e);
            }
        }
    };
    let finished = match run_pooled(t, &part) {
        Some(finished) => finished,
        None => std::thread::scope(|s| {
            let handles: [_; MAX_THREADS] =
                core::array::from_fn(|p| (p > 0 && p < t).then(|| s.spawn(move || part(p))));
            part(0);
            // Every thread joined (not `all`: it would stop at the first that panicked).
            let mut ok = true;
            for h in handles.into_iter().flatten() {
                ok &= h.join().is_ok();
            }
            ok
        }),
    };
    if !finished {
        return Err(RuntimeError::BadThreads);
    }
    first_error.into_inner().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::sync::atomic::AtomicUsize;

    #[test]
    fn every_part_runs_once_per_call_and_errors_come_back() {
        let mut areas = vec![0u8; 4 * 8];
        for round in 0..200 {
            let t = 1 + round % 4;
            let calls = AtomicUsize::new(0);
            on_threads(&mut areas, 8, t, &|p, area| {
                calls.fetch_add(1, Ordering::SeqCst);
                area.fill(p as u8 + 1);
                Ok(())
            })
            .unwrap();
            assert_eq!(calls.load(Ordering::SeqCst), t);
            for (p, a) in areas.chunks(8).take(t).enumerate() {
                assert!(a.iter().all(|&b| b == p as u8 + 1));
            }
        }
        let r = on_threads(&mut areas, 8, 3, &|p, _| {
            if p == 2 {
                Err(RuntimeError::BadThreads)
            } else {
                Ok(())
            }
        });
        assert_eq!(r, Err(RuntimeError::BadThreads));
    }

    #[test]
    fn concurrent_callers_each_get_their_parts() {
        std::thread::scope(|s| {
            for _ in 0..3 {
                s.spawn(|| {
                    let mut areas = vec![0u8; 2];
                    for _ in 0..100 {
                        let sum = AtomicUsize::new(0);
                        on_threads(&mut areas, 1, 2, &|p, _| {
                            sum.fetch_add(p + 1, Ordering::SeqCst);
                            Ok(())
                        })
                        .unwrap();
                        assert_eq!(sum.load(Ordering::SeqCst), 3);
                    }
                });
            }
        });
    }

    #[test]
    fn a_panicking_part_is_an_error_not_a_hang() {
        let mut areas = vec![0u8; 2];
        let r = on_threads(&mut areas, 1, 2, &|p, _| {
            assert!(p != 1, "part 1 fails");
            Ok(())
        });
        assert_eq!(r, Err(RuntimeError::BadThreads));
        // The pool still works afterwards.
        on_threads(&mut areas, 1, 2, &|_, _| Ok(())).unwrap();
    }
}
