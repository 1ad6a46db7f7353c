//! Exact instruction counts under QEMU: SysTick at a known number of instructions per tick,
//! resolved to single instructions by stepping across a tick edge (see `stamp`).

use core::hint::black_box;
use core::sync::atomic::{AtomicU32, Ordering};

use cortex_m::peripheral::syst::SystClkSource;
use cortex_m::peripheral::{SCB, SYST};
use cortex_m_rt::exception;

/// SysTick's reload: its counter has 24 bits.
const RELOAD: u32 = 0x00FF_FFFF;
/// SysTick wraps since start (one interrupt each).
static WRAPS: AtomicU32 = AtomicU32::new(0);

#[exception]
fn SysTick() {
    WRAPS.fetch_add(1, Ordering::Relaxed);
}

/// SysTick ticks since start, to a tick. A wrap between the two reads of `WRAPS` changes it
/// (its interrupt runs at once), and the pair is read again.
fn ticks() -> u64 {
    loop {
        let w = WRAPS.load(Ordering::SeqCst);
        let v = SYST::get_current();
        if WRAPS.load(Ordering::SeqCst) == w {
            return u64::from(w) * (u64::from(RELOAD) + 1) + u64::from(RELOAD - v);
        }
    }
}

/// Exactly 2·n instructions for n ≥ 1 (`subs` and `bne`, n times), plus the call.
#[inline(never)]
fn spin(n: u32) {
    // SAFETY: changes one register and the flags only.
    unsafe {
        core::arch::asm!("2:", "subs {0}, {0}, #1", "bne 2b", inout(reg) n => _,
            options(nomem, nostack));
    }
}

/// SysTick's current value register (SYST_CVR).
const SYST_CVR: usize = 0xE000_E018;
/// Instructions per iteration of the loops in `stamp`: one more than a tick has (40 under
/// QEMU), so each iteration reads SysTick one instruction later within its tick.
pub const VERNIER: u64 = 41;
/// Iterations of both loops in `stamp` together: the phase search needs at most 41.
const VERNIER_ITERS: u32 = 42;
/// Instructions per SysTick tick (`calibrate`); 0 before.
static PER_TICK: AtomicU32 = AtomicU32::new(0);

/// Measures the instructions per SysTick tick with a loop of a known instruction count (the
/// difference of two loops cancels the calls). Exact counts need a whole number that divides
/// `VERNIER − 1`; returns the measured ratio as the error otherwise.
pub fn calibrate() -> Result<u32, f64> {
    let (a, b) = (1u32 << 10, 1u32 << 23);
    let t0 = ticks();
    spin(a);
    let t1 = ticks();
    spin(b);
    let t2 = ticks();
    let ratio = f64::from(2 * (b - a)) / ((t2 - t1) as f64 - (t1 - t0) as f64);
    let r = (ratio + 0.5) as u32;
    let whole = (ratio - f64::from(r)).abs() < 1e-3;
    if whole && r > 0 && (VERNIER as u32 - 1).is_multiple_of(r) {
        PER_TICK.store(r, Ordering::SeqCst);
        Ok(r)
    } else {
        Err(ratio)
    }
}

/// The instruction count at the call, exactly, up to a constant; every call takes the same
/// number of instructions (`Costs`). A tick spans `PER_TICK` instructions, so one reading
/// places the call only within a tick: the first loop reads SysTick every 41 instructions
/// until two readings are 40/`PER_TICK` + 1 ticks apart (2 under QEMU), which happens exactly
/// when the second falls on the first instruction of a tick; the second loop runs the
/// iterations left to `VERNIER_ITERS` (IT-predicated: no branch depends on the phase).
#[inline(never)]
pub fn stamp() -> u64 {
    cortex_m::interrupt::free(|_| {
        let (k, cvr): (u32, u32);
        // SAFETY: reads SYST_CVR (always readable); registers and flags only otherwise.
        unsafe {
            core::arch::asm!(
                "ldr {prev}, [{cvr_addr}]",
                "movs {k}, #0",
                "2:",
                ".rept 35",
                "nop",
                ".endr",
                "adds {k}, {k}, #1",
                "ldr {cur}, [{cvr_addr}]",
                "subs {n}, {prev}, {cur}",
                "mov {prev}, {cur}",
                "cmp {n}, {edge}",
                "bne 2b",
                // n = VERNIER_ITERS − k, at least 1 (k > 41 only when a wrap hid the phase).
                "rsbs {n}, {k}, #{iters}",
                "it le",
                "movle {n}, #1",
                "3:",
                ".rept 39",
                "nop",
                ".endr",
                "subs {n}, {n}, #1",
                "bne 3b",
                cvr_addr = in(reg) SYST_CVR,
                edge = in(reg) (VERNIER as u32 - 1) / PER_TICK.load(Ordering::Relaxed) + 1,
                iters = const VERNIER_ITERS,
                k = out(reg) k,
                prev = out(reg) _,
                cur = out(reg) cvr,
                n = out(reg) _,
                options(nostack, readonly),
            );
        }
        // A wrap whose interrupt waits for the end of `free`: count it if it came before the
        // reading (the counter then reads high).
        let mut w = u64::from(WRAPS.load(Ordering::Relaxed));
        if SCB::is_pendst_pending() && cvr > RELOAD / 2 {
            w += 1;
        }
        let t = w * (u64::from(RELOAD) + 1) + u64::from(RELOAD - cvr);
        t * u64::from(PER_TICK.load(Ordering::Relaxed)) - VERNIER * u64::from(k)
    })
}

/// The clock `Model::run_timed` takes: `stamp`, offset so that the soft-float conversion
/// always takes the same path (41 significant bits, for the first 2^40 instructions).
pub fn clock() -> f64 {
    (stamp() + (1 << 40)) as f64
}

/// Instructions the measuring itself adds to an interval.
pub struct Costs {
    /// `stamp()` then `stamp()`: from the first call to the second.
    pub stamp: u64,
    /// The same through `clock`, as `run_timed` calls it.
    pub clock: u64,
}

impl Costs {
    /// Measures the costs, several times: they must repeat exactly, and a loop of 2·n
    /// instructions must measure 2·n more than an empty one. `None` when not. (Elsewhere the
    /// code between two calls differs by the odd register move: a few instructions.)
    pub fn measure() -> Option<Costs> {
        #[inline(never)]
        fn stamps() -> u64 {
            let a = stamp();
            stamp() - a
        }
        #[inline(never)]
        fn clocks(f: fn() -> f64) -> u64 {
            let a = f();
            (f() - a) as u64
        }
        let f: fn() -> f64 = black_box(clock);
        let mut costs = [(0u64, 0u64); 4];
        for c in &mut costs {
            *c = (stamps(), clocks(f));
        }
        #[inline(never)]
        fn loop_insn(n: u32) -> u64 {
            let a = stamp();
            spin(n);
            stamp() - a
        }
        let (n1, n2) = (1000, 1777);
        let looped = loop_insn(n2) - loop_insn(n1) == u64::from(2 * (n2 - n1));
        let same = costs.iter().all(|&c| c == costs[0]);
        (same && looped).then_some(Costs {
            stamp: costs[0].0,
            clock: costs[0].1,
        })
    }
}

/// Starts SysTick from the core clock, wrapping (and counting a wrap) every 2^24 ticks.
pub fn start(mut syst: SYST) {
    syst.set_clock_source(SystClkSource::Core);
    syst.set_reload(RELOAD);
    syst.clear_current();
    syst.enable_interrupt();
    syst.enable_counter();
    // The counter reads 0 until its first reload, which is not a wrap: start after it.
    while SYST::get_current() == 0 {}
}
