//! conv2d, AVX2, output pixels in the vector lanes (8 per ymm), exact at 32 multiply-adds per
//! `vpmaddubsw`.
//!
//! `vpmaddubsw` multiplies u8 by i8 and adds pairs into i16 with saturation, which arbitrary
//! int8 pairs overflow. Here the sign of each activation moves onto the weight: |x| (u8, at most
//! 128) times `vpsignb(w, x)` = w·sign(x) (|w| ≤ 127, the format's weight range) keeps each
//! product within ±128·127 and each pair within ±32 512 < 2^15, so the i16 sums are exact;
//! `vpmaddwd` by ones adds the pairs into i32 lanes. Per 32 multiply-adds: `vpsignb`,
//! `vpmaddubsw`, `vpmaddwd`, `vpaddd`, with |x| shared by every output channel. With AVX-VNNI
//! (`VNNI = true`) one `vpdpbusd` on the same operands replaces the last three.
//!
//! Layout as in the VNNI pixels-in-lanes kernel (`vnni::lanes`), with the activations kept
//! signed: the input is copied once into scratch as quads of channels (`T`), one plane per
//! quad, padded with the pad values, columns split by stride phase, so 4 output pixels of a
//! row read 16 contiguous bytes at every tap; each vector holds 8 consecutive output pixels
//! (two runs of 4, each within one row). A register tile of 8 channels accumulates from the
//! bias; the requantization runs on the high halves of the products in i32 lanes (shifts
//! n ≥ 33, the usual range; other convs run `avx2::conv2d`).

use core::arch::x86_64::*;

use crate::kernels::{lanes_regions, lanes_supported, ConvParams};

/// Pixels per vector.
const V: usize = 8;
/// Output channels per register tile.
const CH: usize = 8;

/// One output channel's requantization, for accumulators that already hold the bias.
#[derive(Clone, Copy)]
#[repr(C)]
struct Epi {
    bias: i32,
    m0: i32,
    /// (2^(n−1) + z_out·2^n) >> 32: exact, n ≥ 33.
    r_hi: i32,
    /// n − 32.
    n_hi: i32,
}

/// Whether [`conv2d_lanes`] covers this conv (given the scratch `scratch_bytes` reserves):
/// the pixels-in-lanes geometry (`lanes_supported`), output rows of a multiple of 4 pixels,
/// every channel's shift n in [33, 54] and a clamp within i8.
pub fn lanes_covered(p: &ConvParams) -> bool {
    let (hp, wp) = (p.input.h + 2 * p.pad, p.input.w + 2 * p.pad);
    lanes_supported(&p.geometry())
        && p.stride >= 1
        && hp >= p.kernel_h
        && wp >= p.kernel_w
        && p.output.h == (hp - p.kernel_h) / p.stride + 1
        && p.output.w == (wp - p.kernel_w) / p.stride + 1
        && p.output.w.is_multiple_of(4)
        && p.out.act_min.max(-128) <= p.out.act_max.min(127)
        && (0..p.output.c).all(|c| (33..=54).contains(&(31 - p.shift.get(c).clamp(-31, 30))))
}

/// [`conv2d_lanes`] with AVX-VNNI's `vpdpbusd`.
///
/// # Safety
/// The CPU must support AVX2 and AVX-VNNI.
#[target_feature(enable = "avx2,avxvnni")]
pub unsafe fn conv2d_lanes_vnni(
    p: &ConvParams,
    input: &[i8],
    output: &mut [i8],
    scratch: &mut [u8],
) -> bool {
    conv2d_lanes::<true>(p, input, output, scratch)
}

/// Same bytes as `scalar::conv2d`, or `false` (output untouched) outside [`lanes_covered`] or
/// with less scratch than `scratch_bytes` gives: the caller then runs another kernel.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub unsafe fn conv2d_lanes_avx2(
    p: &ConvParams,
    input: &[i8],
    output: &mut [i8],
    scratch: &mut [u8],
) -> bool {
    conv2d_lanes::<false>(p, input, output, scratch)
}

/// The kernel, inlined into each entry point (their target features reach the intrinsics).
#[inline(always)]
unsafe fn conv2d_lanes<const VNNI: bool>(
    p: &ConvParams,
    input: &[i8],
    output: &mut [i8],
    scratch: &mut [u8],
) -> bool {
    if !lanes_covered(p) {
        return false;
    }
    let (cin, cout, k) = (p.input.c, p.output.c, p.k());
    let (s, pad) = (p.stride, p.pad);
    let (kh, kw) = (p.kernel_h, p.kernel_w);
    let (ho, wo) = (p.output.h, p.output.w);
    let npix = ho * wo;
    let (tb, pb, tileb, eb) = lanes_regions(&p.geometry());
    let off = scratch.as_ptr().align_offset(64);
    if scratch.len() < off + tb + pb + tileb + eb
        || eb < cout * core::mem::size_of::<Epi>()
        || input.len() < p.input.len()
        || output.len() < npix * cout
        || p.weights.len() < cout * k
    {
        return false;
    }
    let t = scratch.as_mut_ptr().add(off);
    let epi = t.add(tb + pb + tileb) as *mut Epi;

    // T: planes of quads, padded, columns by stride phase (as vnni::lanes' Geo).
    let planes = cin.div_ceil(4);
    let (hp, wp) = (p.input.h + 2 * pad, p.input.w + 2 * pad);
    let wq = wp.div_ceil(s);
    let row = s * wq * 4;
    let plane = hp * row;
    let at = |yp: usize, xp: usize| yp * row + (xp % s) * wq * 4 + (xp / s) * 4;
    for j in 0..planes {
        let quad = |c: usize| if c < cin { p.pad_value(c) as u8 } else { 0 };
        let pq = u32::from_le_bytes(core::array::from_fn(|i| quad(4 * j + i)));
        let tj = t.add(j * plane);
        for yp in 0..hp {
            for xp in 0..wp {
                let (y, x) = (yp.wrapping_sub(pad), xp.wrapping_sub(pad));
                let q = if y < p.input.h && x < p.input.w {
                    let src = input.as_ptr().add((y * p.input.w + x) * cin + 4 * j) as *const u8;
                    if cin >= 4 {
                        (src as *const u32).read_unaligned()
                    } else {
                        // C_in < 4: one plane, the missing channels 0.
                        u32::from_le_bytes(core::array::from_fn(|i| {
                            if i < cin {
                                src.add(i).read()
                            } else {
                                0
                            }
                        }))
                    }
                } else {
                    pq
                };
                (tj.add(at(yp, xp)) as *mut u32).write_unaligned(q);
            }
        }
    }
    for c in 0..cout {
        let n = 31 - p.shift.get(c).clamp(-31, 30) as i64;
        let r = (1i64 << (n - 1)) + ((p.out.zero_point as i64) << n);
        epi.add(c).write(Epi {
            bias: p.bias.get(c),
            m0: p.multiplier.get(c),
            r_hi: (r >> 32) as i32,
            n_hi: n as i32 - 32,
        });
    }

    // Tap offsets within T, and where each tap's weight quads start in a weight row.
    let taps = kh * kw;
    let tap_off = |tp: usize| {
        let (ky, kx) = (tp / kw, tp % kw);
        ky * row + (kx % s) * wq * 4 + (kx / s) * 4
    };
    let wstep = if cin >= 4 { 4 } else { cin };
    let (lo, hi) = (
        _mm256_set1_epi32(p.out.act_min.max(-128)),
        _mm256_set1_epi32(p.out.act_max.min(127)),
    );
    let ones = _mm256_set1_epi16(1);
    let w = p.weights.as_ptr();
    let mut pi = 0;
    while pi < npix {
        // Two runs of 4 output pixels, each within one row (wo is a multiple of 4).
        let base = |q: usize| {
            let (oy, ox) = (q / wo, q % wo);
            t.add(oy * s * row + ox * 4) as *const u8
        };
        let (b0, b1) = (base(pi), base((pi + 4).min(npix - 4)));
        // C_out is a multiple of CH (lanes_supported).
        let mut co = 0;
        while co < cout {
            let mut acc: [__m256i; CH] =
                core::array::from_fn(|c| _mm256_set1_epi32((*epi.add(co + c)).bias));
            let wc = w.add(co * k);
            for tp in 0..taps {
                let o = tap_off(tp);
                // C_in < 4: a quad runs into the next tap's weights (meeting zeros in T); at
                // the row's last tap it is built without passing the row's end.
                let last = cin < 4 && tp + 1 == taps;
                for j in 0..planes {
                    let x = _mm256_inserti128_si256::<1>(
                        _mm256_castsi128_si256(_mm_loadu_si128(b0.add(o + j * plane) as *const _)),
                        _mm_loadu_si128(b1.add(o + j * plane) as *const _),
                    );
                    let ax = _mm256_abs_epi8(x);
                    let wq = wc.add(tp * cin + 4 * j);
                    let quad = |c: usize| -> i32 {
                        let src = wq.add(c * k);
                        if last {
                            let mut q = 0u32;
                            for i in 0..wstep {
                                q |= (src.add(i).read() as u8 as u32) << (8 * i);
                            }
                            q as i32
                        } else {
                            (src as *const i32).read_unaligned()
                        }
                    };
                    for (c, a) in acc.iter_mut().enumerate() {
                        let sw = _mm256_sign_epi8(_mm256_set1_epi32(quad(c)), x);
                        *a = if VNNI {
                            // Only in conv2d_lanes_vnni, which needs AVX-VNNI.
                            _mm256_dpbusd_avx_epi32(*a, ax, sw)
                        } else {
                            let pair = _mm256_maddubs_epi16(ax, sw);
                            _mm256_add_epi32(*a, _mm256_madd_epi16(pair, ones))
                        };
                    }
                }
            }
            for (c, &a) in acc.iter().enumerate() {
                let e = epi.add(co + c).read();
                let m = _mm256_set1_epi32(e.m0);
                let ev = _mm256_mul_epi32(a, m);
                let od = _mm256_mul_epi32(_mm256_srli_epi64::<32>(a), m);
                // The high halves of the 8 products, in lane order.
                let h = _mm256_blend_epi32::<0xAA>(_mm256_srli_epi64::<32>(ev), od);
                let y = _mm256_sra_epi32(
                    _mm256_add_epi32(h, _mm256_set1_epi32(e.r_hi)),
                    _mm_cvtsi32_si128(e.n_hi),
                );
                let y = _mm256_min_epi32(_mm256_max_epi32(y, lo), hi);
                let b = _mm256_packs_epi16(_mm256_packs_epi32(y, y), _mm256_setzero_si256());
                let bytes = (_mm256_extract_epi32::<0>(b) as u32 as u64)
                    | ((_mm256_extract_epi32::<4>(b) as u32 as u64) << 32);
                let n = (npix - pi).min(V);
                let dst = output.as_mut_ptr().add(pi * cout + co + c);
                for l in 0..n {
                    dst.add(l * cout).write((bytes >> (8 * l)) as i8);
                }
            }
            co += CH;
        }
        pi += V;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::test_util::conv_matches_scalar;
    use crate::kernels::Kernels;
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
        type Lanes = unsafe fn(&ConvParams, &[i8], &mut [i8], &mut [u8]) -> bool;
        let mut kernels: Vec<Lanes> = Vec::new();
        if Kernels::avx2_available() {
            kernels.push(conv2d_lanes_avx2);
        }
        if Kernels::avx_vnni_available() {
            kernels.push(conv2d_lanes_vnni);
        }
        for f in kernels {
            conv_matches_scalar(
                cin,
                cout,
                h,
                w,
                k,
                k,
                stride,
                pad,
                seed,
                &mut |p, x, y, s| {
                    if !unsafe { f(p, x, y, s) } {
                        assert!(!lanes_covered(p), "covered but declined");
                        crate::kernels::scalar::conv2d(p, x, y);
                    }
                },
            );
        }
    }

    #[test]
    fn resnet_shapes() {
        for &(cin, cout, hw, k, s, pad) in &[
            (3, 64, 32, 3, 1, 1),
            (1, 64, 32, 3, 1, 1),
            (64, 64, 32, 3, 1, 1),
            (64, 128, 32, 3, 2, 1),
            (64, 128, 32, 1, 2, 0),
            (128, 128, 16, 3, 1, 1),
            (256, 512, 8, 3, 2, 1),
            (512, 512, 4, 3, 1, 1),
        ] {
            check(cin, cout, hw, hw, k, s, pad, 11 + cin as u64);
        }
    }

    proptest! {
        #[test]
        fn lanes_equals_scalar(
            cin in prop::sample::select(vec![1usize, 2, 3, 4, 8, 12, 16, 20]),
            cout in prop::sample::select(vec![8usize, 16, 24]),
            h in 1usize..14, w in 1usize..24,
            k in prop::sample::select(vec![1usize, 3, 5]),
            stride in 1usize..=2, pad in 0usize..=2, seed in any::<u64>(),
        ) {
            check(cin, cout, h, w, k, stride, pad, seed);
        }
    }
}
