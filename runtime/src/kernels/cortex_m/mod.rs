//! Cortex-M kernels for cores with the DSP extension (Armv7E-M: Cortex-M4, M7): conv2d (and
//! its pointwise form), depthwise_conv2d, fully_connected, max_pool, tflite_add and
//! tflite_avg_pool,
//! bit-identical to `kernels::scalar`, in the
//! manner of CMSIS-NN.
//!
//! Inner products use `SMLAD` (two 16-bit multiply-adds into a 32-bit accumulator): int8 values
//! are widened four at a time by `SXTB16` (bytes 0 and 2 into the two halves) and `SXTB16` with
//! `ROR #8` (bytes 1 and 3). The halves come out reordered, but weights and activations are
//! widened the same way, so each `SMLAD` still pairs weight i with activation i. The sum is
//! exact and wraps modulo 2^32 like the scalar reference's accumulator (`SMLAD` also sets the
//! sticky Q flag on overflow, which nothing reads), so no accumulation bound is needed.
//! Requantization goes through `crate::requant`'s decoding ([`Requant`]), in either rounding
//! ([`Single`], [`Double`]: the kernels are instantiated per rounding, the usual multipliers
//! taking a few instructions in both). max_pool takes the maximum of four int8 lanes at once
//! (`SSUB8` + `SEL`).
//!
//! Each DSP instruction is one line of `asm!` on Arm with DSP (`cfg(octet_arm_dsp)`, set by
//! `build.rs` for `thumbv7em-*`); elsewhere a plain function computes the same bits, so the same
//! kernels run on the host under the shared proptests (there this module is compiled for tests
//! only). The `asm!` itself runs those suites too: built for `thumbv7neon-unknown-linux-gnueabihf`
//! (Armv7-A, the same Thumb-2 DSP instructions, with std) under QEMU user mode (`.ci/run`).
//! The kernels are safe functions: they need nothing the target does not guarantee.

mod conv2d;
mod depthwise_conv2d;
mod fully_connected;
mod max_pool;
mod pointwise;
mod tflite_add;
mod tflite_avg_pool;

pub use conv2d::conv2d;
pub use depthwise_conv2d::depthwise_conv2d;
pub use fully_connected::fully_connected;
pub use max_pool::max_pool;
pub use tflite_add::tflite_add;
pub use tflite_avg_pool::tflite_avg_pool;

use crate::kernels::OutputQuant;
use crate::requant::ChannelRequant;

/// `SMLAD`: `acc + lo(a)·lo(b) + hi(a)·hi(b)` with the halves as i16, modulo 2^32.
#[inline(always)]
fn smlad(a: u32, b: u32, acc: i32) -> i32 {
    #[cfg(octet_arm_dsp)]
    {
        let mut acc = acc;
        // SAFETY: register-only; SMLAD writes the Q flag (so no `preserves_flags`). The
        // accumulator stays in its register (`inout`), which keeps blocks of them allocatable.
        unsafe {
            core::arch::asm!(
                "smlad {c}, {a}, {b}, {c}",
                c = inout(reg) acc,
                a = in(reg) a,
                b = in(reg) b,
                options(pure, nomem, nostack)
            )
        };
        acc
    }
    #[cfg(not(octet_arm_dsp))]
    {
        // Each product is exact in i32 (|p| ≤ 2^30); the instruction's wider sum keeps its low
        // 32 bits, which wrapping additions give in any order.
        let lo = (a as i16 as i32) * (b as i16 as i32);
        let hi = ((a >> 16) as i16 as i32) * ((b >> 16) as i16 as i32);
        acc.wrapping_add(lo).wrapping_add(hi)
    }
}

/// `SXTB16 x, ROR #ROT` (ROT 0 or 8): bytes ROT/8 and ROT/8 + 2 of `x`, sign-extended into
/// the low and high halves.
#[inline(always)]
fn sxtb16<const ROT: u32>(x: u32) -> u32 {
    #[cfg(octet_arm_dsp)]
    {
        let r: u32;
        // SAFETY: register-only, no flags.
        unsafe {
            core::arch::asm!(
                "sxtb16 {r}, {x}, ror #{rot}",
                r = lateout(reg) r,
                x = in(reg) x,
                rot = const ROT,
                options(pure, nomem, nostack, preserves_flags)
            )
        };
        r
    }
    #[cfg(not(octet_arm_dsp))]
    {
        let x = x.rotate_right(ROT);
        (x as u8 as i8 as i16 as u16 as u32) | ((x >> 16) as u8 as i8 as i16 as u16 as u32) << 16
    }
}

/// `SXTAB16 acc, acc, x, ROR #ROT` (ROT 0 or 8): bytes ROT/8 and ROT/8 + 2 of `x`,
/// sign-extended, added to the two 16-bit lanes of `acc` (modulo 2^16 each).
#[inline(always)]
fn sxtab16<const ROT: u32>(acc: u32, x: u32) -> u32 {
    #[cfg(octet_arm_dsp)]
    {
        let r: u32;
        // SAFETY: register-only, no flags.
        unsafe {
            core::arch::asm!(
                "sxtab16 {r}, {a}, {x}, ror #{rot}",
                r = lateout(reg) r,
                a = in(reg) acc,
                x = in(reg) x,
                rot = const ROT,
                options(pure, nomem, nostack, preserves_flags)
            )
        };
        r
    }
    #[cfg(not(octet_arm_dsp))]
    {
        let v = sxtb16::<ROT>(x);
        let lane = |a: u32, i: u32| ((a >> (16 * i)) as u16).wrapping_add((v >> (16 * i)) as u16);
        lane(acc, 0) as u32 | (lane(acc, 1) as u32) << 16
    }
}

/// The four int8 values of `v` widened for [`smlad`]: `(SXTB16 v, SXTB16 ROR #8 v)`.
#[inline(always)]
fn widen(v: u32) -> (u32, u32) {
    (sxtb16::<0>(v), sxtb16::<8>(v))
}

/// Bytes 0..4 of `b` (any alignment) as a little-endian word: one `LDR` on Armv7-M, which
/// loads unaligned words.
#[inline(always)]
fn word(b: &[i8]) -> u32 {
    let mut w = [0i8; 4];
    w.copy_from_slice(&b[..4]);
    u32::from_le_bytes(w.map(|v| v as u8))
}

/// The little-endian word at `*p` (any alignment), and `p` advanced past it: `LDR` with
/// post-increment (left to itself, LLVM indexes such loads from per-row bases it then spills).
///
/// # Safety
/// `*p` is valid for reads of 4 bytes.
#[inline(always)]
unsafe fn ldr_inc(p: &mut *const i8) -> u32 {
    #[cfg(octet_arm_dsp)]
    {
        let v: u32;
        // SAFETY: the caller's guarantee; Armv7-M loads unaligned words with LDR.
        unsafe {
            core::arch::asm!(
                "ldr {v}, [{p}], #4",
                p = inout(reg) *p,
                v = out(reg) v,
                options(pure, readonly, nostack, preserves_flags)
            )
        };
        v
    }
    #[cfg(not(octet_arm_dsp))]
    {
        // SAFETY: the caller's guarantee.
        unsafe {
            let v = load(*p);
            *p = (*p).add(4);
            v
        }
    }
}

/// The little-endian word at `p` (any alignment): one `LDR` on Armv7-M.
///
/// # Safety
/// `p` is valid for reads of 4 bytes.
#[inline(always)]
unsafe fn load(p: *const i8) -> u32 {
    // SAFETY: the caller's guarantee.
    u32::from_le(unsafe { p.cast::<u32>().read_unaligned() })
}

/// The last `b.len()` (< 4) values of a row as a word, zero above them: the final group of a
/// row whose length is not a multiple of 4 (a zero value adds nothing to an inner product).
#[inline(always)]
fn tail_word(b: &[i8]) -> u32 {
    b.iter().rev().fold(0u32, |w, &v| (w << 8) | v as u8 as u32)
}

/// A lane-wise selection by signed comparison: `$sub` (`SSUB8` or `SSUB16`) sets a GE flag per
/// lane where `a ≥ b`, then `SEL` takes its first operand in those lanes and its second
/// elsewhere. Elsewhere than Arm with DSP, `$model` computes the same lanes.
macro_rules! lane_select {
    ($(#[$doc:meta])* $name:ident, $sub:literal, $sel:literal, $model:expr) => {
        $(#[$doc])*
        #[inline(always)]
        fn $name(a: u32, b: u32) -> u32 {
            #[cfg(octet_arm_dsp)]
            {
                let r: u32;
                // SAFETY: register-only; writes the GE flags (so no `preserves_flags`).
                unsafe {
                    core::arch::asm!(
                        concat!($sub, " {t}, {a}, {b}\n", $sel),
                        t = out(reg) _,
                        r = lateout(reg) r,
                        a = in(reg) a,
                        b = in(reg) b,
                        options(pure, nomem, nostack)
                    )
                };
                r
            }
            #[cfg(not(octet_arm_dsp))]
            {
                $model(a, b)
            }
        }
    };
}

lane_select!(
    /// Lane-wise maximum of four int8 lanes (`SSUB8`, `SEL`).
    max8, "ssub8", "sel {r}, {a}, {b}", |a, b| lanes8(a, b, i8::max)
);
lane_select!(
    /// Lane-wise minimum of four int8 lanes (`SSUB8`, `SEL` with its operands swapped).
    min8, "ssub8", "sel {r}, {b}, {a}", |a, b| lanes8(a, b, i8::min)
);
lane_select!(
    /// Lane-wise maximum of two int16 lanes (`SSUB16`, `SEL`).
    max16, "ssub16", "sel {r}, {a}, {b}", |a, b| lanes16(a, b, i16::max)
);
lane_select!(
    /// Lane-wise minimum of two int16 lanes (`SSUB16`, `SEL` with its operands swapped).
    min16, "ssub16", "sel {r}, {b}, {a}", |a, b| lanes16(a, b, i16::min)
);

/// `QADD16`: lane-wise saturating sum of two int16 lanes.
#[inline(always)]
fn qadd16(a: u32, b: u32) -> u32 {
    #[cfg(octet_arm_dsp)]
    {
        let r: u32;
        // SAFETY: register-only (the parallel saturating adds leave the Q flag alone, but
        // nothing here relies on it).
        unsafe {
            core::arch::asm!(
                "qadd16 {r}, {a}, {b}",
                r = lateout(reg) r,
                a = in(reg) a,
                b = in(reg) b,
                options(pure, nomem, nostack)
            )
        };
        r
    }
    #[cfg(not(octet_arm_dsp))]
    {
        lanes16(a, b, i16::saturating_add)
    }
}

/// `f` on each int8 lane of `a` and `b`.
#[cfg(not(octet_arm_dsp))]
fn lanes8(a: u32, b: u32, f: impl Fn(i8, i8) -> i8) -> u32 {
    let (a, b) = (a.to_le_bytes(), b.to_le_bytes());
    u32::from_le_bytes(core::array::from_fn(|i| f(a[i] as i8, b[i] as i8) as u8))
}

/// `f` on each int16 lane of `a` and `b`.
#[cfg(not(octet_arm_dsp))]
fn lanes16(a: u32, b: u32, f: impl Fn(i16, i16) -> i16) -> u32 {
    let lane = |x: u32, i: u32| (x >> (16 * i)) as i16;
    (f(lane(a, 0), lane(b, 0)) as u16 as u32) | (f(lane(a, 1), lane(b, 1)) as u16 as u32) << 16
}

/// An op's output zero point and clamp for the epilogues, the clamp bounds narrowed to int8:
/// `min(max(v, lo), hi)` with `lo`, `hi` the bounds clamped to [−128, 127] is
/// [`OutputQuant::clamp64`] (whatever the bounds, even crossed ones).
#[derive(Clone, Copy)]
struct Epilogue {
    out: OutputQuant,
    lo: i32,
    hi: i32,
}

impl Epilogue {
    #[inline(always)]
    fn new(out: &OutputQuant) -> Self {
        Epilogue {
            out: *out,
            lo: out.act_min.clamp(-128, 127),
            hi: out.act_max.clamp(-128, 127),
        }
    }
}

/// `SMMLAR`: `(acc·2^32 + a·b + 2^31) >> 32`, the high word of the rounded 64-bit sum (the
/// sum taken modulo 2^64, as the instruction does).
#[inline(always)]
fn smmlar(a: i32, b: i32, acc: i32) -> i32 {
    #[cfg(octet_arm_dsp)]
    {
        let r: i32;
        // SAFETY: register-only, no flags.
        unsafe {
            core::arch::asm!(
                "smmlar {r}, {a}, {b}, {c}",
                r = lateout(reg) r,
                a = in(reg) a,
                b = in(reg) b,
                c = in(reg) acc,
                options(pure, nomem, nostack, preserves_flags)
            )
        };
        r
    }
    #[cfg(not(octet_arm_dsp))]
    {
        (((acc as i64) << 32)
            .wrapping_add(a as i64 * b as i64)
            .wrapping_add(1 << 31)
            >> 32) as i32
    }
}

/// A requantization rounding as the epilogues compute it on the high-word path ([`Requant`]):
/// both reduce to `(high(acc) + 2^(n−33)) >> (n − 32)` for n = 31 − shift ≥ 33, with their
/// own `high`. The kernels are instantiated per rounding, so the choice costs nothing per
/// output.
trait Round: Copy {
    /// Whether the high-word path covers the multiplier (n ≥ 33 is checked by [`Requant`]).
    fn covers(m0: i32) -> bool;
    /// The multiplier operand of [`Round::high`].
    fn operand(m0: i32) -> i32;
    /// The value whose `(· + 2^(n−33)) >> (n − 32)` is the requantized sum.
    fn high(acc: i32, operand: i32) -> i32;
}

/// octet's single rounding: `(acc·M0 + 2^(n−1)) >> n`. With acc·M0 = hi·2^32 + lo,
/// 0 ≤ lo < 2^32, the rounding term 2^(n−1) is a multiple of 2^32 (n ≥ 33), lo cannot carry
/// into the quotient, and the value is `(hi + 2^(n−33)) >> (n − 32)`, which cannot overflow
/// (|hi| ≤ 2^30, 2^(n−33) ≤ 2^29): `SMMLA` (or `SMMUL` and an add) and a shift. Any M0.
#[derive(Clone, Copy)]
struct Single;

impl Round for Single {
    #[inline(always)]
    fn covers(_: i32) -> bool {
        true
    }

    #[inline(always)]
    fn operand(m0: i32) -> i32 {
        m0
    }

    #[inline(always)]
    fn high(acc: i32, m0: i32) -> i32 {
        ((acc as i64 * m0 as i64) >> 32) as i32
    }
}

/// TensorFlow Lite's double rounding (`requant::requantize_double`; no left shift when
/// n ≥ 33): r = SaturatingRoundingDoublingHighMul(acc, M0) = ⌊(acc·M0 + 2^30) / 2^31⌋ (for
/// M0 ∈ [2^30, 2^31) the one saturating pair cannot occur), then RoundingDivideByPOT(r, rs),
/// rs = n − 31 ≥ 2, which is ⌊(r − [r < 0] + 2^(rs−1)) / 2^rs⌋ (half away from zero).
///
/// `SMMLAR` gives r − [acc < 0] in one instruction: with M′ = 2·M0 − 2^32 (M0 ≪ 1 in i32),
/// acc·2M0 = acc·M′ + acc·2^32, so `SMMLAR(acc, M′, acc − s)` = ⌊(2·acc·M0 + 2^31) / 2^32⌋ − s
/// = r − s, in [−2^31, 2^31) (r > −2^31 for M0 < 2^31). [acc < 0] may stand for [r < 0]: they
/// differ only where r = 0 and acc < 0, and then both give 0. Halving first keeps the rounding
/// from overflowing: ⌊(y + 2^(rs−1)) / 2^rs⌋ = ((y >> 1) + 2^(rs−2)) >> (rs − 1), the single
/// rounding's constants (rs − 2 = n − 33). Four instructions. Zero (and invalid) multipliers
/// take the exact path.
#[derive(Clone, Copy)]
struct Double;

impl Round for Double {
    #[inline(always)]
    fn covers(m0: i32) -> bool {
        m0 >= 1 << 30
    }

    #[inline(always)]
    fn operand(m0: i32) -> i32 {
        m0.wrapping_shl(1)
    }

    #[inline(always)]
    fn high(acc: i32, m: i32) -> i32 {
        let s = (acc as u32 >> 31) as i32;
        smmlar(acc, m, acc - s) >> 1
    }
}

/// One output channel's requantization in rounding `R`: M0 and the shift as stored, and
/// n = 31 − shift as [`ChannelRequant::new`] decodes it (the accumulators start at the bias,
/// so it is decoded with a zero bias).
///
/// When n ≥ 33 (multipliers below 2^−2, the usual case) and `R` covers M0, the epilogue needs
/// only the high word of a product ([`Round::high`]) and a shift. Other channels take
/// [`OutputQuant::finish`].
#[derive(Clone, Copy)]
struct Requant<R: Round> {
    m0: i32,
    shift: i32,
    /// [`Round::operand`] of M0.
    mul: i32,
    round_hi: i32,
    /// n − 32 on the high-word path; 0 selects `OutputQuant::finish`.
    sh: u32,
    rounding: core::marker::PhantomData<R>,
}

impl<R: Round> Requant<R> {
    #[inline(always)]
    fn new(m0: i32, shift: i32) -> Self {
        let n = ChannelRequant::new(0, m0, shift).n;
        let fast = n >= 33 && R::covers(m0);
        Requant {
            m0,
            shift,
            mul: R::operand(m0),
            round_hi: if fast { 1 << (n - 33) } else { 0 },
            sh: if fast { n - 32 } else { 0 },
            rounding: core::marker::PhantomData,
        }
    }

    /// Whether the high-word path applies.
    #[inline(always)]
    fn fast(&self) -> bool {
        self.sh != 0
    }

    /// The requantized sum on the high-word path: `(high + 2^(n−33)) >> (n − 32)`.
    #[inline(always)]
    fn scaled(&self, acc: i32) -> i32 {
        (R::high(acc, self.mul) + self.round_hi) >> self.sh
    }

    /// `OutputQuant::finish(acc, …)`: `clamp(requant(acc) + z_out)` as int8.
    #[inline(always)]
    fn apply(&self, acc: i32, e: &Epilogue) -> i8 {
        if !self.fast() {
            return e
                .out
                .finish(acc, &ChannelRequant::new(0, self.m0, self.shift));
        }
        // Saturating: where the i32 sum would overflow, the exact value lies past the clamp.
        let v = self.scaled(acc).saturating_add(e.out.zero_point);
        v.max(e.lo).min(e.hi) as i8
    }

    /// [`Requant::apply`] where the high-word path applies (the caller checked [`fast`]) and
    /// `C` covers the epilogue's bounds (the kernels' instance): `QADD`, then `SSAT #8` for
    /// [`Full`].
    ///
    /// [`fast`]: Requant::fast
    #[inline(always)]
    fn fast_apply<C: Clamp>(&self, acc: i32, e: &Epilogue) -> i8 {
        let v = self.scaled(acc).saturating_add(e.out.zero_point);
        C::one(v, e.lo, e.hi) as i8
    }
}

/// How [`Requant2`] clamps its two int16 lanes (and [`Requant::fast_apply`] one value) to an
/// op's bounds, chosen per op (the kernels are instantiated per clamp, as per rounding:
/// [`instance!`]).
trait Clamp: Copy {
    /// Whether this clamp gives the epilogue's bounds.
    fn covers(e: &Epilogue) -> bool;
    /// Each lane of `v` clamped to [lo, hi] (`lo`, `hi`: the bounds in both lanes).
    fn lanes(v: u32, lo: u32, hi: u32) -> u32;
    /// `v` clamped to [lo, hi] (the epilogue's bounds).
    fn one(v: i32, lo: i32, hi: i32) -> i32;
}

/// The whole int8 range (no activation, or a ReLU whose zero point is −128): one `SSAT16 #8`.
#[derive(Clone, Copy)]
struct Full;

impl Clamp for Full {
    #[inline(always)]
    fn covers(e: &Epilogue) -> bool {
        e.lo == -128 && e.hi == 127
    }

    #[inline(always)]
    fn lanes(v: u32, _: u32, _: u32) -> u32 {
        ssat16_8(v)
    }

    #[inline(always)]
    fn one(v: i32, _: i32, _: i32) -> i32 {
        v.clamp(-128, 127)
    }
}

/// Any bounds: `SSUB16` + `SEL`, twice.
#[derive(Clone, Copy)]
struct Bounds;

impl Clamp for Bounds {
    #[inline(always)]
    fn covers(_: &Epilogue) -> bool {
        true
    }

    #[inline(always)]
    fn lanes(v: u32, lo: u32, hi: u32) -> u32 {
        min16(max16(v, lo), hi)
    }

    #[inline(always)]
    fn one(v: i32, lo: i32, hi: i32) -> i32 {
        v.max(lo).min(hi)
    }
}

/// `$f::<R, C>` for op output `$out` (an `OutputQuant`): its rounding `R` and clamp `C`
/// ([`Full`] where the epilogue's bounds are the whole int8 range, else [`Bounds`]), as a
/// function pointer of the type the caller expects: the kernels' one choice of instance.
macro_rules! instance {
    ($out:expr, $f:ident) => {
        match ($out.rounding, <Full as Clamp>::covers(&Epilogue::new($out))) {
            (Rounding::Single, true) => $f::<Single, Full>,
            (Rounding::Single, false) => $f::<Single, Bounds>,
            (Rounding::Double, true) => $f::<Double, Full>,
            (Rounding::Double, false) => $f::<Double, Bounds>,
        }
    };
}
use instance;

/// `SSAT16 #8`: each int16 lane of `x` clamped to [−128, 127].
#[inline(always)]
fn ssat16_8(x: u32) -> u32 {
    #[cfg(octet_arm_dsp)]
    {
        let r: u32;
        // SAFETY: register-only (the saturation's Q flag is read by nothing here).
        unsafe {
            core::arch::asm!(
                "ssat16 {r}, #8, {x}",
                r = lateout(reg) r,
                x = in(reg) x,
                options(pure, nomem, nostack)
            )
        };
        r
    }
    #[cfg(not(octet_arm_dsp))]
    {
        lanes16(x, 0, |v, _| v.clamp(-128, 127))
    }
}

/// Two channels' [`Requant::apply`] on one pixel (both on the high-word path), the zero point
/// and clamp in the two 16-bit lanes of a word: each scaled sum saturated to int16 (`SSAT`;
/// past ±2^15 the clamp decides the same), packed (`PKHBT`), the zero point added saturating
/// (`QADD16`, likewise), clamped (`SSUB16` + `SEL`, twice) and the low bytes of the lanes
/// brought together for one 2-byte store.
/// The clamp `C` ([`Clamp`]) is chosen per op, as the rounding is.
#[derive(Clone, Copy)]
struct Requant2<R: Round, C: Clamp> {
    q: [Requant<R>; 2],
    zp: u32,
    lo: u32,
    hi: u32,
    clamp: core::marker::PhantomData<C>,
}

impl<R: Round, C: Clamp> Requant2<R, C> {
    /// `None` unless both channels take the high-word path, |z_out| ≤ 32 640 (an int16 lane
    /// then still saturates past the clamp bounds; valid models hold |z_out| ≤ 128) and `C`
    /// covers the clamp.
    #[inline(always)]
    fn new(q: [Requant<R>; 2], e: &Epilogue) -> Option<Self> {
        let splat = |v: i32| (v as u16 as u32) * 0x1_0001;
        let zp = e.out.zero_point;
        let ok = q[0].fast() && q[1].fast() && zp.unsigned_abs() <= 32_640 && C::covers(e);
        ok.then(|| Requant2 {
            q,
            zp: splat(zp),
            lo: splat(e.lo),
            hi: splat(e.hi),
            clamp: core::marker::PhantomData,
        })
    }

    /// `[q[0].apply(a0), q[1].apply(a1)]`.
    #[inline(always)]
    fn apply(&self, a0: i32, a1: i32) -> [i8; 2] {
        let v = self.lanes(a0, a1);
        let b = v | v >> 8;
        [b as i8, (b >> 8) as i8]
    }

    /// The two outputs in the low bytes of the word's 16-bit lanes.
    #[inline(always)]
    fn lanes(&self, a0: i32, a1: i32) -> u32 {
        let s0 = self.q[0].scaled(a0).clamp(-32768, 32767);
        let s1 = self.q[1].scaled(a1).clamp(-32768, 32767);
        let v = (s0 as u32 & 0xFFFF) | (s1 as u32) << 16;
        C::lanes(qadd16(v, self.zp), self.lo, self.hi) & 0x00FF_00FF
    }

    /// Four outputs of one requantization (a per-tensor layer's, both of `q` the same) as one
    /// little-endian word: sums 0 and 2 share one word's lanes, 1 and 3 another's, so their
    /// bytes interleave into outputs 0, 1, 2, 3 with one shift-and-or (one `STR` then).
    #[inline(always)]
    fn apply4(&self, a: [i32; 4]) -> u32 {
        self.lanes(a[0], a[2]) | self.lanes(a[1], a[3]) << 8
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::Rounding;
    use proptest::prelude::*;

    #[test]
    fn widening_pairs_lanes() {
        // Bytes −1, 2, −3, 4 (little-endian) and 5, −6, 7, −8.
        let x = u32::from_le_bytes([0xFF, 2, 0xFD, 4]);
        let w = u32::from_le_bytes([5, 0xFA, 7, 0xF8]);
        assert_eq!(sxtb16::<0>(x), 0xFFFD_FFFF);
        assert_eq!(sxtb16::<8>(x), 0x0004_0002);
        let ((xa, xb), (wa, wb)) = (widen(x), widen(w));
        // −5 − 21 − 12 − 32.
        assert_eq!(smlad(xb, wb, smlad(xa, wa, 10)), 10 - 5 - 21 - 12 - 32);
        assert_eq!(tail_word(&[1, -2, 3]), 0x0003_FE01);
        assert_eq!(word(&[1, -2, 3, -4]), 0xFC03_FE01);
    }

    proptest! {
        #[test]
        fn smlad_wraps_like_the_instruction(a in any::<u32>(), b in any::<u32>(), acc in any::<i32>()) {
            let p = |x: u32, y: u32| (x as i16 as i64) * (y as i16 as i64);
            let exact = acc as i64 + p(a, b) + p(a >> 16, b >> 16);
            prop_assert_eq!(smlad(a, b, acc), exact as i32);
        }

        #[test]
        fn sxtab16_adds_lanes(acc in any::<u32>(), x in any::<u32>()) {
            let b = x.to_le_bytes().map(|v| v as i8 as i16);
            let l = |a: u32, i: u32| (a >> (16 * i)) as i16;
            let pack = |v: [i16; 2]| v[0] as u16 as u32 | (v[1] as u16 as u32) << 16;
            let add = |i: usize, j: usize| pack([l(acc, 0).wrapping_add(b[i]), l(acc, 1).wrapping_add(b[j])]);
            prop_assert_eq!(sxtab16::<0>(acc, x), add(0, 2));
            prop_assert_eq!(sxtab16::<8>(acc, x), add(1, 3));
        }

        #[test]
        fn lane_max_min(a in any::<u32>(), b in any::<u32>()) {
            let (x, y) = (a.to_le_bytes(), b.to_le_bytes());
            let mx = u32::from_le_bytes(core::array::from_fn(|i| (x[i] as i8).max(y[i] as i8) as u8));
            let mn = u32::from_le_bytes(core::array::from_fn(|i| (x[i] as i8).min(y[i] as i8) as u8));
            prop_assert_eq!(max8(a, b), mx);
            prop_assert_eq!(min8(a, b), mn);
        }

        /// Both epilogues against `OutputQuant::finish` over every accumulator, multiplier
        /// and shift (valid or not), zero point and clamp (crossed bounds included).
        #[test]
        fn requant_matches_finish(
            acc in accumulator(), m0 in multiplier(), shift in -40i32..40,
            zp in any::<i32>(), lo in -300i32..300, hi in -300i32..300,
        ) {
            for rounding in Rounding::ALL {
                let out = OutputQuant { zero_point: zp, act_min: lo, act_max: hi, rounding };
                let e = Epilogue::new(&out);
                let want = out.finish(acc, &ChannelRequant::new(0, m0, shift));
                prop_assert_eq!(apply(m0, shift, acc, &e), want);
            }
        }

        /// The two-channel epilogue against two one-channel ones (themselves checked against
        /// `finish`), over zero points beyond int8 too, in both roundings.
        #[test]
        fn requant2_matches_requant(
            a0 in accumulator(), a1 in accumulator(), m0 in (1i32 << 30)..=i32::MAX,
            m1 in multiplier(), s0 in -31i32..=-2, s1 in -40i32..=-2,
            zp in -33_000i32..33_000, lo in -300i32..300, hi in -300i32..300,
        ) {
            for rounding in Rounding::ALL {
                let out = OutputQuant { zero_point: zp, act_min: lo, act_max: hi, rounding };
                let e = Epilogue::new(&out);
                let pair = match rounding {
                    Rounding::Single => pair::<Single>([m0, m1], [s0, s1], [a0, a1], &e),
                    Rounding::Double => pair::<Double>([m0, m1], [s0, s1], [a0, a1], &e),
                };
                match pair {
                    Some((two, one)) => prop_assert_eq!(two, one),
                    None => prop_assert!(zp.abs() > 32_640 || (rounding == Rounding::Double && m1 < 1 << 30)),
                }
            }
        }

        #[test]
        fn lane16_ops(a in any::<u32>(), b in any::<u32>()) {
            let l = |x: u32| [x as i16, (x >> 16) as i16];
            let (x, y) = (l(a), l(b));
            let pack = |v: [i16; 2]| v[0] as u16 as u32 | (v[1] as u16 as u32) << 16;
            prop_assert_eq!(max16(a, b), pack([x[0].max(y[0]), x[1].max(y[1])]));
            prop_assert_eq!(min16(a, b), pack([x[0].min(y[0]), x[1].min(y[1])]));
            prop_assert_eq!(qadd16(a, b), pack([x[0].saturating_add(y[0]), x[1].saturating_add(y[1])]));
            prop_assert_eq!(ssat16_8(a), pack([x[0].clamp(-128, 127), x[1].clamp(-128, 127)]));
        }

        #[test]
        fn requant_valid_multipliers(
            acc in -(1i32 << 24)..(1 << 24), m0 in (1i32 << 30)..=i32::MAX, shift in -31i32..=30,
            zp in -128i32..=127,
        ) {
            for rounding in Rounding::ALL {
                let out = OutputQuant { zero_point: zp, act_min: zp, act_max: 127, rounding };
                let want = out.finish(acc, &ChannelRequant::new(0, m0, shift));
                prop_assert_eq!(apply(m0, shift, acc, &Epilogue::new(&out)), want);
            }
        }

        #[test]
        fn smmlar_is_the_rounded_high_word(a in any::<i32>(), b in any::<i32>(), acc in any::<i32>()) {
            let exact = ((acc as i128) << 32) + a as i128 * b as i128 + (1i128 << 31);
            // The instruction keeps bits 63..32 of the sum.
            prop_assert_eq!(smmlar(a, b, acc), (exact >> 32) as i32);
        }
    }

    /// Accumulators: any i32, or small (where the roundings' ties are frequent).
    fn accumulator() -> impl Strategy<Value = i32> {
        prop_oneof![any::<i32>(), -70_000i32..70_000]
    }

    /// Multipliers: valid ones, 2^30 (m a power of two: every tie reaches the rounding), 0,
    /// i32::MIN and any other.
    fn multiplier() -> impl Strategy<Value = i32> {
        prop_oneof![
            (1i32 << 30)..=i32::MAX,
            Just(1 << 30),
            Just(0),
            Just(i32::MIN),
            any::<i32>()
        ]
    }

    /// `Requant::apply` in the epilogue's rounding.
    fn apply(m0: i32, shift: i32, acc: i32, e: &Epilogue) -> i8 {
        match e.out.rounding {
            Rounding::Single => Requant::<Single>::new(m0, shift).apply(acc, e),
            Rounding::Double => Requant::<Double>::new(m0, shift).apply(acc, e),
        }
    }

    /// `Requant2::apply` and two `Requant::apply`s, where `Requant2` covers the pair.
    fn pair<R: Round>(
        m: [i32; 2],
        s: [i32; 2],
        a: [i32; 2],
        e: &Epilogue,
    ) -> Option<([i8; 2], [i8; 2])> {
        let q = [0, 1].map(|i| Requant::<R>::new(m[i], s[i]));
        let one = [0, 1].map(|i| q[i].apply(a[i], e));
        // The full-range clamp where it applies must agree with the bounded one.
        if let Some(full) = Requant2::<R, Full>::new(q, e) {
            assert_eq!(full.apply(a[0], a[1]), one);
        }
        let two = Requant2::<R, Bounds>::new(q, e)?;
        Some((two.apply(a[0], a[1]), one))
    }

    /// Ties of both roundings: m = 0.5·2^shift on small accumulators, every output.
    #[test]
    fn ties() {
        for rounding in Rounding::ALL {
            let out = OutputQuant {
                zero_point: 3,
                act_min: -128,
                act_max: 127,
                rounding,
            };
            let e = Epilogue::new(&out);
            for shift in -6..=-2 {
                for acc in -300..300 {
                    let want = out.finish(acc, &ChannelRequant::new(0, 1 << 30, shift));
                    assert_eq!(
                        apply(1 << 30, shift, acc, &e),
                        want,
                        "{rounding:?} {shift} {acc}"
                    );
                }
            }
        }
    }
}
