//! Threads meeting after each op of a split image; gives up when a thread failed.
//!
//! Each thread counts its arrivals in a slot of its own cache line and waits until every slot
//! has reached its count: one line passes from each writer to each reader, where a shared
//! counter passed its line to every thread in turn and then the release back (286 → 90–105 ns per
//! meeting of two Zen 4 cores).

use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use super::signal::Signal;
use super::MAX_THREADS;

/// One thread's arrivals, alone on its cache line (two lines: CPUs fetch lines in pairs).
#[repr(align(128))]
struct Slot(AtomicUsize);

pub(super) struct Barrier {
    n: usize,
    slots: [Slot; MAX_THREADS],
    /// Sleepers wait on it (its word unused).
    wake: Signal,
    failed: AtomicBool,
}

/// How long a thread at the barrier spins before it sleeps: longer than the imbalance between
/// two parts of an op, far shorter than a scheduler's time slice.
const SPIN: Duration = Duration::from_micros(50);

impl Barrier {
    /// A barrier for parts `0..n` (n ≤ [`MAX_THREADS`]).
    pub(super) fn new(n: usize) -> Self {
        Barrier {
            n: n.min(MAX_THREADS),
            slots: core::array::from_fn(|_| Slot(AtomicUsize::new(0))),
            wake: Signal::new(0),
            failed: AtomicBool::new(false),
        }
    }

    /// Part `part` waits for the other parts; `false` when one of them failed.
    pub(super) fn wait(&self, part: usize) -> bool {
        let slot = &self.slots[part].0;
        // Only this part writes its slot.
        let round = slot.load(Ordering::Relaxed).wrapping_add(1);
        slot.store(round, Ordering::SeqCst);
        self.wake.notify();
        // A part is never more than one round ahead of another: it waits here for all. The
        // loads are SeqCst as the store above: `Signal`'s sleepers rely on it (a plain load on
        // x86, the same `ldar` as an acquire on Armv8).
        self.wake.wait_until(SPIN, |_| {
            self.failed.load(Ordering::SeqCst)
                || self.slots[..self.n]
                    .iter()
                    .all(|s| s.0.load(Ordering::SeqCst) >= round)
        });
        !self.failed.load(Ordering::SeqCst)
    }

    /// Releases every waiter, now and at later waits, with `false`.
    pub(super) fn fail(&self) {
        self.failed.store(true, Ordering::SeqCst);
        self.wake.notify();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn meets_every_generation_and_releases_on_failure() {
        let b = Barrier::new(3);
        let hits = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for part in 0..3 {
                let (b, hits) = (&b, &hits);
                s.spawn(move || {
                    for round in 0..100 {
                        hits.fetch_add(1, Ordering::SeqCst);
                        assert!(b.wait(part));
                        // Everyone has counted this round before anyone counts the next.
                        assert!(hits.load(Ordering::SeqCst) >= 3 * (round + 1));
                        assert!(b.wait(part));
                    }
                });
            }
        });
        let b = Barrier::new(2);
        std::thread::scope(|s| {
            let h = s.spawn(|| b.wait(1));
            std::thread::sleep(Duration::from_millis(5));
            b.fail();
            assert!(!h.join().unwrap());
        });
    }

    /// A part that arrives after the others slept (past the spin) wakes them.
    #[test]
    fn sleepers_are_woken() {
        let b = Barrier::new(2);
        std::thread::scope(|s| {
            let h = s.spawn(|| b.wait(0));
            std::thread::sleep(SPIN * 20);
            assert!(b.wait(1));
            assert!(h.join().unwrap());
        });
    }

    /// What a meeting of two threads costs (`… --ignored --nocapture meeting_cost`).
    #[test]
    #[ignore]
    fn meeting_cost() {
        let b = Barrier::new(2);
        let n = 200_000u32;
        let t = Instant::now();
        std::thread::scope(|s| {
            for part in 0..2 {
                let b = &b;
                s.spawn(move || (0..n).for_each(|_| assert!(b.wait(part))));
            }
        });
        println!("{:?} per meeting", t.elapsed() / n);
    }
}
