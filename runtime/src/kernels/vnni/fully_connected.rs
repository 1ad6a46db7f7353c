//! fully_connected, AVX-512 VNNI, for one image or a group of them (the interpreter's image
//! groups): each weight vector is loaded once for up to [`I`] images.
//!
//! The inputs are offset to u8 (x + 128), 64 bytes per `vpdpbusd`; a second `vpdpbusd`
//! against ones sums each row's weights once per group, so the −128·Σw correction is exact in
//! wrapping i32 (the reference's arithmetic). [`R`] rows × [`I`] images of accumulators per
//! pass; each row's 16 lanes are summed with a shuffle tree four rows at a time, and
//! [`BLOCK`] rows are requantized together with the conv's epilogue ([`FusedLanes`]), in
//! either rounding. With weights packed at prepare ([`PackedFc`]) the rows lie in the lanes
//! instead ([`packed`]). The AVX2 kernel does 16 multiply-adds per `vpmaddwd` after
//! widening both operands.

use core::arch::x86_64::*;

use super::conv2d::FusedLanes;
use crate::kernels::{scalar, ConvImage, FcParams, Layout, PackedFc, GROUP_IMAGES};
use crate::requant::{FusedRequant, OutputQuant, Rounding};

mod packed;

pub(super) use packed::rows as packed_rows;
pub(crate) use packed::{sum as input_sum, BlockEpi, Limits};

/// Rows per pass.
const R: usize = 4;
/// Images per pass.
const I: usize = 4;
/// Rows requantized together (one vector of i32).
const BLOCK: usize = 16;

/// Same bytes as [`scalar::fully_connected`].
///
/// # Safety
/// The CPU must support AVX-512 F, BW, VL and VNNI.
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn fully_connected(p: &FcParams, input: &[i8], output: &mut [i8]) {
    fully_connected_batch(p, &mut [ConvImage::new(input, output, &mut [])]);
}

/// [`fully_connected`] of every image of `imgs` (their scratch unused), each weight read once
/// per [`GROUP_IMAGES`].
///
/// # Safety
/// The CPU must support AVX-512 F, BW, VL and VNNI.
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn fully_connected_batch(p: &FcParams, imgs: &mut [ConvImage]) {
    let (k, n) = (p.k, p.n);
    let short = |m: &ConvImage| m.input.len() < k || m.output.len() < n;
    if p.weights.len() < n * k || k == 0 || imgs.iter().any(short) {
        for m in imgs.iter_mut() {
            scalar::fully_connected(p, m.input, m.output);
        }
        return;
    }
    if let Some(w) = p.packed.of(Layout::VnniFc) {
        if w.len() >= (PackedFc { k, n }).bytes() {
            return packed::run(p, w, imgs);
        }
    }
    for group in imgs.chunks_mut(GROUP_IMAGES) {
        let x: [*const i8; GROUP_IMAGES] = core::array::from_fn(|i| {
            group
                .get(i)
                .map_or(group[0].input.as_ptr(), |m| m.input.as_ptr())
        });
        let m = group.len();
        let mut j0 = 0;
        while j0 < n {
            let rows = (n - j0).min(BLOCK);
            // Row sums per image, and Σw per row, for rows j0..j0 + rows.
            let mut sums = [[0i32; BLOCK]; GROUP_IMAGES];
            let mut sw = [0i32; BLOCK];
            for r0 in (0..rows).step_by(R) {
                // Rows past the last repeat it; their sums are not used.
                let w: [*const i8; R] = core::array::from_fn(|r| {
                    p.weights.as_ptr().add((j0 + (r0 + r).min(rows - 1)) * k)
                });
                let mut i0 = 0;
                while i0 + I <= m {
                    pass::<I>(k, w, &x[i0..], &mut sums[i0..], &mut sw, r0, i0 == 0);
                    i0 += I;
                }
                while i0 < m {
                    pass::<1>(k, w, &x[i0..], &mut sums[i0..], &mut sw, r0, i0 == 0);
                    i0 += 1;
                }
            }
            let e = epi(p, j0, rows);
            for (s, img) in sums.iter().zip(group.iter_mut()) {
                let y = &mut img.output[j0..j0 + rows];
                match p.out.rounding {
                    Rounding::Single => requant::<false>(s, &sw, &e, &p.out, y),
                    Rounding::Double => requant::<true>(s, &sw, &e, &p.out, y),
                }
            }
            j0 += rows;
        }
    }
}

/// Rows `r0..r0 + R` (weight rows `w`) of images `x[..J]`: their sums into `sums[i][r0..]`,
/// and with `first` each row's Σw into `sw[r0..]`.
#[inline]
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn pass<const J: usize>(
    k: usize,
    w: [*const i8; R],
    x: &[*const i8],
    sums: &mut [[i32; BLOCK]],
    sw: &mut [i32; BLOCK],
    r0: usize,
    first: bool,
) {
    let (flip, ones) = (_mm512_set1_epi8(-128), _mm512_set1_epi8(1));
    let mut acc = [[_mm512_setzero_si512(); R]; J];
    let mut swv = [_mm512_setzero_si512(); R];
    let mut at = 0;
    while at < k {
        // Bytes past K load as 0 in both operands: nothing added.
        let mask: __mmask64 = if k - at >= 64 {
            !0
        } else {
            (1u64 << (k - at)) - 1
        };
        let xv: [__m512i; J] = core::array::from_fn(|i| {
            _mm512_maskz_mov_epi8(
                mask,
                _mm512_xor_si512(_mm512_maskz_loadu_epi8(mask, x[i].add(at)), flip),
            )
        });
        for r in 0..R {
            let wv = _mm512_maskz_loadu_epi8(mask, w[r].add(at));
            for i in 0..J {
                acc[i][r] = _mm512_dpbusd_epi32(acc[i][r], xv[i], wv);
            }
            if first {
                swv[r] = _mm512_dpbusd_epi32(swv[r], ones, wv);
            }
        }
        at += 64;
    }
    for i in 0..J {
        _mm_storeu_si128(sums[i][r0..].as_mut_ptr() as *mut __m128i, hsum4(acc[i]));
    }
    if first {
        _mm_storeu_si128(sw[r0..].as_mut_ptr() as *mut __m128i, hsum4(swv));
    }
}

/// The lane sums of four vectors (wrapping).
#[inline]
#[target_feature(enable = "avx2,avx512f")]
unsafe fn hsum4(v: [__m512i; R]) -> __m128i {
    // Per 128-bit lane: [a0+a2, b0+b2, a1+a3, b1+b3], the same for c and d, then
    // [Σa, Σb, Σc, Σd]; then the four 128-bit lanes.
    let ab = _mm512_add_epi32(
        _mm512_unpacklo_epi32(v[0], v[1]),
        _mm512_unpackhi_epi32(v[0], v[1]),
    );
    let cd = _mm512_add_epi32(
        _mm512_unpacklo_epi32(v[2], v[3]),
        _mm512_unpackhi_epi32(v[2], v[3]),
    );
    let s = _mm512_add_epi32(_mm512_unpacklo_epi64(ab, cd), _mm512_unpackhi_epi64(ab, cd));
    let s = _mm256_add_epi32(_mm512_castsi512_si256(s), _mm512_extracti64x4_epi64::<1>(s));
    _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256::<1>(s))
}

/// Requantization constants of [`BLOCK`] rows.
type Epi = FusedLanes<BLOCK>;

/// Rows `j0..j0 + rows` of `p` (M0 = 0 past them).
fn epi(p: &FcParams, j0: usize, rows: usize) -> Epi {
    let mut e = Epi::new();
    for r in 0..rows {
        let j = j0 + r;
        let q = FusedRequant::new(p.multiplier.get(j), p.shift.get(j), p.out.rounding);
        e.set(r, &q, p.bias.get(j));
    }
    e
}

/// Writes `y` (up to [`BLOCK`] rows): `sum − 128·Σw + bias`, requantized exactly as
/// `OutputQuant::requantize` in the `DOUBLE` rounding or the single one
/// ([`FusedLanes::apply8`]).
#[inline]
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl")]
unsafe fn requant<const DOUBLE: bool>(
    sums: &[i32; BLOCK],
    sw: &[i32; BLOCK],
    e: &Epi,
    out: &OutputQuant,
    y: &mut [i8],
) {
    let mut bytes = [0i8; BLOCK];
    for g in 0..BLOCK / 8 {
        let s = _mm256_loadu_si256(sums.as_ptr().add(8 * g) as *const __m256i);
        let w = _mm256_loadu_si256(sw.as_ptr().add(8 * g) as *const __m256i);
        // Σ (x + 128)·w − 128·Σw = Σ x·w, all wrapping.
        let acc = _mm256_sub_epi32(s, _mm256_slli_epi32::<7>(w));
        _mm_storel_epi64(
            bytes.as_mut_ptr().add(8 * g) as *mut __m128i,
            e.apply8::<DOUBLE>(g, acc, out),
        );
    }
    y.copy_from_slice(&bytes[..y.len()]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::test_util::{fc_batch_matches_scalar, fc_suite, FcData};
    use crate::kernels::Kernels;

    // SAFETY: the kernel runs only where AVX-512 VNNI is available.
    fc_suite!(if Kernels::vnni_available(), |p, x, y| unsafe { fully_connected(p, x, y) });

    /// Groups of 1 to 11 images (whole passes of `I`, the single-image tail, more than a
    /// group): each image's bytes as the reference's.
    #[test]
    fn batches_equal_scalar() {
        if !Kernels::vnni_available() {
            println!("SKIP: no AVX-512 VNNI");
            return;
        }
        for (m, (k, n)) in (1..=11).zip(
            [(640, 128), (128, 8), (300, 17), (64, 16), (5, 3)]
                .into_iter()
                .cycle(),
        ) {
            let data: Vec<FcData> = (0..m)
                .map(|i| FcData::random(k, n, (m * 31 + i) as u64))
                .collect();
            // One layer, the images' own inputs.
            // SAFETY: AVX-512 VNNI is available.
            fc_batch_matches_scalar(&data[0].params(), &data, &mut |p, imgs| unsafe {
                fully_connected_batch(p, imgs)
            });
        }
    }
}
