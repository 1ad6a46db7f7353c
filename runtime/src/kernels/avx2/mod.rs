//! AVX2 kernels (x86-64). Bit-identical to `kernels::scalar`: the same wrapping i32
//! accumulator (products widened to i16 and summed in pairs by `vpmaddwd`, exact since
//! |x·w| ≤ 128·128) and the same requantization.
//!
//! Every function here is `unsafe` only because it needs AVX2: call it only when
//! `Kernels::avx2_available()`.

mod conv2d;
mod fully_connected;

pub use conv2d::conv2d;
pub use fully_connected::fully_connected;

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

#[cfg(test)]
pub(crate) mod test_util {
    use crate::kernels::{ConvParams, I32Array, OutputQuant, Shape};

    /// A fast conv kernel under test: (params, input, output, scratch).
    pub type ConvKernel<'f> = dyn FnMut(&ConvParams, &[i8], &mut [i8], &mut [u8]) + 'f;

    /// xorshift64* stream for test data.
    pub struct Rng(pub u64);
    impl Rng {
        pub fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
        pub fn range(&mut self, lo: i64, hi: i64) -> i64 {
            lo + (self.next() % ((hi - lo + 1) as u64)) as i64
        }
        pub fn i8s(&mut self, n: usize, lo: i64, hi: i64) -> Vec<i8> {
            (0..n).map(|_| self.range(lo, hi) as i8).collect()
        }
        pub fn i32s(&mut self, n: usize, lo: i64, hi: i64) -> Vec<u8> {
            (0..n)
                .flat_map(|_| (self.range(lo, hi) as i32).to_le_bytes())
                .collect()
        }
    }

    /// A convolution of the given shape with values drawn from `seed` (weights, biases,
    /// multipliers, pad values, zero points, clamp), run by the scalar reference and by `fast`:
    /// the bytes must be equal. Shapes the kernel cannot cover are skipped.
    #[allow(clippy::too_many_arguments)]
    pub fn conv_matches_scalar(
        cin: usize,
        cout: usize,
        h: usize,
        w: usize,
        kh: usize,
        kw: usize,
        stride: usize,
        pad: usize,
        seed: u64,
        fast: &mut ConvKernel,
    ) {
        if h + 2 * pad < kh || w + 2 * pad < kw {
            return;
        }
        let mut rng = Rng(seed | 1);
        let ho = (h + 2 * pad - kh) / stride + 1;
        let wo = (w + 2 * pad - kw) / stride + 1;
        let k = kh * kw * cin;
        let input = rng.i8s(cin * h * w, -128, 127);
        let weights = rng.i8s(cout * k, -127, 127);
        let bias = rng.i32s(cout, -(1 << 20), 1 << 20);
        let mult = rng.i32s(cout, 1 << 30, i32::MAX as i64);
        // Mostly typical shifts (n in [33, 49]); every fourth case the whole valid range.
        let shift = if rng.next().is_multiple_of(4) {
            rng.i32s(cout, -31, 30)
        } else {
            rng.i32s(cout, -18, -2)
        };
        let pads = if rng.next().is_multiple_of(2) {
            rng.i8s(cin, -128, 127)
        } else {
            Vec::new()
        };
        let zo = rng.range(-128, 127) as i32;
        let (lo, hi) = if rng.next().is_multiple_of(2) {
            (zo.max(-128), 127)
        } else {
            (-128, 127)
        };
        let p = ConvParams {
            input: Shape { c: cin, h, w },
            output: Shape {
                c: cout,
                h: ho,
                w: wo,
            },
            kernel_h: kh,
            kernel_w: kw,
            stride,
            pad,
            weights: &weights,
            bias: I32Array::new(&bias),
            multiplier: I32Array::new(&mult),
            shift: I32Array::new(&shift),
            pad_values: &pads,
            input_zero_point: rng.range(-128, 127) as i32,
            out: OutputQuant {
                zero_point: zo,
                act_min: lo,
                act_max: hi,
            },
        };
        let mut want = vec![0i8; cout * ho * wo];
        let mut got = vec![0x55i8; cout * ho * wo];
        crate::kernels::scalar::conv2d(&p, &input, &mut want);
        let mut scratch = vec![0xAAu8; crate::scratch_bytes(1, &p.geometry())];
        fast(&p, &input, &mut got, &mut scratch);
        assert_eq!(want, got);
    }
}
