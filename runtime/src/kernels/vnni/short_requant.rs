//! The short form of the i32-lane requantization on 16 lanes, for lanes whose n is at least 33
//! (`FusedRequant`'s n: the usual shifts, from −2 down; `HighRequant`'s form without the
//! accumulator's bound and shifts): what the packed fully connected layer and the x86
//! depthwise conv's AVX-512 form share. [`short_unsigned`] is the rounding in three
//! instructions fewer where the sums are bounded (|x| < 2^30, n ≤ 53, M0 ≥ 0) and offset to be
//! positive, the zero point in its terms: the packed layouts check that at packing (`FcEpi`)
//! and take it in the double rounding, as does the x86 tflite_add's output; the depthwise
//! conv's constants do not, and it keeps [`short_requant`]'s.

use core::arch::x86_64::*;

#[cfg(doc)]
use crate::requant::UnsignedRequant;

/// Per lane, `(((x·M0 + b) >> 32) + r_hi) >> n_hi` with `b` what lies below 2^32 of the
/// rounding term less the correction: nothing for the single rounding, ±2^30 by the product's
/// sign for the `DOUBLE`; `x` the biased sum, `r_hi` the rounding term's high half, `n_hi` =
/// n − 32. Before the output's clamp and zero point.
#[inline]
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl")]
pub(crate) unsafe fn short_requant<const DOUBLE: bool>(
    x: __m512i,
    m0: __m512i,
    r_hi: __m512i,
    n_hi: __m512i,
) -> __m512i {
    let below = |p: __m512i| {
        if DOUBLE {
            let neg = _mm512_cmplt_epi64_mask(p, _mm512_setzero_si512());
            let b = _mm512_mask_blend_epi64(
                neg,
                _mm512_set1_epi64(1 << 30),
                _mm512_set1_epi64(-(1 << 30)),
            );
            _mm512_add_epi64(p, b)
        } else {
            p
        }
    };
    let even = below(_mm512_mul_epi32(x, m0));
    let odd = below(_mm512_mul_epi32(
        _mm512_srli_epi64::<32>(x),
        _mm512_srli_epi64::<32>(m0),
    ));
    let high = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64::<32>(even), odd);
    _mm512_srav_epi32(_mm512_add_epi32(high, r_hi), n_hi)
}

/// The rounding `(P + round − [x < 0]·corr) >> n` (P = x·M0; corr 2^31 in the `DOUBLE`
/// rounding, else 0) as `(V >> 32 + [x ≥ 0]) >> (n − 31)` (the sign's term only in the
/// double), V = 2·(P + round) − 2^32·[DOUBLE] computed from the sums offset to `u = x + 2^30`
/// (positive: |x| < 2^30) as `u·2M0 + (2·round − 2^31·M0 − 2^32·[DOUBLE])` in unsigned 64-bit
/// products, so that the results are the products' high halves, gathered by one permutation
/// ([`UnsignedRequant`] gives the terms). `m2` is 2·M0 (u32; M0 ≥ 0) per lane, `m2_odd` the
/// odd lanes' in the even halves, `round` the 64-bit terms of the even and odd lanes, `rs` =
/// n − 31. Exact where |x| < 2^30, n ≤ 53 and the terms hold a zero point of at most 128
/// (|V| < 2^63). Before the output's clamp.
#[inline]
#[target_feature(enable = "avx2,avx512f")]
pub(crate) unsafe fn short_unsigned<const DOUBLE: bool>(
    u: __m512i,
    m2: __m512i,
    m2_odd: __m512i,
    round: [__m512i; 2],
    rs: __m512i,
) -> __m512i {
    let even = _mm512_add_epi64(_mm512_mul_epu32(u, m2), round[0]);
    let odd = _mm512_add_epi64(
        _mm512_mul_epu32(_mm512_srli_epi64::<32>(u), m2_odd),
        round[1],
    );
    // Lane 2i: even's dword 2i + 1; lane 2i + 1: odd's dword 2i + 1 (index 16 + 2i + 1).
    let high = _mm512_permutex2var_epi32(
        even,
        _mm512_set_epi32(31, 15, 29, 13, 27, 11, 25, 9, 23, 7, 21, 5, 19, 3, 17, 1),
        odd,
    );
    if DOUBLE {
        // u ≥ 2^30 where x ≥ 0.
        _mm512_srav_epi32(_mm512_add_epi32(high, _mm512_srli_epi32::<30>(u)), rs)
    } else {
        _mm512_srav_epi32(high, rs)
    }
}
