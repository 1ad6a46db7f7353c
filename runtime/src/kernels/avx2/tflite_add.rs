//! tflite_add (TFLite's ADD), AVX2 (the avx2 and avx-vnni sets): 16 elements per step in two
//! vectors of 8; where packing found the op one line in both input bytes ([`PairLine`]), two
//! multiplies, two adds and a shift per element; else the inputs' requantizations computed
//! from the input bytes where the tables have that form ([`InputDirect`]: a product in 64-bit
//! lanes, a shift and the sign), else gathered from the call's tables (`vpgatherdd`, slow on
//! AMD), and the output's in i32 lanes ([`TfliteAddTables`], `HighRequant`'s form), in either
//! rounding; the last elements through a 16-byte buffer. The same bytes as
//! `scalar::tflite_add`.

use core::arch::x86_64::*;

use crate::kernels::{InputDirect, PairLine, TfliteAddTables};

/// `out[i]` for every element of the common length, from the tables of the call's parameters.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub unsafe fn tflite_add(t: &TfliteAddTables, a: &[i8], b: &[i8], output: &mut [i8]) {
    // The op's line needs only its own constants and the clamp.
    if let Some(l) = &t.pair {
        return run_pair(l, t.lo + t.zero_point, t.hi + t.zero_point, a, b, output);
    }
    let h = &t.out;
    let c = Consts {
        acc_min: _mm256_set1_epi32(h.acc_min),
        acc_max: _mm256_set1_epi32(h.acc_max),
        ls: _mm256_set1_epi32(h.ls as i32),
        m0: _mm256_set1_epi32(h.m0),
        pre: _mm256_set1_epi64x(h.pre as i64),
        round: _mm256_set1_epi64x(h.round),
        corr: _mm256_set1_epi64x(h.corr),
        n: _mm256_set1_epi32(h.n as i32),
        lo: _mm256_set1_epi32(t.lo),
        hi: _mm256_set1_epi32(t.hi),
        zo: _mm256_set1_epi32(t.zero_point),
        // Index q of a table is entry q + 128.
        ta: t.a.as_ptr().add(128),
        tb: t.b.as_ptr().add(128),
        direct: t.direct.map(|d| d.map(|d| Direct::new(&d))),
    };
    // As the AVX-512 kernel: loops without what the usual output shifts do not need.
    match (c.direct.is_some(), h.shifted(), h.corr != 0) {
        (true, false, false) => c.run::<true, false, false>(a, b, output),
        (true, false, true) => c.run::<true, false, true>(a, b, output),
        (true, true, _) => c.run::<true, true, true>(a, b, output),
        (false, false, false) => c.run::<false, false, false>(a, b, output),
        (false, false, true) => c.run::<false, false, true>(a, b, output),
        (false, true, _) => c.run::<false, true, true>(a, b, output),
    }
}

/// An input's [`InputDirect`] in vectors.
#[derive(Clone, Copy)]
struct Direct {
    z: __m256i,
    m: __m256i,
    rp: __m256i,
    d: __m128i,
}

impl Direct {
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn new(d: &InputDirect) -> Self {
        Direct {
            z: _mm256_set1_epi32(d.z),
            m: _mm256_set1_epi32(d.m as i32),
            rp: _mm256_set1_epi64x(d.rp as i64),
            d: _mm_cvtsi32_si128(d.d as i32),
        }
    }

    /// The entries of the low 8 bytes of `q`, in i32 lanes.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn eight(&self, q: __m128i) -> __m256i {
        let x = _mm256_sub_epi32(_mm256_cvtepi8_epi32(q), self.z);
        let ax = _mm256_abs_epi32(x);
        // [x < 0] in each 32-bit lane: the even lanes' alone in their 64-bit lanes, the odd
        // ones' shifted there.
        let neg = _mm256_srli_epi32::<31>(x);
        let low = _mm256_set1_epi64x(u32::MAX as i64);
        let term = |neg: __m256i| _mm256_sub_epi64(self.rp, neg);
        let even = _mm256_add_epi64(
            _mm256_mul_epu32(ax, self.m),
            term(_mm256_and_si256(neg, low)),
        );
        let odd = _mm256_add_epi64(
            _mm256_mul_epu32(_mm256_srli_epi64::<32>(ax), self.m),
            term(_mm256_srli_epi64::<32>(neg)),
        );
        // Each entry within i32: the low halves after the shift, the odd ones moved up.
        let v = _mm256_blend_epi32::<0xAA>(
            _mm256_srl_epi64(even, self.d),
            _mm256_slli_epi64::<32>(_mm256_srl_epi64(odd, self.d)),
        );
        _mm256_sign_epi32(v, x)
    }
}

/// Every element from the op's line in both input bytes ([`PairLine`]), clamped to
/// `[lo, hi]`, 16 at a time: the last ones through a 16-byte buffer.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn run_pair(l: &PairLine, lo: i32, hi: i32, a: &[i8], b: &[i8], output: &mut [i8]) {
    let (ca, cb, c0) = (
        _mm256_set1_epi32(l.a),
        _mm256_set1_epi32(l.b),
        _mm256_set1_epi32(l.c),
    );
    let s = _mm_cvtsi32_si128(l.s as i32);
    let (lo, hi) = (_mm256_set1_epi32(lo), _mm256_set1_epi32(hi));
    let eight = |qa: __m128i, qb: __m128i| {
        let xa = _mm256_mullo_epi32(_mm256_cvtepi8_epi32(qa), ca);
        let xb = _mm256_mullo_epi32(_mm256_cvtepi8_epi32(qb), cb);
        let x = _mm256_sra_epi32(_mm256_add_epi32(_mm256_add_epi32(xa, xb), c0), s);
        _mm256_min_epi32(_mm256_max_epi32(x, lo), hi)
    };
    each(a, b, output, |qa, qb| {
        let lo8 = eight(qa, qb);
        let hi8 = eight(_mm_srli_si128::<8>(qa), _mm_srli_si128::<8>(qb));
        narrow(lo8, hi8)
    });
}

/// `sixteen` over every whole 16 elements of the inputs' and output's common length (the x86
/// sets' tflite_add loop); returns that length and where the whole steps ended: each set
/// finishes the rest its own way (a buffer here, masked loads and stores on AVX-512).
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn whole_steps(
    a: &[i8],
    b: &[i8],
    output: &mut [i8],
    sixteen: &impl Fn(__m128i, __m128i) -> __m128i,
) -> (usize, usize) {
    let len = output.len().min(a.len()).min(b.len());
    let (a, b, y) = (a.as_ptr(), b.as_ptr(), output.as_mut_ptr());
    let mut i = 0;
    while i + 16 <= len {
        let qa = _mm_loadu_si128(a.add(i) as *const __m128i);
        let qb = _mm_loadu_si128(b.add(i) as *const __m128i);
        _mm_storeu_si128(y.add(i) as *mut __m128i, sixteen(qa, qb));
        i += 16;
    }
    (len, i)
}

/// `sixteen` over every 16 elements: the last ones through a 16-byte buffer.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn each(
    a: &[i8],
    b: &[i8],
    output: &mut [i8],
    sixteen: impl Fn(__m128i, __m128i) -> __m128i,
) {
    let (len, i) = whole_steps(a, b, output, &sixteen);
    let (a, b, y) = (a.as_ptr(), b.as_ptr(), output.as_mut_ptr());
    if i < len {
        let n = len - i;
        let (mut qa, mut qb, mut out) = ([0i8; 16], [0i8; 16], [0i8; 16]);
        core::ptr::copy_nonoverlapping(a.add(i), qa.as_mut_ptr(), n);
        core::ptr::copy_nonoverlapping(b.add(i), qb.as_mut_ptr(), n);
        let v = sixteen(
            _mm_loadu_si128(qa.as_ptr() as *const __m128i),
            _mm_loadu_si128(qb.as_ptr() as *const __m128i),
        );
        _mm_storeu_si128(out.as_mut_ptr() as *mut __m128i, v);
        core::ptr::copy_nonoverlapping(out.as_ptr(), y.add(i), n);
    }
}

/// Two vectors of 8 values within i8, as 16 bytes in element order.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn narrow(lo8: __m256i, hi8: __m256i) -> __m128i {
    // i16 lanes [lo 0..4, hi 0..4 | lo 4..8, hi 4..8], put in element order, then bytes (both
    // packs exact: the values lie within i8).
    let w = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_packs_epi32(lo8, hi8));
    _mm_packs_epi16(_mm256_castsi256_si128(w), _mm256_extracti128_si256::<1>(w))
}

/// The call's constants in vectors.
struct Consts {
    acc_min: __m256i,
    acc_max: __m256i,
    ls: __m256i,
    m0: __m256i,
    pre: __m256i,
    round: __m256i,
    corr: __m256i,
    n: __m256i,
    lo: __m256i,
    hi: __m256i,
    zo: __m256i,
    ta: *const i32,
    tb: *const i32,
    direct: Option<[Direct; 2]>,
}

impl Consts {
    /// Every element, 16 at a time: the last ones through a 16-byte buffer.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn run<const DIRECT: bool, const SHIFTED: bool, const CORR: bool>(
        &self,
        a: &[i8],
        b: &[i8],
        output: &mut [i8],
    ) {
        each(a, b, output, |qa, qb| {
            self.sixteen::<DIRECT, SHIFTED, CORR>(qa, qb)
        });
    }

    /// 16 output bytes of 16 input bytes each.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn sixteen<const DIRECT: bool, const SHIFTED: bool, const CORR: bool>(
        &self,
        qa: __m128i,
        qb: __m128i,
    ) -> __m128i {
        let lo8 = self.eight::<DIRECT, SHIFTED, CORR>(qa, qb);
        let hi8 =
            self.eight::<DIRECT, SHIFTED, CORR>(_mm_srli_si128::<8>(qa), _mm_srli_si128::<8>(qb));
        narrow(lo8, hi8)
    }

    /// The 8 elements of the low 8 bytes of `qa`, `qb`, clamped and with the zero point, in
    /// i32 lanes: the entries computed where `DIRECT` (the constants have `direct`), else
    /// gathered; `SHIFTED` and `CORR` as the constants need.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn eight<const DIRECT: bool, const SHIFTED: bool, const CORR: bool>(
        &self,
        qa: __m128i,
        qb: __m128i,
    ) -> __m256i {
        let (va, vb) = match (DIRECT, &self.direct) {
            (true, Some([da, db])) => (da.eight(qa), db.eight(qb)),
            _ => (
                _mm256_i32gather_epi32::<4>(self.ta, _mm256_cvtepi8_epi32(qa)),
                _mm256_i32gather_epi32::<4>(self.tb, _mm256_cvtepi8_epi32(qb)),
            ),
        };
        let mut x = _mm256_add_epi32(va, vb);
        if SHIFTED {
            x = _mm256_min_epi32(_mm256_max_epi32(x, self.acc_min), self.acc_max);
            x = _mm256_sllv_epi32(x, self.ls);
        }
        // Even elements in the low halves of the 64-bit lanes, odd ones moved there.
        let x_odd = _mm256_srli_epi64::<32>(x);
        // t = x·M0·2^pre + round − [x < 0]·corr: corr is 0 or 2^31, bit 31 of x's low half.
        let t = |x: __m256i| {
            let mut p = _mm256_mul_epi32(x, self.m0);
            if SHIFTED {
                p = _mm256_sllv_epi64(p, self.pre);
            }
            let p = _mm256_add_epi64(p, self.round);
            if CORR {
                _mm256_sub_epi64(p, _mm256_and_si256(x, self.corr))
            } else {
                p
            }
        };
        // The high halves of the 8 sums, in element order.
        let high = _mm256_blend_epi32::<0xAA>(_mm256_srli_epi64::<32>(t(x)), t(x_odd));
        let r = _mm256_srav_epi32(high, self.n);
        let r = _mm256_min_epi32(_mm256_max_epi32(r, self.lo), self.hi);
        _mm256_add_epi32(r, self.zo)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::test_util::tflite_add_suite;
    use crate::kernels::Kernels;

    /// The entries computed where the tables have the direct form (most drawn parameters,
    /// every TFLite-derived one).
    mod direct {
        use super::*;
        tflite_add_suite!(if Kernels::avx2_available(), |_, t, a, b, y| unsafe {
            tflite_add(t, a, b, y)
        });
    }

    /// The direct form's entries, all 256 of each table, where the products land on rounding
    /// ties (multipliers 2^30 + 2^v, small shifts, both roundings): as the tables hold them.
    #[test]
    fn direct_entries_at_ties() {
        use crate::kernels::test_util::{tflite_add_params, Rng};
        use crate::requant::Rounding;
        if !Kernels::avx2_available() {
            println!("SKIP: no AVX2");
            return;
        }
        let mut ties = 0;
        for (v, shift, ls, rounding) in (0..30).flat_map(|v| {
            (-4..=0).flat_map(move |s| {
                [0, 20]
                    .into_iter()
                    .flat_map(move |ls| Rounding::ALL.map(move |r| (v, s, ls, r)))
            })
        }) {
            let mut p = tflite_add_params(&mut Rng(v as u64 + 1));
            p.multipliers[0] = ((1 << 30) + (1 << v), shift);
            p.left_shift = ls;
            p.out.rounding = rounding;
            let t = TfliteAddTables::new(&p).unwrap();
            let Some([d, _]) = t.direct else {
                continue;
            };
            let q: [i8; 256] = core::array::from_fn(|i| (i as i32 - 128) as i8);
            for chunk in q.chunks_exact(8) {
                let mut bytes = [0i8; 16];
                bytes[..8].copy_from_slice(chunk);
                let mut got = [0i32; 8];
                // SAFETY: AVX2 is available.
                unsafe {
                    let x = _mm_loadu_si128(bytes.as_ptr() as *const __m128i);
                    let v = Direct::new(&d).eight(x);
                    _mm256_storeu_si256(got.as_mut_ptr() as *mut __m256i, v);
                }
                for (&q, &g) in chunk.iter().zip(&got) {
                    assert_eq!(g, t.a[(q as i32 + 128) as usize], "{p:?} {q}");
                    // A tie below zero: half up would give one more in magnitude.
                    let x = q as i32 - d.z;
                    let up = (x.unsigned_abs() as u64 * d.m as u64 + d.rp) >> d.d;
                    ties += (x < 0 && up as i32 != -g) as usize;
                }
            }
        }
        assert!(ties > 100, "only {ties} ties");
    }

    /// The op as one line in both input bytes where packing finds one (most of the suite's
    /// TFLite-derived parameters), else as above.
    mod pair {
        use super::*;
        tflite_add_suite!(if Kernels::avx2_available(), |p, t, a, b, y| unsafe {
            tflite_add(&t.clone().with_pair_line(p), a, b, y)
        });
    }

    /// The entries gathered.
    mod gathered {
        use super::*;
        tflite_add_suite!(if Kernels::avx2_available(), |_, t, a, b, y| unsafe {
            let t = TfliteAddTables {
                direct: None,
                ..t.clone()
            };
            tflite_add(&t, a, b, y)
        });
    }
}
