//! A word threads wait on: a waiter spins a while (the events waited for come within
//! microseconds), then sleeps on a condition variable (a thread whose core another process has
//! must not be waited for by spinning).

use core::sync::atomic::{fence, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

pub(super) struct Signal {
    word: AtomicUsize,
    sleepers: AtomicUsize,
    lock: Mutex<()>,
    wake: Condvar,
}

impl Signal {
    pub(super) const fn new(word: usize) -> Self {
        Signal {
            word: AtomicUsize::new(word),
            sleepers: AtomicUsize::new(0),
            lock: Mutex::new(()),
            wake: Condvar::new(),
        }
    }

    pub(super) fn load(&self) -> usize {
        self.word.load(Ordering::SeqCst)
    }

    /// Stores `word` without waking anyone (no one waits for this value).
    pub(super) fn store_quiet(&self, word: usize) {
        self.word.store(word, Ordering::SeqCst);
    }

    /// Stores `word` and wakes the sleepers.
    pub(super) fn store(&self, word: usize) {
        self.word.store(word, Ordering::SeqCst);
        self.notify();
    }

    /// Subtracts 1 without waking anyone; returns the previous word.
    pub(super) fn decrement(&self) -> usize {
        self.word.fetch_sub(1, Ordering::SeqCst)
    }

    /// Wakes the sleepers (after a change made through another atomic they check).
    pub(super) fn notify(&self) {
        // A sleeper counts itself before checking the word (both SeqCst): either it sees the
        // change or this sees it and wakes it (it holds the lock until it waits). The fence
        // keeps the change before the load below where SeqCst alone did not: QEMU's aarch64 on
        // an x86 host lets a store-release pass a later load-acquire (Armv8 forbids it), and a
        // sleeper then slept through the change (CI's hang in tests/prepared.rs).
        fence(Ordering::SeqCst);
        if self.sleepers.load(Ordering::SeqCst) > 0 {
            let _guard = self.lock.lock();
            self.wake.notify_all();
        }
    }

    /// Waits until `done(word)`, spinning for `spin` first; returns the word seen.
    pub(super) fn wait_until(&self, spin: Duration, done: impl Fn(usize) -> bool) -> usize {
        // The clock is started after the first 64 spins and read every 64 only: it costs
        // more than a spin, and most waits end sooner.
        let mut start = None;
        let mut i = 0u32;
        let mut yielding = false;
        loop {
            let w = self.load();
            if done(w) {
                return w;
            }
            i = i.wrapping_add(1);
            if yielding {
                // Another thread on this core (the one waited for, perhaps) runs first.
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
            if yielding || i.is_multiple_of(64) {
                let t = start.get_or_insert_with(Instant::now).elapsed();
                if t >= spin {
                    break;
                }
                yielding = t >= spin / 4;
            }
        }
        let mut guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        let w = loop {
            let w = self.load();
            if done(w) {
                break w;
            }
            guard = self.wake.wait(guard).unwrap_or_else(|e| e.into_inner());
        };
        self.sleepers.fetch_sub(1, Ordering::SeqCst);
        w
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sleeping_waiter_is_woken() {
        static S: Signal = Signal::new(0);
        std::thread::scope(|s| {
            let h = s.spawn(|| S.wait_until(Duration::ZERO, |w| w == 7));
            // Give the waiter time to go to sleep (it must be woken, not find the word).
            std::thread::sleep(Duration::from_millis(20));
            S.store(7);
            assert_eq!(h.join().unwrap(), 7);
        });
    }
}
