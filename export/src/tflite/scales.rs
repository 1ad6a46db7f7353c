//! The float scales TFLite derives its integer parameters from.
//!
//! A `.o8` stores each channel's requantization as (M0, shift), not the weight scale it came
//! from; TFLite and TFLite Micro store float scales and compute (M0, shift) themselves when they
//! prepare the model: `QuantizeMultiplier((double)s_in · (double)s_w[c] / (double)s_out)`
//! (tensorflow/lite/kernels/kernel_util.cc, PopulateConvolutionQuantizationParams; TFLite Micro's
//! fully_connected_common.cc the same). That rounding is the runtime's own
//! [`quantize_multiplier`] (frexp, then round(f · 2^31) half away from zero, which for a
//! positive f is the runtime's half up), so [`weight_scale`] searches for the f32 weight scale
//! whose derived pair is the stored one, bit for bit.

use octet_runtime::quantize_multiplier;

/// How far (in f32 steps either side of the closest value) [`weight_scale`] searches. The
/// exporter computes (M0, shift) with TFLite's formula from an f32 weight scale, so that scale
/// lies within a step or two of the estimate; a f32 step moves M0 by about 2^7, so beyond a
/// few steps nothing can match.
const SEARCH_STEPS: u32 = 64;

/// The multiplier TFLite derives from the scales of an op's input, weights and output.
pub fn derived_multiplier(s_in: f32, s_w: f32, s_out: f32) -> Option<(i32, i32)> {
    quantize_multiplier(s_in as f64 * s_w as f64 / s_out as f64)
}

/// A weight scale for (M0, shift) between an input of scale `s_in` and an output of scale
/// `s_out`, and whether TFLite derives exactly (M0, shift) from it. When no f32 value does,
/// the closest estimate (off by at most 2^−23 relatively, a few units of M0).
pub fn weight_scale(s_in: f32, s_out: f32, m0: i32, shift: i32) -> (f32, bool) {
    let m = m0 as f64 * 2f64.powi(shift - 31);
    let estimate = (m * s_out as f64 / s_in as f64) as f32;
    let target = Some((m0, shift));
    if derived_multiplier(s_in, estimate, s_out) == target {
        return (estimate, true);
    }
    let (mut up, mut down) = (estimate, estimate);
    for _ in 0..SEARCH_STEPS {
        up = f32::from_bits(up.to_bits() + 1);
        down = f32::from_bits(down.to_bits() - 1);
        for s in [up, down] {
            if derived_multiplier(s_in, s, s_out) == target {
                return (s, true);
            }
        }
    }
    (estimate, false)
}

/// The bias scale TFLite expects of a weight scale: s_in · s_w (its kernels check the bias
/// tensor's scale against this product to a relative 1e−6).
pub fn bias_scale(s_in: f32, s_w: f32) -> f32 {
    (s_in as f64 * s_w as f64) as f32
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// A multiplier computed from f32 scales by TFLite's formula (as the exporter does) is
        /// found again from the activations' scales alone.
        #[test]
        fn recovers_the_exporters_weight_scale(
            s_in in 1e-4f32..1.0, s_w in 1e-5f32..1e-1, s_out in 1e-3f32..10.0,
        ) {
            let (m0, shift) = derived_multiplier(s_in, s_w, s_out).unwrap();
            let (s, exact) = weight_scale(s_in, s_out, m0, shift);
            prop_assert!(exact);
            prop_assert_eq!(derived_multiplier(s_in, s, s_out), Some((m0, shift)));
        }
    }

    /// A pair no f32 weight scale reaches (M0 between two f32 steps) is reported as inexact,
    /// with a scale within a step of it.
    #[test]
    fn reports_an_unreachable_multiplier() {
        let (s_in, s_out) = (1.0f32 / 255.0, 0.05f32);
        let (m0, shift) = derived_multiplier(s_in, 0.01, s_out).unwrap();
        let misses: Vec<i32> = (1..200)
            .map(|d| m0 + d)
            .filter(|&m| !weight_scale(s_in, s_out, m, shift).1)
            .collect();
        assert!(!misses.is_empty(), "every M0 near {m0} was reachable");
        let (s, _) = weight_scale(s_in, s_out, misses[0], shift);
        let (got, _) = derived_multiplier(s_in, s, s_out).unwrap();
        assert!((got - misses[0]).abs() < 256, "{got} vs {}", misses[0]);
    }
}
