//! fully_connected, AVX-512 VNNI: 4 output rows per pass, 64 multiply-adds per `vpdpbusd`.
//!
//! The input is offset to u8 (x + 128) 64 bytes at a time, shared by the 4 rows; each row's
//! accumulator starts at its bias and a second `vpdpbusd` against ones sums its weights, so the
//! −128·Σw correction is exact in wrapping i32 (the reference's arithmetic). The AVX2 kernel
//! does 16 multiply-adds per `vpmaddwd` after widening both operands.

use core::arch::x86_64::*;

use crate::kernels::{scalar, FcParams};

/// Rows per pass.
const R: usize = 4;

/// Same bytes as [`scalar::fully_connected`].
///
/// # Safety
/// The CPU must support AVX-512 F, BW and VNNI.
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn fully_connected(p: &FcParams, input: &[i8], output: &mut [i8]) {
    let (k, n) = (p.k, p.n);
    if input.len() < k || output.len() < n || p.weights.len() < n * k {
        return scalar::fully_connected(p, input, output);
    }
    let (x, w) = (input.as_ptr(), p.weights.as_ptr());
    let (flip, ones) = (_mm512_set1_epi8(-128), _mm512_set1_epi8(1));
    let tail: __mmask64 = if k.is_multiple_of(64) {
        !0
    } else {
        (1u64 << (k % 64)) - 1
    };
    let chunks = k.div_ceil(64);
    let mut j = 0;
    while j < n {
        let rows = (n - j).min(R);
        let mut acc = [_mm512_setzero_si512(); R];
        let mut sw = [_mm512_setzero_si512(); R];
        for ci in 0..chunks {
            let m = if ci + 1 == chunks { tail } else { !0 };
            // Bytes past K load as 0 in both operands: nothing added.
            let xv = _mm512_maskz_mov_epi8(
                m,
                _mm512_xor_si512(_mm512_maskz_loadu_epi8(m, x.add(64 * ci)), flip),
            );
            for r in 0..R {
                if r < rows {
                    let wv = _mm512_maskz_loadu_epi8(m, w.add((j + r) * k + 64 * ci));
                    acc[r] = _mm512_dpbusd_epi32(acc[r], xv, wv);
                    sw[r] = _mm512_dpbusd_epi32(sw[r], ones, wv);
                }
            }
        }
        for r in 0..rows {
            // Σ (x + 128)·w − 128·Σw = Σ x·w, lane by lane and in the sum, all wrapping.
            let v = _mm512_sub_epi32(acc[r], _mm512_slli_epi32::<7>(sw[r]));
            let acc = _mm512_reduce_add_epi32(v).wrapping_add(p.bias.get(j + r));
            output[j + r] = p
                .out
                .requantize(acc, p.multiplier.get(j + r), p.shift.get(j + r));
        }
        j += rows;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::test_util::fc_suite;
    use crate::kernels::Kernels;

    // SAFETY: the kernel runs only where AVX-512 VNNI is available.
    fc_suite!(if Kernels::vnni_available(), |p, x, y| unsafe { fully_connected(p, x, y) });
}
