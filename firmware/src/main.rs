//! Runs an `.o8` model on a Cortex-M, as `bench/mcu.sh` does under QEMU (`mps2-an386`,
//! Cortex-M4F; `mps2-an385`, Cortex-M3): parses the embedded model, runs every embedded image
//! with each kernel set of `OCTET_MCU_KERNELS`, compares the logits with the host's and prints,
//! over semihosting, one `key=value` line per measurement: instructions to parse, per image,
//! per op (image 0), whether a repeated run took exactly as many, and the deepest stack.
//! Exits through semihosting: success when every logit byte matched and nothing failed.
//!
//! Instructions: QEMU's `-icount shift=0` makes virtual time one nanosecond per instruction,
//! and SysTick counts the 25 MHz core clock of that virtual time: a tick every 40
//! instructions, which `calibrate` measures with a loop of a known instruction count. `stamp`
//! resolves single instructions within a tick, so the counts are exact (up to the few
//! instructions of the measuring calls) and repeat exactly.
#![no_std]
#![no_main]

use core::hint::black_box;
use core::sync::atomic::{AtomicU32, Ordering};

use cortex_m::peripheral::syst::SystClkSource;
use cortex_m::peripheral::{SCB, SYST};
use cortex_m_rt::{entry, exception};
use cortex_m_semihosting::{debug, hprint, hprintln};
use octet_runtime::{Kernels, Model, OpKind};
use panic_semihosting as _;

/// 16-byte alignment for the model (its data section is 16-aligned in the file) and the arena.
#[repr(C, align(16))]
struct Aligned<T>(T);

/// The model, images, expected logits and kernel names `build.rs` embeds.
mod inputs {
    use super::Aligned;
    include!(concat!(env!("OUT_DIR"), "/inputs.rs"));
}

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
const VERNIER: u64 = 41;
/// Iterations of both loops in `stamp` together: the phase search needs at most 41.
const VERNIER_ITERS: u32 = 42;
/// Instructions per SysTick tick (`calibrate`); 0 before.
static PER_TICK: AtomicU32 = AtomicU32::new(0);

/// Measures the instructions per SysTick tick with a loop of a known instruction count (the
/// difference of two loops cancels the calls). Exact counts need a whole number that divides
/// `VERNIER − 1`; returns the measured ratio as the error otherwise.
fn calibrate() -> Result<u32, f64> {
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
fn stamp() -> u64 {
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
fn clock() -> f64 {
    (stamp() + (1 << 40)) as f64
}

/// Instructions the measuring itself adds to an interval.
struct Costs {
    /// `stamp()` then `stamp()`: from the first call to the second.
    stamp: u64,
    /// The same through `clock`, as `run_timed` calls it.
    clock: u64,
}

impl Costs {
    /// Measures the costs, several times: they must repeat exactly, and a loop of 2·n
    /// instructions must measure 2·n more than an empty one. `None` when not. (Elsewhere the
    /// code between two calls differs by the odd register move: a few instructions.)
    fn measure() -> Option<Costs> {
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

/// What fills the unused stack, to find afterwards how deep it went.
const PAINT: u32 = 0x5EED_C0DE;
/// Bytes painted below the stack pointer; a deeper stack is reported as an error.
const STACK_WINDOW: usize = 128 * 1024;
/// Bytes left unpainted below the stack pointer (the painting code's own frame).
const STACK_MARGIN: usize = 256;

extern "C" {
    /// The top of the stack (cortex-m-rt's link.x: the end of RAM).
    static _stack_start: u32;
    /// The end of .bss and .uninit: the stack may not grow below it.
    static __sheap: u32;
}

/// A painted stack region `[lo, hi)`, word addresses.
struct Painted {
    lo: usize,
    hi: usize,
}

impl Painted {
    /// Paints the free stack below the caller's frame.
    #[inline(always)]
    fn new() -> Painted {
        let hi = (cortex_m::register::msp::read() as usize - STACK_MARGIN) & !3;
        let floor = core::ptr::addr_of!(__sheap) as usize;
        let lo = hi.saturating_sub(STACK_WINDOW).max(floor);
        let mut a = lo;
        while a < hi {
            // SAFETY: free stack between the end of .bss and the stack pointer, word-aligned.
            unsafe { (a as *mut u32).write_volatile(PAINT) };
            a += 4;
        }
        Painted { lo, hi }
    }

    /// The deepest stack use since `new`, in bytes below the top of the stack; `None` when
    /// the stack went below the painted window.
    fn used(&self) -> Option<usize> {
        let top = core::ptr::addr_of!(_stack_start) as usize;
        let mut a = self.lo;
        // SAFETY: as in `new`; only reads.
        while a < self.hi && unsafe { (a as *const u32).read_volatile() } == PAINT {
            a += 4;
        }
        (a > self.lo).then_some(top - a)
    }
}

/// Multiply-adds of an op (conv2d and fully_connected; 0 for the rest).
fn macs(m: &Model, j: u32) -> u64 {
    let Some(o) = m.op(j) else { return 0 };
    let len = |id| m.tensor(id).map_or(0, |t| t.len() as u64);
    match o.kind {
        OpKind::Conv2d => {
            let c_in = m.tensor(o.input0).map_or(0, |t| u64::from(t.c));
            len(o.output) * u64::from(o.kernel_h) * u64::from(o.kernel_w) * c_in
        }
        OpKind::FullyConnected => len(o.output) * len(o.input0),
        _ => 0,
    }
}

fn stack_or_fail(used: Option<usize>, what: &str) -> Option<usize> {
    if used.is_none() {
        hprintln!(
            "error: {}: the stack went deeper than the painted {} bytes (raise STACK_WINDOW in firmware/src/main.rs)",
            what,
            STACK_WINDOW
        );
    }
    used
}

/// Runs one image between two stamps: the logits (or the error) and the instructions, the
/// stamps' own included. Every measured run goes through here, so they include the same.
#[inline(never)]
fn run_image<'b>(
    model: &Model,
    k: Kernels,
    img: &[u8],
    arena: &'b mut [u8],
) -> (octet_runtime::Result<&'b [i8]>, u64) {
    let t0 = stamp();
    let r = model.run_with(k, img, arena);
    (r, stamp() - t0)
}

/// Everything the firmware measures; false when something failed (already printed).
fn bench(arena: &mut [u8]) -> bool {
    let per_tick = match calibrate() {
        Ok(r) => r,
        Err(ratio) => {
            hprintln!(
                "error: SysTick counts {}/1000 instructions per tick; exact counts need a whole divisor of {} (run under QEMU with -icount shift=0: 40)",
                (ratio * 1000.0) as u64,
                VERNIER - 1
            );
            return false;
        }
    };
    let Some(c) = Costs::measure() else {
        hprintln!("error: the instruction counts do not repeat exactly (is QEMU running with -icount shift=0?)");
        return false;
    };
    hprintln!(
        "octet-mcu target={} model_bytes={} arena_bytes={} images={} kernels={} insn_per_tick={} stamp_cost={} clock_cost={}",
        env!("OCTET_FIRMWARE_TARGET"),
        inputs::MODEL.0.len(),
        arena.len(),
        inputs::N_IMAGES,
        inputs::KERNELS_LIST,
        per_tick,
        c.stamp,
        c.clock
    );

    let paint = Painted::new();
    let t0 = stamp();
    let parsed = Model::parse(&inputs::MODEL.0);
    let t1 = stamp();
    let Some(mut peak) = stack_or_fail(paint.used(), "parse") else {
        return false;
    };
    let model = match parsed {
        Ok(m) => m,
        Err(e) => {
            hprintln!("error: the embedded model is invalid: {}", e);
            return false;
        }
    };
    hprintln!("parse insn={} stack={}", t1 - t0 - c.stamp, peak);
    if model.arena_bytes() > arena.len() {
        hprintln!(
            "error: the model needs an arena of {} bytes, the firmware has {} (rebuild: build.rs sizes it from the model)",
            model.arena_bytes(),
            arena.len()
        );
        return false;
    }
    let (n_in, n_out) = (model.input_len(), model.output_len());
    let (mut ok, mut ran) = (true, 0);
    for name in inputs::KERNELS {
        let Some(k) = Kernels::from_name(name) else {
            hprintln!("error: unknown kernel set '{}'", name);
            return false;
        };
        // A set this core lacks (the DSP kernels on a Cortex-M3) is reported and skipped.
        let resolved = match k.resolved_name() {
            Ok(r) => r,
            Err(e) => {
                hprintln!("unavailable kernels={} ({})", name, e);
                continue;
            }
        };
        ran += 1;
        let mut image0 = 0;
        for (i, img) in inputs::IMAGES.chunks_exact(n_in).enumerate() {
            let paint = Painted::new();
            let (r, insn) = run_image(&model, k, img, arena);
            let Some(stack) = stack_or_fail(paint.used(), "run") else {
                return false;
            };
            peak = peak.max(stack);
            let logits = match r {
                Ok(l) => l,
                Err(e) => {
                    hprintln!("error: kernels {}, image {}: {}", name, i, e);
                    return false;
                }
            };
            let expected = &inputs::EXPECTED[i * n_out..(i + 1) * n_out];
            let same = logits.iter().zip(expected).all(|(&q, &e)| q as u8 == e);
            ok &= same;
            if i == 0 {
                image0 = insn;
            }
            hprint!(
                "run kernels={} resolved={} image={} insn={} stack={} match={} logits=",
                name,
                resolved,
                i,
                insn - c.stamp,
                stack,
                if same { "yes" } else { "no" }
            );
            for &q in logits {
                hprint!("{:02x}", q as u8);
            }
            hprintln!();
        }

        // Image 0 again, whole and op by op (twice): the counts must repeat exactly.
        let img = &inputs::IMAGES[..n_in];
        let (again, repeat) = run_image(&model, k, img, arena);
        let again = again.is_ok();
        let mut first = [0f64; inputs::N_OPS];
        let mut second = [0f64; inputs::N_OPS];
        let paint = Painted::new();
        let timed = model
            .run_timed(k, img, arena, &mut first, clock)
            .and_then(|()| model.run_timed(k, img, arena, &mut second, clock));
        let Some(stack) = stack_or_fail(paint.used(), "run_timed") else {
            return false;
        };
        peak = peak.max(stack);
        if let (false, _) | (_, Err(_)) = (again, timed) {
            hprintln!(
                "error: kernels {}: the repeated runs of image 0 failed",
                name
            );
            return false;
        }
        for (j, (a, b)) in first.iter().zip(&second).enumerate() {
            let kind = model.op(j as u32).map_or("?", |o| o.kind.name());
            hprintln!(
                "op kernels={} index={} kind={} macs={} insn={} repeat={}",
                name,
                j,
                kind,
                macs(&model, j as u32),
                *a as u64 - c.clock,
                *b as u64 - c.clock
            );
        }
        let stable = repeat == image0 && first == second;
        hprintln!(
            "stable kernels={} {}",
            name,
            if stable { "yes" } else { "no" }
        );
    }
    if ran == 0 {
        hprintln!(
            "error: none of the kernel sets {} runs on this core",
            inputs::KERNELS_LIST
        );
        return false;
    }
    hprintln!("stack peak={}", peak);
    if !ok {
        hprintln!("error: logits differ from the host's (the run lines with match=no)");
    }
    ok
}

#[entry]
fn main() -> ! {
    static mut ARENA: Aligned<[u8; inputs::ARENA_BYTES]> = Aligned([0; inputs::ARENA_BYTES]);
    let Some(mut p) = cortex_m::Peripherals::take() else {
        panic!("the core peripherals were taken before main");
    };
    p.SYST.set_clock_source(SystClkSource::Core);
    p.SYST.set_reload(RELOAD);
    p.SYST.clear_current();
    p.SYST.enable_interrupt();
    p.SYST.enable_counter();
    // The counter reads 0 until its first reload, which is not a wrap: start after it.
    while SYST::get_current() == 0 {}
    let ok = bench(&mut ARENA.0);
    debug::exit(if ok {
        debug::EXIT_SUCCESS
    } else {
        debug::EXIT_FAILURE
    });
    loop {
        cortex_m::asm::wfi();
    }
}
