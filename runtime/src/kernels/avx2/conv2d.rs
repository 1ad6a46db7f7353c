//! conv2d, AVX2: implicit GEMM over HWC input and OHWI weights.
//!
//! For each block of [`CONV_PIXEL_BLOCK`] output pixels the patches (kh runs of kw·C_in
//! values, padded taps filled with the pad values) are widened to i16 into the op's scratch,
//! one row of `align16(K)` values per pixel, zero past K. Then for each triple of output
//! channels, 4 pixels × 3 channels accumulate `vpmaddwd` products in 12 registers, reusing each
//! loaded patch vector for 3 channels and each weight vector for 4 pixels (pairs and single
//! channels for the remainder).

use core::arch::x86_64::*;

use super::{hsum4, hsum8, load16_i8_as_i16};
use crate::kernels::{scalar, ConvParams, PatchPiece, CONV_PIXEL_BLOCK};
use crate::requant::ChannelRequant;

const P: usize = CONV_PIXEL_BLOCK;

/// Same bytes as [`scalar::conv2d`]. `scratch` must hold `scratch_bytes(conv2d, …)` bytes
/// (falls back to the scalar kernel otherwise).
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub unsafe fn conv2d(p: &ConvParams, input: &[i8], output: &mut [i8], scratch: &mut [u8]) {
    let k = p.k();
    let kp = crate::align16(k);
    let cout = p.output.c;
    let npix = p.output.h * p.output.w;
    if scratch.len() < P * kp * 2
        || input.len() < p.input.len()
        || output.len() < npix * cout
        || p.weights.len() < cout * k
    {
        return scalar::conv2d(p, input, output);
    }
    let base = scratch.as_mut_ptr() as *mut i16;
    let mut p0 = 0;
    while p0 < npix {
        let np = (npix - p0).min(P);
        for r in 0..np {
            pack_patch(p, input, p0 + r, base.add(r * kp), kp);
        }
        let x = base as *const i16;
        let mut co = 0;
        while co + 3 <= cout {
            let w0 = &p.weights[co * k..][..k];
            let w1 = &p.weights[(co + 1) * k..][..k];
            let w2 = &p.weights[(co + 2) * k..][..k];
            let s = dot4x3(x, kp, k, w0, w1, w2);
            let q: [ChannelRequant; 3] = core::array::from_fn(|c| chan(p, co + c));
            for r in 0..np {
                let o = &mut output[(p0 + r) * cout + co..][..3];
                for (c, ov) in o.iter_mut().enumerate() {
                    *ov = p.out.finish(s[r * 3 + c], &q[c]);
                }
            }
            co += 3;
        }
        if co + 2 <= cout {
            let w0 = &p.weights[co * k..][..k];
            let w1 = &p.weights[(co + 1) * k..][..k];
            let s = dot4x2(x, kp, k, w0, w1);
            let q: [ChannelRequant; 2] = core::array::from_fn(|c| chan(p, co + c));
            for r in 0..np {
                let o = &mut output[(p0 + r) * cout + co..][..2];
                for (c, ov) in o.iter_mut().enumerate() {
                    *ov = p.out.finish(s[r * 2 + c], &q[c]);
                }
            }
            co += 2;
        }
        if co < cout {
            let w0 = &p.weights[co * k..][..k];
            let s = dot4x1(x, kp, k, w0);
            for (r, &sr) in s.iter().enumerate().take(np) {
                let acc = sr.wrapping_add(p.bias.get(co));
                output[(p0 + r) * cout + co] =
                    p.out.requantize(acc, p.multiplier.get(co), p.shift.get(co));
            }
        }
        p0 += P;
    }
}

#[inline(always)]
fn chan(p: &ConvParams, c: usize) -> ChannelRequant {
    ChannelRequant::new(p.bias.get(c), p.multiplier.get(c), p.shift.get(c))
}

/// Widens `src` to i16 at `dst`.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn widen(src: &[i8], dst: *mut i16) {
    let n = src.len();
    let mut i = 0;
    while i + 16 <= n {
        let v = _mm_loadu_si128(src.as_ptr().add(i) as *const __m128i);
        _mm256_storeu_si256(dst.add(i) as *mut __m256i, _mm256_cvtepi8_epi16(v));
        i += 16;
    }
    while i < n {
        dst.add(i).write_unaligned(src[i] as i16);
        i += 1;
    }
}

#[inline]
unsafe fn fill_pad(p: &ConvParams, dst: *mut i16) {
    for ci in 0..p.input.c {
        dst.add(ci).write_unaligned(p.pad_value(ci) as i16);
    }
}

/// Writes the i16 patch of output pixel `pi` (K values, then zeros up to `kp`) at `row`.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn pack_patch(p: &ConvParams, input: &[i8], pi: usize, row: *mut i16, kp: usize) {
    p.patch_pieces(pi, |at, piece| match piece {
        PatchPiece::Input { start, n } => widen(&input[start..start + n], row.add(at)),
        PatchPiece::Pad => fill_pad(p, row.add(at)),
    });
    for i in p.k()..kp {
        row.add(i).write_unaligned(0);
    }
}

/// Dot products of 4 patch rows (i16, stride `kp`) with 3 weight rows of length `k`.
/// Result index: pixel·3 + channel.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn dot4x3(x: *const i16, kp: usize, k: usize, w0: &[i8], w1: &[i8], w2: &[i8]) -> [i32; 12] {
    let mut a = [_mm256_setzero_si256(); 12];
    macro_rules! step {
        ($kk:expr, $wa:expr, $wb:expr, $wc:expr) => {{
            let (kk, wa, wb, wc) = ($kk, $wa, $wb, $wc);
            for r in 0..P {
                let xv = _mm256_loadu_si256(x.add(r * kp + kk) as *const __m256i);
                a[r * 3] = _mm256_add_epi32(a[r * 3], _mm256_madd_epi16(xv, wa));
                a[r * 3 + 1] = _mm256_add_epi32(a[r * 3 + 1], _mm256_madd_epi16(xv, wb));
                a[r * 3 + 2] = _mm256_add_epi32(a[r * 3 + 2], _mm256_madd_epi16(xv, wc));
            }
        }};
    }
    let kfull = k & !15;
    let mut kk = 0;
    while kk < kfull {
        let wa = _mm256_cvtepi8_epi16(_mm_loadu_si128(w0.as_ptr().add(kk) as *const __m128i));
        let wb = _mm256_cvtepi8_epi16(_mm_loadu_si128(w1.as_ptr().add(kk) as *const __m128i));
        let wc = _mm256_cvtepi8_epi16(_mm_loadu_si128(w2.as_ptr().add(kk) as *const __m128i));
        step!(kk, wa, wb, wc);
        kk += 16;
    }
    if kfull < k {
        step!(
            kfull,
            load16_i8_as_i16(w0, kfull),
            load16_i8_as_i16(w1, kfull),
            load16_i8_as_i16(w2, kfull)
        );
    }
    let lo = hsum8([a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]]);
    let hi = hsum4([a[8], a[9], a[10], a[11]]);
    [
        lo[0], lo[1], lo[2], lo[3], lo[4], lo[5], lo[6], lo[7], hi[0], hi[1], hi[2], hi[3],
    ]
}

/// Dot products of 4 patch rows (i16, stride `kp`) with 2 weight rows of length `k`.
/// Result index: pixel·2 + channel.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn dot4x2(x: *const i16, kp: usize, k: usize, w0: &[i8], w1: &[i8]) -> [i32; 8] {
    let mut a = [_mm256_setzero_si256(); 8];
    macro_rules! step {
        ($kk:expr, $wa:expr, $wb:expr) => {{
            let (kk, wa, wb) = ($kk, $wa, $wb);
            for r in 0..P {
                let xv = _mm256_loadu_si256(x.add(r * kp + kk) as *const __m256i);
                a[r * 2] = _mm256_add_epi32(a[r * 2], _mm256_madd_epi16(xv, wa));
                a[r * 2 + 1] = _mm256_add_epi32(a[r * 2 + 1], _mm256_madd_epi16(xv, wb));
            }
        }};
    }
    let kfull = k & !15;
    let mut kk = 0;
    while kk < kfull {
        let wa = _mm256_cvtepi8_epi16(_mm_loadu_si128(w0.as_ptr().add(kk) as *const __m128i));
        let wb = _mm256_cvtepi8_epi16(_mm_loadu_si128(w1.as_ptr().add(kk) as *const __m128i));
        step!(kk, wa, wb);
        kk += 16;
    }
    if kfull < k {
        step!(
            kfull,
            load16_i8_as_i16(w0, kfull),
            load16_i8_as_i16(w1, kfull)
        );
    }
    hsum8(a)
}

/// Dot products of 4 patch rows with 1 weight row.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn dot4x1(x: *const i16, kp: usize, k: usize, w0: &[i8]) -> [i32; 4] {
    let mut a = [_mm256_setzero_si256(); 4];
    let mut kk = 0;
    while kk < k {
        let wa = load16_i8_as_i16(w0, kk);
        for (r, ar) in a.iter_mut().enumerate() {
            let xv = _mm256_loadu_si256(x.add(r * kp + kk) as *const __m256i);
            *ar = _mm256_add_epi32(*ar, _mm256_madd_epi16(xv, wa));
        }
        kk += 16;
    }
    hsum4(a)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::test_util::{conv_matches_scalar, conv_suite, ConvCase};
    use crate::kernels::Kernels;

    /// Never declines.
    fn check(c: &ConvCase) {
        if Kernels::avx2_available() {
            // SAFETY: AVX2 checked above.
            conv_matches_scalar(c, &mut |p, x, y, s| unsafe { conv2d(p, x, y, s) });
        }
    }

    conv_suite!(check);
}
