//! tflite_add, scalar reference: TensorFlow Lite's int8 ADD.

use crate::kernels::TfliteAddParams;

/// `out = clamp(requant_o(requant_0((a − z0)·2^ls) + requant_1((b − z1)·2^ls)) + z_out)`, each
/// requantization rounded as `p.out.rounding` says (TFLite's
/// `MultiplyByQuantizedMultiplierSmallerThanOneExp`), the sum wrapping in i32 as TFLite's does.
pub fn tflite_add(p: &TfliteAddParams, a: &[i8], b: &[i8], output: &mut [i8]) {
    let r = p.out.rounding;
    let [(m0, s0), (m1, s1), (mo, so)] = p.multipliers;
    let ls = p.left_shift.clamp(0, 30) as u32;
    for ((o, &x), &y) in output.iter_mut().zip(a).zip(b) {
        let x = (x as i32 - p.zero_points[0]) << ls;
        let y = (y as i32 - p.zero_points[1]) << ls;
        let sum = r
            .requantize(x, m0, s0)
            .wrapping_add(r.requantize(y, m1, s1));
        let v = r.requantize(sum, mo, so) as i64 + p.out.zero_point as i64;
        *o = p.out.clamp64(v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::test_util::full_range;
    use crate::requant::Rounding;

    /// Equal scales: the inputs' multipliers are 1/2 each (TFLite's twice-the-largest-scale
    /// normalisation) and the output's 2·2^−20, so the sum of the real values comes back.
    #[test]
    fn equal_scales_add_real_values() {
        for rounding in Rounding::ALL {
            let p = TfliteAddParams {
                zero_points: [3, -2],
                left_shift: 20,
                multipliers: [(1 << 30, 0), (1 << 30, 0), (1 << 30, -18)],
                out: crate::kernels::OutputQuant {
                    rounding,
                    ..full_range(1)
                },
            };
            let mut out = [0i8; 3];
            tflite_add(&p, &[13, -7, 100], &[8, 2, 100], &mut out);
            // (13 − 3) + (8 + 2) + 1 = 21; (−10) + 4 + 1 = −5; 97 + 102 + 1 → 127.
            assert_eq!(out, [21, -5, 127], "{rounding:?}");
        }
    }
}
