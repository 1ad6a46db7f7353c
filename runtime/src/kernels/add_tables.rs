//! The form the SIMD tflite_add kernels compute: the two input requantizations depend on the
//! input byte only, so a call first tabulates them (256 values per input, each by the
//! definition, `Rounding::requantize`), leaving one requantization per element, the output's,
//! in [`HighRequant`]'s i32-lane form.

use crate::kernels::TfliteAddParams;
use crate::model::TFLITE_ADD_MAX_SHIFT;
use crate::requant::{valid_multiplier, HighRequant};

/// One call's tables and output constants (built per call: 512 requantizations, little
/// against the tens of thousands of elements of a residual add, and nothing kept between
/// calls).
#[derive(Clone, Debug)]
#[repr(C, align(64))]
pub struct TfliteAddTables {
    /// `requant_0((q − z0)·2^ls)` at `q + 128`.
    pub a: [i32; 256],
    /// `requant_1((q − z1)·2^ls)` at `q + 128`.
    pub b: [i32; 256],
    /// The output requantization of the (wrapping) sum.
    pub out: HighRequant,
    /// Output zero point.
    pub zero_point: i32,
    /// Clamp less the zero point, low end: the requantized sum is clamped to `[lo, hi]`, then
    /// the zero point added (no i32 overflow where the sum is large).
    pub lo: i32,
    /// Clamp less the zero point, high end.
    pub hi: i32,
}

impl TfliteAddTables {
    /// The tables of `p`; `None` for parameters the format rejects (zero points outside
    /// [−128, 127], a left shift outside [0, 23], an invalid output pair), which the kernels
    /// leave to the scalar reference.
    pub fn new(p: &TfliteAddParams) -> Option<Self> {
        if !Self::covers(p) {
            return None;
        }
        let ((mo, so), zo, r) = (p.multipliers[2], p.out.zero_point, p.out.rounding);
        let table = |i: usize| {
            let mut t = [0; 256];
            Self::input_table(p, i, &mut t);
            t
        };
        // `OutputQuant::clamp64`'s bounds within i8: min(max(v, lo), hi) as it computes them.
        let (lo, hi) = (
            p.out.act_min.clamp(-128, 127),
            p.out.act_max.clamp(-128, 127),
        );
        Some(TfliteAddTables {
            a: table(0),
            b: table(1),
            out: HighRequant::new(mo, so, r),
            zero_point: zo,
            lo: lo - zo,
            hi: hi - zo,
        })
    }

    /// Whether the tables cover `p`: zero points within [−128, 127], a left shift within
    /// [0, 23], a valid output pair (what the format accepts); kernels leave the rest to the
    /// scalar reference.
    pub fn covers(p: &TfliteAddParams) -> bool {
        let byte = -128..=127;
        let [z0, z1] = p.zero_points;
        let (mo, so) = p.multipliers[2];
        byte.contains(&z0)
            && byte.contains(&z1)
            && byte.contains(&p.out.zero_point)
            && (0..=TFLITE_ADD_MAX_SHIFT).contains(&p.left_shift)
            && valid_multiplier(mo, so)
    }

    /// Input `i`'s (0 or 1) table: `requant_i((q − z_i)·2^ls)` at `q + 128`, each by the
    /// definition (`Rounding::requantize`). For parameters [`TfliteAddTables::covers`].
    pub fn input_table(p: &TfliteAddParams, i: usize, dst: &mut [i32; 256]) {
        let (z, (m, s)) = (p.zero_points[i], p.multipliers[i]);
        let (r, ls) = (p.out.rounding, p.left_shift as u32);
        for (q, d) in (-128..).zip(dst.iter_mut()) {
            *d = r.requantize((q - z) << ls, m, s);
        }
    }

    /// One element as the SIMD kernels compute it (the tests' statement of their form).
    #[cfg(test)]
    pub fn apply(&self, q0: i8, q1: i8) -> i8 {
        let sum =
            self.a[(q0 as i32 + 128) as usize].wrapping_add(self.b[(q1 as i32 + 128) as usize]);
        (self.out.apply(sum).max(self.lo).min(self.hi) + self.zero_point) as i8
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::scalar;
    use crate::kernels::test_util::{tflite_add_params, Rng};
    use crate::kernels::OutputQuant;
    use crate::requant::Rounding;

    /// Every pair of input bytes, input 0 major.
    fn all_pairs() -> (Vec<i8>, Vec<i8>) {
        (0..1 << 16)
            .map(|i: i32| ((i >> 8) as u8 as i8, i as u8 as i8))
            .unzip()
    }

    /// The tables' form is the scalar reference on every pair of input bytes.
    #[test]
    fn tables_are_the_reference() {
        let (a, b) = all_pairs();
        let mut want = vec![0i8; a.len()];
        for seed in 0..64 {
            let p = tflite_add_params(&mut Rng(seed * 2 + 1));
            let t = TfliteAddTables::new(&p).unwrap();
            scalar::tflite_add(&p, &a, &b, &mut want);
            for i in 0..a.len() {
                assert_eq!(t.apply(a[i], b[i]), want[i], "{p:?} {} {}", a[i], b[i]);
            }
        }
    }

    /// Only what the format rejects is declined: a zero point outside i8, a left shift above
    /// 23, an invalid output pair; the inputs' pairs are tabulated whatever they are.
    #[test]
    fn declines_only_invalid() {
        let p = TfliteAddParams {
            zero_points: [-128, 127],
            left_shift: 23,
            multipliers: [(0, -31), (i32::MAX, 30), (1 << 30, -31)],
            out: OutputQuant {
                zero_point: 127,
                act_min: -128,
                act_max: 127,
                rounding: Rounding::Double,
            },
        };
        assert!(TfliteAddTables::new(&p).is_some());
        let mut bad = [p; 6];
        bad[0].zero_points[0] = 128;
        bad[1].zero_points[1] = -129;
        bad[2].out.zero_point = 128;
        bad[3].left_shift = 24;
        bad[4].left_shift = -1;
        bad[5].multipliers[2] = (1 << 29, 0);
        for b in bad {
            assert!(TfliteAddTables::new(&b).is_none(), "{b:?}");
        }
    }
}
