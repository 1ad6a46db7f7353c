//! conv2d, AVX-512 VNNI (256-bit): implicit GEMM like `avx2::conv2d`, but the patch rows in
//! scratch are u8 (x + 128), `align32(K)` bytes each, zero past K, and each step multiplies 32
//! bytes of 4 pixels by 32 weights of 4 output channels with `vpdpbusd`. Σw per channel (for
//! the −128·Σw correction) accumulates alongside with a vector of ones.

use core::arch::x86_64::*;

use crate::kernels::avx2::{hsum4, hsum8_v};
use crate::kernels::{scalar, ConvParams, CONV_PIXEL_BLOCK};
use crate::requant::{ChannelRequant, OutputQuant};

const P: usize = CONV_PIXEL_BLOCK;
const CORR_CACHE: usize = 1024;

const fn align32(n: usize) -> usize {
    (n + 31) & !31
}

/// Same bytes as [`scalar::conv2d`]; uses the same scratch as the AVX2 kernel
/// (`4·align16(K)·2 ≥ 4·align32(K)` bytes).
///
/// # Safety
/// The CPU must support AVX2, AVX-512 VNNI and AVX-512 VL.
#[target_feature(enable = "avx2,avx512f,avx512vl,avx512vnni")]
pub unsafe fn conv2d(p: &ConvParams, input: &[i8], output: &mut [i8], scratch: &mut [u8]) {
    let k = p.k();
    let kp = align32(k);
    let cout = p.output.c;
    let npix = p.output.h * p.output.w;
    if scratch.len() < P * kp
        || input.len() < p.input.len()
        || output.len() < npix * cout
        || p.weights.len() < cout * k
    {
        return scalar::conv2d(p, input, output);
    }
    let base = scratch.as_mut_ptr();
    // 128·Σw per channel, computed with the first pixel block and reused (when it fits).
    let mut corr = [0i32; CORR_CACHE];
    let cache = cout <= CORR_CACHE;
    let mut p0 = 0;
    while p0 < npix {
        let np = (npix - p0).min(P);
        for r in 0..np {
            pack_patch(p, input, p0 + r, base.add(r * kp), kp);
        }
        let x = base as *const u8;
        let mut co = 0;
        while co < cout {
            let nc = (cout - co).min(4);
            let rows: [&[i8]; 4] = core::array::from_fn(|c| {
                let cc = co + c.min(nc - 1);
                &p.weights[cc * k..][..k]
            });
            let (sums, corr4) = if p0 == 0 || !cache {
                let (s, sw) = dot4x4::<true>(x, kp, k, rows);
                if cache {
                    corr[co..co + nc].copy_from_slice(&sw[..nc]);
                }
                (s, sw)
            } else {
                let (s, _) = dot4x4::<false>(x, kp, k, rows);
                let mut sw = [0i32; 4];
                sw[..nc].copy_from_slice(&corr[co..co + nc]);
                (s, sw)
            };
            let q: [ChannelRequant; 4] = core::array::from_fn(|c| {
                let cc = co + c.min(nc - 1);
                let mut q =
                    ChannelRequant::new(p.bias.get(cc), p.multiplier.get(cc), p.shift.get(cc));
                q.bias = q.bias.wrapping_sub(corr4[c]);
                q
            });
            let bytes = epilogue(sums, &q, &p.out);
            for r in 0..np {
                let o = &mut output[(p0 + r) * cout + co..][..nc];
                for (c, ov) in o.iter_mut().enumerate() {
                    *ov = bytes[r * 4 + c];
                }
            }
            co += nc;
        }
        p0 += P;
    }
}

#[inline]
#[target_feature(enable = "avx2")]
unsafe fn copy_offset(src: &[i8], dst: *mut u8) {
    let n = src.len();
    let bias = _mm256_set1_epi8(-128);
    let mut i = 0;
    while i + 32 <= n {
        let v = _mm256_loadu_si256(src.as_ptr().add(i) as *const __m256i);
        _mm256_storeu_si256(dst.add(i) as *mut __m256i, _mm256_xor_si256(v, bias));
        i += 32;
    }
    while i < n {
        dst.add(i).write((src[i] as u8) ^ 0x80);
        i += 1;
    }
}

#[inline]
unsafe fn fill_pad(p: &ConvParams, dst: *mut u8) {
    for ci in 0..p.input.c {
        dst.add(ci).write((p.pad_value(ci) as u8) ^ 0x80);
    }
}

/// Requantizes the 16 sums (2 vectors of pixel·4 + channel, bias not yet added) exactly like
/// `OutputQuant::finish`, 4 channels of one pixel per 64-bit vector.
#[inline]
#[target_feature(enable = "avx2,avx512f,avx512vl")]
unsafe fn epilogue(sums: [__m256i; 2], q: &[ChannelRequant; 4], out: &OutputQuant) -> [i8; 16] {
    let bias = _mm256_setr_epi32(
        q[0].bias, q[1].bias, q[2].bias, q[3].bias, q[0].bias, q[1].bias, q[2].bias, q[3].bias,
    );
    let m0 = _mm256_setr_epi64x(q[0].m0, q[1].m0, q[2].m0, q[3].m0);
    let round = _mm256_setr_epi64x(q[0].round, q[1].round, q[2].round, q[3].round);
    let n = _mm256_setr_epi64x(q[0].n as i64, q[1].n as i64, q[2].n as i64, q[3].n as i64);
    let z = _mm256_set1_epi64x(out.zero_point as i64);
    let amin = _mm256_set1_epi64x(out.act_min as i64);
    let amax = _mm256_set1_epi64x(out.act_max as i64);
    let lo8 = _mm256_set1_epi64x(-128);
    let hi8 = _mm256_set1_epi64x(127);
    let mut res = [0i8; 16];
    for (h, &v) in sums.iter().enumerate() {
        let v = _mm256_add_epi32(v, bias);
        for half in 0..2 {
            let x = if half == 0 {
                _mm256_cvtepi32_epi64(_mm256_castsi256_si128(v))
            } else {
                _mm256_cvtepi32_epi64(_mm256_extracti128_si256::<1>(v))
            };
            let t = _mm256_add_epi64(_mm256_mul_epi32(x, m0), round);
            let t = _mm256_add_epi64(_mm256_srav_epi64(t, n), z);
            let t = _mm256_min_epi64(_mm256_max_epi64(t, amin), amax);
            let t = _mm256_min_epi64(_mm256_max_epi64(t, lo8), hi8);
            let b = _mm_cvtsi128_si32(_mm256_cvtepi64_epi8(t));
            let at = (h * 2 + half) * 4;
            res[at..at + 4].copy_from_slice(&b.to_le_bytes().map(|x| x as i8));
        }
    }
    res
}

/// Writes the u8 patch (x + 128) of output pixel `pi`, then zeros up to `kp`.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn pack_patch(p: &ConvParams, input: &[i8], pi: usize, row: *mut u8, kp: usize) {
    let (cin, h, w) = (p.input.c, p.input.h as isize, p.input.w as isize);
    let (kh, kw, s, pad) = (p.kernel_h, p.kernel_w, p.stride, p.pad as isize);
    let wo = p.output.w;
    let (oy, ox) = (pi / wo, pi % wo);
    let run = kw * cin;
    let ix0 = (ox * s) as isize - pad;
    for ky in 0..kh {
        let dst = row.add(ky * run);
        let iy = (oy * s + ky) as isize - pad;
        if iy < 0 || iy >= h {
            for kx in 0..kw {
                fill_pad(p, dst.add(kx * cin));
            }
            continue;
        }
        let rowbase = iy as usize * w as usize;
        if ix0 >= 0 && ix0 + kw as isize <= w {
            copy_offset(&input[(rowbase + ix0 as usize) * cin..][..run], dst);
        } else {
            for kx in 0..kw {
                let ix = ix0 + kx as isize;
                if ix >= 0 && ix < w {
                    copy_offset(
                        &input[(rowbase + ix as usize) * cin..][..cin],
                        dst.add(kx * cin),
                    );
                } else {
                    fill_pad(p, dst.add(kx * cin));
                }
            }
        }
    }
    core::ptr::write_bytes(row.add(kh * run), 0, kp - kh * run);
}

/// 32 weights from `src[at..]`, zero past the end.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn load32(src: &[i8], at: usize) -> __m256i {
    if at + 32 <= src.len() {
        _mm256_loadu_si256(src.as_ptr().add(at) as *const __m256i)
    } else {
        let mut buf = [0i8; 32];
        if at < src.len() {
            let rem = src.len() - at;
            buf[..rem].copy_from_slice(&src[at..]);
        }
        _mm256_loadu_si256(buf.as_ptr() as *const __m256i)
    }
}

/// Dot products of 4 u8 patch rows with 4 weight rows (index pixel·4 + channel) and, when
/// `SUM`, 128·Σw per channel.
#[inline]
#[target_feature(enable = "avx2,avx512f,avx512vl,avx512vnni")]
unsafe fn dot4x4<const SUM: bool>(
    x: *const u8,
    kp: usize,
    k: usize,
    w: [&[i8]; 4],
) -> ([__m256i; 2], [i32; 4]) {
    let mut a = [_mm256_setzero_si256(); 16];
    let mut sw = [_mm256_setzero_si256(); 4];
    let ones = _mm256_set1_epi8(1);
    macro_rules! step {
        ($kk:expr, $wv:expr) => {{
            let (kk, wv): (usize, [__m256i; 4]) = ($kk, $wv);
            if SUM {
                for c in 0..4 {
                    sw[c] = _mm256_dpbusd_epi32(sw[c], ones, wv[c]);
                }
            }
            for r in 0..P {
                let xv = _mm256_loadu_si256(x.add(r * kp + kk) as *const __m256i);
                for c in 0..4 {
                    a[r * 4 + c] = _mm256_dpbusd_epi32(a[r * 4 + c], xv, wv[c]);
                }
            }
        }};
    }
    let kfull = k & !31;
    let mut kk = 0;
    while kk < kfull {
        let wv: [__m256i; 4] =
            core::array::from_fn(|c| _mm256_loadu_si256(w[c].as_ptr().add(kk) as *const __m256i));
        step!(kk, wv);
        kk += 32;
    }
    if kfull < k {
        let wv: [__m256i; 4] = core::array::from_fn(|c| load32(w[c], kfull));
        step!(kfull, wv);
    }
    let lo = hsum8_v([a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]]);
    let hi = hsum8_v([a[8], a[9], a[10], a[11], a[12], a[13], a[14], a[15]]);
    let out = [lo, hi];
    let mut corr = [0i32; 4];
    if SUM {
        let s = hsum4(sw);
        for c in 0..4 {
            corr[c] = s[c].wrapping_mul(128);
        }
    }
    (out, corr)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::avx2::test_util::Rng;
    use crate::kernels::{I32Array, Kernels, OutputQuant, Shape};
    use proptest::prelude::*;

    #[allow(clippy::too_many_arguments)]
    fn check(
        cin: usize,
        cout: usize,
        h: usize,
        w: usize,
        k: usize,
        stride: usize,
        pad: usize,
        seed: u64,
    ) {
        if !Kernels::vnni_available() || h + 2 * pad < k || w + 2 * pad < k {
            return;
        }
        let mut rng = Rng(seed | 1);
        let ho = (h + 2 * pad - k) / stride + 1;
        let wo = (w + 2 * pad - k) / stride + 1;
        let kk = k * k * cin;
        let input = rng.i8s(cin * h * w, -128, 127);
        let weights = rng.i8s(cout * kk, -127, 127);
        let bias = rng.i32s(cout, -(1 << 20), 1 << 20);
        let mult = rng.i32s(cout, 1 << 30, i32::MAX as i64);
        let shift = rng.i32s(cout, -18, -2);
        let pads = if rng.next().is_multiple_of(2) {
            rng.i8s(cin, -128, 127)
        } else {
            Vec::new()
        };
        let p = ConvParams {
            input: Shape { c: cin, h, w },
            output: Shape {
                c: cout,
                h: ho,
                w: wo,
            },
            kernel_h: k,
            kernel_w: k,
            stride,
            pad,
            weights: &weights,
            bias: I32Array::new(&bias),
            multiplier: I32Array::new(&mult),
            shift: I32Array::new(&shift),
            pad_values: &pads,
            input_zero_point: rng.range(-128, 127) as i32,
            out: OutputQuant {
                zero_point: rng.range(-128, 127) as i32,
                act_min: -128,
                act_max: 127,
            },
        };
        let mut want = vec![0i8; cout * ho * wo];
        let mut got = vec![0x55i8; cout * ho * wo];
        scalar::conv2d(&p, &input, &mut want);
        let mut scratch = vec![0xAAu8; crate::scratch_bytes(1, k as u32, k as u32, cin as u32)];
        unsafe { conv2d(&p, &input, &mut got, &mut scratch) };
        assert_eq!(want, got);
    }

    #[test]
    fn fixed_shapes() {
        for &(cin, cout, hw, k, s, pad) in &[
            (1, 6, 32, 5, 1, 0),
            (6, 16, 14, 5, 1, 0),
            (3, 64, 8, 3, 1, 1),
            (64, 64, 4, 3, 1, 1),
            (64, 128, 8, 3, 2, 1),
            (17, 5, 7, 3, 2, 2),
            (33, 3, 5, 5, 1, 2),
        ] {
            check(cin, cout, hw, hw, k, s, pad, 7 + cin as u64);
        }
    }

    proptest! {
        #[test]
        fn vnni_equals_scalar(
            cin in prop::sample::select(vec![1usize, 2, 3, 5, 8, 16, 17, 33]),
            cout in prop::sample::select(vec![1usize, 2, 3, 5, 8, 17]),
            h in 1usize..10, w in 1usize..10,
            k in prop::sample::select(vec![1usize, 3, 5]),
            stride in 1usize..=2, pad in 0usize..=2, seed in any::<u64>(),
        ) {
            check(cin, cout, h, w, k, stride, pad, seed);
        }
    }
}
