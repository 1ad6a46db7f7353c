//! The short form of the i32-lane requantization on 16 lanes, for lanes whose n is at least 33
//! (`FusedRequant`'s n: the usual shifts, from −2 down; `HighRequant`'s form without the
//! accumulator's bound and shifts): what the packed fully connected layer and the x86
//! depthwise conv's AVX-512 form share.

use core::arch::x86_64::*;

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
