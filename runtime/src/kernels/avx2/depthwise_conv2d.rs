//! depthwise_conv2d, AVX2 (all three x86 sets; the VNNI set puts two output pixels in each
//! AVX-512 vector): depth multiplier 1, channels in lanes.
//!
//! The padded input the outputs read is widened once into scratch as i16 with the input zero
//! point taken off (so padding is 0; the bias gains z·Σw), 16 channels per block
//! ([`SimdDepthwise`]). Taps go in pairs: `vpunpck{l,h}wd` interleaves two taps' 16 channels
//! and `vpmaddwd` with the pair's interleaved weights adds both products per channel into i32
//! lanes, exactly (|x − z|·|w| ≤ 255·128; `vpdpwssd`, the same sum, in the AVX-512 form).
//! The two accumulators hold channels 0–3, 8–11 and
//! 4–7, 12–15, the order `vpackssdw` puts back; the requantization constants are laid out in
//! it ([`HighRequant`]'s i32-lane form, per channel, in either rounding).

use core::arch::x86_64::*;
use core::ops::Range;

use crate::kernels::vnni::short_requant::short_requant;
use crate::kernels::{
    scalar, DepthwiseParams, Layout, SimdDepthwise, DW_BLOCK, DW_EPI_BYTES, DW_MAX_TAPS,
};
use crate::requant::{FusedRequant, HighRequant, Rounding};

/// The channel of element `e` of accumulator `v` (0 or 1) of a block.
const fn lane_channel(v: usize, e: usize) -> usize {
    v * 4 + (e % 4) + (e / 4) * 8
}

/// One accumulator's requantization constants: 8 i32 vectors, then 6 i64 vectors (the even
/// elements', then the odd ones'). `r_hi` and `n_hi` serve the usual shifts' form
/// ([`requant_hi`]); the rest [`HighRequant`]'s.
#[repr(C, align(32))]
struct Epi {
    bias: [i32; 8],
    r_hi: [i32; 8],
    n_hi: [i32; 8],
    acc_min: [i32; 8],
    acc_max: [i32; 8],
    ls: [i32; 8],
    m0: [i32; 8],
    n: [i32; 8],
    pre: [[i64; 4]; 2],
    round: [[i64; 4]; 2],
    corr: [[i64; 4]; 2],
}

const _: () = assert!(2 * core::mem::size_of::<Epi>() == DW_EPI_BYTES);

/// Same bytes as [`scalar::depthwise_conv2d`]; `scratch` holds `SimdDepthwise::bytes` (with
/// less, or an op it does not cover, the scalar reference runs).
///
/// # Safety
/// The CPU must support AVX2.
pub unsafe fn depthwise_conv2d(
    p: &DepthwiseParams,
    input: &[i8],
    output: &mut [i8],
    scratch: &mut [u8],
) {
    if !depthwise_conv2d_rows(p, input, output, scratch, 0..p.output.h) {
        scalar::depthwise_conv2d(p, input, output)
    }
}

/// [`depthwise_conv2d`] with two output pixels per AVX-512 vector (the VNNI set), where every
/// channel has the usual shifts ([`requant_hi`]'s form); the same bytes.
///
/// # Safety
/// The CPU must support AVX2 and AVX-512 F, BW, VL and VNNI.
pub unsafe fn depthwise_conv2d_512(
    p: &DepthwiseParams,
    input: &[i8],
    output: &mut [i8],
    scratch: &mut [u8],
) {
    if !depthwise_conv2d_512_rows(p, input, output, scratch, 0..p.output.h) {
        scalar::depthwise_conv2d(p, input, output)
    }
}

/// Output rows `rows` of [`depthwise_conv2d`] into `output` (those rows, HWC), for threads
/// sharing an image: only the input rows they read are widened. `false` (nothing written)
/// where the kernel does not cover the call.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub unsafe fn depthwise_conv2d_rows(
    p: &DepthwiseParams,
    input: &[i8],
    output: &mut [i8],
    scratch: &mut [u8],
    rows: Range<usize>,
) -> bool {
    run::<false>(p, input, output, scratch, rows)
}

/// [`depthwise_conv2d_rows`] of [`depthwise_conv2d_512`].
///
/// # Safety
/// The CPU must support AVX2 and AVX-512 F, BW, VL and VNNI.
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn depthwise_conv2d_512_rows(
    p: &DepthwiseParams,
    input: &[i8],
    output: &mut [i8],
    scratch: &mut [u8],
    rows: Range<usize>,
) -> bool {
    run::<true>(p, input, output, scratch, rows)
}

/// The kernel over output rows `rows` (`output` holds those rows); `WIDE`: pairs of pixels in
/// AVX-512 vectors (the CPU has AVX-512 F and BW). `false` where it does not cover the call.
#[inline(always)]
unsafe fn run<const WIDE: bool>(
    p: &DepthwiseParams,
    input: &[i8],
    output: &mut [i8],
    scratch: &mut [u8],
    rows: Range<usize>,
) -> bool {
    let (ho, row) = (p.output.h, p.output.w * p.output.c);
    if rows.start >= rows.end || rows.end > ho || output.len() < (rows.end - rows.start) * row {
        return rows.start == rows.end && rows.end <= ho;
    }
    // The full output's length stands for the rows' (checked above).
    let Some(l) = SimdDepthwise::for_call(p, input.len(), p.output.len(), scratch.len()) else {
        return false;
    };
    let taps = p.window.kernel_h * p.window.kernel_w;
    let base = scratch.as_mut_ptr();
    let base = base.add(base.align_offset(32));
    let image = base as *mut i16;
    // The padded input rows these output rows read.
    let sh = p.window.stride_h;
    let read = rows.start * sh..((rows.end - 1) * sh + p.window.kernel_h).min(l.rows);

    // The weights and constants packed at prepare, else laid out the same way in scratch.
    let (weights, epi, hi) = match packed_of(p, &l) {
        Some(pk) => {
            let w = pk.as_ptr();
            let flags = *w.add(l.weight_bytes() + l.blocks * DW_EPI_BYTES);
            (
                w as *const __m256i,
                w.add(l.weight_bytes()) as *const Epi,
                flags == 1,
            )
        }
        None => {
            let w = base.add(l.image_bytes());
            let hi = pack(p, &l, w);
            (
                w as *const __m256i,
                w.add(l.weight_bytes()) as *const Epi,
                hi,
            )
        }
    };
    // The AVX-512 loop (the usual shifts) reads the image block by block: each block's
    // plane of rows × columns × 16 channels apart (8 channels: 8 per pixel, four pixels per
    // vector); the others a pixel's blocks together.
    let block_major = WIDE && hi;
    let eight = block_major && p.output.c == 8;
    let unit = if eight {
        widen_eight(p, &l, input, image, read);
        8
    } else if block_major {
        widen::<true>(p, &l, input, image, read);
        DW_BLOCK
    } else {
        widen::<false>(p, &l, input, image, read);
        l.blocks * DW_BLOCK
    };
    // Each tap pair's offsets in i16 elements from an output's top-left input pixel.
    let mut offsets = [(0usize, 0usize); DW_MAX_TAPS.div_ceil(2)];
    let kw = p.window.kernel_w;
    for (j, o) in offsets.iter_mut().take(l.pairs).enumerate() {
        let at = |t: usize| ((t / kw) * l.cols + t % kw) * unit;
        // An odd count's last pair repeats its tap against a zero weight.
        *o = (at(2 * j), at((2 * j + 1).min(taps - 1)));
    }
    let job = Job {
        p,
        l,
        image,
        weights,
        epi,
        offsets: &offsets[..l.pairs],
        lim: Limits::new(p),
        out: output.as_mut_ptr(),
        rows,
    };
    match (hi, p.out.rounding, WIDE) {
        (true, Rounding::Single, true) if eight => job.pixels_eight::<false>(),
        (true, Rounding::Double, true) if eight => job.pixels_eight::<true>(),
        (true, Rounding::Single, true) => job.pixels_512::<false>(),
        (true, Rounding::Double, true) => job.pixels_512::<true>(),
        (true, Rounding::Single, false) => job.pixels::<HI_SINGLE>(),
        (true, Rounding::Double, false) => job.pixels::<HI_DOUBLE>(),
        (false, _, _) => job.pixels::<GENERAL>(),
    }
    true
}

/// Writes the weights ([`pack_weights`]) and the constants ([`fill_epi`]) at `dst` (32-byte
/// aligned, `weight_bytes + blocks · DW_EPI_BYTES` bytes); returns whether every channel has
/// the usual shifts (every n from 33: the shorter epilogue).
fn pack(p: &DepthwiseParams, l: &SimdDepthwise, dst: *mut u8) -> bool {
    let hi = (0..p.output.c).all(|ch| fused(p, ch).n >= 33);
    pack_weights(p, l, dst as *mut __m256i);
    // SAFETY: the constants' region follows the weights' and holds `blocks` pairs of `Epi`,
    // 32-byte aligned (the weights' bytes are a multiple of 64).
    let epi = unsafe { dst.add(l.weight_bytes()) as *mut Epi };
    for b in 0..l.blocks {
        // SAFETY: as above.
        unsafe {
            fill_epi(p, b, &mut *epi.add(2 * b), 0, !hi);
            fill_epi(p, b, &mut *epi.add(2 * b + 1), 1, !hi);
        }
    }
    hi
}

/// Bytes of the packed layout of `p` (`kernels::packed`'s `X86Depthwise`): [`pack`]'s
/// weights and constants, then 32 bytes whose first says whether the shifts are the usual ones;
/// `None` where the kernel does not cover `p`.
pub fn depthwise_packed_bytes(p: &DepthwiseParams) -> Option<usize> {
    // Covered as a call with buffers that fit.
    let l = SimdDepthwise::for_call(p, p.input.len(), p.output.len(), usize::MAX)?;
    Some(l.weight_bytes() + l.blocks * DW_EPI_BYTES + 32)
}

/// Packs `p` into `dst` (32-byte aligned, [`depthwise_packed_bytes`] long).
pub fn depthwise_pack(p: &DepthwiseParams, dst: &mut [u8]) {
    let l = SimdDepthwise::new(&p.geometry());
    let flags = l.weight_bytes() + l.blocks * DW_EPI_BYTES;
    assert!(dst.len() > flags && (dst.as_ptr() as usize).is_multiple_of(32));
    let hi = pack(p, &l, dst.as_mut_ptr());
    dst[flags] = hi as u8;
}

/// `p`'s packed weights and constants, where packed for this layout (aligned and long enough).
fn packed_of<'a>(p: &DepthwiseParams<'a>, l: &SimdDepthwise) -> Option<&'a [u8]> {
    let pk = p.packed.of(Layout::X86Depthwise)?;
    let ok = (pk.as_ptr() as usize).is_multiple_of(32)
        && pk.len() > l.weight_bytes() + l.blocks * DW_EPI_BYTES;
    ok.then_some(pk)
}

/// Epilogue forms: [`requant`] for any shift, [`requant_hi`] in either rounding.
const GENERAL: u8 = 0;
const HI_SINGLE: u8 = 1;
const HI_DOUBLE: u8 = 2;

/// One call's prepared scratch and output.
struct Job<'p> {
    p: &'p DepthwiseParams<'p>,
    l: SimdDepthwise,
    image: *const i16,
    weights: *const __m256i,
    epi: *const Epi,
    /// Each tap pair's offsets in i16 elements from an output's top-left input pixel.
    offsets: &'p [(usize, usize)],
    lim: Limits,
    /// Output row `rows.start`'s first pixel.
    out: *mut i8,
    /// The output rows to compute.
    rows: Range<usize>,
}

impl Job<'_> {
    /// Every output pixel of the rows, every block of channels.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn pixels<const E: u8>(&self) {
        for oy in self.rows.clone() {
            for ox in 0..self.p.output.w {
                self.pixel::<E>(oy, ox);
            }
        }
    }

    /// Output pixel (`oy`, `ox`), every block of channels.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn pixel<const E: u8>(&self, oy: usize, ox: usize) {
        let (p, l) = (self.p, &self.l);
        let (c, wo) = (p.output.c, p.output.w);
        let (sh, sw) = (p.window.stride_h, p.window.stride_w);
        let blk = l.blocks * DW_BLOCK;
        let x0 = self.image.add((oy * sh * l.cols + ox * sw) * blk);
        let y = self.out.add(((oy - self.rows.start) * wo + ox) * c);
        for b in 0..l.blocks {
            let (mut a0, mut a1) = (_mm256_setzero_si256(), _mm256_setzero_si256());
            let xb = x0.add(b * DW_BLOCK);
            let wb = self.weights.add(b * 2);
            for (j, &(o0, o1)) in self.offsets.iter().enumerate() {
                let xa = _mm256_loadu_si256(xb.add(o0) as *const __m256i);
                let xc = _mm256_loadu_si256(xb.add(o1) as *const __m256i);
                let w = wb.add(j * l.blocks * 2);
                let lo = _mm256_unpacklo_epi16(xa, xc);
                let hi = _mm256_unpackhi_epi16(xa, xc);
                a0 = _mm256_add_epi32(a0, _mm256_madd_epi16(lo, *w));
                a1 = _mm256_add_epi32(a1, _mm256_madd_epi16(hi, *w.add(1)));
            }
            let (e0, e1) = (&*self.epi.add(2 * b), &*self.epi.add(2 * b + 1));
            let (r0, r1) = match E {
                GENERAL => (requant(a0, e0, &self.lim), requant(a1, e1, &self.lim)),
                HI_SINGLE => (
                    requant_hi::<false>(a0, e0, &self.lim),
                    requant_hi::<false>(a1, e1, &self.lim),
                ),
                _ => (
                    requant_hi::<true>(a0, e0, &self.lim),
                    requant_hi::<true>(a1, e1, &self.lim),
                ),
            };
            // i16 lanes [0–3, 4–7 | 8–11, 12–15]: channel order.
            let h = _mm256_packs_epi32(r0, r1);
            let bytes =
                _mm_packs_epi16(_mm256_castsi256_si128(h), _mm256_extracti128_si256::<1>(h));
            let n = (c - b * DW_BLOCK).min(DW_BLOCK);
            if n == DW_BLOCK {
                _mm_storeu_si128(y.add(b * DW_BLOCK) as *mut __m128i, bytes);
            } else {
                let mut buf = [0i8; DW_BLOCK];
                _mm_storeu_si128(buf.as_mut_ptr() as *mut __m128i, bytes);
                core::ptr::copy_nonoverlapping(buf.as_ptr(), y.add(b * DW_BLOCK), n);
            }
        }
    }
}

impl Job<'_> {
    /// Every output pixel of the rows, two per AVX-512 vector (consecutive in row-major
    /// order, the first in the low 256 bits; an odd count's last one paired with itself),
    /// block by block of channels, over the block-major image ([`widen`]): a block's weights
    /// and constants stay in registers over all its pixels, and two neighbours of a row with
    /// stride 1 are one 512-bit load (a pair across rows, or with a wider stride, two 256-bit
    /// loads). The same steps as [`Job::pixel`] with the weights and constants in both
    /// halves. Every channel has the usual shifts.
    #[inline]
    #[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn pixels_512<const DOUBLE: bool>(&self) {
        for b in 0..self.l.blocks {
            // 3×3 windows (five tap pairs, the models' depthwise convs) with the pairs
            // unrolled; others with their count.
            match self.offsets.len() {
                5 => self.block_512::<DOUBLE, 5>(b),
                _ => self.block_512::<DOUBLE, 0>(b),
            }
        }
    }

    /// Block `b` of [`Job::pixels_512`]; `P`: the tap pairs, 0 for `offsets.len()`.
    #[inline]
    #[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn block_512<const DOUBLE: bool, const P: usize>(&self, b: usize) {
        let (p, l) = (self.p, &self.l);
        let (c, wo) = (p.output.c, p.output.w);
        let (sh, sw) = (p.window.stride_h, p.window.stride_w);
        let pairs = if P > 0 { P } else { self.offsets.len() };
        let both = |v: *const __m256i| _mm512_broadcast_i64x4(_mm256_load_si256(v));
        let mut w = [[_mm512_setzero_si512(); 2]; DW_MAX_TAPS.div_ceil(2)];
        for (j, wj) in w.iter_mut().enumerate().take(pairs) {
            let at = self.weights.add((j * l.blocks + b) * 2);
            *wj = [both(at), both(at.add(1))];
        }
        let e = [0, 1].map(|v| EpiV::new(&*self.epi.add(2 * b + v)));
        let lim = (
            _mm512_broadcast_i64x4(self.lim.lo),
            _mm512_broadcast_i64x4(self.lim.hi),
            _mm512_broadcast_i64x4(self.lim.zo),
        );
        let plane = self.image.add(b * l.rows * l.cols * DW_BLOCK);
        let at_in = |(oy, ox): (usize, usize)| plane.add((oy * sh * l.cols + ox * sw) * DW_BLOCK);
        let n = (self.rows.end - self.rows.start) * wo;
        let at = b * DW_BLOCK;
        let mask = ((1u32 << (c - at).min(DW_BLOCK)) - 1) as __mmask16;
        let next = |px| after(px, 1, wo);
        let (mut px, mut i) = ((self.rows.start, 0usize), 0usize);
        while i < n {
            let px1 = if i + 1 < n { next(px) } else { px };
            let (x0, x1) = (at_in(px), at_in(px1));
            let taps = &self.offsets[..pairs];
            let (a0, a1) = if sw == 1 && px1.0 == px.0 && px1.1 == px.1 + 1 {
                pair_sums(
                    taps,
                    &w,
                    |o| _mm512_loadu_si512(x0.add(o) as *const __m512i),
                )
            } else {
                pair_sums(taps, &w, |o| {
                    let lo = _mm256_loadu_si256(x0.add(o) as *const __m256i);
                    let hi = _mm256_loadu_si256(x1.add(o) as *const __m256i);
                    _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi)
                })
            };
            let r0 = e[0].requant::<DOUBLE>(a0, lim);
            let r1 = e[1].requant::<DOUBLE>(a1, lim);
            // i16 lanes: pixel 0's channels 0–7, 8–15, then pixel 1's.
            let bytes = _mm512_cvtsepi16_epi8(_mm512_packs_epi32(r0, r1));
            // Masked stores: a copy of a runtime length is a call to memcpy.
            let y = self.out.add(i * c + at);
            _mm_mask_storeu_epi8(y, mask, _mm256_castsi256_si128(bytes));
            if i + 1 < n {
                _mm_mask_storeu_epi8(y.add(c), mask, _mm256_extracti128_si256::<1>(bytes));
            }
            px = next(px1);
            i += 2;
        }
    }
}

impl Job<'_> {
    /// [`Job::pixels_512`] for 8 channels, over [`widen_eight`]'s image: four consecutive
    /// pixels per AVX-512 vector (one 512-bit load per tap where they lie in one row at
    /// stride 1), each 128-bit lane a pixel's 8 channels as the 16-channel loop's low halves
    /// order them, so the block's weights and constants are its channels 0–7 in every lane.
    #[inline]
    #[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn pixels_eight<const DOUBLE: bool>(&self) {
        let (p, l) = (self.p, &self.l);
        let wo = p.output.w;
        let (sh, sw) = (p.window.stride_h, p.window.stride_w);
        let pairs = self.offsets.len();
        // A 256-bit vector's low 128 bits (channels 0–3 of its accumulator) in all four lanes.
        let four = |v: *const __m256i| _mm512_broadcast_i32x4(_mm256_castsi256_si128(*v));
        let mut w = [[_mm512_setzero_si512(); 2]; DW_MAX_TAPS.div_ceil(2)];
        for (j, wj) in w.iter_mut().enumerate().take(pairs) {
            let at = self.weights.add(j * l.blocks * 2);
            *wj = [four(at), four(at.add(1))];
        }
        let e = [0, 1].map(|v| EpiV::eight(&*self.epi.add(v)));
        let lim = (
            _mm512_broadcast_i64x4(self.lim.lo),
            _mm512_broadcast_i64x4(self.lim.hi),
            _mm512_broadcast_i64x4(self.lim.zo),
        );
        let at_in = |(oy, ox): (usize, usize)| self.image.add((oy * sh * l.cols + ox * sw) * 8);
        let n = (self.rows.end - self.rows.start) * wo;
        let (mut px, mut i) = ((self.rows.start, 0usize), 0usize);
        while i < n {
            let m = (n - i).min(4);
            let (a0, a1) = if sw == 1 && px.1 + 4 <= wo {
                let x0 = at_in(px);
                pair_sums(&self.offsets[..pairs], &w, |o| {
                    _mm512_loadu_si512(x0.add(o) as *const __m512i)
                })
            } else {
                // Pixels past the band's last repeat it; their outputs are not stored.
                let mut four = [px; 4];
                for k in 1..m {
                    four[k] = after(four[k - 1], 1, wo);
                }
                for k in m..4 {
                    four[k] = four[m - 1];
                }
                let x = four.map(at_in);
                pair_sums(&self.offsets[..pairs], &w, |o| {
                    let v = |k: usize| _mm_loadu_si128(x[k].add(o) as *const __m128i);
                    let lo = _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(v(0)), v(1));
                    let hi = _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(v(2)), v(3));
                    _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi)
                })
            };
            let r0 = e[0].requant::<DOUBLE>(a0, lim);
            let r1 = e[1].requant::<DOUBLE>(a1, lim);
            // Each 128-bit lane: its pixel's channels 0–3, then 4–7.
            let bytes = _mm512_cvtsepi16_epi8(_mm512_packs_epi32(r0, r1));
            let mask = (u32::MAX >> (32 - 8 * m)) as __mmask32;
            _mm256_mask_storeu_epi8(self.out.add(i * 8), mask, bytes);
            i += m;
            px = after(px, m, wo);
        }
    }
}

/// The output pixel `m` after (`oy`, `ox`) in row-major order, rows `wo` wide.
#[inline(always)]
fn after((mut oy, ox): (usize, usize), m: usize, wo: usize) -> (usize, usize) {
    let mut ox = ox + m;
    while ox >= wo {
        ox -= wo;
        oy += 1;
    }
    (oy, ox)
}

/// The two accumulators of a pair of pixels: for each tap pair's offsets, `two(offset)` the
/// pixels' 16 channels side by side, interleaved tap by tap against the pair's weights.
#[inline]
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn pair_sums(
    taps: &[(usize, usize)],
    w: &[[__m512i; 2]],
    two: impl Fn(usize) -> __m512i,
) -> (__m512i, __m512i) {
    let (mut a0, mut a1) = (_mm512_setzero_si512(), _mm512_setzero_si512());
    for (&(o0, o1), wj) in taps.iter().zip(w) {
        let (xa, xc) = (two(o0), two(o1));
        a0 = _mm512_dpwssd_epi32(a0, _mm512_unpacklo_epi16(xa, xc), wj[0]);
        a1 = _mm512_dpwssd_epi32(a1, _mm512_unpackhi_epi16(xa, xc), wj[1]);
    }
    (a0, a1)
}

/// One accumulator's constants of the usual shifts ([`requant_hi`]'s) in both halves of
/// AVX-512 vectors, loaded once per block.
struct EpiV {
    bias: __m512i,
    m0: __m512i,
    r_hi: __m512i,
    n_hi: __m512i,
}

impl EpiV {
    #[inline]
    #[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl")]
    unsafe fn new(e: &Epi) -> Self {
        EpiV::loaded(e, |a| {
            _mm512_broadcast_i64x4(_mm256_load_si256(a.as_ptr() as *const __m256i))
        })
    }

    /// The constants of an 8-channel block's accumulator: its channels 0–3 in every 128-bit
    /// lane ([`Job::pixels_eight`]).
    #[inline]
    #[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl")]
    unsafe fn eight(e: &Epi) -> Self {
        EpiV::loaded(e, |a| {
            _mm512_broadcast_i32x4(_mm_load_si128(a.as_ptr() as *const __m128i))
        })
    }

    /// Each constant of `e` through `ld`.
    #[inline(always)]
    fn loaded(e: &Epi, ld: impl Fn(&[i32; 8]) -> __m512i) -> Self {
        EpiV {
            bias: ld(&e.bias),
            m0: ld(&e.m0),
            r_hi: ld(&e.r_hi),
            n_hi: ld(&e.n_hi),
        }
    }

    /// [`requant_hi`] on 16 lanes; `lim` the clamp, less the zero point, and the zero point.
    #[inline]
    #[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl")]
    unsafe fn requant<const DOUBLE: bool>(
        &self,
        sum: __m512i,
        lim: (__m512i, __m512i, __m512i),
    ) -> __m512i {
        let x = _mm512_add_epi32(sum, self.bias);
        let r = short_requant::<DOUBLE>(x, self.m0, self.r_hi, self.n_hi);
        let r = _mm512_min_epi32(_mm512_max_epi32(r, lim.0), lim.1);
        _mm512_add_epi32(r, lim.2)
    }
}

/// The output clamp, less the zero point, and the zero point.
struct Limits {
    lo: __m256i,
    hi: __m256i,
    zo: __m256i,
}

impl Limits {
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn new(p: &DepthwiseParams) -> Self {
        let zo = p.out.zero_point;
        // Clamped before the zero point is added, so nothing overflows; `vpackss*` then
        // saturates to i8 as the reference's last clamp does.
        let lo = p.out.act_min.max(-128).saturating_sub(zo);
        let hi = p.out.act_max.min(127).saturating_sub(zo);
        Limits {
            lo: _mm256_set1_epi32(lo),
            hi: _mm256_set1_epi32(hi),
            zo: _mm256_set1_epi32(zo),
        }
    }
}

/// The 8 sums of one accumulator, biased and requantized (`HighRequant::apply`), clamped, with
/// the zero point.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn requant(sum: __m256i, e: &Epi, lim: &Limits) -> __m256i {
    let ld = |a: &[i32; 8]| _mm256_load_si256(a.as_ptr() as *const __m256i);
    let ld64 = |a: &[i64; 4]| _mm256_load_si256(a.as_ptr() as *const __m256i);
    let mut x = _mm256_add_epi32(sum, ld(&e.bias));
    x = _mm256_min_epi32(_mm256_max_epi32(x, ld(&e.acc_min)), ld(&e.acc_max));
    x = _mm256_sllv_epi32(x, ld(&e.ls));
    let m0 = ld(&e.m0);
    // t = x·M0·2^pre + round − [x < 0]·corr per 64-bit lane (corr is 0 or 2^31: x's bit 31).
    let t = |x: __m256i, m0: __m256i, k: usize| {
        let p = _mm256_sllv_epi64(_mm256_mul_epi32(x, m0), ld64(&e.pre[k]));
        let p = _mm256_add_epi64(p, ld64(&e.round[k]));
        _mm256_sub_epi64(p, _mm256_and_si256(x, ld64(&e.corr[k])))
    };
    let even = t(x, m0, 0);
    let odd = t(_mm256_srli_epi64::<32>(x), _mm256_srli_epi64::<32>(m0), 1);
    let high = _mm256_blend_epi32::<0xAA>(_mm256_srli_epi64::<32>(even), odd);
    let r = _mm256_srav_epi32(high, ld(&e.n));
    let r = _mm256_min_epi32(_mm256_max_epi32(r, lim.lo), lim.hi);
    _mm256_add_epi32(r, lim.zo)
}

/// [`requant`] where every channel's n is at least 33 (`FusedRequant`'s n; the usual shifts,
/// from −2 down): `(P + round − [P < 0]·corr) >> n` is `(((P + b) >> 32) + r_hi) >> (n − 32)`,
/// b what lies below 2^32 less the correction (nothing for the single rounding, ±2^30 by P's
/// sign for the `DOUBLE`), with P = acc·M0 (no left shift there).
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn requant_hi<const DOUBLE: bool>(sum: __m256i, e: &Epi, lim: &Limits) -> __m256i {
    let ld = |a: &[i32; 8]| _mm256_load_si256(a.as_ptr() as *const __m256i);
    let x = _mm256_add_epi32(sum, ld(&e.bias));
    let m0 = ld(&e.m0);
    let below = |p: __m256i| {
        if DOUBLE {
            let neg = _mm256_cmpgt_epi64(_mm256_setzero_si256(), p);
            let b = _mm256_blendv_epi8(
                _mm256_set1_epi64x(1 << 30),
                _mm256_set1_epi64x(-(1 << 30)),
                neg,
            );
            _mm256_add_epi64(p, b)
        } else {
            p
        }
    };
    let even = below(_mm256_mul_epi32(x, m0));
    let odd = below(_mm256_mul_epi32(
        _mm256_srli_epi64::<32>(x),
        _mm256_srli_epi64::<32>(m0),
    ));
    let high = _mm256_blend_epi32::<0xAA>(_mm256_srli_epi64::<32>(even), odd);
    let r = _mm256_srav_epi32(_mm256_add_epi32(high, ld(&e.r_hi)), ld(&e.n_hi));
    let r = _mm256_min_epi32(_mm256_max_epi32(r, lim.lo), lim.hi);
    _mm256_add_epi32(r, lim.zo)
}

/// Block `b`'s accumulator `v` constants (the [`requant`] ones only where `general`);
/// channels past C get zeros (their outputs are not stored).
fn fill_epi(p: &DepthwiseParams, b: usize, e: &mut Epi, v: usize, general: bool) {
    let taps = p.window.kernel_h * p.window.kernel_w;
    for i in 0..8 {
        let ch = b * DW_BLOCK + lane_channel(v, i);
        let (bias, f, h) = if ch < p.output.c {
            // The reference sums x·w; the image holds x − z: z·Σw goes into the bias
            // (wrapping, as the reference's sum).
            let sw = (0..taps).fold(0i32, |a, t| {
                a.wrapping_add(p.weights[t * p.output.c + ch] as i32)
            });
            let h = if general {
                HighRequant::new(p.multiplier.get(ch), p.shift.get(ch), p.out.rounding)
            } else {
                HighRequant::default()
            };
            let bias = p.bias.get(ch).wrapping_add(sw.wrapping_mul(zero_point(p)));
            (bias, fused(p, ch), h)
        } else {
            (0, FusedRequant::default(), HighRequant::default())
        };
        e.bias[i] = bias;
        e.r_hi[i] = (f.round >> 32) as i32;
        e.n_hi[i] = f.n as i32 - 32;
        e.acc_min[i] = h.acc_min;
        e.acc_max[i] = h.acc_max;
        e.ls[i] = h.ls as i32;
        e.m0[i] = f.m0;
        e.n[i] = h.n as i32;
        let (k, at) = (i % 2, i / 2);
        e.pre[k][at] = h.pre as i64;
        e.round[k][at] = h.round;
        e.corr[k][at] = h.corr;
    }
}

/// Channel `ch`'s requantization in [`FusedRequant`]'s form.
fn fused(p: &DepthwiseParams, ch: usize) -> FusedRequant {
    FusedRequant::new(p.multiplier.get(ch), p.shift.get(ch), p.out.rounding)
}

/// The input zero point as the reference pads with it.
fn zero_point(p: &DepthwiseParams) -> i32 {
    p.input_zero_point.clamp(-128, 127)
}

/// Padded input rows `rows` as i16, x − z, 0 for padding and past C: block by block of
/// [`DW_BLOCK`] channels, at `((row · cols + col) · blocks + block) · 16` (a pixel's blocks
/// together) or, `BLOCK_MAJOR`, at `((block · rows + row) · cols + col) · 16` (each block's
/// plane apart).
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn widen<const BLOCK_MAJOR: bool>(
    p: &DepthwiseParams,
    l: &SimdDepthwise,
    input: &[i8],
    image: *mut i16,
    rows: Range<usize>,
) {
    let (c, h, w) = (p.input.c, p.input.h, p.input.w);
    let (top, left) = (p.window.pad_top, p.window.pad_left);
    let z = zero_point(p);
    let zv = _mm256_set1_epi16(z as i16);
    for r in rows {
        let iy = r.wrapping_sub(top);
        for col in 0..l.cols {
            let ix = col.wrapping_sub(left);
            let inside = iy < h && ix < w;
            let src = input
                .as_ptr()
                .add(if inside { (iy * w + ix) * c } else { 0 });
            for b in 0..l.blocks {
                let dst = image.add(if BLOCK_MAJOR {
                    ((b * l.rows + r) * l.cols + col) * DW_BLOCK
                } else {
                    ((r * l.cols + col) * l.blocks + b) * DW_BLOCK
                });
                let ci = b * DW_BLOCK;
                if !inside {
                    core::ptr::write_bytes(dst, 0, DW_BLOCK);
                } else if ci + DW_BLOCK <= c {
                    let v = _mm256_cvtepi8_epi16(_mm_loadu_si128(src.add(ci) as *const __m128i));
                    _mm256_storeu_si256(dst as *mut __m256i, _mm256_sub_epi16(v, zv));
                } else {
                    for k in 0..DW_BLOCK {
                        *dst.add(k) = if ci + k < c {
                            (*src.add(ci + k) as i32 - z) as i16
                        } else {
                            0
                        };
                    }
                }
            }
        }
    }
}

/// [`widen`] of an 8-channel input (one block), 8 values per pixel at `(row · cols + col) · 8`:
/// four pixels in an AVX-512 vector.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn widen_eight(
    p: &DepthwiseParams,
    l: &SimdDepthwise,
    input: &[i8],
    image: *mut i16,
    rows: Range<usize>,
) {
    let (h, w) = (p.input.h, p.input.w);
    let (top, left) = (p.window.pad_top, p.window.pad_left);
    let zv = _mm_set1_epi16(zero_point(p) as i16);
    for r in rows {
        let iy = r.wrapping_sub(top);
        for col in 0..l.cols {
            let ix = col.wrapping_sub(left);
            let dst = image.add((r * l.cols + col) * 8) as *mut __m128i;
            let v = if iy < h && ix < w {
                let src = input.as_ptr().add((iy * w + ix) * 8) as *const __m128i;
                _mm_sub_epi16(_mm_cvtepi8_epi16(_mm_loadl_epi64(src)), zv)
            } else {
                _mm_setzero_si128()
            };
            _mm_storeu_si128(dst, v);
        }
    }
}

/// The weights as i16 tap pairs: for pair j and block b, two vectors (one per accumulator) of
/// (w[2j][ch], w[2j+1][ch]) per channel in the accumulator's lane order; 0 past C and for an
/// odd count's missing tap.
fn pack_weights(p: &DepthwiseParams, l: &SimdDepthwise, out: *mut __m256i) {
    let (c, taps) = (p.output.c, p.window.kernel_h * p.window.kernel_w);
    let w = |t: usize, ch: usize| -> i16 {
        if t < taps && ch < c {
            p.weights[t * c + ch] as i16
        } else {
            0
        }
    };
    for j in 0..l.pairs {
        for b in 0..l.blocks {
            for v in 0..2 {
                let mut lanes = [0i16; 16];
                for e in 0..8 {
                    let ch = b * DW_BLOCK + lane_channel(v, e);
                    lanes[2 * e] = w(2 * j, ch);
                    lanes[2 * e + 1] = w(2 * j + 1, ch);
                }
                // SAFETY: the weights region holds pairs·blocks·2 vectors, 32-byte aligned.
                unsafe {
                    let dst = out.add((j * l.blocks + b) * 2 + v) as *mut [i16; 16];
                    dst.write(lanes)
                };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::test_util::{depthwise_matches_scalar_in, depthwise_suite, ConvCase};
    use crate::kernels::{x86_scratch_bytes, Kernels, OpGeometry};

    fn check(c: &ConvCase) {
        if !Kernels::avx2_available() {
            return;
        }
        let stated = |g: &OpGeometry| {
            let n = x86_scratch_bytes(g);
            assert!(c.cout != c.cin || n > 0, "{c:?}");
            n
        };
        // SAFETY: AVX2 is available.
        depthwise_matches_scalar_in(c, &stated, &mut |p, x, y, s| unsafe {
            depthwise_conv2d(p, x, y, s)
        });
        // The weights and constants packed at prepare instead.
        // SAFETY: AVX2 is available.
        depthwise_matches_scalar_in(c, &stated, &mut |p, x, y, s| {
            with_packed(p, &mut |q| unsafe { depthwise_conv2d(q, x, y, s) })
        });
        if Kernels::vnni_available() {
            // SAFETY: AVX-512 F, BW, VL and VNNI come with the VNNI set.
            depthwise_matches_scalar_in(c, &stated, &mut |p, x, y, s| unsafe {
                depthwise_conv2d_512(p, x, y, s)
            });
            // SAFETY: as above.
            depthwise_matches_scalar_in(c, &stated, &mut |p, x, y, s| {
                with_packed(p, &mut |q| unsafe { depthwise_conv2d_512(q, x, y, s) })
            });
            // In bands of rows, as threads sharing an image run it.
            // SAFETY: as above.
            depthwise_matches_scalar_in(c, &stated, &mut |p, x, y, s| unsafe {
                in_bands::<true>(p, x, y, s)
            });
        }
        // SAFETY: AVX2 is available.
        depthwise_matches_scalar_in(c, &stated, &mut |p, x, y, s| {
            with_packed(p, &mut |q| unsafe { in_bands::<false>(q, x, y, s) })
        });
    }

    /// [`depthwise_conv2d_rows`] (`WIDE`: [`depthwise_conv2d_512_rows`]) over three bands of output rows (some empty where the
    /// output is short), each into its own rows of `y`; the scalar reference where the kernel
    /// declines the first rows.
    unsafe fn in_bands<const WIDE: bool>(
        p: &DepthwiseParams,
        x: &[i8],
        y: &mut [i8],
        s: &mut [u8],
    ) {
        let (h, row) = (p.output.h, p.output.w * p.output.c);
        let cuts = [0, h / 3, (2 * h).div_ceil(3), h];
        for b in 0..3 {
            let rows = cuts[b]..cuts[b + 1];
            let out = &mut y[rows.start * row..rows.end * row];
            let covered = if WIDE {
                depthwise_conv2d_512_rows(p, x, out, s, rows)
            } else {
                depthwise_conv2d_rows(p, x, out, s, rows)
            };
            if !covered {
                assert_eq!(cuts[b], 0, "declined a later band of {p:?}");
                return scalar::depthwise_conv2d(p, x, y);
            }
        }
    }

    /// `run` of `p` with its packed layout (32-byte aligned, as `Model::prepare_packed` gives
    /// it), where the kernel covers `p`.
    fn with_packed(p: &DepthwiseParams, run: &mut dyn FnMut(&DepthwiseParams)) {
        let Some(n) = depthwise_packed_bytes(p) else {
            return run(p);
        };
        let mut buf = vec![0xA5u8; n + 32];
        let at = buf.as_ptr().align_offset(32);
        let dst = &mut buf[at..at + n];
        depthwise_pack(p, dst);
        let q = DepthwiseParams {
            packed: crate::kernels::Packed {
                layout: Layout::X86Depthwise,
                bytes: dst,
            },
            ..*p
        };
        run(&q)
    }

    depthwise_suite!(check);

    /// Less scratch than stated: the scalar kernel, same bytes.
    #[test]
    fn short_scratch_falls_back() {
        if !Kernels::avx2_available() {
            return;
        }
        let c = ConvCase::square(5, 5, 6, 3, 1, 1, 3);
        // SAFETY: AVX2 is available.
        depthwise_matches_scalar_in(
            &c,
            &|g| x86_scratch_bytes(g) - 1,
            &mut |p, x, y, s| unsafe { depthwise_conv2d(p, x, y, s) },
        );
    }
}
