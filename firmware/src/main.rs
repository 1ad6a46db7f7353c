//! Runs an `.o8` model on a Cortex-M, as `bench/mcu.sh` does under QEMU (`mps2-an386`,
//! Cortex-M4F; `mps2-an385`, Cortex-M3): parses the embedded model, runs every embedded image
//! with each kernel set of `OCTET_MCU_KERNELS`, compares the logits with the host's and prints,
//! over semihosting, one `key=value` line per measurement: instructions to parse, per image,
//! per op (image 0), whether a repeated run took exactly as many, and the deepest stack.
//! Exits through semihosting: success when every logit byte matched and nothing failed.
//!
//! Instructions (`clock.rs`): QEMU's `-icount shift=0` makes virtual time one nanosecond per
//! instruction, and SysTick counts the 25 MHz core clock of that virtual time: a tick every 40
//! instructions, which `calibrate` measures with a loop of a known instruction count. `stamp`
//! resolves single instructions within a tick, so the counts are exact (up to the few
//! instructions of the measuring calls) and repeat exactly. Stack depth: `stack.rs`.
#![no_std]
#![no_main]

mod clock;
mod stack;

use cortex_m_rt::entry;
use cortex_m_semihosting::{debug, hprint, hprintln};
use octet_runtime::{Kernels, Model, PreparedOp};
use panic_semihosting as _;

use clock::{clock, stamp, Costs};
use stack::{stack_or_fail, Painted};

/// 16-byte alignment for the model (its data section is 16-aligned in the file) and the arena.
#[repr(C, align(16))]
struct Aligned<T>(T);

/// The alignment a packed image needs (`octet_runtime::kernels::PACKED_ALIGN`).
#[repr(C, align(64))]
struct AlignedPacked<T>(T);

/// The model, packed image, images, expected logits and kernel names `build.rs` embeds.
mod inputs {
    use super::{Aligned, AlignedPacked};
    include!(concat!(env!("OUT_DIR"), "/inputs.rs"));
}

/// Multiply-adds of op `j` (`Model::op_macs`).
fn macs(m: &Model, j: u32) -> u64 {
    m.op(j).map_or(0, |o| m.op_macs(&o))
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

/// Calibrates the clock and measures its costs; `None` when the counts cannot be exact.
fn measuring() -> Option<(u32, Costs)> {
    let per_tick = match clock::calibrate() {
        Ok(r) => r,
        Err(ratio) => {
            hprintln!(
                "error: SysTick counts {}/1000 instructions per tick; exact counts need a whole divisor of {} (run under QEMU with -icount shift=0: 40)",
                (ratio * 1000.0) as u64,
                clock::VERNIER - 1
            );
            return None;
        }
    };
    let Some(c) = Costs::measure() else {
        hprintln!("error: the instruction counts do not repeat exactly (is QEMU running with -icount shift=0?)");
        return None;
    };
    Some((per_tick, c))
}

/// Parses the embedded model and prepares its ops once into `table` (every run then only
/// dispatches; the packed weights read from the embedded image where there is one): the model
/// and the deepest stack either step took.
fn parse<'t>(c: &Costs, table: &'t mut [PreparedOp<'t>]) -> Option<(Model<'t>, usize)> {
    let paint = Painted::new();
    let t0 = stamp();
    let parsed = Model::parse(&inputs::MODEL.0);
    let t1 = stamp();
    let stack = stack_or_fail(paint.used(), "parse")?;
    let model = match parsed {
        Ok(m) => m,
        Err(e) => {
            hprintln!("error: the embedded model is invalid: {}", e);
            return None;
        }
    };
    hprintln!("parse insn={} stack={}", t1 - t0 - c.stamp, stack);
    let paint = Painted::new();
    let t0 = stamp();
    let image = &inputs::PACKED.0;
    let prepared = match image.is_empty() {
        true => model.prepare(table),
        false => model.prepare_packed_image(table, image, Kernels::CortexM),
    };
    let t1 = stamp();
    let prepare_stack = stack_or_fail(paint.used(), "prepare")?;
    match prepared {
        Ok(m) => {
            hprintln!(
                "prepare insn={} stack={} packed_bytes={}",
                t1 - t0 - c.stamp,
                prepare_stack,
                image.len()
            );
            Some((m, stack.max(prepare_stack)))
        }
        Err(e) => {
            hprintln!("error: the embedded model cannot be prepared: {}", e);
            None
        }
    }
}

/// One kernel set's runs of the model.
struct Runs<'m> {
    model: &'m Model<'m>,
    kernels: Kernels,
    name: &'m str,
    costs: &'m Costs,
}

/// What `Runs::images` saw: whether every image's logits matched, image 0's instructions and
/// the deepest stack.
struct Images {
    all_match: bool,
    image0: u64,
    stack: usize,
}

impl Runs<'_> {
    /// Runs every image, printing its instructions, stack and logits.
    fn images(&self, resolved: &str, arena: &mut [u8]) -> Option<Images> {
        let (n_in, n_out) = (self.model.input_len(), self.model.output_len());
        let mut seen = Images {
            all_match: true,
            image0: 0,
            stack: 0,
        };
        for (i, img) in inputs::IMAGES.chunks_exact(n_in).enumerate() {
            let paint = Painted::new();
            let (r, insn) = run_image(self.model, self.kernels, img, arena);
            let stack = stack_or_fail(paint.used(), "run")?;
            seen.stack = seen.stack.max(stack);
            let logits = match r {
                Ok(l) => l,
                Err(e) => {
                    hprintln!("error: kernels {}, image {}: {}", self.name, i, e);
                    return None;
                }
            };
            let expected = &inputs::EXPECTED[i * n_out..(i + 1) * n_out];
            let same = logits.iter().zip(expected).all(|(&q, &e)| q as u8 == e);
            seen.all_match &= same;
            if i == 0 {
                seen.image0 = insn;
            }
            hprint!(
                "run kernels={} resolved={} image={} insn={} stack={} match={} logits=",
                self.name,
                resolved,
                i,
                insn - self.costs.stamp,
                stack,
                if same { "yes" } else { "no" }
            );
            for &q in logits {
                hprint!("{:02x}", q as u8);
            }
            hprintln!();
        }
        Some(seen)
    }

    /// Image 0 again, whole and op by op (twice): prints each op's instructions and whether the
    /// counts repeated exactly (`image0`: the first run's); the stack `run_timed` took.
    fn repeat_image0(&self, image0: u64, arena: &mut [u8]) -> Option<usize> {
        let (model, k, c) = (self.model, self.kernels, self.costs);
        let img = &inputs::IMAGES[..model.input_len()];
        let (again, repeat) = run_image(model, k, img, arena);
        let again = again.is_ok();
        let mut first = [0f64; inputs::N_OPS];
        let mut second = [0f64; inputs::N_OPS];
        let paint = Painted::new();
        let timed = model
            .run_timed(k, img, arena, &mut first, clock)
            .and_then(|()| model.run_timed(k, img, arena, &mut second, clock));
        let stack = stack_or_fail(paint.used(), "run_timed")?;
        if let (false, _) | (_, Err(_)) = (again, timed) {
            hprintln!(
                "error: kernels {}: the repeated runs of image 0 failed",
                self.name
            );
            return None;
        }
        for (j, (a, b)) in first.iter().zip(&second).enumerate() {
            let kind = model.op(j as u32).map_or("?", |o| o.kind.name());
            hprintln!(
                "op kernels={} index={} kind={} macs={} insn={} repeat={}",
                self.name,
                j,
                kind,
                macs(model, j as u32),
                *a as u64 - c.clock,
                *b as u64 - c.clock
            );
        }
        let stable = repeat == image0 && first == second;
        hprintln!(
            "stable kernels={} {}",
            self.name,
            if stable { "yes" } else { "no" }
        );
        Some(stack)
    }
}

/// Everything the firmware measures; false when something failed (already printed).
fn bench(arena: &mut [u8]) -> bool {
    let Some((per_tick, c)) = measuring() else {
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
    let mut table = [PreparedOp::EMPTY; inputs::N_OPS];
    let Some((model, mut peak)) = parse(&c, &mut table) else {
        return false;
    };
    let (mut ok, mut ran) = (true, 0);
    for name in inputs::KERNELS {
        let Some(kernels) = Kernels::from_name(name) else {
            hprintln!("error: unknown kernel set '{}'", name);
            return false;
        };
        // A set this core lacks (the DSP kernels on a Cortex-M3) is reported and skipped.
        let resolved = match kernels.resolved_name() {
            Ok(r) => r,
            Err(e) => {
                hprintln!("unavailable kernels={} ({})", name, e);
                continue;
            }
        };
        if model.arena_bytes(kernels) > arena.len() {
            hprintln!(
                "error: kernels {}: the model needs an arena of {} bytes, the firmware has {} (rebuild: build.rs sizes it from the model)",
                name,
                model.arena_bytes(kernels),
                arena.len()
            );
            return false;
        }
        ran += 1;
        let runs = Runs {
            model: &model,
            kernels,
            name,
            costs: &c,
        };
        let Some(seen) = runs.images(resolved, arena) else {
            return false;
        };
        ok &= seen.all_match;
        let Some(stack) = runs.repeat_image0(seen.image0, arena) else {
            return false;
        };
        peak = peak.max(seen.stack).max(stack);
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
    let Some(p) = cortex_m::Peripherals::take() else {
        panic!("the core peripherals were taken before main");
    };
    clock::start(p.SYST);
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
