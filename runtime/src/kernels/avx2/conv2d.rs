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
    if !p.is_uniform()
        || scratch.len() < P * kp * 2
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
            let s = dot4::<3>(x, kp, k, weight_rows(p, co));
            store(p, &s, np, p0, co, output);
            co += 3;
        }
        if co + 2 <= cout {
            let s = dot4::<2>(x, kp, k, weight_rows(p, co));
            store(p, &s, np, p0, co, output);
            co += 2;
        }
        if co < cout {
            let s = dot4::<1>(x, kp, k, weight_rows(p, co));
            store(p, &s, np, p0, co, output);
        }
        p0 += P;
    }
}

/// The weight rows of output channels `co..co + C`.
#[inline(always)]
fn weight_rows<'a, const C: usize>(p: &ConvParams<'a>, co: usize) -> [&'a [i8]; C] {
    let k = p.k();
    core::array::from_fn(|c| &p.weights[(co + c) * k..][..k])
}

/// The output stage: the sums `s[pixel][channel]` of pixels `p0..p0 + np` and channels
/// `co..co + C` requantized into their HWC bytes.
#[inline(always)]
fn store<const C: usize>(
    p: &ConvParams,
    s: &[[i32; C]; P],
    np: usize,
    p0: usize,
    co: usize,
    output: &mut [i8],
) {
    let cout = p.output.c;
    let q: [ChannelRequant; C] = core::array::from_fn(|c| chan(p, co + c));
    for (r, sr) in s.iter().enumerate().take(np) {
        let o = &mut output[(p0 + r) * cout + co..][..C];
        for ((ov, &sum), q) in o.iter_mut().zip(sr).zip(&q) {
            *ov = p.out.finish(sum, q);
        }
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

/// Dot products of 4 patch rows (i16, stride `kp`) with `C` weight rows of length `k`:
/// `[pixel][channel]`. Each loaded patch vector serves the `C` channels, each weight vector
/// the 4 pixels.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn dot4<const C: usize>(x: *const i16, kp: usize, k: usize, w: [&[i8]; C]) -> [[i32; C]; P] {
    let mut a = [[_mm256_setzero_si256(); C]; P];
    macro_rules! step {
        ($kk:expr, $wv:expr) => {{
            let (kk, wv): (usize, [__m256i; C]) = ($kk, $wv);
            for (r, ar) in a.iter_mut().enumerate() {
                let xv = _mm256_loadu_si256(x.add(r * kp + kk) as *const __m256i);
                for (acc, &wc) in ar.iter_mut().zip(&wv) {
                    *acc = _mm256_add_epi32(*acc, _mm256_madd_epi16(xv, wc));
                }
            }
        }};
    }
    let kfull = k & !15;
    let mut kk = 0;
    while kk < kfull {
        let mut wv = [_mm256_setzero_si256(); C];
        for (v, wr) in wv.iter_mut().zip(&w) {
            *v = _mm256_cvtepi8_epi16(_mm_loadu_si128(wr.as_ptr().add(kk) as *const __m128i));
        }
        step!(kk, wv);
        kk += 16;
    }
    if kfull < k {
        let mut wv = [_mm256_setzero_si256(); C];
        for (v, wr) in wv.iter_mut().zip(&w) {
            *v = load16_i8_as_i16(wr, kfull);
        }
        step!(kfull, wv);
    }
    // Horizontal sums, 8 vectors (then 4) at a time, in `[pixel][channel]` order.
    let mut v = [_mm256_setzero_si256(); 12];
    let n = P * C;
    for (i, vi) in v.iter_mut().enumerate().take(n) {
        *vi = a[i / C][i % C];
    }
    let mut sums = [0i32; 12];
    let mut i = 0;
    while i + 8 <= n {
        let h = hsum8(core::array::from_fn(|j| v[i + j]));
        sums[i..i + 8].copy_from_slice(&h);
        i += 8;
    }
    if i < n {
        let h = hsum4(core::array::from_fn(|j| v[i + j]));
        sums[i..i + 4].copy_from_slice(&h);
    }
    core::array::from_fn(|r| core::array::from_fn(|c| sums[r * C + c]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::test_util::conv_suite;
    use crate::kernels::Kernels;

    // SAFETY: the kernel runs only where AVX2 is available.
    conv_suite!(if Kernels::avx2_available(), |p, x, y, s| unsafe { conv2d(p, x, y, s) });
}
