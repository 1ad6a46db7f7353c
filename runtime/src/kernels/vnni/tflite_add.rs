//! tflite_add (TFLite's ADD), AVX-512 F: the inputs' requantizations from the call's tables
//! and the output's in i32 lanes ([`TfliteAddTables`], `HighRequant`'s form), in either
//! rounding; the last elements through masked loads and stores. The same bytes as
//! `scalar::tflite_add`.
//!
//! Where packing found the op one line in both input bytes ([`PairLine`]), each element is
//! two multiplies, two adds and a shift. Else, with VBMI and tables that fit lines
//! ([`InputLine`]), 64 elements per step: each table entry is its line (one multiply per
//! lane) plus a residual byte looked up 64 at a time (`vpermi2b`); otherwise 16 per step, the
//! entries gathered (`vpgatherdd`, several times slower per element on recent Xeons).

use core::arch::x86_64::*;

use super::lanes::vbmi;
use super::short_requant::short_unsigned;
use super::Limits;
use crate::kernels::avx2::whole_steps;
use crate::kernels::{InputLine, PairLine, TfliteAddTables};
use crate::requant::UNSIGNED_OFFSET;

/// `out[i]` for every element of the common length, from the tables of the call's parameters.
///
/// # Safety
/// The CPU must support AVX-512 F, BW and VL.
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl")]
pub unsafe fn tflite_add(t: &TfliteAddTables, a: &[i8], b: &[i8], output: &mut [i8]) {
    let lim = Limits::of(t.zero_point, t.lo + t.zero_point, t.hi + t.zero_point);
    // The op's line needs only its own constants and the clamp.
    if let Some(l) = &t.pair {
        return lim.run_pair(l, a, b, output);
    }
    let h = &t.out;
    let c = Consts {
        acc_min: _mm512_set1_epi32(h.acc_min),
        acc_max: _mm512_set1_epi32(h.acc_max),
        ls: _mm512_set1_epi32(h.ls as i32),
        m0: _mm512_set1_epi32(h.m0),
        pre: _mm512_set1_epi64(h.pre as i64),
        round: _mm512_set1_epi64(h.round),
        corr: _mm512_set1_epi64(h.corr),
        n: _mm512_set1_epi32(h.n as i32),
        u: {
            let u = t.unsigned.unwrap_or_default();
            Unsigned {
                m2: _mm512_set1_epi32(u.m2 as i32),
                round: _mm512_set1_epi64(u.round),
                rs: _mm512_set1_epi32(u.rs as i32),
                offset: _mm512_set1_epi32(UNSIGNED_OFFSET),
            }
        },
        lim,
        // Index q of a table is entry q + 128.
        ta: t.a.as_ptr().add(128),
        tb: t.b.as_ptr().add(128),
    };
    // The usual output shifts (below 0, either rounding) with bounded sums take the unsigned
    // form, else need neither the accumulator's bound nor its shifts, and the single rounding
    // no correction: loops without them (corr is 0 wherever the accumulator is shifted).
    let form = match (&t.unsigned, h.shifted(), h.corr != 0) {
        (Some(u), _, _) if u.sign => UNSIGNED_SIGN,
        (Some(_), _, _) => UNSIGNED,
        (None, false, false) => PLAIN,
        (None, false, true) => CORR,
        (None, true, _) => SHIFTED,
    };
    let lines = t.lines.as_ref().filter(|_| vbmi());
    match form {
        UNSIGNED_SIGN => c.run_form::<UNSIGNED_SIGN>(lines, a, b, output),
        UNSIGNED => c.run_form::<UNSIGNED>(lines, a, b, output),
        PLAIN => c.run_form::<PLAIN>(lines, a, b, output),
        CORR => c.run_form::<CORR>(lines, a, b, output),
        _ => c.run_form::<SHIFTED>(lines, a, b, output),
    }
}

/// The output requantization's forms: `HighRequant`'s with neither the accumulator's bound
/// and shifts nor the sign's correction, with the correction, with all; `UnsignedRequant`'s
/// without and with the sign's term.
const PLAIN: u8 = 0;
const CORR: u8 = 1;
const SHIFTED: u8 = 2;
const UNSIGNED: u8 = 3;
const UNSIGNED_SIGN: u8 = 4;

/// One input's line in vectors: the slope and offset in i32 lanes, the residuals in four
/// 64-byte quarters.
struct Line {
    c: __m512i,
    off: __m512i,
    k: __m128i,
    r: [__m512i; 4],
}

impl Line {
    #[inline]
    #[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl")]
    unsafe fn new(l: &InputLine) -> Self {
        let r = l.r.as_ptr() as *const __m512i;
        Line {
            c: _mm512_set1_epi32(l.c),
            off: _mm512_set1_epi32(l.off),
            k: _mm_cvtsi32_si128(l.k as i32),
            r: [0, 1, 2, 3].map(|i| _mm512_loadu_si512(r.add(i))),
        }
    }

    /// The residuals of 64 input bytes: the table's low half for q ≥ 0, its high half (q < 0)
    /// where the sign bit is set.
    #[inline]
    #[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl,avx512vbmi")]
    unsafe fn residuals(&self, q: __m512i) -> __m512i {
        let lo = _mm512_permutex2var_epi8(self.r[0], q, self.r[1]);
        let hi = _mm512_permutex2var_epi8(self.r[2], q, self.r[3]);
        _mm512_mask_blend_epi8(_mm512_movepi8_mask(q), lo, hi)
    }

    /// The line at 16 input bytes, in i32 lanes.
    #[inline]
    #[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl")]
    unsafe fn at(&self, q: __m128i) -> __m512i {
        let x = _mm512_mullo_epi32(_mm512_cvtepi8_epi32(q), self.c);
        _mm512_sra_epi32(_mm512_add_epi32(x, self.off), self.k)
    }
}

impl Limits {
    /// Every element from the op's line in both input bytes, 16 at a time: the last ones
    /// through masked loads and stores.
    #[inline]
    #[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl")]
    unsafe fn run_pair(&self, l: &PairLine, a: &[i8], b: &[i8], output: &mut [i8]) {
        let (ca, cb, c0) = (
            _mm512_set1_epi32(l.a),
            _mm512_set1_epi32(l.b),
            _mm512_set1_epi32(l.c),
        );
        let s = _mm_cvtsi32_si128(l.s as i32);
        let line = |qa: __m128i, qb: __m128i| {
            let xa = _mm512_mullo_epi32(_mm512_cvtepi8_epi32(qa), ca);
            let xb = _mm512_mullo_epi32(_mm512_cvtepi8_epi32(qb), cb);
            let x = _mm512_add_epi32(_mm512_add_epi32(xa, xb), c0);
            self.clamp(_mm512_sra_epi32(x, s))
        };
        each(a, b, output, line);
    }
}

/// `sixteen` over every 16 elements of the common length (the AVX2 set's whole steps): the
/// last ones through masked loads and stores.
#[inline]
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl")]
unsafe fn each(
    a: &[i8],
    b: &[i8],
    output: &mut [i8],
    sixteen: impl Fn(__m128i, __m128i) -> __m128i,
) {
    let (len, i) = whole_steps(a, b, output, &sixteen);
    let (a, b, y) = (a.as_ptr(), b.as_ptr(), output.as_mut_ptr());
    if i < len {
        let k = ((1u32 << (len - i)) - 1) as __mmask16;
        let qa = _mm_maskz_loadu_epi8(k, a.add(i));
        let qb = _mm_maskz_loadu_epi8(k, b.add(i));
        _mm_mask_storeu_epi8(y.add(i), k, sixteen(qa, qb));
    }
}

/// The call's constants in vectors.
struct Consts {
    acc_min: __m512i,
    acc_max: __m512i,
    ls: __m512i,
    m0: __m512i,
    pre: __m512i,
    round: __m512i,
    corr: __m512i,
    n: __m512i,
    u: Unsigned,
    /// The output's clamp and zero point.
    lim: Limits,
    ta: *const i32,
    tb: *const i32,
}

/// `UnsignedRequant`'s constants in vectors (its default's where the form does not hold).
struct Unsigned {
    m2: __m512i,
    round: __m512i,
    rs: __m512i,
    offset: __m512i,
}

impl Consts {
    /// Every element in `FORM`: through the lines where there are some, else gathered.
    #[inline]
    #[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl")]
    unsafe fn run_form<const FORM: u8>(
        &self,
        lines: Option<&[InputLine; 2]>,
        a: &[i8],
        b: &[i8],
        output: &mut [i8],
    ) {
        match lines {
            // SAFETY: lines are only given where VBMI is here.
            Some(l) => self.run_lines::<FORM>(l, a, b, output),
            None => self.run::<FORM>(a, b, output),
        }
    }

    /// Every element, 16 at a time: the last ones through masked loads and stores.
    #[inline]
    #[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl")]
    unsafe fn run<const FORM: u8>(&self, a: &[i8], b: &[i8], output: &mut [i8]) {
        each(a, b, output, |qa, qb| self.sixteen::<FORM>(qa, qb));
    }

    /// Every element, 64 at a time through the lines: masked loads and stores where fewer
    /// are left.
    #[inline]
    #[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl,avx512vbmi")]
    unsafe fn run_lines<const FORM: u8>(
        &self,
        lines: &[InputLine; 2],
        a: &[i8],
        b: &[i8],
        output: &mut [i8],
    ) {
        let (la, lb) = (Line::new(&lines[0]), Line::new(&lines[1]));
        let len = output.len().min(a.len()).min(b.len());
        let (a, b, y) = (a.as_ptr(), b.as_ptr(), output.as_mut_ptr());
        let mut i = 0;
        while i < len {
            let n = (len - i).min(64);
            let k = u64::MAX >> (64 - n);
            let qa = _mm512_maskz_loadu_epi8(k, a.add(i));
            let qb = _mm512_maskz_loadu_epi8(k, b.add(i));
            // Two residuals within [−64, 63] add in a byte.
            let r = _mm512_add_epi8(la.residuals(qa), lb.residuals(qb));
            let r: [__m128i; 4] = [
                _mm512_castsi512_si128(r),
                _mm512_extracti32x4_epi32::<1>(r),
                _mm512_extracti32x4_epi32::<2>(r),
                _mm512_extracti32x4_epi32::<3>(r),
            ];
            let q: [[__m128i; 4]; 2] = [qa, qb].map(|v| {
                [
                    _mm512_castsi512_si128(v),
                    _mm512_extracti32x4_epi32::<1>(v),
                    _mm512_extracti32x4_epi32::<2>(v),
                    _mm512_extracti32x4_epi32::<3>(v),
                ]
            });
            for j in 0..n.div_ceil(16) {
                let x = _mm512_add_epi32(la.at(q[0][j]), lb.at(q[1][j]));
                let x = _mm512_add_epi32(x, _mm512_cvtepi8_epi32(r[j]));
                let v = self.requantize::<FORM>(x);
                _mm_mask_storeu_epi8(y.add(i + 16 * j), (k >> (16 * j)) as __mmask16, v);
            }
            i += n;
        }
    }

    /// 16 output bytes of 16 input bytes each, the tables' entries gathered.
    #[inline]
    #[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl")]
    unsafe fn sixteen<const FORM: u8>(&self, qa: __m128i, qb: __m128i) -> __m128i {
        let va = _mm512_i32gather_epi32::<4>(_mm512_cvtepi8_epi32(qa), self.ta);
        let vb = _mm512_i32gather_epi32::<4>(_mm512_cvtepi8_epi32(qb), self.tb);
        self.requantize::<FORM>(_mm512_add_epi32(va, vb))
    }

    /// 16 output bytes of 16 (wrapping) sums of table entries, in `FORM`.
    #[inline]
    #[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl")]
    unsafe fn requantize<const FORM: u8>(&self, mut x: __m512i) -> __m128i {
        if FORM == UNSIGNED || FORM == UNSIGNED_SIGN {
            let (u, x) = (&self.u, _mm512_add_epi32(x, self.u.offset));
            let r = if FORM == UNSIGNED_SIGN {
                short_unsigned::<true>(x, u.m2, u.m2, [u.round; 2], u.rs)
            } else {
                short_unsigned::<false>(x, u.m2, u.m2, [u.round; 2], u.rs)
            };
            return self.lim.clamp(r);
        }
        let (shifted, corr) = (FORM == SHIFTED, FORM != PLAIN);
        if shifted {
            x = _mm512_min_epi32(_mm512_max_epi32(x, self.acc_min), self.acc_max);
            x = _mm512_sllv_epi32(x, self.ls);
        }
        // Even elements in the low halves of the 64-bit lanes, odd ones moved there.
        let x_odd = _mm512_srli_epi64::<32>(x);
        // t = x·M0·2^pre + round − [x < 0]·corr: corr is 0 or 2^31, bit 31 of x's low half.
        let t = |x: __m512i| {
            let mut p = _mm512_mul_epi32(x, self.m0);
            if shifted {
                p = _mm512_sllv_epi64(p, self.pre);
            }
            let p = _mm512_add_epi64(p, self.round);
            if corr {
                _mm512_sub_epi64(p, _mm512_and_si512(x, self.corr))
            } else {
                p
            }
        };
        // The high halves of the 16 sums, in element order.
        let high = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64::<32>(t(x)), t(x_odd));
        self.lim.finish(_mm512_srav_epi32(high, self.n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::test_util::tflite_add_suite;
    use crate::kernels::Kernels;

    /// The entries gathered.
    mod gathered {
        use super::*;
        tflite_add_suite!(if Kernels::vnni_available(), |_, t, a, b, y| unsafe {
            tflite_add(t, a, b, y)
        });
    }

    /// The op as one line in both input bytes where packing finds one (most of the suite's
    /// TFLite-derived parameters), else as the tables give.
    mod pair {
        use super::*;
        tflite_add_suite!(if Kernels::vnni_available(), |p, t, a, b, y| unsafe {
            tflite_add(&t.clone().with_pair_line(p), a, b, y)
        });
    }

    /// The entries from lines where the tables fit them (the suite's TFLite-derived half)
    /// and VBMI is here, gathered otherwise.
    mod lines {
        use super::*;
        tflite_add_suite!(if Kernels::vnni_available(), |_, t, a, b, y| unsafe {
            tflite_add(&t.clone().with_lines(), a, b, y)
        });

        #[test]
        fn vbmi_here() {
            if Kernels::vnni_available() && !vbmi() {
                println!("SKIP: no AVX-512 VBMI on this CPU, the lines are not run");
            }
        }
    }
}
