//! fully_connected, AVX2: 4 output rows per pass sharing each widened input vector.

use core::arch::x86_64::*;

use super::{hsum4, load16_i8_as_i16};
use crate::kernels::{scalar, FcParams};

/// Same bytes as [`scalar::fully_connected`].
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub unsafe fn fully_connected(p: &FcParams, input: &[i8], output: &mut [i8]) {
    let (k, n) = (p.k, p.n);
    if input.len() < k || output.len() < n || p.weights.len() < n * k {
        return scalar::fully_connected(p, input, output);
    }
    let x = &input[..k];
    let kfull = k & !15;
    let xtail = load16_i8_as_i16(x, kfull);
    let mut j = 0;
    while j + 4 <= n {
        let rows = [
            &p.weights[j * k..][..k],
            &p.weights[(j + 1) * k..][..k],
            &p.weights[(j + 2) * k..][..k],
            &p.weights[(j + 3) * k..][..k],
        ];
        let mut a = [_mm256_setzero_si256(); 4];
        let mut kk = 0;
        while kk < kfull {
            let xv = _mm256_cvtepi8_epi16(_mm_loadu_si128(x.as_ptr().add(kk) as *const __m128i));
            for (ar, row) in a.iter_mut().zip(rows) {
                let wv =
                    _mm256_cvtepi8_epi16(_mm_loadu_si128(row.as_ptr().add(kk) as *const __m128i));
                *ar = _mm256_add_epi32(*ar, _mm256_madd_epi16(xv, wv));
            }
            kk += 16;
        }
        if kfull < k {
            for (ar, row) in a.iter_mut().zip(rows) {
                let wv = load16_i8_as_i16(row, kfull);
                *ar = _mm256_add_epi32(*ar, _mm256_madd_epi16(xtail, wv));
            }
        }
        let s = hsum4(a);
        for (i, &si) in s.iter().enumerate() {
            let acc = si.wrapping_add(p.bias.get(j + i));
            output[j + i] = p
                .out
                .requantize(acc, p.multiplier.get(j + i), p.shift.get(j + i));
        }
        j += 4;
    }
    while j < n {
        let row = &p.weights[j * k..][..k];
        let mut a = _mm256_setzero_si256();
        let mut kk = 0;
        while kk < k {
            let xv = load16_i8_as_i16(x, kk);
            a = _mm256_add_epi32(a, _mm256_madd_epi16(xv, load16_i8_as_i16(row, kk)));
            kk += 16;
        }
        let z = _mm256_setzero_si256();
        let s = hsum4([a, z, z, z]);
        let acc = s[0].wrapping_add(p.bias.get(j));
        output[j] = p.out.requantize(acc, p.multiplier.get(j), p.shift.get(j));
        j += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::test_util::fc_suite;
    use crate::kernels::Kernels;

    // SAFETY: the kernel runs only where AVX2 is available.
    fc_suite!(if Kernels::avx2_available(), |p, x, y| unsafe { fully_connected(p, x, y) });
}
