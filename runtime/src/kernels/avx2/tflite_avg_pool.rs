//! tflite_avg_pool (TensorFlow Lite's AVERAGE_POOL_2D), AVX2 (all three x86 sets): 8 channels
//! per i32 vector, the window's taps summed exactly (no tap limit); each sum divided as the
//! reference does (half away from zero, truncating division).

use core::arch::x86_64::*;

use crate::kernels::{scalar, PoolParams};

/// Channels per vector.
const G: usize = 8;

/// Same bytes as [`scalar::tflite_avg_pool`]. Channels go 8 at a time, the last group the last
/// 8 channels (overlapping the one before where C is not a multiple of 8); fewer than 8
/// channels or dilation run the scalar kernel.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub unsafe fn tflite_avg_pool(p: &PoolParams, input: &[i8], output: &mut [i8]) {
    let (c, w) = (p.input.c, p.input.w);
    let (ho, wo) = (p.output.h, p.output.w);
    let g = &p.window;
    if c < G
        || g.dilation_h != 1
        || g.dilation_w != 1
        || input.len() < p.input.len()
        || output.len() < ho * wo * c
    {
        return scalar::tflite_avg_pool(p, input, output);
    }
    let x = input.as_ptr();
    for (i, o) in output.chunks_exact_mut(c).take(ho * wo).enumerate() {
        let (rows, cols, count) = p.window_of(i);
        let mut at = 0;
        loop {
            let a = at.min(c - G);
            let mut acc = _mm256_setzero_si256();
            for iy in rows.clone() {
                for ix in cols.clone() {
                    let v = _mm_loadl_epi64(x.add((iy * w + ix) * c + a) as *const __m128i);
                    acc = _mm256_add_epi32(acc, _mm256_cvtepi8_epi32(v));
                }
            }
            let mut sums = [0i32; G];
            _mm256_storeu_si256(sums.as_mut_ptr() as *mut __m256i, acc);
            for (y, &sum) in o[a..a + G].iter_mut().zip(&sums) {
                let avg = if sum > 0 {
                    (sum + count / 2) / count
                } else {
                    (sum - count / 2) / count
                };
                *y = p.out.clamp64(avg as i64);
            }
            if a + G >= c {
                break;
            }
            at += G;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::test_util::tflite_avg_pool_suite;
    use crate::kernels::Kernels;

    // SAFETY: the kernel runs only where AVX2 is available.
    tflite_avg_pool_suite!(if Kernels::avx2_available(), |p, x, y| unsafe {
        tflite_avg_pool(p, x, y)
    });
}
