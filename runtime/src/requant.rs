//! Requantization: the one definition of each rounding every CPU and GPU kernel uses
//! (FORMAT.md, "Requantization").
//!
//! `M0 ∈ [2^30, 2^31)` (or 0) and `shift` represent m = M0 · 2^(shift − 31). A model records
//! which of two roundings its ops use ([`Rounding`]):
//! - [`Rounding::Single`], octet's: with n = 31 − shift in [1, 62],
//!   `(acc · M0 + 2^(n−1)) >> n` in i64 (one rounding, half up) — TensorFlow Lite's
//!   `MultiplyByQuantizedMultiplier` built with `TFLITE_SINGLE_ROUNDING`;
//! - [`Rounding::Double`], TensorFlow Lite's default (stock TFLite, TFLite Micro, CMSIS-NN):
//!   gemmlowp's `SaturatingRoundingDoublingHighMul(acc · 2^max(shift, 0), M0)` (the left shift
//!   wrapping in i32, as TFLite's compiled code does), then `RoundingDivideByPOT` by
//!   max(−shift, 0) (half away from zero).
//!
//! [`FusedRequant`] writes both as one shift of the product with a sign-dependent correction,
//! the form the SIMD epilogues compute (checked here against the definitions).

/// Smallest valid M0 (2^30).
pub const M0_MIN: i32 = 1 << 30;
/// Smallest valid shift (n = 62).
pub const SHIFT_MIN: i32 = -31;
/// Largest valid shift (n = 1).
pub const SHIFT_MAX: i32 = 30;

/// Whether (m0, shift) is a valid requantization pair: M0 in [2^30, 2^31), or 0 (TFLite's
/// encoding of a multiplier below 2^−32: every output is the zero point), and shift in
/// [−31, 30].
pub const fn valid_multiplier(m0: i32, shift: i32) -> bool {
    (m0 >= M0_MIN || m0 == 0) && shift >= SHIFT_MIN && shift <= SHIFT_MAX
}

/// The requantization rounding a model records (FORMAT.md header byte 35).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Rounding {
    /// octet's single rounding: `(acc · M0 + 2^(n−1)) >> n`, n = 31 − shift.
    Single,
    /// TensorFlow Lite's default double rounding (gemmlowp's high multiply, then a rounding
    /// shift), what stock TFLite Micro and CMSIS-NN compute.
    Double,
}

impl Rounding {
    /// Both, octet's first.
    pub const ALL: [Rounding; 2] = [Rounding::Single, Rounding::Double];

    /// The header code: 1 single, 2 double (0 is not a rounding: a writer must choose).
    pub const fn code(self) -> u8 {
        match self {
            Rounding::Single => 1,
            Rounding::Double => 2,
        }
    }

    /// The rounding of a header code.
    pub const fn from_code(code: u8) -> Option<Rounding> {
        match code {
            1 => Some(Rounding::Single),
            2 => Some(Rounding::Double),
            _ => None,
        }
    }

    /// Lower-case name (`single`, `double`), as command lines and reports spell it.
    pub const fn name(self) -> &'static str {
        match self {
            Rounding::Single => "single",
            Rounding::Double => "double",
        }
    }

    /// `acc · M0 · 2^(shift − 31)` rounded this way, saturated to i32.
    #[inline(always)]
    pub fn requantize(self, acc: i32, m0: i32, shift: i32) -> i32 {
        match self {
            Rounding::Single => requantize(acc, m0, shift),
            Rounding::Double => requantize_double(acc, m0, shift),
        }
    }
}

/// `--rounding`: `double` (TFLite's default) and `single` (octet's), each with a line of help.
#[cfg(feature = "clap")]
impl clap::ValueEnum for Rounding {
    fn value_variants<'a>() -> &'a [Self] {
        &[Rounding::Double, Rounding::Single]
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        let help = match self {
            Rounding::Double => {
                "TensorFlow Lite's default (stock TFLite, TFLite Micro, CMSIS-NN): the same bytes"
            }
            Rounding::Single => {
                "octet's single rounding (TFLite built with TFLITE_SINGLE_ROUNDING)"
            }
        };
        Some(clap::builder::PossibleValue::new(self.name()).help(help))
    }
}

/// gemmlowp's `SaturatingRoundingDoublingHighMul`: `(a · b + nudge) / 2^31` with C's
/// truncating division, nudge 2^30 for a non-negative product and 1 − 2^30 otherwise, and
/// `i32::MAX` for the one overflowing pair (both `i32::MIN`).
#[inline(always)]
pub fn saturating_rounding_doubling_high_mul(a: i32, b: i32) -> i32 {
    if a == i32::MIN && b == i32::MIN {
        return i32::MAX;
    }
    let ab = a as i64 * b as i64;
    let nudge = if ab >= 0 {
        1i64 << 30
    } else {
        1 - (1i64 << 30)
    };
    // |ab + nudge| < 2^62: the quotient fits in i32.
    ((ab + nudge) / (1i64 << 31)) as i32
}

/// gemmlowp's `RoundingDivideByPOT`: `x / 2^exponent` rounded to nearest, ties away from
/// zero, for exponent in [0, 31] (clamped there, so the function is total).
#[inline(always)]
pub fn rounding_divide_by_pot(x: i32, exponent: u32) -> i32 {
    let e = exponent.min(31);
    // For e = 31 the mask is 0x7FFF_FFFF, as C's (1 << 31) − 1 wraps to.
    let mask = ((1i64 << e) - 1) as i32;
    let remainder = x & mask;
    let threshold = (mask >> 1) + (x < 0) as i32;
    (x >> e) + (remainder > threshold) as i32
}

/// TensorFlow Lite's default `MultiplyByQuantizedMultiplier(acc, M0, shift)`:
/// `RoundingDivideByPOT(SaturatingRoundingDoublingHighMul(acc · 2^ls, M0), rs)` with
/// ls = max(shift, 0), rs = max(−shift, 0); `acc · 2^ls` wraps in i32 as TFLite's does.
/// A shift outside [−31, 30] is clamped there.
#[inline(always)]
pub fn requantize_double(acc: i32, m0: i32, shift: i32) -> i32 {
    let (ls, rs) = double_shifts(shift);
    let x = acc.wrapping_mul(1i32 << ls);
    rounding_divide_by_pot(saturating_rounding_doubling_high_mul(x, m0), rs)
}

/// The double rounding's two shifts of a stored `shift` (clamped to [−31, 30]): the left shift
/// max(shift, 0) before the high multiply and the rounding right shift max(−shift, 0) after it.
#[inline(always)]
pub const fn double_shifts(shift: i32) -> (u32, u32) {
    let s = if shift < SHIFT_MIN {
        SHIFT_MIN
    } else if shift > SHIFT_MAX {
        SHIFT_MAX
    } else {
        shift
    };
    if s >= 0 {
        (s as u32, 0)
    } else {
        (0, (-s) as u32)
    }
}

/// Whether `n` is a valid plain right shift (add op): in [1, 62].
pub const fn valid_right_shift(n: i32) -> bool {
    n >= 1 && n <= 62
}

#[inline(always)]
fn rounding_shift(v: i64, n: u32) -> i64 {
    (v + (1i64 << (n - 1))) >> n
}

#[inline(always)]
fn n_of(shift: i32) -> u32 {
    // Valid models have n in [1, 62]; clamping keeps the function total for any input.
    (31 - shift.clamp(SHIFT_MIN, SHIFT_MAX)) as u32
}

/// `(acc · M0 + 2^(n−1)) >> n` with n = 31 − shift, computed in i64, saturated to i32.
///
/// Exact for valid pairs (`M0 ∈ [2^30, 2^31)`, shift in [−31, 30]); the saturation never
/// changes a clamped int8 output. For a shift outside the range, n is clamped to [1, 62].
#[inline(always)]
pub fn requantize(acc: i32, m0: i32, shift: i32) -> i32 {
    // |acc·M0| ≤ 2^62 and the rounding term ≤ 2^61: no i64 overflow.
    let v = rounding_shift(acc as i64 * m0 as i64, n_of(shift));
    v.clamp(i32::MIN as i64, i32::MAX as i64) as i32
}

/// Output quantization of an op: zero point, clamp and the model's rounding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutputQuant {
    /// Output zero point.
    pub zero_point: i32,
    /// Lower clamp (quantized).
    pub act_min: i32,
    /// Upper clamp (quantized).
    pub act_max: i32,
    /// How the requantization rounds.
    pub rounding: Rounding,
}

impl OutputQuant {
    /// `clamp(requant(acc) + z_out, act_min, act_max)` as i8, rounded as `self.rounding` says.
    #[inline(always)]
    pub fn requantize(&self, acc: i32, m0: i32, shift: i32) -> i8 {
        let v = match self.rounding {
            Rounding::Single => rounding_shift(acc as i64 * m0 as i64, n_of(shift)),
            Rounding::Double => requantize_double(acc, m0, shift) as i64,
        };
        self.clamp64(v + self.zero_point as i64)
    }

    /// Clamps to [act_min, act_max] (and to i8).
    #[inline(always)]
    pub fn clamp64(&self, v: i64) -> i8 {
        v.max(self.act_min as i64)
            .min(self.act_max as i64)
            .clamp(-128, 127) as i8
    }

    /// `clamp(requant(sum + bias) + z_out)` with the channel's constants decoded once:
    /// the same value as `self.requantize(sum.wrapping_add(bias), m0, shift)`.
    #[inline(always)]
    pub fn finish(&self, sum: i32, c: &ChannelRequant) -> i8 {
        let acc = sum.wrapping_add(c.bias);
        let v = match self.rounding {
            Rounding::Single => (acc as i64 * c.m0 + c.round) >> c.n,
            Rounding::Double => requantize_double(acc, c.m0 as i32, c.shift()) as i64,
        };
        self.clamp64(v + self.zero_point as i64)
    }
}

/// One output channel's bias and multiplier, decoded for the kernels' epilogues.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChannelRequant {
    /// Bias.
    pub bias: i32,
    /// M0 as i64.
    pub m0: i64,
    /// 2^(n−1).
    pub round: i64,
    /// n = 31 − shift, clamped to [1, 62].
    pub n: u32,
}

impl ChannelRequant {
    /// From the stored bias, M0 and shift.
    #[inline(always)]
    pub fn new(bias: i32, m0: i32, shift: i32) -> Self {
        let n = n_of(shift);
        ChannelRequant {
            bias,
            m0: m0 as i64,
            round: 1i64 << (n - 1),
            n,
        }
    }

    /// The stored shift again, clamped as `new` clamps it: 31 − n.
    #[inline(always)]
    pub const fn shift(&self) -> i32 {
        31 - self.n as i32
    }
}

/// One output channel's requantization in the single form the vector epilogues compute,
/// whichever the rounding: with `x = acc · 2^ls` (wrapping in i32) and `P = x · M0` (exact in
/// i64), `requant(acc) = (P + round − [P < 0] · corr) >> n` (arithmetic shift).
///
/// - [`Rounding::Single`]: ls = 0, n = 31 − shift, round = 2^(n−1), corr = 0 (the definition).
/// - [`Rounding::Double`]: ls = max(shift, 0), rs = max(−shift, 0), n = 31 + rs,
///   round = 2^30 + [rs ≥ 1]·2^(n−1), corr = [rs ≥ 1]·2^31. Why: with M0 ≥ 0 the high
///   multiply's pair is never (i32::MIN, i32::MIN), and its truncating division with the
///   sign-dependent nudge is `t1 = ⌊(P + 2^30) / 2^31⌋`; the rounding shift is
///   `⌊(t1 + 2^(rs−1) − [t1 < 0]) / 2^rs⌋`, where `[t1 < 0]` may read `[P < 0]` (P < 0
///   gives t1 ≤ 0, and at t1 = 0 the −1 changes nothing); ⌊⌊a⌋ / 2^rs⌋ = ⌊a / 2^rs⌋ makes the
///   two floors one.
///
/// `[P < 0]` may also read `[x < 0]` (they differ only for M0 = 0, where t1 = 0), so a kernel
/// may test the sign it has at hand. |P| < 2^62 and round < 2^62: no i64 overflow. For n ≥ 33,
/// round mod 2^32 is 0 (single) or 2^30 (double) and corr is 0 or 2^31: what lies below the
/// high halves of `P` is the same for every channel, which the i32 epilogues rely on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FusedRequant {
    /// Left shift of the accumulator, in [0, 30] (double rounding, shift > 0; else 0).
    pub ls: u32,
    /// Right shift, in [1, 62].
    pub n: u32,
    /// M0.
    pub m0: i32,
    /// The rounding term.
    pub round: i64,
    /// Subtracted where the product is negative: 0 or 2^31.
    pub corr: i64,
}

impl FusedRequant {
    /// From the stored M0 and shift (clamped to [−31, 30]) and the model's rounding.
    #[inline]
    pub fn new(m0: i32, shift: i32, rounding: Rounding) -> Self {
        let shift = shift.clamp(SHIFT_MIN, SHIFT_MAX);
        match rounding {
            Rounding::Single => {
                let n = n_of(shift);
                FusedRequant {
                    ls: 0,
                    n,
                    m0,
                    round: 1i64 << (n - 1),
                    corr: 0,
                }
            }
            Rounding::Double => {
                let (ls, rs) = (shift.max(0) as u32, (-shift).max(0) as u32);
                let n = 31 + rs;
                let tie = if rs >= 1 { 1i64 << (n - 1) } else { 0 };
                FusedRequant {
                    ls,
                    n,
                    m0,
                    round: (1i64 << 30) + tie,
                    corr: if rs >= 1 { 1i64 << 31 } else { 0 },
                }
            }
        }
    }

    /// `requant(acc)` as the form above computes it (before the zero point and the clamp):
    /// [`requantize_double`], or the single rounding unsaturated.
    #[inline]
    pub fn apply(&self, acc: i32) -> i64 {
        let x = acc.wrapping_shl(self.ls);
        let p = x as i64 * self.m0 as i64;
        let corr = if p < 0 { self.corr } else { 0 };
        (p + self.round - corr) >> self.n
    }
}

/// [`FusedRequant`] as i32-lane kernels compute it, for any valid pair in either rounding:
/// with `x = clamp(acc, acc_min, acc_max) · 2^ls` (wrapping in i32) and `t = x · M0 · 2^pre +
/// round − [x < 0] · corr` (exact in i64), `requant(acc)` is `(t >> 32) >> n`: the high half of
/// a 64-bit sum, then an i32 shift (a vector multiply of 32-bit lanes gives the high halves).
///
/// - n ≥ 32 ([`FusedRequant`]'s n; single with shift ≤ −1, double with shift ≤ −1): its
///   constants, pre = 0, n − 32 here.
/// - n ≤ 31 (shift ≥ 0): pre = 32 − n scales the product up to a 32-bit shift (round and corr
///   with it; corr is 0 there). |t| < 2^63 needs |x · M0| < 2^(31 + n): true of any x for
///   n = 31 (the double rounding's left shift is its `ls`), so only the single rounding with
///   shift ≥ 1 bounds the accumulator, to ±2^max(n − 20, 0): beyond that m = M0 · 2^−n ≥
///   2^(30 − n) makes |requant(acc)| ≥ 1024, so the output is the clamp's end either way (the
///   single rounding saturates, and any zero point and clamp lie within i8).
///
/// So `apply(acc) == rounding.requantize(clamp(acc, acc_min, acc_max))`, and after a zero point
/// and a clamp within [−128, 127] it equals `OutputQuant::requantize(acc)` (tested below).
/// corr is 0 or 2^31, so a kernel may take it as bit 31 of x.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HighRequant {
    /// Lower bound of the accumulator (i32::MIN: none).
    pub acc_min: i32,
    /// Upper bound of the accumulator (i32::MAX: none).
    pub acc_max: i32,
    /// Left shift of the accumulator, in [0, 30].
    pub ls: u32,
    /// M0.
    pub m0: i32,
    /// Left shift of the product, in [0, 31].
    pub pre: u32,
    /// The rounding term, scaled by 2^pre.
    pub round: i64,
    /// Subtracted where x is negative: 0 or 2^31.
    pub corr: i64,
    /// Right shift of the high half, in [0, 30].
    pub n: u32,
}

impl HighRequant {
    /// From the stored M0 and shift (clamped to [−31, 30]) and the model's rounding.
    pub fn new(m0: i32, shift: i32, rounding: Rounding) -> Self {
        let f = FusedRequant::new(m0, shift, rounding);
        let pre = 32u32.saturating_sub(f.n);
        let bound = if pre >= 2 {
            1i32 << f.n.saturating_sub(20)
        } else {
            i32::MAX
        };
        HighRequant {
            acc_min: if pre >= 2 { -bound } else { i32::MIN },
            acc_max: bound,
            ls: f.ls,
            m0: f.m0,
            pre,
            round: f.round << pre,
            corr: f.corr << pre,
            n: f.n.saturating_sub(32),
        }
    }

    /// Whether the accumulator is bounded or shifted, or the product shifted (a shift ≥ 0);
    /// where not (every shift below 0, the usual one), x = acc and `t = x · M0 + round −
    /// [x < 0] · corr`, which kernels may compute with fewer instructions.
    pub const fn shifted(&self) -> bool {
        self.ls != 0 || self.pre != 0 || self.acc_min != i32::MIN || self.acc_max != i32::MAX
    }

    /// `requant(clamp(acc, acc_min, acc_max))` in the form above.
    #[inline]
    pub fn apply(&self, acc: i32) -> i32 {
        let x = acc.clamp(self.acc_min, self.acc_max).wrapping_shl(self.ls);
        let p = (x as i64 * self.m0 as i64) << self.pre;
        let corr = if x < 0 { self.corr } else { 0 };
        ((p + self.round - corr) >> 32) as i32 >> self.n
    }
}

/// Parameters of the requantizing residual add (FORMAT.md, "add").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AddRequant {
    /// Input 0 zero point.
    pub z0: i32,
    /// Input 0 multiplier m0 = round(s0 / s_out · 2^n).
    pub m0: i32,
    /// Input 1 zero point.
    pub z1: i32,
    /// Input 1 multiplier.
    pub m1: i32,
    /// Right shift n in [1, 62].
    pub n: i32,
    /// Output zero point and clamp.
    pub out: OutputQuant,
}

impl AddRequant {
    /// `clamp(((q0 − z0)·m0 + (q1 − z1)·m1 + 2^(n−1)) >> n) + z_out)` in i64.
    #[inline(always)]
    pub fn apply(&self, q0: i8, q1: i8) -> i8 {
        let t = (q0 as i64 - self.z0 as i64) * self.m0 as i64
            + (q1 as i64 - self.z1 as i64) * self.m1 as i64;
        let n = self.n.clamp(1, 62) as u32;
        self.out
            .clamp64(rounding_shift(t, n) + self.out.zero_point as i64)
    }
}

/// TensorFlow Lite's `QuantizeMultiplier` (quantization_util.cc) for a multiplier `m ≥ 0`:
/// [`quantize_multiplier`]'s pair, (0, 0) for 0 and for multipliers below its range (TFLite
/// flushes a shift below −31 to a zero multiplier), `None` for m ≥ 2^30, negative or not
/// finite (TFLite would saturate or fail there; no int8 model has such a multiplier).
pub fn quantize_multiplier_tflite(m: f64) -> Option<(i32, i32)> {
    if !(m.is_finite() && m >= 0.0) {
        return None;
    }
    match quantize_multiplier(m) {
        Some(pair) => Some(pair),
        None if m < 1.0 => Some((0, 0)),
        None => None,
    }
}

/// Converts a real multiplier `m` to (M0, shift) with M0 ∈ [2^30, 2^31), m ≈ M0·2^(shift−31)
/// (relative error ≤ 2^−31, M0 rounded half up), and n = 31 − shift in [1, 62], i.e.
/// m ∈ [2^−32, 2^30). `None` for m outside that range, zero, negative or not finite.
///
/// Integer-only (reads the f64's bits), so it gives the same answer on every platform.
pub fn quantize_multiplier(m: f64) -> Option<(i32, i32)> {
    if !(m.is_finite() && m > 0.0) {
        return None;
    }
    let bits = m.to_bits();
    let exp = ((bits >> 52) & 0x7ff) as i32;
    if exp == 0 {
        return None; // subnormal: far below 2^−32
    }
    // m = mant · 2^(exp − 1075) = f · 2^e with f = mant / 2^53 ∈ [0.5, 1), e = exp − 1022.
    let mant = (bits & ((1u64 << 52) - 1)) | (1u64 << 52);
    let mut m0 = (mant + (1u64 << 21)) >> 22; // round(f · 2^31)
    let mut e = exp - 1022;
    if m0 == 1u64 << 31 {
        m0 = 1u64 << 30;
        e += 1;
    }
    if !(SHIFT_MIN..=SHIFT_MAX).contains(&e) {
        return None;
    }
    Some((m0 as i32, e))
}

/// The sums' offset of [`UnsignedRequant`]'s form: what kernels add to them so that they are
/// positive (|acc| < 2^30 there).
pub const UNSIGNED_OFFSET: i32 = 1 << 30;

/// A row's requantization in the unsigned form of the x86 short epilogue
/// (`kernels::vnni::short_requant::short_unsigned`): over `u = acc + 2^30` (|acc| < 2^30,
/// the caller's bound), `(V >> 32 + [acc ≥ 0]·sign) >> rs` with V = u·m2 + round in unsigned
/// 64-bit products: 2·([`FusedRequant`]'s acc·M0 + round + z·2^n) − 2^32·sign, shifted by
/// n − 31, is the requantization with the zero point `z` added, before the clamp (`sign`:
/// the double rounding's correction, [acc < 0] subtracted after the first shift).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UnsignedRequant {
    /// 2·M0, as u32.
    pub m2: u32,
    /// 2·(round + z·2^n) − 2^31·M0, less 2^32 where `sign`.
    pub round: i64,
    /// n − 31.
    pub rs: u32,
    /// The double rounding's sign correction.
    pub sign: bool,
}

impl UnsignedRequant {
    /// `f`'s form with zero point `z`; `None` where it does not hold: n outside [33, 53] (the
    /// usual shifts, from −2 down), M0 < 0 or |z| > 128 (|V| < 2^63 needs all three).
    pub fn new(f: &FusedRequant, z: i32) -> Option<Self> {
        if !(33..=53).contains(&f.n) || f.m0 < 0 || z.unsigned_abs() > 128 {
            return None;
        }
        let round = f.round + ((z as i64) << f.n);
        // corr is 2^31 in the double rounding (n ≥ 33), 0 in the single.
        let sign = f.corr != 0;
        Some(UnsignedRequant {
            m2: 2 * f.m0 as u32,
            round: 2 * round - ((f.m0 as i64) << 31) - ((sign as i64) << 32),
            rs: f.n - 31,
            sign,
        })
    }

    /// `acc`'s requantization with the zero point as the form computes it (|acc| < 2^30).
    pub fn apply(&self, acc: i32) -> i32 {
        let u = acc.wrapping_add(UNSIGNED_OFFSET) as u32 as u64;
        let v = (u * self.m2 as u64) as i64 + self.round;
        let sign = (self.sign && acc >= 0) as i32;
        ((v >> 32) as i32 + sign) >> self.rs
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn exact(acc: i32, m0: i32, shift: i32) -> i32 {
        let n = 31 - shift;
        let num = acc as i128 * m0 as i128 + (1i128 << (n - 1));
        let q = num.div_euclid(1i128 << n); // floor
        q.clamp(i32::MIN as i128, i32::MAX as i128) as i32
    }

    /// gemmlowp's two steps written out in i128 from their definitions: the high multiply as
    /// C's truncating division of the nudged product, the shift rounding half away from zero.
    fn tflite_double(acc: i32, m0: i32, shift: i32) -> i32 {
        let (ls, rs) = (shift.max(0), (-shift).max(0));
        let x = (acc as i64 * (1i64 << ls)) as i32; // C's int32 multiply wraps
        let ab = x as i128 * m0 as i128;
        let nudge: i128 = if ab >= 0 { 1 << 30 } else { 1 - (1 << 30) };
        let hi = (ab + nudge) / (1i128 << 31); // truncates toward zero, like C
        let hi = if x == i32::MIN && m0 == i32::MIN {
            i32::MAX as i128
        } else {
            hi
        };
        if rs == 0 {
            return hi as i32;
        }
        let d = 1i128 << rs;
        let q = hi.abs() / d;
        let r = hi.abs() % d;
        let mag = if 2 * r >= d { q + 1 } else { q };
        (if hi < 0 { -mag } else { mag }) as i32
    }

    #[test]
    fn double_rounding_known_values() {
        // m = 0.25, acc = 1: 0.5 after the first step rounds up to 1, then 1/2 rounds up again.
        assert_eq!(requantize_double(1, 1 << 30, -1), 1);
        assert_eq!(requantize(1, 1 << 30, -1), 0);
        // acc = −2: exact −0.5; single rounds half up to 0, TFLite away from zero to −1.
        assert_eq!(requantize_double(-2, 1 << 30, -1), -1);
        assert_eq!(requantize(-2, 1 << 30, -1), 0);
        // A typical conv multiplier: 8 of the accumulators 0..2999 differ (NOTES_tflite.md).
        let differ = (0..3000)
            .filter(|&a| {
                requantize(a, 1_518_500_250, -8) != requantize_double(a, 1_518_500_250, -8)
            })
            .count();
        assert_eq!(differ, 8);
        assert_eq!(requantize_double(181, 1_518_500_250, -8), 1);
        assert_eq!(
            saturating_rounding_doubling_high_mul(i32::MIN, i32::MIN),
            i32::MAX
        );
        assert_eq!(rounding_divide_by_pot(-5, 1), -3);
        assert_eq!(rounding_divide_by_pot(5, 1), 3);
        assert_eq!(rounding_divide_by_pot(i32::MIN, 31), -1);
        assert_eq!(rounding_divide_by_pot(1 << 30, 31), 1);
        assert_eq!(rounding_divide_by_pot((1 << 30) - 1, 31), 0);
        // A zero multiplier gives zero in both.
        for r in Rounding::ALL {
            assert_eq!(r.requantize(123_456, 0, -5), 0);
        }
        assert_eq!(quantize_multiplier_tflite(0.0), Some((0, 0)));
        assert_eq!(quantize_multiplier_tflite(1e-12), Some((0, 0)));
        assert_eq!(quantize_multiplier_tflite(0.5), Some((1 << 30, 0)));
        assert_eq!(quantize_multiplier_tflite(2f64.powi(31)), None);
        assert_eq!(Rounding::from_code(0), None);
        for r in Rounding::ALL {
            assert_eq!(Rounding::from_code(r.code()), Some(r));
        }
    }

    /// [`FusedRequant`] and [`HighRequant`] at the ends: extreme accumulators, M0 and every
    /// shift.
    #[test]
    fn fused_edges() {
        let accs = [
            i32::MIN,
            i32::MIN + 1,
            -(1 << 30),
            -3,
            -2,
            -1,
            0,
            1,
            2,
            1 << 30,
            i32::MAX,
        ];
        for acc in accs {
            for m0 in [0, 1 << 30, (1 << 30) + 1, i32::MAX] {
                for shift in -31..=30 {
                    let f = FusedRequant::new(m0, shift, Rounding::Double);
                    assert_eq!(f.apply(acc), tflite_double(acc, m0, shift) as i64);
                    let s = FusedRequant::new(m0, shift, Rounding::Single);
                    let n = 31 - shift;
                    let want = (acc as i128 * m0 as i128 + (1i128 << (n - 1))) >> n;
                    assert_eq!(s.apply(acc) as i128, want, "{acc} {m0} {shift}");
                    for r in Rounding::ALL {
                        let h = HighRequant::new(m0, shift, r);
                        let bounded = acc.clamp(h.acc_min, h.acc_max);
                        assert_eq!(h.apply(acc), r.requantize(bounded, m0, shift));
                        for zo in [-128, 0, 127] {
                            let out = OutputQuant {
                                zero_point: zo,
                                act_min: -128,
                                act_max: 127,
                                rounding: r,
                            };
                            let got = out.clamp64(h.apply(acc) as i64 + zo as i64);
                            assert_eq!(got, out.requantize(acc, m0, shift), "{acc} {m0} {shift}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn known_values() {
        assert_eq!(quantize_multiplier(1.0), Some((1 << 30, 1)));
        assert_eq!(quantize_multiplier(0.5), Some((1 << 30, 0)));
        assert_eq!(quantize_multiplier(0.0), None);
        assert_eq!(quantize_multiplier(-1.0), None);
        assert_eq!(quantize_multiplier(f64::NAN), None);
        assert_eq!(quantize_multiplier(2f64.powi(30)), None);
        assert!(quantize_multiplier(2f64.powi(30) * 0.999).is_some());
        assert_eq!(quantize_multiplier(2f64.powi(-32)), Some((1 << 30, -31)));
        assert_eq!(quantize_multiplier(2f64.powi(-33)), None);
        // m = 0.5 exactly: acc·0.5 rounds half up.
        assert_eq!(requantize(3, 1 << 30, 0), 2);
        assert_eq!(requantize(-3, 1 << 30, 0), -1);
        assert_eq!(requantize(i32::MAX, i32::MAX, 30), i32::MAX);
        assert_eq!(requantize(i32::MIN, i32::MAX, 30), i32::MIN);
        // Rounding to the top of M0's range carries into the exponent.
        let just_below_one = 1.0 - 2f64.powi(-40);
        assert_eq!(quantize_multiplier(just_below_one), Some((1 << 30, 1)));
    }

    proptest! {
        #[test]
        fn requantize_is_exact_rounding(acc in any::<i32>(), m0 in (1i32 << 30)..=i32::MAX, shift in -31i32..=30) {
            prop_assert_eq!(requantize(acc, m0, shift), exact(acc, m0, shift));
        }

        #[test]
        fn requantize_small_acc(acc in -70_000i32..70_000, m0 in (1i32 << 30)..=i32::MAX, shift in -31i32..=30) {
            prop_assert_eq!(requantize(acc, m0, shift), exact(acc, m0, shift));
        }

        #[test]
        fn quantize_multiplier_is_close(m in 2f64.powi(-32)..2f64.powi(30) * 0.9999) {
            let (m0, shift) = quantize_multiplier(m).unwrap();
            prop_assert!(valid_multiplier(m0, shift));
            let back = m0 as f64 * 2f64.powi(shift - 31);
            prop_assert!(((back - m) / m).abs() <= 2f64.powi(-30));
        }

        #[test]
        fn quantize_multiplier_log_range(e in -32.0f64..29.99) {
            let m = 2f64.powf(e);
            let (m0, shift) = quantize_multiplier(m).unwrap();
            prop_assert!(valid_multiplier(m0, shift));
            let back = m0 as f64 * 2f64.powi(shift - 31);
            prop_assert!(((back - m) / m).abs() <= 2f64.powi(-30));
        }

        #[test]
        fn double_matches_gemmlowp(acc in any::<i32>(), m0 in (1i32 << 30)..=i32::MAX, shift in -31i32..=30) {
            prop_assert_eq!(requantize_double(acc, m0, shift), tflite_double(acc, m0, shift));
        }

        #[test]
        fn double_small_acc(acc in -70_000i32..70_000, m0 in prop_oneof![Just(0), (1i32 << 30)..=i32::MAX], shift in -31i32..=0) {
            prop_assert_eq!(requantize_double(acc, m0, shift), tflite_double(acc, m0, shift));
        }

        /// `finish` over decoded constants is `requantize` of the sum, in both roundings.
        #[test]
        fn finish_is_requantize(sum in -(1i32 << 24)..(1 << 24), bias in -(1i32 << 24)..(1 << 24),
                                m0 in prop_oneof![Just(0), (1i32 << 30)..=i32::MAX], shift in -31i32..=30,
                                zp in -128i32..=127, double in any::<bool>()) {
            let rounding = if double { Rounding::Double } else { Rounding::Single };
            let out = OutputQuant { zero_point: zp, act_min: -128, act_max: 127, rounding };
            let c = ChannelRequant::new(bias, m0, shift);
            prop_assert_eq!(out.finish(sum, &c), out.requantize(sum.wrapping_add(bias), m0, shift));
        }

        /// The vector epilogues' form is each rounding, for any accumulator, M0 (0 included)
        /// and shift, testing the sign of the product or of the shifted accumulator.
        #[test]
        fn fused_is_each_rounding(acc in prop_oneof![any::<i32>(), -70_000i32..70_000],
                                  m0 in prop_oneof![Just(0), Just(1 << 30), Just(i32::MAX), (1i32 << 30)..=i32::MAX],
                                  shift in -31i32..=30) {
            let f = FusedRequant::new(m0, shift, Rounding::Double);
            prop_assert_eq!(f.apply(acc), tflite_double(acc, m0, shift) as i64);
            let x = acc.wrapping_shl(f.ls);
            let by_x = (x as i64 * m0 as i64 + f.round - if x < 0 { f.corr } else { 0 }) >> f.n;
            prop_assert_eq!(by_x, f.apply(acc));
            let s = FusedRequant::new(m0, shift, Rounding::Single);
            let n = 31 - shift;
            let want = (acc as i128 * m0 as i128 + (1i128 << (n - 1))).div_euclid(1i128 << n);
            prop_assert_eq!(s.apply(acc) as i128, want);
        }

        /// [`HighRequant`] is the rounding's requantization of the bounded accumulator, and
        /// with a zero point and a clamp within i8, `OutputQuant::requantize` of any.
        #[test]
        fn high_is_each_rounding(acc in prop_oneof![any::<i32>(), -70_000i32..70_000, -2048i32..2048],
                                 m0 in prop_oneof![Just(0), Just(1 << 30), Just(i32::MAX), (1i32 << 30)..=i32::MAX],
                                 shift in -31i32..=30, double in any::<bool>(),
                                 zo in -128i32..=127, lo in -128i32..=127, hi in -128i32..=127) {
            let rounding = if double { Rounding::Double } else { Rounding::Single };
            let h = HighRequant::new(m0, shift, rounding);
            prop_assert!(h.corr == 0 || h.corr == 1 << 31);
            let bounded = acc.clamp(h.acc_min, h.acc_max);
            prop_assert_eq!(h.apply(acc), rounding.requantize(bounded, m0, shift));
            let out = OutputQuant { zero_point: zo, act_min: lo, act_max: hi, rounding };
            prop_assert_eq!(out.clamp64(h.apply(acc) as i64 + zo as i64), out.requantize(acc, m0, shift));
        }

        /// [`UnsignedRequant`] is the rounding's requantization plus the zero point, for every
        /// accumulator under 2^30, M0 ≥ 0 (0 included) and shift it takes (−22 to −2, n in
        /// [33, 53]), and refuses the others.
        #[test]
        fn unsigned_is_each_rounding(acc in prop_oneof![-(1i32 << 30) + 1..1 << 30, -70_000i32..70_000, Just((1 << 30) - 1), Just(-(1 << 30) + 1)],
                                     m0 in prop_oneof![Just(0), Just(1 << 30), Just(i32::MAX), (1i32 << 30)..=i32::MAX, i32::MIN..0],
                                     shift in -31i32..=30, double in any::<bool>(), zo in -200i32..=200) {
            let rounding = if double { Rounding::Double } else { Rounding::Single };
            let f = FusedRequant::new(m0, shift, rounding);
            match UnsignedRequant::new(&f, zo) {
                Some(u) => {
                    prop_assert!((-22..=-2).contains(&shift) && m0 >= 0 && zo.abs() <= 128);
                    prop_assert_eq!(u.apply(acc) as i64, f.apply(acc) + zo as i64);
                }
                None => prop_assert!(!(-22..=-2).contains(&shift) || m0 < 0 || zo.abs() > 128),
            }
        }

        #[test]
        fn add_matches_i128(q0 in any::<i8>(), q1 in any::<i8>(), z0 in -128i32..=127, z1 in -128i32..=127,
                            m0 in 0i32..=i32::MAX, m1 in 0i32..=i32::MAX, n in 1i32..=62, zo in -128i32..=127) {
            let p = AddRequant { z0, m0, z1, m1, n, out: OutputQuant { zero_point: zo, act_min: -128, act_max: 127, rounding: Rounding::Single } };
            let t = (q0 as i128 - z0 as i128) * m0 as i128 + (q1 as i128 - z1 as i128) * m1 as i128;
            let v = (t + (1i128 << (n - 1))).div_euclid(1i128 << n) + zo as i128;
            prop_assert_eq!(p.apply(q0, q1) as i128, v.clamp(-128, 127));
        }
    }
}
