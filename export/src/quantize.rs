//! Quantization primitives of the int8 contract: activation parameters, int8 weights, and the
//! residual add's multipliers (FORMAT.md, "Requantization"). Per-channel multipliers are
//! encoded by the runtime's `requant::quantize_multiplier`, the one definition.

use octet_runtime::requant::quantize_multiplier_tflite;
use octet_runtime::requant::valid_right_shift;
use octet_runtime::Rounding;
use serde::{Deserialize, Serialize};

/// How weights get their scales.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum WeightScheme {
    /// One scale per output channel, max|w_c|/127 (TFLite's default).
    #[default]
    PerChannel,
    /// One scale per layer, max|w|/127 (the classic 127/max|w| scheme).
    PerTensor,
}

impl WeightScheme {
    pub const ALL: [WeightScheme; 2] = [WeightScheme::PerChannel, WeightScheme::PerTensor];

    /// The name `--weights` takes and reports print.
    pub fn name(self) -> &'static str {
        match self {
            WeightScheme::PerChannel => "per-channel",
            WeightScheme::PerTensor => "per-tensor",
        }
    }

    /// One line for `--help`.
    pub fn help(self) -> &'static str {
        match self {
            WeightScheme::PerChannel => "symmetric, one scale per output channel (TFLite's)",
            WeightScheme::PerTensor => "symmetric, one scale per layer (the lab's 127/max|w|)",
        }
    }
}

impl std::fmt::Display for WeightScheme {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// `--weights`: `--help` lists the schemes with their help; clap refuses other names.
#[cfg(feature = "clap")]
impl clap::ValueEnum for WeightScheme {
    fn value_variants<'a>() -> &'a [Self] {
        &Self::ALL
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(clap::builder::PossibleValue::new(self.name()).help(self.help()))
    }
}

/// Smallest activation scale the exporter emits: keeps multipliers of dead (all-zero) tensors
/// encodable.
pub const MIN_ACTIVATION_SCALE: f32 = 1.0 / (1u32 << 20) as f32;

/// real = scale · (q − zero_point).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct QParams {
    pub scale: f32,
    pub zero_point: i32,
}

impl QParams {
    /// The runtime's input tensor: `q = pixel − 128`, real = pixel/255.
    pub fn input() -> Self {
        Self {
            scale: 1.0 / 255.0,
            zero_point: -128,
        }
    }

    /// Parameters covering the clip range `[lo, hi]`, which is widened to contain 0 so that 0
    /// (padding, ReLU) is exact. Asymmetric: 256 levels over the range; symmetric: zero point 0,
    /// levels ±127.
    pub fn from_range(lo: f32, hi: f32, symmetric: bool) -> Self {
        let (lo, hi) = (lo.min(0.0) as f64, hi.max(0.0) as f64);
        if symmetric {
            let a = lo.abs().max(hi);
            let scale = ((a / 127.0) as f32).max(MIN_ACTIVATION_SCALE);
            return Self {
                scale,
                zero_point: 0,
            };
        }
        let scale = (((hi - lo) / 255.0) as f32).max(MIN_ACTIVATION_SCALE);
        let zp = (-128.0 - lo / scale as f64).round().clamp(-128.0, 127.0) as i32;
        Self {
            scale,
            zero_point: zp,
        }
    }

    pub fn quantize(&self, x: f32) -> i8 {
        ((x as f64 / self.scale as f64).round() + self.zero_point as f64).clamp(-128.0, 127.0) as i8
    }

    pub fn dequantize(&self, q: i8) -> f32 {
        self.scale * (q as i32 - self.zero_point) as f32
    }

    /// The real range the 256 codes cover.
    pub fn range(&self) -> (f32, f32) {
        (self.dequantize(-128), self.dequantize(127))
    }
}

/// `clamp(round(w/scale), −127, 127)`: symmetric int8 weight.
pub fn quantize_weight(w: f32, scale: f32) -> i8 {
    (w as f64 / scale as f64).round().clamp(-127.0, 127.0) as i8
}

/// Int8 weights with one scale per output channel (repeated for [`WeightScheme::PerTensor`]).
#[derive(Debug, Clone)]
pub struct QuantizedWeights {
    /// Same layout as the float weights.
    pub q: Vec<i8>,
    pub scales: Vec<f32>,
}

impl QuantizedWeights {
    /// The real value each int8 weight stands for.
    pub fn dequantize(&self) -> Vec<f32> {
        let per = self.q.len() / self.scales.len().max(1);
        self.q
            .iter()
            .enumerate()
            .map(|(i, &q)| q as f32 * self.scales[i / per])
            .collect()
    }
}

/// Quantizes `[C_out][…]` weights. `min_scale[c]` is a floor for channel c's scale (keeps
/// multipliers and biases of near-zero channels representable); an all-zero layer gets scale 1.
pub fn quantize_weights(
    w: &[f32],
    cout: usize,
    scheme: WeightScheme,
    min_scale: &[f32],
) -> QuantizedWeights {
    let per = w.len() / cout.max(1);
    let max_abs = |s: &[f32]| s.iter().fold(0f32, |m, x| m.max(x.abs()));
    let layer = max_abs(w) / 127.0;
    let scales: Vec<f32> = (0..cout)
        .map(|o| {
            let s = match scheme {
                WeightScheme::PerChannel => max_abs(&w[o * per..(o + 1) * per]) / 127.0,
                WeightScheme::PerTensor => layer,
            };
            let s = if s > 0.0 {
                s
            } else if layer > 0.0 {
                layer
            } else {
                1.0
            };
            s.max(min_scale.get(o).copied().unwrap_or(0.0))
        })
        .collect();
    let q = w
        .iter()
        .enumerate()
        .map(|(i, &x)| quantize_weight(x, scales[i / per]))
        .collect();
    QuantizedWeights { q, scales }
}

/// The real value of `(M0, shift)`.
pub fn multiplier_value(m0: i32, shift: i32) -> f64 {
    m0 as f64 * 2f64.powi(shift - 31)
}

/// e with m = f · 2^e, f ∈ [0.5, 1), read from the f64's bits (as the runtime's
/// `quantize_multiplier` does); `None` unless m is positive, finite and normal.
fn exponent(m: f64) -> Option<i32> {
    if !(m.is_finite() && m > 0.0) {
        return None;
    }
    let biased = ((m.to_bits() >> 52) & 0x7ff) as i32;
    (biased != 0).then_some(biased - 1022)
}

/// The left shift of TensorFlow Lite's int8 ADD (add_common.cc: 20 for int8 outputs).
pub const TFLITE_ADD_LEFT_SHIFT: i32 = 20;

/// TensorFlow Lite's ADD parameters from the f32 scales of its inputs and output, as TFLite
/// Micro computes them when it prepares the op (add_common.cc): with t = 2·max(s0, s1) in
/// double, the inputs' multipliers s_i / t and the output's t / (2^20 · s_out), each through
/// TFLite's `QuantizeMultiplier` ([`quantize_multiplier_tflite`]). `[(M0, shift); 3]`: input 0,
/// input 1, output; `None` when one is out of the runtime's range.
pub fn tflite_add_multipliers(s0: f32, s1: f32, s_out: f32) -> Option<[(i32, i32); 3]> {
    let twice_max = 2.0 * s0.max(s1) as f64;
    let m0 = quantize_multiplier_tflite(s0 as f64 / twice_max)?;
    let m1 = quantize_multiplier_tflite(s1 as f64 / twice_max)?;
    let mo = quantize_multiplier_tflite(
        twice_max / ((1i64 << TFLITE_ADD_LEFT_SHIFT) as f64 * s_out as f64),
    )?;
    Some([m0, m1, mo])
}

/// TensorFlow Lite's int8 softmax parameters for β `beta` and input scale `s_in`, as TFLite
/// Micro computes them (softmax_common.cc): `PreprocessSoftmaxScaling(β, s_in, 5)` — the
/// multiplier of min(β·s_in·2^26, 2^31 − 1 (2^30 − 1 when built for the single rounding)) with
/// its left shift — and diff_min = −`CalculateInputRadius(5, shift)` = −floor(31·2^26 / 2^shift).
/// `(M0, left shift, diff_min)`; `None` when the multiplier is not above 1 or its shift above 30.
pub fn softmax_params(beta: f32, s_in: f32, rounding: Rounding) -> Option<(i32, i32, i32)> {
    let max_real = match rounding {
        Rounding::Single => (1i64 << 30) as f64 - 1.0,
        Rounding::Double => (1i64 << 31) as f64 - 1.0,
    };
    let m = (beta as f64 * s_in as f64 * (1i64 << 26) as f64).min(max_real);
    // NaN (a NaN scale or β) is not above 1 either.
    if m.partial_cmp(&1.0) != Some(std::cmp::Ordering::Greater) {
        return None;
    }
    let (m0, shift) = quantize_multiplier_tflite(m).filter(|&(_, s)| s >= 0)?;
    let radius = (31.0 * (1i64 << 26) as f64 / (1i64 << shift) as f64).floor();
    Some((m0, shift, -(radius as i32)))
}

/// The residual add's integer parameters: `m_i = round(s_i/s_out · 2^n)` with n chosen so that
/// max(m0, m1) ∈ [2^30, 2^31). Returns `([m0, m1], n)`.
pub fn add_multipliers(s0: f64, s1: f64, s_out: f64) -> Option<([i32; 2], i32)> {
    let (r0, r1) = (s0 / s_out, s1 / s_out);
    let e = exponent(r0.max(r1))?;
    let mut n = 31 - e;
    loop {
        if !valid_right_shift(n) {
            return None;
        }
        let m0 = (r0 * 2f64.powi(n)).round();
        let m1 = (r1 * 2f64.powi(n)).round();
        let top = m0.max(m1);
        if top >= (1u64 << 31) as f64 {
            n -= 1;
            continue;
        }
        debug_assert!(top >= (1u64 << 30) as f64);
        return Some(([m0 as i32, m1 as i32], n));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use octet_runtime::{quantize_multiplier, requantize};
    use proptest::prelude::*;

    proptest! {
        /// The runtime's encoding over the exporter's whole range of multipliers.
        #[test]
        fn multiplier_encodes_within_half_an_ulp(m in 1e-9f64..1e8) {
            let (m0, shift) = quantize_multiplier(m).unwrap();
            prop_assert!((1 << 30..=i32::MAX).contains(&m0));
            prop_assert!((1..=62).contains(&(31 - shift)));
            let v = multiplier_value(m0, shift);
            prop_assert!(((v - m) / m).abs() <= 2f64.powi(-31), "{m} → {v}");
        }

        #[test]
        fn requantize_matches_f64(m in 1e-6f64..4.0, acc in -(1i32 << 20)..(1 << 20)) {
            let (m0, shift) = quantize_multiplier(m).unwrap();
            let got = requantize(acc, m0, shift) as i64;
            let exact = acc as f64 * multiplier_value(m0, shift);
            // Round half up of the exactly represented product.
            prop_assert_eq!(got, (exact + 0.5).floor() as i64);
            prop_assert!((got as f64 - acc as f64 * m).abs() <= 0.5 + (acc as f64 * m).abs() * 1e-9 + 1e-9);
        }

        #[test]
        fn add_multipliers_are_normalised(s0 in 1e-4f64..10.0, s1 in 1e-4f64..10.0, so in 1e-4f64..10.0) {
            let ([m0, m1], n) = add_multipliers(s0, s1, so).unwrap();
            prop_assert!((1..=62).contains(&n));
            let top = m0.max(m1) as i64;
            prop_assert!(((1i64 << 30)..(1i64 << 31)).contains(&top));
            let scale = 2f64.powi(n);
            prop_assert!((m0 as f64 / scale - s0 / so).abs() <= 0.5 / scale + 1e-15);
            prop_assert!((m1 as f64 / scale - s1 / so).abs() <= 0.5 / scale + 1e-15);
        }

        #[test]
        fn weight_error_is_half_a_step_inside_and_saturates_outside(
            w in -10f32..10.0, scale in 1e-3f32..0.1,
        ) {
            let q = quantize_weight(w, scale);
            prop_assert!((-127..=127).contains(&(q as i32)));
            if w.abs() <= 127.0 * scale {
                prop_assert!((w - q as f32 * scale).abs() <= scale / 2.0 * (1.0 + 1e-5));
            } else {
                prop_assert_eq!(q as i32, if w > 0.0 { 127 } else { -127 });
            }
        }

        #[test]
        fn per_channel_error_bounded_by_channel_scale(
            rows in proptest::collection::vec(
                (0.001f32..5.0, proptest::collection::vec(-1f32..1.0, 9)), 1..6)
        ) {
            // Channel o has magnitude rows[o].0: per-channel scales track it, per-tensor does not.
            let cout = rows.len();
            let w: Vec<f32> = rows.iter().flat_map(|(m, r)| r.iter().map(move |x| x * m)).collect();
            let pc = quantize_weights(&w, cout, WeightScheme::PerChannel, &[]);
            let pt = quantize_weights(&w, cout, WeightScheme::PerTensor, &[]);
            let (dpc, dpt) = (pc.dequantize(), pt.dequantize());
            let layer = w.iter().fold(0f32, |m, x| m.max(x.abs())) / 127.0;
            for o in 0..cout {
                let cmax = w[o * 9..(o + 1) * 9].iter().fold(0f32, |m, x| m.max(x.abs()));
                prop_assert!(pc.scales[o] <= layer * (1.0 + 1e-6));
                if cmax > 0.0 {
                    prop_assert!((pc.scales[o] - cmax / 127.0).abs() <= 1e-6 * cmax);
                }
                for i in o * 9..(o + 1) * 9 {
                    prop_assert!((w[i] - dpc[i]).abs() <= pc.scales[o] / 2.0 * (1.0 + 1e-5) + 1e-12);
                    prop_assert!((w[i] - dpt[i]).abs() <= layer / 2.0 * (1.0 + 1e-5) + 1e-12);
                }
            }
        }

        #[test]
        fn activation_params_cover_the_range(lo in -50f32..50.0, width in 1e-3f32..100.0, sym in any::<bool>()) {
            let hi = lo + width;
            let p = QParams::from_range(lo, hi, sym);
            prop_assert!((-128..=127).contains(&p.zero_point));
            // 0 is exact.
            prop_assert_eq!(p.dequantize(p.quantize(0.0)), 0.0);
            // The covered range reaches both ends within one step (zero point rounding).
            let (a, b) = p.range();
            prop_assert!(a <= lo.min(0.0) + p.scale && b >= hi.max(0.0) - p.scale, "{a} {b} vs {lo} {hi}");
        }
    }
}
