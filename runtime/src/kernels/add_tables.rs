//! The form the SIMD tflite_add kernels compute: the two input requantizations depend on the
//! input byte only, so they are tabulated (256 values per input, each by the definition,
//! `Rounding::requantize`) once at prepare (`Model::prepare_packed`) or, unprepared, per call,
//! leaving one requantization per element, the output's, in [`HighRequant`]'s i32-lane form.

use crate::kernels::TfliteAddParams;
use crate::model::TFLITE_ADD_MAX_SHIFT;
use crate::requant::{valid_multiplier, FusedRequant, HighRequant, UnsignedRequant};

/// One op's tables and output constants: packed at prepare (`Layout::AddTables`), else built
/// per call (512 requantizations, about 2 µs: a quarter of a residual add's time on 16,384
/// elements with the AVX-512 lines).
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
    /// Both tables as lines and bytes ([`InputLine`]), where kernels without gathers asked
    /// for them ([`TfliteAddTables::with_lines`]) and both tables fit.
    pub lines: Option<[InputLine; 2]>,
    /// The output requantization with the zero point in [`UnsignedRequant`]'s form, where it
    /// holds and every sum of two entries is under 2^30.
    pub unsigned: Option<UnsignedRequant>,
    /// Both tables as products ([`InputDirect`]), where every entry is one: kernels without
    /// fast gathers compute the entries instead of loading them.
    pub direct: Option<[InputDirect; 2]>,
    /// The whole op as one line in both input bytes ([`PairLine`]), where packing found one
    /// that gives every pair's output ([`TfliteAddTables::with_pair_line`]).
    pub pair: Option<PairLine>,
}

/// The whole op as one line in its two input bytes: `clamp((q0·a + q1·b + c) >> s)` in i32
/// (no product or sum leaves it), the clamp the op's, with its zero point. The tables'
/// requantizations (2^20 finer than an output step, TFLite's left shift) and the output's
/// round a line in (q0, q1); a line at 2^−s resolution rounds it the same way wherever no
/// pair lies nearer a rounding boundary than the line's error, which [`PairLine::fit`] checks
/// on all 65,536 pairs, once, at packing. Kernels then compute an element in two multiplies,
/// two adds and a shift.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PairLine {
    /// Input 0's slope, scaled by 2^s.
    pub a: i32,
    /// Input 1's slope, scaled by 2^s.
    pub b: i32,
    /// The value at (0, 0), scaled by 2^s, with what rounds.
    pub c: i32,
    /// The scale's shift.
    pub s: u32,
}

impl PairLine {
    /// The line through the op's slopes at the finest scale whose terms stay within i32 (or
    /// one of the two next coarser), where it gives the output of every pair of input bytes
    /// as `t` does; `None` where none does.
    pub fn fit(p: &TfliteAddParams, t: &TfliteAddTables) -> Option<Self> {
        let (mo, so) = p.multipliers[2];
        // round(v·M_out·2^s / d), M_out = mo·2^(so − 31): in output steps, scaled by 2^s.
        let scaled = |v: i64, d: i128, s: i32| -> Option<i64> {
            let (num, e) = (v as i128 * mo as i128, so - 31 + s);
            let (num, den) = match e {
                0.. => (num.checked_shl(e as u32)?, d),
                _ => (num, d.checked_shl(e.unsigned_abs())?),
            };
            i64::try_from((2 * num + den).div_euclid(2 * den)).ok()
        };
        // The slopes: each table is a rounded line over its 255 steps.
        let rise = |t: &[i32; 256]| t[255] as i64 - t[0] as i64;
        let terms = |s: i32| -> Option<(i64, i64, i64)> {
            let (a, b) = (scaled(rise(&t.a), 255, s)?, scaled(rise(&t.b), 255, s)?);
            let c = scaled(t.a[128] as i64 + t.b[128] as i64, 1, s)? + ((t.zero_point as i64) << s);
            Some((a, b, c))
        };
        let fits = |s: i32| {
            terms(s).is_some_and(|(a, b, c)| {
                let [a, b, c] = [a, b, c].map(|v| (v as i128).abs());
                128 * (a + b) + c + (2 << s) <= i32::MAX as i128
            })
        };
        let finest = (0..=30).rev().find(|&s| fits(s))?;
        // Scales 0..=30 only: a shift outside [0, 31] is no shift.
        ((finest - 2).max(0)..=finest).rev().find_map(|s| {
            let (a, b, _) = terms(s)?;
            Self::at_scale(t, a, b, s as u32)
        })
    }

    /// The line at scale 2^s, its value at (0, 0) the middle of those every pair allows.
    fn at_scale(t: &TfliteAddTables, a: i64, b: i64, s: u32) -> Option<Self> {
        // Slopes whose products leave i32 never fit: checked first, so no term below
        // overflows i64.
        if a.abs() > 1 << 24 || b.abs() > 1 << 24 {
            return None;
        }
        let (lo, hi) = ((t.lo + t.zero_point) as i64, (t.hi + t.zero_point) as i64);
        let (mut c_min, mut c_max) = (i64::MIN, i64::MAX);
        for q0 in -128..=127i8 {
            for q1 in -128..=127i8 {
                let r = t.apply(q0, q1) as i64;
                let base = a * q0 as i64 + b * q1 as i64;
                // clamp((base + c) >> s) = r: at least r above the clamp's low end, at most r
                // below its high end.
                if r > lo {
                    c_min = c_min.max((r << s) - base);
                }
                if r < hi {
                    c_max = c_max.min(((r + 1) << s) - base - 1);
                }
            }
        }
        if c_min > c_max {
            return None;
        }
        let c = match (c_min, c_max) {
            (i64::MIN, i64::MAX) => 0,
            (i64::MIN, m) => m,
            (m, i64::MAX) => m,
            (l, h) => l + (h - l) / 2,
        };
        // Every product and partial sum within i32.
        let top = 128 * (a.abs() + b.abs()) + c.abs();
        (top <= i32::MAX as i64).then_some(PairLine {
            a: a as i32,
            b: b as i32,
            c: c as i32,
            s,
        })
    }

    /// The pair's output before the clamp, as the kernels compute it.
    pub fn value(&self, q0: i8, q1: i8) -> i32 {
        (q0 as i32 * self.a + q1 as i32 * self.b + self.c) >> self.s
    }
}

/// An input table as the rounding it tabulates, computed from the input byte in 64-bit lanes:
/// with x = q − z, `t[q + 128] = sign(x)·((|x|·m + rp − [x < 0]) >> d)`. Both roundings of
/// `requant((q − z)·2^ls)` have this form: each rounds |x|·m·2^(ls + ls') (ls' the double
/// rounding's own left shift) over 2^n half up for x ≥ 0 and half down for x < 0 (the
/// double's two steps compose, as floors of floors do), so rp is `FusedRequant::round`
/// / 2^(ls + ls') and d = n − ls − ls'. [`InputDirect::fit`] checks every entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InputDirect {
    /// The input's zero point.
    pub z: i32,
    /// The multiplier M0 (non-negative).
    pub m: u32,
    /// The rounding term, scaled down by the left shifts.
    pub rp: u64,
    /// The right shift, in [0, 63].
    pub d: u32,
}

impl InputDirect {
    /// Input `i`'s form, where it gives every entry of its table `t`.
    pub fn fit(p: &TfliteAddParams, i: usize, t: &[i32; 256]) -> Option<Self> {
        let (m, s) = p.multipliers[i];
        let f = FusedRequant::new(m, s, p.out.rounding);
        let g = p.left_shift.checked_add(f.ls as i32)? as u32;
        let (n, round) = (f.n, u64::try_from(f.round).ok()?);
        // The rounding term loses nothing to the scaling (its low g bits are 0).
        if n < g || n - g > 63 || g >= 64 || round.trailing_zeros() < g || m < 0 {
            return None;
        }
        let d = InputDirect {
            z: p.zero_points[i],
            m: m as u32,
            rp: round >> g,
            d: n - g,
        };
        (-128..=127i8)
            .zip(t)
            .all(|(q, &v)| d.value(q) == Some(v))
            .then_some(d)
    }

    /// Input byte q's entry as the kernels compute it; `None` where a term leaves 64 bits or
    /// the entry i32.
    pub fn value(&self, q: i8) -> Option<i32> {
        let x = q as i32 - self.z;
        let neg = (x < 0) as u64;
        let p = (x.unsigned_abs() as u64).checked_mul(self.m as u64)?;
        let v = i64::try_from(p.checked_add(self.rp)?.checked_sub(neg)? >> self.d).ok()?;
        i32::try_from(if neg == 1 { -v } else { v }).ok()
    }
}

/// An input table as a line and a byte: `t[q + 128] = ((q·c + off) >> k) + r[q as u8]` for
/// every byte q, every term within i32 and every `r` within [−64, 63] (two of them add in an
/// i8). A table is a rounded line (each input's requantization is affine in q), so kernels
/// compute it with one multiply and one byte lookup instead of a gather.
#[derive(Clone, Debug)]
#[repr(C, align(64))]
pub struct InputLine {
    /// The residuals, indexed by the input byte as u8 (q = 0..127, then −128..−1).
    pub r: [i8; 256],
    /// The line's slope, scaled by 2^k.
    pub c: i32,
    /// The line's value at q = 0, scaled by 2^k, with half of 2^k to round.
    pub off: i32,
    /// The scale's shift, in [0, 24].
    pub k: u32,
}

impl InputLine {
    /// The line through `t`'s ends at the finest scale whose terms stay within i32, and its
    /// residuals; `None` where one falls outside [−64, 63] (a saturated or wrapped table).
    pub fn fit(t: &[i32; 256]) -> Option<Self> {
        let rise = t[255] as i64 - t[0] as i64;
        let term = |c: i64, off: i64, q: i64| q * c + off;
        let (c, off, k) = (0..=24u32).rev().find_map(|k| {
            // Round half up: the slope over 255 steps and the value at q = 0.
            let c = ((rise << k) + 127).div_euclid(255);
            let off = ((t[128] as i64) << k) + ((1i64 << k) >> 1);
            let fits = |v: i64| i32::try_from(v).is_ok();
            (fits(c) && fits(term(c, off, -128)) && fits(term(c, off, 127))).then_some((c, off, k))
        })?;
        let mut r = [0i8; 256];
        for (i, &v) in t.iter().enumerate() {
            let q = i as i64 - 128;
            let d = v as i64 - (term(c, off, q) >> k);
            r[q as u8 as usize] = i8::try_from(d).ok().filter(|d| (-64..64).contains(d))?;
        }
        Some(InputLine {
            r,
            c: c as i32,
            off: off as i32,
            k,
        })
    }

    /// Input byte q's table value as the kernels compute it (wrapping, as their lanes do).
    #[cfg(test)]
    pub fn value(&self, q: i8) -> i32 {
        (q as i32)
            .wrapping_mul(self.c)
            .wrapping_add(self.off)
            .wrapping_shr(self.k)
            .wrapping_add(self.r[q as u8 as usize] as i32)
    }
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
        let (a, b) = (table(0), table(1));
        let top = |t: &[i32; 256]| t.iter().map(|v| v.unsigned_abs()).max().unwrap_or(0) as u64;
        let unsigned = (top(&a) + top(&b) < 1 << 30)
            .then(|| UnsignedRequant::new(&FusedRequant::new(mo, so, r), zo))
            .flatten();
        let direct = InputDirect::fit(p, 0, &a).zip(InputDirect::fit(p, 1, &b));
        Some(TfliteAddTables {
            direct: direct.map(<[_; 2]>::from),
            a,
            b,
            out: HighRequant::new(mo, so, r),
            zero_point: zo,
            lo: lo - zo,
            hi: hi - zo,
            lines: None,
            unsigned,
            pair: None,
        })
    }

    /// These tables with the op as one line where one gives every pair ([`PairLine::fit`]:
    /// 65,536 pairs per scale tried, so at packing, not per call).
    pub fn with_pair_line(mut self, p: &TfliteAddParams) -> Self {
        self.pair = PairLine::fit(p, &self);
        self
    }

    /// These tables with their lines where both fit ([`InputLine::fit`]).
    pub fn with_lines(mut self) -> Self {
        self.lines = InputLine::fit(&self.a)
            .zip(InputLine::fit(&self.b))
            .map(<[_; 2]>::from);
        self
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

    /// One element as the SIMD kernels compute it from the tables (the tests' statement of
    /// their form, and what [`PairLine::fit`] checks a line against).
    pub fn apply(&self, q0: i8, q1: i8) -> i8 {
        let sum =
            self.a[(q0 as i32 + 128) as usize].wrapping_add(self.b[(q1 as i32 + 128) as usize]);
        let (zo, lo, hi) = (self.zero_point, self.lo, self.hi);
        match &self.unsigned {
            Some(u) => u.apply(sum).max(lo + zo).min(hi + zo) as i8,
            None => (self.out.apply(sum).max(lo).min(hi) + zo) as i8,
        }
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
        let mut unsigned = 0;
        for seed in 0..64 {
            let p = tflite_add_params(&mut Rng(seed * 2 + 1));
            let t = TfliteAddTables::new(&p).unwrap();
            unsigned += t.unsigned.is_some() as usize;
            scalar::tflite_add(&p, &a, &b, &mut want);
            for i in 0..a.len() {
                assert_eq!(t.apply(a[i], b[i]), want[i], "{p:?} {} {}", a[i], b[i]);
            }
        }
        // Both forms ran.
        assert!(
            (8..56).contains(&unsigned),
            "{unsigned} of 64 in the unsigned form"
        );
    }

    /// TFLite's own input parameters: left shift 20, multipliers s_i / (2·max s) for drawn
    /// scales.
    fn tflite_inputs(p: &mut TfliteAddParams, rng: &mut Rng) {
        let [s0, s1] = [0; 2].map(|_| 2f64.powf(-12.0 * rng.unit()));
        let twice = 2.0 * s0.max(s1);
        let pair = |m: f64| crate::requant::quantize_multiplier_tflite(m).unwrap();
        p.multipliers[0] = pair(s0 / twice);
        p.multipliers[1] = pair(s1 / twice);
        p.left_shift = 20;
    }

    /// Every table is its direct form ([`InputDirect`]) for TFLite's own parameters (left
    /// shift 20, multipliers s_i / (2·max s)) in both roundings, and for most drawn ones.
    #[test]
    fn direct_are_the_tables() {
        let (mut drawn, mut direct) = (0, 0);
        for seed in 0..256 {
            let mut rng = Rng(seed * 2 + 1);
            let mut p = tflite_add_params(&mut rng);
            let tflite = seed % 2 == 0;
            if tflite {
                tflite_inputs(&mut p, &mut rng);
            }
            let t = TfliteAddTables::new(&p).unwrap();
            match &t.direct {
                Some(d) => {
                    for (d, table) in d.iter().zip([&t.a, &t.b]) {
                        for q in -128..=127i8 {
                            let want = table[(q as i32 + 128) as usize];
                            assert_eq!(d.value(q), Some(want), "{p:?} {q}");
                        }
                    }
                    direct += !tflite as usize;
                }
                None => assert!(!tflite, "{p:?}"),
            }
            drawn += !tflite as usize;
        }
        assert!(2 * direct > drawn, "{direct} of {drawn}");
    }

    /// Where a table fits a line, the line and residuals give every entry; TFLite's own
    /// parameters (left shift 20, multipliers s_i / (2·max s)) always fit, in both roundings;
    /// saturated tables do not.
    #[test]
    fn lines_are_the_tables() {
        let (mut fitted, mut tflite) = (0, 0);
        for seed in 0..256 {
            let mut rng = Rng(seed * 2 + 1);
            let mut p = tflite_add_params(&mut rng);
            if seed % 2 == 0 {
                tflite_inputs(&mut p, &mut rng);
            }
            let t = TfliteAddTables::new(&p).unwrap().with_lines();
            if seed % 2 == 0 {
                assert!(t.lines.is_some(), "{p:?}");
                tflite += 1;
            }
            let Some(lines) = &t.lines else {
                continue;
            };
            fitted += 1;
            for (line, table) in lines.iter().zip([&t.a, &t.b]) {
                for q in -128..=127i8 {
                    assert_eq!(line.value(q), table[(q as i32 + 128) as usize], "{p:?} {q}");
                }
            }
        }
        let mut saturated = [i32::MIN; 256];
        saturated[200..].fill(i32::MAX);
        assert!(InputLine::fit(&saturated).is_none());
        assert!(fitted > tflite, "{fitted} {tflite}");
    }

    /// Where packing finds the op one line ([`PairLine`]), the line clamped is the scalar
    /// reference on every pair of input bytes; it finds one for most of TFLite's own
    /// parameters, in both roundings.
    #[test]
    fn pair_lines_are_the_reference() {
        let (a, b) = all_pairs();
        let mut want = vec![0i8; a.len()];
        let (mut tflite, mut fitted) = (0, 0);
        for seed in 0..48 {
            let mut rng = Rng(seed * 2 + 1);
            let mut p = tflite_add_params(&mut rng);
            let ours = seed % 3 != 0;
            if ours {
                tflite_inputs(&mut p, &mut rng);
                tflite += 1;
            }
            let t = TfliteAddTables::new(&p).unwrap().with_pair_line(&p);
            let Some(l) = t.pair else {
                continue;
            };
            fitted += ours as usize;
            scalar::tflite_add(&p, &a, &b, &mut want);
            let (lo, hi) = (t.lo + t.zero_point, t.hi + t.zero_point);
            for i in 0..a.len() {
                let got = l.value(a[i], b[i]).clamp(lo, hi) as i8;
                assert_eq!(got, want[i], "{p:?} {l:?} {} {}", a[i], b[i]);
            }
        }
        assert!(4 * fitted >= 3 * tflite, "{fitted} of {tflite}");
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
