//! tflite_add (TFLite's ADD), AVX2 (the avx2 and avx-vnni sets): 16 elements per step in two
//! vectors of 8, the inputs' requantizations gathered from the call's tables and the output's
//! in i32 lanes ([`TfliteAddTables`], `HighRequant`'s form), in either rounding; the last
//! elements through a 16-byte buffer. The same bytes as `scalar::tflite_add`.

use core::arch::x86_64::*;

use crate::kernels::TfliteAddTables;

/// `out[i]` for every element of the common length, from the tables of the call's parameters.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub unsafe fn tflite_add(t: &TfliteAddTables, a: &[i8], b: &[i8], output: &mut [i8]) {
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
    };
    // As the AVX-512 kernel: loops without what the usual output shifts do not need.
    match (h.shifted(), h.corr != 0) {
        (false, false) => c.run::<false, false>(a, b, output),
        (false, true) => c.run::<false, true>(a, b, output),
        (true, _) => c.run::<true, true>(a, b, output),
    }
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
}

impl Consts {
    /// Every element, 16 at a time: the last ones through a 16-byte buffer.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn run<const SHIFTED: bool, const CORR: bool>(
        &self,
        a: &[i8],
        b: &[i8],
        output: &mut [i8],
    ) {
        let len = output.len().min(a.len()).min(b.len());
        let (a, b, y) = (a.as_ptr(), b.as_ptr(), output.as_mut_ptr());
        let mut i = 0;
        while i + 16 <= len {
            let qa = _mm_loadu_si128(a.add(i) as *const __m128i);
            let qb = _mm_loadu_si128(b.add(i) as *const __m128i);
            let v = self.sixteen::<SHIFTED, CORR>(qa, qb);
            _mm_storeu_si128(y.add(i) as *mut __m128i, v);
            i += 16;
        }
        if i < len {
            let n = len - i;
            let (mut qa, mut qb, mut out) = ([0i8; 16], [0i8; 16], [0i8; 16]);
            core::ptr::copy_nonoverlapping(a.add(i), qa.as_mut_ptr(), n);
            core::ptr::copy_nonoverlapping(b.add(i), qb.as_mut_ptr(), n);
            let v = self.sixteen::<SHIFTED, CORR>(
                _mm_loadu_si128(qa.as_ptr() as *const __m128i),
                _mm_loadu_si128(qb.as_ptr() as *const __m128i),
            );
            _mm_storeu_si128(out.as_mut_ptr() as *mut __m128i, v);
            core::ptr::copy_nonoverlapping(out.as_ptr(), y.add(i), n);
        }
    }

    /// 16 output bytes of 16 input bytes each.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn sixteen<const SHIFTED: bool, const CORR: bool>(
        &self,
        qa: __m128i,
        qb: __m128i,
    ) -> __m128i {
        let lo8 = self.eight::<SHIFTED, CORR>(qa, qb);
        let hi8 = self.eight::<SHIFTED, CORR>(_mm_srli_si128::<8>(qa), _mm_srli_si128::<8>(qb));
        // i16 lanes [lo 0..4, hi 0..4 | lo 4..8, hi 4..8], put in element order, then bytes
        // (both packs exact: the values lie within i8).
        let w = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_packs_epi32(lo8, hi8));
        _mm_packs_epi16(_mm256_castsi256_si128(w), _mm256_extracti128_si256::<1>(w))
    }

    /// The 8 elements of the low 8 bytes of `qa`, `qb`, clamped and with the zero point, in
    /// i32 lanes; `SHIFTED` and `CORR` as the constants need.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn eight<const SHIFTED: bool, const CORR: bool>(
        &self,
        qa: __m128i,
        qb: __m128i,
    ) -> __m256i {
        let va = _mm256_i32gather_epi32::<4>(self.ta, _mm256_cvtepi8_epi32(qa));
        let vb = _mm256_i32gather_epi32::<4>(self.tb, _mm256_cvtepi8_epi32(qb));
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

    tflite_add_suite!(if Kernels::avx2_available(), |_, t, a, b, y| unsafe {
        tflite_add(t, a, b, y)
    });
}
