//! softmax, scalar reference: TensorFlow Lite's integer softmax for int8 input and output
//! (`reference_ops::Softmax`, what TFLite Micro runs), bit for bit.

use crate::fixedpoint::{exp_on_negative_values, mul, reciprocal, rescale};
use crate::kernels::SoftmaxParams;
use crate::requant::rounding_divide_by_pot;

/// Integer bits of the rescaled differences (Q5.26) and of the sum of exponentials (Q12.19).
const DIFF_BITS: i32 = 5;
const ACCUM_BITS: i32 = 12;

/// Each row of `p.depth` values: differences from the row's maximum, rescaled by the input
/// multiplier into Q5.26, exponentiated, summed in Q12.19, and each exponential times the
/// reciprocal of the sum written as `clamp(q − 128)` (the output scale is 1/256); differences
/// below `diff_min` give −128.
pub fn softmax(p: &SoftmaxParams, input: &[i8], output: &mut [i8]) {
    let depth = p.depth.max(1);
    let rescaled = |diff: i32| {
        p.rounding
            .requantize(diff, p.input_multiplier, p.input_left_shift)
    };
    for (row, out) in input
        .chunks_exact(depth)
        .zip(output.chunks_exact_mut(depth))
    {
        let max = row.iter().copied().max().unwrap_or(i8::MIN) as i32;
        let mut sum = 0i32;
        for &x in row {
            let diff = x as i32 - max;
            if diff >= p.diff_min {
                let e = exp_on_negative_values(rescaled(diff), DIFF_BITS);
                sum = sum.wrapping_add(rescale(e, 0, ACCUM_BITS));
            }
        }
        let (scale, bits_over_unit) = reciprocal(sum, ACCUM_BITS);
        // TFLite checks this exponent is in [0, 31]; clamping keeps the kernel total.
        let exponent = (bits_over_unit + 31 - 8).clamp(0, 31) as u32;
        for (o, &x) in out.iter_mut().zip(row) {
            let diff = x as i32 - max;
            *o = if diff >= p.diff_min {
                let e = exp_on_negative_values(rescaled(diff), DIFF_BITS);
                let q = rounding_divide_by_pot(mul(scale, e), exponent);
                (q - 128).clamp(-128, 127) as i8
            } else {
                -128
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::requant::{quantize_multiplier, Rounding};

    /// TFLite's parameters for an input scale (β = 1): the multiplier of β·s·2^26, and
    /// −floor(31·2^26 / 2^left_shift).
    fn params(scale: f64, depth: usize, rounding: Rounding) -> SoftmaxParams {
        let (m, shift) = quantize_multiplier(scale * 2f64.powi(26)).unwrap();
        let radius = (31.0 * 2f64.powi(26) / 2f64.powi(shift)).floor() as i32;
        SoftmaxParams {
            depth,
            input_multiplier: m,
            input_left_shift: shift,
            diff_min: -radius,
            rounding,
        }
    }

    /// The outputs approximate the real softmax to within a step or two of 1/256.
    #[test]
    fn approximates_the_real_softmax() {
        let input: Vec<i8> = vec![-128, -20, 0, 5, 30, 31, 100, 127];
        for rounding in Rounding::ALL {
            let p = params(0.05, input.len(), rounding);
            let mut out = vec![0i8; input.len()];
            softmax(&p, &input, &mut out);
            let e: Vec<f64> = input.iter().map(|&x| (0.05 * x as f64).exp()).collect();
            let s: f64 = e.iter().sum();
            for (o, e) in out.iter().zip(&e) {
                let want = e / s * 256.0 - 128.0;
                assert!((*o as f64 - want).abs() <= 1.5, "{o} vs {want}");
            }
        }
    }

    /// Equal inputs share the mass equally; a row of one value gives the top value.
    #[test]
    fn uniform_and_single() {
        let p = params(0.1, 4, Rounding::Double);
        let mut out = [0i8; 4];
        softmax(&p, &[7; 4], &mut out);
        assert_eq!(out, [-64; 4]);
        let p = params(0.1, 1, Rounding::Double);
        let mut one = [0i8; 1];
        softmax(&p, &[-3], &mut one);
        assert_eq!(one, [127]);
    }
}
