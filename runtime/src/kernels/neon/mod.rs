//! aarch64 NEON kernels (conv2d, depthwise_conv2d, fully_connected, tflite_add), bit-identical to `kernels::scalar`: the same
//! wrapping i32 accumulator and the same requantization in either rounding (`crate::requant`'s
//! `ChannelRequant` constants, `OutputQuant::finish` on 4 lanes: [`Single4`], [`Double4`]; each
//! kernel is instantiated per rounding).
//!
//! Each kernel has two inner products: with `dotprod`, `SDOT` (16 int8 multiply-adds into 4
//! i32 lanes per instruction); without, `SMULL`/`SMULL2` into i16 (exact: |x·w| ≤ 128·128)
//! and `SADALP` pair-adds into i32, so sums of two products never sit in an i16.
//!
//! Every public function here is `unsafe` because it needs NEON (and `dotprod` for the `_dot`
//! versions): call it only when `Kernels::neon_available()` (`Kernels::dotprod_available()`).
//! The private helpers that use NEON intrinsics are reached only from those entry points, so
//! NEON is there whenever they run (and it is the baseline of aarch64 Linux targets).

mod conv2d;
mod depthwise_conv2d;
mod fully_connected;
mod narrow;
mod tflite_add;

pub use conv2d::{conv2d, conv2d_dot};
pub use depthwise_conv2d::depthwise_conv2d;
pub use fully_connected::{fully_connected, fully_connected_dot};
pub use tflite_add::tflite_add;

use core::arch::aarch64::*;

use crate::kernels::{I32Array, OutputQuant};
use crate::requant::ChannelRequant;

/// `acc + x·w` over 16 int8 pairs, 4 per i32 lane, with `SDOT` (the intrinsic `vdotq_s32` is
/// not stable on this toolchain; the instruction is one line of asm).
///
/// # Safety
/// The CPU must support `dotprod`.
#[inline]
#[target_feature(enable = "neon,dotprod")]
unsafe fn sdot(acc: int32x4_t, x: int8x16_t, w: int8x16_t) -> int32x4_t {
    let mut acc = acc;
    // SAFETY: the caller guarantees dotprod; SDOT only reads and writes vector registers.
    unsafe {
        core::arch::asm!(
            "sdot {acc:v}.4s, {x:v}.16b, {w:v}.16b",
            acc = inout(vreg) acc,
            x = in(vreg) x,
            w = in(vreg) w,
            options(pure, nomem, nostack, preserves_flags)
        );
    }
    acc
}

/// `acc + x·w` over 16 int8 pairs: SDOT when `DOT`, else widening multiplies to i16 and
/// pairwise accumulation into i32 (lane j gets products 4j..4j+3 either way; only the sum over
/// lanes matters).
///
/// # Safety
/// NEON, and `dotprod` when `DOT`.
#[inline(always)]
unsafe fn mac<const DOT: bool>(acc: int32x4_t, x: int8x16_t, w: int8x16_t) -> int32x4_t {
    if DOT {
        // SAFETY: DOT is only instantiated by the `_dot` entry points, which require dotprod.
        unsafe { sdot(acc, x, w) }
    } else {
        // SAFETY: NEON (the caller's contract); register-only operations.
        unsafe {
            let lo = vmull_s8(vget_low_s8(x), vget_low_s8(w));
            let hi = vmull_high_s8(x, w);
            vpadalq_s16(vpadalq_s16(acc, lo), hi)
        }
    }
}

/// 16 bytes of `s` from `at`, zero past its end (the slow path of [`Tail::load`]).
#[inline]
fn load16(s: &[i8], at: usize) -> int8x16_t {
    let mut buf = [0i8; 16];
    if at < s.len() {
        let n = (s.len() - at).min(16);
        buf[..n].copy_from_slice(&s[at..at + n]);
    }
    // SAFETY: buf is 16 readable bytes; NEON: reached only from the entry points (module doc).
    unsafe { vld1q_s8(buf.as_ptr()) }
}

/// The last `k % 16` values of a row of `k`, as one vector zero-filled past them: a load of
/// the row's last 16 bytes and a table lookup that moves the wanted bytes down (indices past
/// them are out of range, which TBL reads as zero). Rows shorter than 16 take a bounded copy.
#[derive(Clone, Copy)]
struct Tail {
    idx: uint8x16_t,
    kfull: usize,
}

impl Tail {
    #[inline(always)]
    fn new(k: usize) -> Self {
        let r = k % 16;
        let idx: [u8; 16] = core::array::from_fn(|i| if i < r { (16 - r + i) as u8 } else { 0xFF });
        // SAFETY: a load of a local 16-byte array; NEON: reached only from the entry points.
        Tail {
            idx: unsafe { vld1q_u8(idx.as_ptr()) },
            kfull: k & !15,
        }
    }

    /// `row[kfull..]` zero-filled to 16 values; `row` must be exactly `k` long.
    #[inline(always)]
    fn load(&self, row: &[i8]) -> int8x16_t {
        if row.len() >= 16 {
            // SAFETY: row[len − 16..len] is in bounds; NEON: reached only from the entry points.
            unsafe { vqtbl1q_s8(vld1q_s8(row.as_ptr().add(row.len() - 16)), self.idx) }
        } else {
            load16(row, self.kfull)
        }
    }
}

/// Lane i: the (wrapping) sum of the lanes of `v[i]`.
#[inline(always)]
unsafe fn reduce4(v: [int32x4_t; 4]) -> int32x4_t {
    // SAFETY: register-only NEON operations (the caller's contract).
    unsafe { vpaddq_s32(vpaddq_s32(v[0], v[1]), vpaddq_s32(v[2], v[3])) }
}

/// Dot products of `NP` input rows with `NC` weight rows over `k` values: result `r` holds
/// row r's sums in lanes 0..NC (zero beyond). `wtail` holds the weight rows' last partial
/// vectors (`Tail::load`, zero past `k`), so whatever an input row holds past `k` contributes
/// nothing: input rows either have room for a full vector there (packed patch rows of
/// `align16(k)`) or are exactly `k` long and read through `tail`.
///
/// # Safety
/// NEON, and `dotprod` when `DOT`. Weight rows hold at least `k & !15` values.
#[inline(always)]
unsafe fn dot_tile<const DOT: bool, const NP: usize, const NC: usize>(
    x: [&[i8]; NP],
    w: [&[i8]; NC],
    wtail: &[int8x16_t; NC],
    tail: &Tail,
    k: usize,
) -> [int32x4_t; NP] {
    // SAFETY: every full-vector load below stays inside its slice (kk + 16 ≤ kfull ≤ len);
    // the input tail is a full load only where the row has room for it.
    unsafe {
        let mut a = [[vdupq_n_s32(0); NC]; NP];
        let kfull = tail.kfull;
        let mut kk = 0;
        while kk < kfull {
            let wv: [int8x16_t; NC] = core::array::from_fn(|c| vld1q_s8(w[c].as_ptr().add(kk)));
            for r in 0..NP {
                let xv = vld1q_s8(x[r].as_ptr().add(kk));
                for c in 0..NC {
                    a[r][c] = mac::<DOT>(a[r][c], xv, wv[c]);
                }
            }
            kk += 16;
        }
        if kfull < k {
            for r in 0..NP {
                let xv = if x[r].len() >= kfull + 16 {
                    vld1q_s8(x[r].as_ptr().add(kfull))
                } else {
                    tail.load(x[r])
                };
                for c in 0..NC {
                    a[r][c] = mac::<DOT>(a[r][c], xv, wtail[c]);
                }
            }
        }
        let z = vdupq_n_s32(0);
        core::array::from_fn(|r| {
            let v: [int32x4_t; 4] = core::array::from_fn(|c| if c < NC { a[r][c] } else { z });
            reduce4(v)
        })
    }
}

/// The output zero point and clamp as vectors.
#[derive(Clone, Copy)]
struct Epilogue {
    /// The zero point in i64 lanes (the single rounding adds it before narrowing).
    zp64: int64x2_t,
    /// The zero point (the double rounding's epilogue holds it in i32 lanes).
    zero_point: i32,
    lo: int32x4_t,
    hi: int32x4_t,
}

impl Epilogue {
    #[inline(always)]
    fn new(o: &OutputQuant) -> Self {
        // SAFETY: register-only NEON operations; NEON: reached only from the entry points.
        unsafe {
            Epilogue {
                zp64: vdupq_n_s64(o.zero_point as i64),
                zero_point: o.zero_point,
                lo: vdupq_n_s32(o.act_min),
                hi: vdupq_n_s32(o.act_max),
            }
        }
    }

    /// `v` (the requantized values plus the zero point, saturated to i32) clamped to
    /// [act_min, act_max] and to i8: saturating to i32 first gives the same value, because the
    /// clamp bounds are i32; saturating to i8 is the final clamp to i8.
    #[inline(always)]
    fn clamp(&self, v: int32x4_t) -> [i8; 4] {
        // SAFETY: register-only NEON operations; NEON: reached only from the entry points.
        unsafe {
            let v = vminq_s32(vmaxq_s32(v, self.lo), self.hi);
            let v16 = vqmovn_s32(v);
            let v8 = vqmovn_s16(vcombine_s16(v16, v16));
            vget_lane_u32::<0>(vreinterpret_u32_s8(v8))
                .to_le_bytes()
                .map(|b| b as i8)
        }
    }
}

/// Four output channels' requantization in one rounding, its constants decoded once per
/// channel group by [`ChannelRequant::new`] (lanes past the channel count hold
/// `ChannelRequant::default()`; their outputs are dropped). A kernel is instantiated for each
/// rounding ([`Single4`], [`Double4`]), so the choice costs nothing per output.
trait Requant4: Copy {
    fn new(q: &ChannelArrays, c0: usize, nc: usize, e: &Epilogue) -> Self;

    /// `OutputQuant::finish` on 4 lanes of sums (the bias not yet added).
    fn apply(&self, sum: int32x4_t, e: &Epilogue) -> [i8; 4];
}

/// An op's per-channel arrays: bias, M0, shift.
type ChannelArrays<'a> = (I32Array<'a>, I32Array<'a>, I32Array<'a>);

/// The decoded constants of channels `c0..c0 + nc`, default past `nc`.
#[inline(always)]
fn channels(q: &ChannelArrays, c0: usize, nc: usize) -> [ChannelRequant; 4] {
    let (bias, m0, shift) = q;
    core::array::from_fn(|i| {
        if i < nc {
            ChannelRequant::new(bias.get(c0 + i), m0.get(c0 + i), shift.get(c0 + i))
        } else {
            ChannelRequant::default()
        }
    })
}

/// `f` of each lane's channel, as a vector.
#[inline(always)]
fn lanes(ch: &[ChannelRequant; 4], f: impl Fn(&ChannelRequant) -> i32) -> int32x4_t {
    let v: [i32; 4] = core::array::from_fn(|i| f(&ch[i]));
    // SAFETY: a load of a local array of 4 i32; NEON: reached only from the entry points.
    unsafe { vld1q_s32(v.as_ptr()) }
}

/// The single rounding (`Rounding::Single`): `((sum + bias)·M0 + 2^(n−1)) >> n` in i64.
#[derive(Clone, Copy)]
struct Single4 {
    bias: int32x4_t,
    m0: int32x4_t,
    round: [int64x2_t; 2],
    neg_n: [int64x2_t; 2],
}

impl Requant4 for Single4 {
    #[inline(always)]
    fn new(q: &ChannelArrays, c0: usize, nc: usize, _: &Epilogue) -> Self {
        let ch = channels(q, c0, nc);
        let r: [i64; 4] = core::array::from_fn(|i| ch[i].round);
        let n: [i64; 4] = core::array::from_fn(|i| -(ch[i].n as i64));
        // SAFETY: loads of local arrays of the right sizes; NEON: reached only from the entry
        // points.
        unsafe {
            Single4 {
                bias: lanes(&ch, |c| c.bias),
                // ChannelRequant keeps M0 as an i64 holding an i32: the cast is exact.
                m0: lanes(&ch, |c| c.m0 as i32),
                round: [vld1q_s64(r.as_ptr()), vld1q_s64(r.as_ptr().add(2))],
                neg_n: [vld1q_s64(n.as_ptr()), vld1q_s64(n.as_ptr().add(2))],
            }
        }
    }

    /// `clamp(((sum + bias)·M0 + 2^(n−1)) >> n) + z_out)` in i64, narrowed to i32 with
    /// saturation before the clamp ([`Epilogue::clamp`]).
    #[inline(always)]
    fn apply(&self, sum: int32x4_t, e: &Epilogue) -> [i8; 4] {
        // SAFETY: register-only NEON operations; NEON: reached only from the entry points.
        unsafe {
            let acc = vaddq_s32(sum, self.bias);
            let lo = vmull_s32(vget_low_s32(acc), vget_low_s32(self.m0));
            let hi = vmull_high_s32(acc, self.m0);
            // SSHL by −n is the arithmetic shift right (floor), like `>>` on i64.
            let lo = vaddq_s64(
                vshlq_s64(vaddq_s64(lo, self.round[0]), self.neg_n[0]),
                e.zp64,
            );
            let hi = vaddq_s64(
                vshlq_s64(vaddq_s64(hi, self.round[1]), self.neg_n[1]),
                e.zp64,
            );
            e.clamp(vcombine_s32(vqmovn_s64(lo), vqmovn_s64(hi)))
        }
    }
}

/// TensorFlow Lite's double rounding (`Rounding::Double`, `requant::requantize_double`), as
/// gemmlowp computes it on NEON: `SSHL` by the left shift (wrapping, as the i32 multiply),
/// `SQRDMULH` (exactly `SaturatingRoundingDoublingHighMul`: `(2·a·b + 2^31) >> 32` saturated,
/// the same quotient for either sign of the product, `i32::MAX` for `i32::MIN`²), then
/// `RoundingDivideByPOT` as `SRSHL` (round half up) of the value less 1 where it is negative
/// (so that ties go away from zero; saturating, for `i32::MIN`).
#[derive(Clone, Copy)]
struct Double4 {
    bias: int32x4_t,
    m0: int32x4_t,
    left: int32x4_t,
    neg_right: int32x4_t,
    zp: int32x4_t,
}

impl Requant4 for Double4 {
    #[inline(always)]
    fn new(q: &ChannelArrays, c0: usize, nc: usize, e: &Epilogue) -> Self {
        let ch = channels(q, c0, nc);
        let shifts = |c: &ChannelRequant| crate::requant::double_shifts(c.shift());
        Double4 {
            bias: lanes(&ch, |c| c.bias),
            m0: lanes(&ch, |c| c.m0 as i32),
            left: lanes(&ch, |c| shifts(c).0 as i32),
            neg_right: lanes(&ch, |c| -(shifts(c).1 as i32)),
            // SAFETY: register-only; NEON: reached only from the entry points.
            zp: unsafe { vdupq_n_s32(e.zero_point) },
        }
    }

    /// `clamp(RoundingDivideByPOT(SRDHM((sum + bias)·2^ls, M0), rs) + z_out)`, the zero point
    /// added saturating (past i32 the clamp decides the same).
    #[inline(always)]
    fn apply(&self, sum: int32x4_t, e: &Epilogue) -> [i8; 4] {
        // SAFETY: register-only NEON operations; NEON: reached only from the entry points.
        unsafe {
            let acc = vaddq_s32(sum, self.bias);
            let x = vqrdmulhq_s32(vshlq_s32(acc, self.left), self.m0);
            // −1 where x < 0 and the shift is not 0 (−rs has its sign bit set exactly then).
            let fix = vshrq_n_s32::<31>(vandq_s32(x, self.neg_right));
            let v = vrshlq_s32(vqaddq_s32(x, fix), self.neg_right);
            e.clamp(vqaddq_s32(v, self.zp))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::Rounding;
    use crate::requant::ChannelRequant;
    use proptest::prelude::*;

    /// Each lane of `Q::apply` against `OutputQuant::finish` (requant.rs), lanes past `nc`
    /// dropped.
    fn check<Q: Requant4>(sums: [i32; 4], ch: [(i32, i32, i32); 4], nc: usize, out: OutputQuant) {
        let arr = |f: fn(&(i32, i32, i32)) -> i32| -> Vec<u8> {
            ch.iter().flat_map(|c| f(c).to_le_bytes()).collect()
        };
        let (b, m, s) = (arr(|c| c.0), arr(|c| c.1), arr(|c| c.2));
        let (b, m, s) = (I32Array::new(&b), I32Array::new(&m), I32Array::new(&s));
        // SAFETY: NEON is the aarch64 Linux baseline (asserted).
        assert!(crate::kernels::Kernels::neon_available());
        let e = Epilogue::new(&out);
        let q = Q::new(&(b, m, s), 0, nc, &e);
        let got = q.apply(unsafe { vld1q_s32(sums.as_ptr()) }, &e);
        for i in 0..nc {
            let c = ChannelRequant::new(ch[i].0, ch[i].1, ch[i].2);
            assert_eq!(
                got[i],
                out.finish(sums[i], &c),
                "lane {i}: {sums:?} {ch:?} {out:?}"
            );
        }
    }

    /// Sums and biases: any i32 (their sum wraps), or small (ties of the roundings are
    /// frequent there, at small multipliers).
    fn values() -> impl Strategy<Value = [i32; 4]> {
        prop_oneof![any::<[i32; 4]>(), prop::array::uniform4(-70_000i32..70_000)]
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

    /// Ties of both roundings: m = 0.5·2^shift on small sums, no clamp but i8's.
    #[test]
    fn ties() {
        for rounding in Rounding::ALL {
            let out = OutputQuant {
                zero_point: 0,
                act_min: -128,
                act_max: 127,
                rounding,
            };
            for shift in -4..=0 {
                for s0 in (-40..40).step_by(4) {
                    let sums = [s0, s0 + 1, s0 + 2, s0 + 3];
                    let ch = [
                        (0, 1 << 30, shift),
                        (-1, 1 << 30, shift),
                        (0, 1 << 30, shift),
                        (1, 1 << 30, shift),
                    ];
                    match rounding {
                        Rounding::Single => check::<Single4>(sums, ch, 4, out),
                        Rounding::Double => check::<Double4>(sums, ch, 4, out),
                    }
                }
            }
        }
    }

    proptest! {
        /// Both epilogues over those sums, biases and multipliers, shifts past the valid range
        /// too, any zero point and clamp (crossed ones included).
        #[test]
        fn epilogues_match_finish(
            sums in values(), bias in values(), m0 in prop::array::uniform4(multiplier()),
            shift in prop::array::uniform4(-40i32..40), nc in 1usize..=4,
            zp in prop_oneof![-128i32..=127, any::<i32>()], lo in -300i32..300, hi in -300i32..300,
        ) {
            let ch: [(i32, i32, i32); 4] = core::array::from_fn(|i| (bias[i], m0[i], shift[i]));
            for rounding in Rounding::ALL {
                let out = OutputQuant { zero_point: zp, act_min: lo, act_max: hi, rounding };
                match rounding {
                    Rounding::Single => check::<Single4>(sums, ch, nc, out),
                    Rounding::Double => check::<Double4>(sums, ch, nc, out),
                }
            }
        }
    }
}
