//! Requantizing residual add, AVX-512 F and BW: in i32 lanes when the multipliers allow an
//! exact split (the usual case: 32 elements per step, each multiplier's halves applied to both
//! inputs by one `vpmaddwd`), else in i64 lanes; exactly [`AddRequant::apply`].

use core::arch::x86_64::*;

use crate::kernels::AddRequant;

/// Zero points whose `q − z` products stay far inside i64 (|q − z| ≤ 384, |m| < 2^31) and fit
/// `vpmuldq`'s signed 32-bit operands.
pub(crate) fn add_supported(p: &AddRequant) -> bool {
    (-256..=256).contains(&p.z0) && (-256..=256).contains(&p.z1)
}

/// `out[i] = p.apply(a[i], b[i])` over the common length; same bytes as `scalar::add`.
///
/// # Safety
/// The CPU must support AVX-512 F, BW and VL; `add_supported(p)` must hold.
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl")]
pub unsafe fn add(p: &AddRequant, a: &[i8], b: &[i8], output: &mut [i8]) {
    match (narrow_supported(p), Halves::pairs(p)) {
        (true, Some(h)) => add_pairs(p, &h, a, b, output),
        (true, None) => add_narrow(p, a, b, output),
        _ => add_wide(p, a, b, output),
    }
}

/// The multipliers split as m = mh·2^16 + ml with both halves in i16 (ml in [−2^15, 2^15)):
/// `vpmaddwd` pairs of (q0, q1) take them.
struct Halves {
    /// (mh0, mh1) and (ml0, ml1) as i16 pairs in every 32-bit lane.
    mh: i32,
    ml: i32,
}

impl Halves {
    /// The split, where each mh fits i16 (every m ≥ 0 but those within 2^15 of 2^31 whose low
    /// half is 2^15 or more).
    fn pairs(p: &AddRequant) -> Option<Self> {
        let split = |m: i32| -> Option<(i16, i16)> {
            let (mh, ml) = (m >> 16, m & 0xFFFF);
            let (mh, ml) = if ml >= 1 << 15 {
                (mh + 1, ml - (1 << 16))
            } else {
                (mh, ml)
            };
            Some((i16::try_from(mh).ok()?, ml as i16))
        };
        let (h0, l0) = split(p.m0)?;
        let (h1, l1) = split(p.m1)?;
        let pair = |x: i16, y: i16| (x as u16 as i32) | ((y as i32) << 16);
        Some(Halves {
            mh: pair(h0, h1),
            ml: pair(l0, l1),
        })
    }
}

/// [`add_narrow`]'s arithmetic with H and L each one `vpmaddwd` of the interleaved inputs
/// (signed halves: the same identity, L now of either sign): 32 elements per step, the
/// unpacked order restored by the 64-bit interleave of the narrowed halves.
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl")]
unsafe fn add_pairs(p: &AddRequant, h: &Halves, a: &[i8], b: &[i8], output: &mut [i8]) {
    let len = output.len().min(a.len()).min(b.len());
    let k = Narrow::new(p);
    let (mh, ml) = (_mm512_set1_epi32(h.mh), _mm512_set1_epi32(h.ml));
    // 16 elements' (q0, q1) pairs as i16 to bytes.
    let sixteen = |w: __m256i| {
        let w = _mm512_cvtepi8_epi16(w);
        k.bytes(_mm512_madd_epi16(w, mh), _mm512_madd_epi16(w, ml))
    };
    let mut i = 0;
    while i + 32 <= len {
        let x = _mm256_loadu_si256(a.as_ptr().add(i) as *const __m256i);
        let y = _mm256_loadu_si256(b.as_ptr().add(i) as *const __m256i);
        // Per 128-bit lane: elements 0–7 (16–23) and 8–15 (24–31), each with its pair.
        let first = sixteen(_mm256_unpacklo_epi8(x, y));
        let second = sixteen(_mm256_unpackhi_epi8(x, y));
        let y0 = output.as_mut_ptr().add(i) as *mut __m128i;
        _mm_storeu_si128(y0, _mm_unpacklo_epi64(first, second));
        _mm_storeu_si128(y0.add(1), _mm_unpackhi_epi64(first, second));
        i += 32;
    }
    for j in i..len {
        output[j] = p.apply(a[j], b[j]);
    }
}

/// Whether [`add_narrow`] is exact for `p`: n in [17, 47], m0, m1 ≥ 0, |z0|, |z1| ≤ 256 and a
/// clamp within i8.
fn narrow_supported(p: &AddRequant) -> bool {
    (17..=47).contains(&p.n)
        && p.m0 >= 0
        && p.m1 >= 0
        && add_supported(p)
        && p.out.act_min.max(-128) <= p.out.act_max.min(127)
}

/// The add in 32-bit lanes, 16 elements per vector. With m = mh·2^16 + ml (0 ≤ ml < 2^16)
/// and C = z0·m0 + z1·m1 = Ch·2^16 + Cl, t = (q0−z0)·m0 + (q1−z1)·m1 = H·2^16 + L where
/// H = q0·mh0 + q1·mh1 − Ch and L = q0·ml0 + q1·ml1 − Cl both fit i32 (|H| < 2^25,
/// |L| < 2^25), and (t + 2^(n−1)) >> n = (H + 2^(n−17) + (L >> 16)) >> (n − 16) exactly
/// (nested floor division; the sum stays below 2^31 for n ≤ 47).
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl")]
unsafe fn add_narrow(p: &AddRequant, a: &[i8], b: &[i8], output: &mut [i8]) {
    let len = output.len().min(a.len()).min(b.len());
    let k = Narrow::new(p);
    let mh0 = _mm512_set1_epi32(p.m0 >> 16);
    let ml0 = _mm512_set1_epi32(p.m0 & 0xFFFF);
    let mh1 = _mm512_set1_epi32(p.m1 >> 16);
    let ml1 = _mm512_set1_epi32(p.m1 & 0xFFFF);
    let mut i = 0;
    while i + 16 <= len {
        let x = _mm512_cvtepi8_epi32(_mm_loadu_si128(a.as_ptr().add(i) as *const __m128i));
        let y = _mm512_cvtepi8_epi32(_mm_loadu_si128(b.as_ptr().add(i) as *const __m128i));
        let h = _mm512_add_epi32(_mm512_mullo_epi32(x, mh0), _mm512_mullo_epi32(y, mh1));
        let l = _mm512_add_epi32(_mm512_mullo_epi32(x, ml0), _mm512_mullo_epi32(y, ml1));
        _mm_storeu_si128(output.as_mut_ptr().add(i) as *mut __m128i, k.bytes(h, l));
        i += 16;
    }
    for j in i..len {
        output[j] = p.apply(a[j], b[j]);
    }
}

/// The 32-bit form's constants, for H = q0·mh0 + q1·mh1 and L = q0·ml0 + q1·ml1 per lane.
struct Narrow {
    /// 2^(n−17) − Ch, −Cl (C = z0·m0 + z1·m1 = Ch·2^16 + Cl), n − 16.
    hc: __m512i,
    lc: __m512i,
    sh: __m128i,
    zo: __m512i,
    lo: __m512i,
    hi: __m512i,
}

impl Narrow {
    #[inline]
    #[target_feature(enable = "avx2,avx512f")]
    unsafe fn new(p: &AddRequant) -> Self {
        let c = p.z0 as i64 * p.m0 as i64 + p.z1 as i64 * p.m1 as i64;
        Narrow {
            hc: _mm512_set1_epi32(((1i64 << (p.n - 17)) - (c >> 16)) as i32),
            lc: _mm512_set1_epi32(-(c & 0xFFFF) as i32),
            sh: _mm_cvtsi32_si128(p.n - 16),
            zo: _mm512_set1_epi32(p.out.zero_point),
            lo: _mm512_set1_epi32(p.out.act_min.max(-128)),
            hi: _mm512_set1_epi32(p.out.act_max.min(127)),
        }
    }

    /// 16 outputs of H and L: `(H + hc + ((L + lc) >> 16)) >> (n − 16)`, the zero point added,
    /// clamped, as bytes.
    #[inline]
    #[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl")]
    unsafe fn bytes(&self, h: __m512i, l: __m512i) -> __m128i {
        let l = _mm512_srai_epi32::<16>(_mm512_add_epi32(l, self.lc));
        let t = _mm512_sra_epi32(_mm512_add_epi32(_mm512_add_epi32(h, self.hc), l), self.sh);
        let t = _mm512_add_epi32(t, self.zo);
        _mm512_cvtepi32_epi8(_mm512_min_epi32(_mm512_max_epi32(t, self.lo), self.hi))
    }
}

/// The add in i64 lanes, any parameters `add_supported` accepts.
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl")]
unsafe fn add_wide(p: &AddRequant, a: &[i8], b: &[i8], output: &mut [i8]) {
    let len = output.len().min(a.len()).min(b.len());
    let n = p.n.clamp(1, 62);
    let z0 = _mm512_set1_epi64(p.z0 as i64);
    let z1 = _mm512_set1_epi64(p.z1 as i64);
    let m0 = _mm512_set1_epi64(p.m0 as i64);
    let m1 = _mm512_set1_epi64(p.m1 as i64);
    let round = _mm512_set1_epi64(1i64 << (n - 1));
    let sh = _mm_cvtsi32_si128(n);
    let zo = _mm512_set1_epi64(p.out.zero_point as i64);
    let amin = _mm512_set1_epi64(p.out.act_min as i64);
    let amax = _mm512_set1_epi64(p.out.act_max as i64);
    let lo8 = _mm512_set1_epi64(-128);
    let hi8 = _mm512_set1_epi64(127);
    let one = |x: __m128i, y: __m128i| -> __m128i {
        let x = _mm512_sub_epi64(_mm512_cvtepi8_epi64(x), z0);
        let y = _mm512_sub_epi64(_mm512_cvtepi8_epi64(y), z1);
        let t = _mm512_add_epi64(_mm512_mul_epi32(x, m0), _mm512_mul_epi32(y, m1));
        let t = _mm512_sra_epi64(_mm512_add_epi64(t, round), sh);
        let t = _mm512_add_epi64(t, zo);
        let t = _mm512_min_epi64(_mm512_max_epi64(t, amin), amax);
        let t = _mm512_min_epi64(_mm512_max_epi64(t, lo8), hi8);
        _mm512_cvtepi64_epi8(t)
    };
    let mut i = 0;
    while i + 16 <= len {
        let x = _mm_loadu_si128(a.as_ptr().add(i) as *const __m128i);
        let y = _mm_loadu_si128(b.as_ptr().add(i) as *const __m128i);
        let lo = one(x, y);
        let hi = one(_mm_srli_si128::<8>(x), _mm_srli_si128::<8>(y));
        _mm_storeu_si128(
            output.as_mut_ptr().add(i) as *mut __m128i,
            _mm_unpacklo_epi64(lo, hi),
        );
        i += 16;
    }
    for j in i..len {
        output[j] = p.apply(a[j], b[j]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::test_util::Rng;
    use crate::kernels::{scalar, Kernels, OutputQuant};
    use proptest::prelude::*;

    /// The kernel against the scalar reference on random inputs of `len`.
    fn check(p: &AddRequant, len: usize, seed: u64) -> Result<(), TestCaseError> {
        if !Kernels::vnni_available() {
            return Ok(());
        }
        let mut rng = Rng(seed | 1);
        let a = rng.i8s(len, -128, 127);
        let b = rng.i8s(len, -128, 127);
        let mut want = vec![0i8; len];
        let mut got = vec![0x55i8; len];
        scalar::add(p, &a, &b, &mut want);
        // SAFETY: AVX-512 checked above.
        unsafe { add(p, &a, &b, &mut got) };
        prop_assert_eq!(want, got);
        Ok(())
    }

    /// Requantizations with right shifts `n`.
    fn adds(n: core::ops::RangeInclusive<i32>) -> impl Strategy<Value = AddRequant> {
        (
            (-256i32..=256, -256i32..=256),
            (0i32..=i32::MAX, 0i32..=i32::MAX),
            n,
            (-128i32..=127, -128i32..=0, 0i32..=127),
        )
            .prop_map(|((z0, z1), (m0, m1), n, (zo, lo, hi))| AddRequant {
                z0,
                m0,
                z1,
                m1,
                n,
                out: OutputQuant {
                    zero_point: zo,
                    act_min: lo,
                    act_max: hi,
                    rounding: crate::requant::Rounding::Single,
                },
            })
    }

    proptest! {
        /// Multipliers whose high half does not fit i16 once the low half is signed (within
        /// 2^15 of 2^31): the 32-bit path without `vpmaddwd`; and their neighbours.
        #[test]
        fn add_unpaired_equals_reference(
            p in adds(15..=49),
            d in (0i32..(1 << 16), 0i32..(1 << 16)),
            len in 0usize..100,
            seed in any::<u64>(),
        ) {
            let p = AddRequant { m0: i32::MAX - d.0, m1: i32::MAX - d.1, ..p };
            check(&p, len, seed)?;
        }

        /// Shifts of the 32-bit fast path.
        #[test]
        fn add_narrow_equals_reference(p in adds(15..=49), len in 0usize..100, seed in any::<u64>()) {
            check(&p, len, seed)?;
        }

        #[test]
        fn add_equals_reference(p in adds(-3..=66), len in 0usize..100, seed in any::<u64>()) {
            check(&p, len, seed)?;
        }
    }
}
