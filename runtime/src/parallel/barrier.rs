//! Threads meeting after each op of a split image; gives up when a thread failed.

use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use super::signal::Signal;

pub(super) struct Barrier {
    n: usize,
    count: AtomicUsize,
    generation: Signal,
    failed: AtomicBool,
}

/// How long a thread at the barrier spins before it sleeps: longer than the imbalance between
/// two parts of an op, far shorter than a scheduler's time slice.
const SPIN: Duration = Duration::from_micros(50);

impl Barrier {
    pub(super) fn new(n: usize) -> Self {
        Barrier {
            n,
            count: AtomicUsize::new(0),
            generation: Signal::new(0),
            failed: AtomicBool::new(false),
        }
    }

    /// Waits for the other threads; `false` when one of them failed.
    pub(super) fn wait(&self) -> bool {
        let g = self.generation.load();
        if self.count.fetch_add(1, Ordering::SeqCst) + 1 == self.n {
            self.count.store(0, Ordering::SeqCst);
            self.generation.store(g.wrapping_add(1));
        } else {
            self.generation
                .wait_until(SPIN, |w| w != g || self.failed.load(Ordering::SeqCst));
        }
        !self.failed.load(Ordering::SeqCst)
    }

    /// Releases every waiter, now and at later waits, with `false`.
    pub(super) fn fail(&self) {
        self.failed.store(true, Ordering::SeqCst);
        self.generation.notify();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meets_every_generation_and_releases_on_failure() {
        let b = Barrier::new(3);
        let hits = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..3 {
                s.spawn(|| {
                    for round in 0..100 {
                        hits.fetch_add(1, Ordering::SeqCst);
                        assert!(b.wait());
                        // Everyone has counted this round before anyone counts the next.
                        assert!(hits.load(Ordering::SeqCst) >= 3 * (round + 1));
                        assert!(b.wait());
                    }
                });
            }
        });
        let b = Barrier::new(2);
        std::thread::scope(|s| {
            let h = s.spawn(|| b.wait());
            std::thread::sleep(Duration::from_millis(5));
            b.fail();
            assert!(!h.join().unwrap());
        });
    }
}
