//! Requantization: the one definition every CPU and GPU kernel uses (FORMAT.md).
//!
//! `M0 ∈ [2^30, 2^31)` and `shift` represent m = M0 · 2^(shift − 31); with n = 31 − shift in
//! [1, 62], `requant(acc) = (acc · M0 + 2^(n−1)) >> n` in i64 (one rounding, half up).

/// Smallest valid M0 (2^30).
pub const M0_MIN: i32 = 1 << 30;
/// Smallest valid shift (n = 62).
pub const SHIFT_MIN: i32 = -31;
/// Largest valid shift (n = 1).
pub const SHIFT_MAX: i32 = 30;

/// Whether (m0, shift) is a valid requantization pair.
pub const fn valid_multiplier(m0: i32, shift: i32) -> bool {
    m0 >= M0_MIN && shift >= SHIFT_MIN && shift <= SHIFT_MAX
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

/// Output quantization of an op: zero point and clamp.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutputQuant {
    /// Output zero point.
    pub zero_point: i32,
    /// Lower clamp (quantized).
    pub act_min: i32,
    /// Upper clamp (quantized).
    pub act_max: i32,
}

impl OutputQuant {
    /// `clamp(requant(acc) + z_out, act_min, act_max)` as i8.
    #[inline(always)]
    pub fn requantize(&self, acc: i32, m0: i32, shift: i32) -> i8 {
        let v = rounding_shift(acc as i64 * m0 as i64, n_of(shift)) + self.zero_point as i64;
        self.clamp64(v)
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
        let acc = sum.wrapping_add(c.bias) as i64;
        let v = ((acc * c.m0 + c.round) >> c.n) + self.zero_point as i64;
        self.clamp64(v)
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
        fn add_matches_i128(q0 in any::<i8>(), q1 in any::<i8>(), z0 in -128i32..=127, z1 in -128i32..=127,
                            m0 in 0i32..=i32::MAX, m1 in 0i32..=i32::MAX, n in 1i32..=62, zo in -128i32..=127) {
            let p = AddRequant { z0, m0, z1, m1, n, out: OutputQuant { zero_point: zo, act_min: -128, act_max: 127 } };
            let t = (q0 as i128 - z0 as i128) * m0 as i128 + (q1 as i128 - z1 as i128) * m1 as i128;
            let v = (t + (1i128 << (n - 1))).div_euclid(1i128 << n) + zo as i128;
            prop_assert_eq!(p.apply(q0, q1) as i128, v.clamp(-128, 127));
        }
    }
}
