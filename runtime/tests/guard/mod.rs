//! Guards for the crafted-input tests (also included, by path, by the trainer's and the
//! command line's): a global allocator that refuses any single allocation above a bound and
//! says which case asked for it, and a watchdog that ends the process, naming the case, when
//! one case runs too long. Install in the test binary with
//! `#[global_allocator] static A: guard::Bounded = guard::Bounded;`.
#![allow(dead_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Write;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Largest single allocation allowed (bytes); `usize::MAX` until [`arm`].
static LIMIT: AtomicUsize = AtomicUsize::new(usize::MAX);
/// Largest single allocation seen while armed.
static LARGEST: AtomicUsize = AtomicUsize::new(0);
/// Allocations refused (an infallible one then aborts the process, after the report below).
static REFUSED: AtomicUsize = AtomicUsize::new(0);
/// The case running now (`u64::MAX`: none), and when it started (ms since `BASE`).
static CASE: AtomicU64 = AtomicU64::new(u64::MAX);
static CASE_START_MS: AtomicU64 = AtomicU64::new(0);
static BASE: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();

/// The bounded allocator (the system's, with the check).
pub struct Bounded;

fn allowed(size: usize) -> bool {
    if size > LIMIT.load(Ordering::Relaxed) {
        REFUSED.fetch_add(1, Ordering::Relaxed);
        // No allocation here: the message is built on the stack and written unbuffered.
        let mut buf = [0u8; 160];
        let mut w = &mut buf[..];
        let _ = write!(
            w,
            "\nguard: case {} asked for {} bytes in one allocation (bound {})\n",
            CASE.load(Ordering::Relaxed),
            size,
            LIMIT.load(Ordering::Relaxed)
        );
        let n = 160 - w.len();
        let _ = std::io::stderr().write_all(&buf[..n]);
        return false;
    }
    LARGEST.fetch_max(size, Ordering::Relaxed);
    true
}

// SAFETY: forwards to the system allocator, or returns null (allowed by the trait).
unsafe impl GlobalAlloc for Bounded {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if allowed(l.size()) {
            System.alloc(l)
        } else {
            std::ptr::null_mut()
        }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        if allowed(l.size()) {
            System.alloc_zeroed(l)
        } else {
            std::ptr::null_mut()
        }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        if allowed(new) {
            System.realloc(p, l, new)
        } else {
            std::ptr::null_mut()
        }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        System.dealloc(p, l)
    }
}

fn now_ms() -> u64 {
    BASE.get_or_init(Instant::now).elapsed().as_millis() as u64
}

/// Bounds every later allocation to `limit` bytes and starts a watchdog that aborts the
/// process when one case (see [`case`]) runs longer than `per_case`.
pub fn arm(limit: usize, per_case: Duration) {
    LIMIT.store(limit, Ordering::Relaxed);
    now_ms();
    std::thread::spawn(move || loop {
        std::thread::sleep(Duration::from_millis(100));
        let c = CASE.load(Ordering::Relaxed);
        if c != u64::MAX
            && now_ms().saturating_sub(CASE_START_MS.load(Ordering::Relaxed))
                > per_case.as_millis() as u64
        {
            let _ = writeln!(
                std::io::stderr(),
                "guard: case {c} ran longer than {per_case:?} (a hang): aborting"
            );
            std::process::abort();
        }
    });
}

/// Marks the start of case `id` (for the reports above).
pub fn case(id: u64) {
    CASE_START_MS.store(now_ms(), Ordering::Relaxed);
    CASE.store(id, Ordering::Relaxed);
}

/// Marks that no case runs (the watchdog rests).
pub fn idle() {
    CASE.store(u64::MAX, Ordering::Relaxed);
}

/// Allocations refused so far.
pub fn refused() -> usize {
    REFUSED.load(Ordering::Relaxed)
}

/// Largest single allocation so far (while armed).
pub fn largest() -> usize {
    LARGEST.load(Ordering::Relaxed)
}

/// A line on the test's real stderr, past the harness's capture (so CI logs show it).
pub fn report(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}
