//! gemmlowp's fixed-point arithmetic, as far as TensorFlow Lite's integer softmax uses it: raw
//! i32 values with a number of integer bits (Q_i.(31−i)), multiplication by
//! [`saturating_rounding_doubling_high_mul`], rescaling by powers of two, `exp` on negative
//! values and `1/(1 + x)`. Written from gemmlowp's `fixedpoint.h` definitions; additions wrap
//! as the C++ code's do on every compiler TFLite runs on.

use crate::requant::{rounding_divide_by_pot, saturating_rounding_doubling_high_mul};

/// `1.0` with 0 integer bits: gemmlowp's `FixedPoint<int32_t, 0>::One()`, the largest raw value.
pub const ONE_Q0: i32 = i32::MAX;

/// The product of two fixed-point values (integer bits add up).
#[inline(always)]
pub fn mul(a: i32, b: i32) -> i32 {
    saturating_rounding_doubling_high_mul(a, b)
}

/// gemmlowp's `SaturatingRoundingMultiplyByPOT<exponent>`: a saturating left shift for a
/// positive exponent, [`rounding_divide_by_pot`] for a negative one.
#[inline(always)]
pub fn saturating_rounding_multiply_by_pot(x: i32, exponent: i32) -> i32 {
    if exponent > 0 {
        let threshold = (1i32 << (31 - exponent)) - 1;
        if x > threshold {
            i32::MAX
        } else if x < -threshold {
            i32::MIN
        } else {
            x.wrapping_shl(exponent as u32)
        }
    } else {
        rounding_divide_by_pot(x, (-exponent) as u32)
    }
}

/// gemmlowp's `Rescale`: a value with `src_bits` integer bits as one with `dst_bits`.
#[inline(always)]
pub fn rescale(x: i32, src_bits: i32, dst_bits: i32) -> i32 {
    saturating_rounding_multiply_by_pot(x, src_bits - dst_bits)
}

/// gemmlowp's `RoundingHalfSum`: (a + b)/2 rounded half away from zero, in i64.
#[inline(always)]
pub fn rounding_half_sum(a: i32, b: i32) -> i32 {
    let sum = a as i64 + b as i64;
    let sign = if sum >= 0 { 1 } else { -1 };
    ((sum + sign) / 2) as i32
}

/// exp(a) for a in [−1/4, 0), both with 0 integer bits: gemmlowp's Taylor expansion around −1/8.
fn exp_on_interval_between_negative_one_quarter_and_0_excl(a: i32) -> i32 {
    const EXP_MINUS_ONE_EIGHTH: i32 = 1_895_147_668;
    const ONE_THIRD: i32 = 715_827_883;
    let x = a.wrapping_add(1 << 28);
    let x2 = mul(x, x);
    let x3 = mul(x2, x);
    let x4 = mul(x2, x2);
    let x4_over_4 = saturating_rounding_multiply_by_pot(x4, -2);
    let poly = saturating_rounding_multiply_by_pot(
        mul(x4_over_4.wrapping_add(x3), ONE_THIRD).wrapping_add(x2),
        -1,
    );
    EXP_MINUS_ONE_EIGHTH.wrapping_add(mul(EXP_MINUS_ONE_EIGHTH, x.wrapping_add(poly)))
}

/// exp(a) for a ≤ 0 with `int_bits` integer bits (1 to 5), as a value with 0 integer bits:
/// gemmlowp's `exp_on_negative_values` (the fraction's exp times exp(−2^k) for each set bit
/// of the integer part).
pub fn exp_on_negative_values(a: i32, int_bits: i32) -> i32 {
    let frac = 31 - int_bits;
    let one_quarter = 1i32 << (frac - 2);
    let a_mod_quarter_minus_one_quarter = (a & (one_quarter - 1)).wrapping_sub(one_quarter);
    let mut result = exp_on_interval_between_negative_one_quarter_and_0_excl(rescale(
        a_mod_quarter_minus_one_quarter,
        int_bits,
        0,
    ));
    let remainder = a_mod_quarter_minus_one_quarter.wrapping_sub(a);
    // exp(−2^k) in Q0 for k = −2..=4.
    const BARREL: [(i32, i32); 7] = [
        (-2, 1_672_461_947),
        (-1, 1_302_514_674),
        (0, 790_015_084),
        (1, 290_630_308),
        (2, 39_332_535),
        (3, 720_401),
        (4, 242),
    ];
    for (exponent, multiplier) in BARREL {
        if int_bits > exponent && remainder & (1 << (frac + exponent)) != 0 {
            result = mul(result, multiplier);
        }
    }
    if a == 0 {
        ONE_Q0
    } else {
        result
    }
}

/// 1/(1 + a) for a in [0, 1), both with 0 integer bits: gemmlowp's Newton–Raphson division
/// (three iterations from 48/17 − 32/17·d).
pub fn one_over_one_plus_x_for_x_in_0_1(a: i32) -> i32 {
    const C48_OVER_17: i32 = 1_515_870_810; // Q2
    const CNEG32_OVER_17: i32 = -1_010_580_540; // Q2
    const ONE_Q2: i32 = 1 << 29;
    let half_denominator = rounding_half_sum(a, ONE_Q0);
    let mut x = C48_OVER_17.wrapping_add(mul(half_denominator, CNEG32_OVER_17));
    for _ in 0..3 {
        let half_denominator_times_x = mul(half_denominator, x);
        let one_minus = ONE_Q2.wrapping_sub(half_denominator_times_x);
        x = x.wrapping_add(rescale(mul(x, one_minus), 4, 2));
    }
    // ExactMulByPot<−1> makes x a value with 1 integer bit, then Rescale<0>.
    rescale(x, 1, 0)
}

/// TensorFlow Lite's `GetReciprocal`: for `x > 0` with `int_bits` integer bits, 1/x as a value
/// with 0 integer bits scaled by 2^−`num_bits_over_unit` (returned beside it).
pub fn reciprocal(x: i32, int_bits: i32) -> (i32, i32) {
    let headroom_plus_one = (x as u32).leading_zeros() as i32;
    let num_bits_over_unit = int_bits - headroom_plus_one;
    let shifted_sum_minus_one = ((x as u32)
        .wrapping_shl(headroom_plus_one as u32)
        .wrapping_sub(1 << 31)) as i32;
    (
        one_over_one_plus_x_for_x_in_0_1(shifted_sum_minus_one),
        num_bits_over_unit,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn real(x: i32, int_bits: i32) -> f64 {
        x as f64 / 2f64.powi(31 - int_bits)
    }

    /// The approximations are what they approximate, to gemmlowp's accuracy.
    #[test]
    fn exp_and_reciprocal_approximate() {
        for i in 0..=2000 {
            let v = -(i as f64) / 100.0; // [−20, 0]
            let a = (v * 2f64.powi(26)) as i32; // Q5
            let e = real(exp_on_negative_values(a, 5), 0);
            assert!((e - v.exp()).abs() < 2e-6, "exp({v}) = {e}");
        }
        for i in 0..1000 {
            let v = i as f64 / 1000.0;
            let a = (v * 2f64.powi(31)) as i32;
            let r = real(one_over_one_plus_x_for_x_in_0_1(a), 0);
            assert!((r - 1.0 / (1.0 + v)).abs() < 1e-8, "1/(1+{v}) = {r}");
        }
        let (r, bits) = reciprocal(3 << 19, 12); // 3.0 in Q12
        assert!((real(r, 0) * 2f64.powi(-bits) - 1.0 / 3.0).abs() < 1e-8);
    }

    #[test]
    fn pot_saturates_and_rounds() {
        assert_eq!(saturating_rounding_multiply_by_pot(1 << 29, 2), i32::MAX);
        assert_eq!(
            saturating_rounding_multiply_by_pot(-(1 << 29) - 1, 2),
            i32::MIN
        );
        assert_eq!(saturating_rounding_multiply_by_pot(3, 2), 12);
        assert_eq!(saturating_rounding_multiply_by_pot(6, -2), 2);
        assert_eq!(saturating_rounding_multiply_by_pot(-6, -2), -2);
        assert_eq!(rounding_half_sum(3, 4), 4);
        assert_eq!(rounding_half_sum(-3, -4), -4);
    }
}
