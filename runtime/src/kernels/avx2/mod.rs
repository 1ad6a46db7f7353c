//! AVX2 kernels (x86-64). Bit-identical to `kernels::scalar`: the same wrapping i32
//! accumulator (products widened to i16 and summed in pairs by `vpmaddwd`, exact since
//! |x·w| ≤ 128·128) and the same requantization.
//!
//! Every function here is `unsafe` only because it needs AVX2: call it only when
//! `Kernels::avx2_available()`.

mod conv2d;
mod depthwise_conv2d;
mod fully_connected;
mod implicit;
mod lanes;
mod max_pool;
mod packed;
mod tflite_add;
mod tflite_avg_pool;

pub use conv2d::conv2d;
pub use depthwise_conv2d::{
    depthwise_conv2d, depthwise_conv2d_512, depthwise_conv2d_512_rows, depthwise_conv2d_rows,
    depthwise_pack, depthwise_packed_bytes,
};
pub use fully_connected::fully_connected;
pub use implicit::{conv2d_implicit_rows, conv2d_implicit_rows_vnni, implicit_rows_covered};
pub use lanes::{conv2d_lanes_avx2, conv2d_lanes_vnni, lanes_covered, lanes_scratch};
pub use max_pool::max_pool;
pub use packed::{fully_connected_packed, fully_connected_packed_vnni};
pub use tflite_add::tflite_add;
pub(crate) use tflite_add::whole_steps;
pub use tflite_avg_pool::tflite_avg_pool;

use core::arch::x86_64::*;

/// 16 weights (or inputs) from `src[at..at+16]`, sign-extended to i16; bytes past the end of
/// `src` read as zero.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn load16_i8_as_i16(src: &[i8], at: usize) -> __m256i {
    if at + 16 <= src.len() {
        _mm256_cvtepi8_epi16(_mm_loadu_si128(src.as_ptr().add(at) as *const __m128i))
    } else {
        let mut buf = [0i8; 16];
        if at < src.len() {
            let rem = src.len() - at;
            buf[..rem].copy_from_slice(&src[at..]);
        }
        _mm256_cvtepi8_epi16(_mm_loadu_si128(buf.as_ptr() as *const __m128i))
    }
}

/// Horizontal sums of 8 vectors: lane i of the result is the (wrapping) sum of `v[i]`.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn hsum8(v: [__m256i; 8]) -> [i32; 8] {
    let r = hsum8_v(v);
    let mut out = [0i32; 8];
    _mm256_storeu_si256(out.as_mut_ptr() as *mut __m256i, r);
    out
}

/// [`hsum8`] as a vector.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn hsum8_v(v: [__m256i; 8]) -> __m256i {
    let t0 = _mm256_hadd_epi32(v[0], v[1]);
    let t1 = _mm256_hadd_epi32(v[2], v[3]);
    let t2 = _mm256_hadd_epi32(v[4], v[5]);
    let t3 = _mm256_hadd_epi32(v[6], v[7]);
    let u0 = _mm256_hadd_epi32(t0, t1);
    let u1 = _mm256_hadd_epi32(t2, t3);
    _mm256_add_epi32(
        _mm256_permute2x128_si256::<0x20>(u0, u1),
        _mm256_permute2x128_si256::<0x31>(u0, u1),
    )
}

/// Horizontal sums of 4 vectors.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn hsum4(v: [__m256i; 4]) -> [i32; 4] {
    let t0 = _mm256_hadd_epi32(v[0], v[1]);
    let t1 = _mm256_hadd_epi32(v[2], v[3]);
    let u = _mm256_hadd_epi32(t0, t1);
    let r = _mm_add_epi32(_mm256_castsi256_si128(u), _mm256_extracti128_si256::<1>(u));
    let mut out = [0i32; 4];
    _mm_storeu_si128(out.as_mut_ptr() as *mut __m128i, r);
    out
}
