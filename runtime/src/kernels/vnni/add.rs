//! Requantizing residual add, AVX-512 F: 16 elements per step, in i32 lanes when the
//! multipliers allow an exact split (the usual case), else in i64 lanes; exactly
//! [`AddRequant::apply`].

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
    if narrow_supported(p) {
        return add_narrow(p, a, b, output);
    }
    add_wide(p, a, b, output)
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
    let c = p.z0 as i64 * p.m0 as i64 + p.z1 as i64 * p.m1 as i64;
    let (ch, cl) = (c >> 16, c & 0xFFFF);
    let mh0 = _mm512_set1_epi32(p.m0 >> 16);
    let ml0 = _mm512_set1_epi32(p.m0 & 0xFFFF);
    let mh1 = _mm512_set1_epi32(p.m1 >> 16);
    let ml1 = _mm512_set1_epi32(p.m1 & 0xFFFF);
    let hc = _mm512_set1_epi32(((1i64 << (p.n - 17)) - ch) as i32);
    let lc = _mm512_set1_epi32(-cl as i32);
    let sh = _mm_cvtsi32_si128(p.n - 16);
    let zo = _mm512_set1_epi32(p.out.zero_point);
    let lo = _mm512_set1_epi32(p.out.act_min.max(-128));
    let hi = _mm512_set1_epi32(p.out.act_max.min(127));
    let mut i = 0;
    while i + 16 <= len {
        let x = _mm512_cvtepi8_epi32(_mm_loadu_si128(a.as_ptr().add(i) as *const __m128i));
        let y = _mm512_cvtepi8_epi32(_mm_loadu_si128(b.as_ptr().add(i) as *const __m128i));
        let h = _mm512_add_epi32(
            _mm512_add_epi32(_mm512_mullo_epi32(x, mh0), _mm512_mullo_epi32(y, mh1)),
            hc,
        );
        let l = _mm512_add_epi32(
            _mm512_add_epi32(_mm512_mullo_epi32(x, ml0), _mm512_mullo_epi32(y, ml1)),
            lc,
        );
        let t = _mm512_sra_epi32(_mm512_add_epi32(h, _mm512_srai_epi32::<16>(l)), sh);
        let t = _mm512_min_epi32(_mm512_max_epi32(_mm512_add_epi32(t, zo), lo), hi);
        _mm_storeu_si128(
            output.as_mut_ptr().add(i) as *mut __m128i,
            _mm512_cvtepi32_epi8(t),
        );
        i += 16;
    }
    for j in i..len {
        output[j] = p.apply(a[j], b[j]);
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
