//! conv2d, AVX-512 VNNI, over weights packed at prepare as the fully connected layer the conv
//! applies to each pixel's patch (`ConvParams::as_fc`, K = kh·kw·C_in, N = C_out): the fully
//! connected kernel over packed weights, eight pixels at a time as it takes images. A
//! pointwise conv (1×1, stride 1, no padding) reads its pixels in place; any other gathers
//! each patch (pad values included) onto the stack first, K up to [`IM2COL_MAX_K`]. Output
//! channels lie in the lanes, so small images (MobileNet's 6×6 and 3×3 layers) leave no lane
//! empty, and the outputs are written in HWC order without a transpose.

use core::arch::x86_64::*;
use core::mem::MaybeUninit;

use super::fully_connected::packed_rows;
use crate::kernels::{
    ConvImage, ConvParams, Layout, PackedFc, PatchPiece, AMX_MAX_K, GROUP_IMAGES, IM2COL_MAX_K,
};

/// Pixels whose patches are gathered at once.
const PIXELS: usize = 8;

/// `p` over every image of `images` (their scratch unused), where `p` was packed for this
/// kernel, is uniform where not pointwise (the dispatch pads other convs first) and the
/// buffers hold its tensors; `false` (nothing written) else.
///
/// # Safety
/// The CPU must support AVX-512 F, BW, VL and VNNI.
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn conv2d_packed(p: &ConvParams, images: &mut [ConvImage]) -> bool {
    let Some(w) = p.packed.of(Layout::VnniFc) else {
        return false;
    };
    let f = p.as_fc();
    let px = p.output.h * p.output.w;
    let fits = |m: &ConvImage| m.input.len() >= p.input.len() && m.output.len() >= p.output.len();
    if w.len() < (PackedFc { k: f.k, n: f.n }).bytes() || !images.iter().all(fits) {
        return false;
    }
    let (k, cout) = (f.k, f.n);
    if p.pointwise_fc().is_some() {
        for group in images.chunks_mut(GROUP_IMAGES) {
            let mut ptrs = [(core::ptr::null::<i8>(), core::ptr::null_mut::<i8>()); GROUP_IMAGES];
            for (q, m) in ptrs.iter_mut().zip(group.iter_mut()) {
                *q = (m.input.as_ptr(), m.output.as_mut_ptr());
            }
            // SAFETY: pixel i of the group lies within its image's checked tensors.
            packed_rows(&f, w, group.len() * px, |i| {
                let (x, y) = ptrs[i / px];
                (x.add(i % px * k), y.add(i % px * cout))
            });
        }
        return true;
    }
    let gather = match Gather::new(p) {
        Some(g) if k <= IM2COL_MAX_K => g,
        _ => return false,
    };
    for m in images.iter_mut() {
        gathered(
            p,
            &gather,
            w,
            m.input.as_ptr(),
            m.output.as_mut_ptr(),
            0..px,
        );
    }
    true
}

/// Output rows `rows` of a conv [`conv2d_packed`] covers into `output` (those rows, HWC), for
/// threads sharing an image: the packed product over those rows' pixels only (a pointwise
/// conv's input rows, or the gathered patches); `false` (nothing written) where it declines.
///
/// # Safety
/// The CPU must support AVX2, AVX-512 F, BW, VL and VNNI.
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn conv2d_packed_rows(
    p: &ConvParams,
    input: &[i8],
    output: &mut [i8],
    rows: core::ops::Range<usize>,
) -> bool {
    let Some(w) = p.packed.of(Layout::VnniFc) else {
        return false;
    };
    let f = p.as_fc();
    let (wo, cout) = (p.output.w, f.n);
    if !packed_rows_covered(p)
        || w.len() < (PackedFc { k: f.k, n: f.n }).bytes()
        || rows.start > rows.end
        || rows.end > p.output.h
        || input.len() < p.input.len()
        || output.len() < (rows.end - rows.start) * wo * cout
    {
        return false;
    }
    let pixels = rows.start * wo..rows.end * wo;
    // The output pointer of pixel `pixels.start`, as if the whole output were there.
    let y = output.as_mut_ptr().wrapping_sub(pixels.start * cout);
    if p.pointwise_fc().is_some() {
        let x = input.as_ptr();
        packed_rows(&f, w, pixels.len(), |i| {
            let at = pixels.start + i;
            (x.add(at * f.k), y.wrapping_add(at * cout))
        });
        return true;
    }
    let Some(gather) = Gather::new(p) else {
        return false;
    };
    gathered(p, &gather, w, input.as_ptr(), y, pixels);
    true
}

/// Whether [`conv2d_packed_rows`] covers packed conv `p`: a pointwise conv, or one whose
/// patches it gathers.
pub fn packed_rows_covered(p: &ConvParams) -> bool {
    p.pointwise_fc().is_some()
        || (p.k() <= IM2COL_MAX_K && p.is_uniform() && p.input.c <= GATHER_MAX_CIN)
}

/// Pixels `pixels` of one image through gathered patches, `PIXELS` at a time: `y` is pixel 0's
/// output (only `pixels`' are written).
#[inline]
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn gathered(
    p: &ConvParams,
    gather: &Gather,
    w: &[u8],
    x: *const i8,
    y: *mut i8,
    pixels: core::ops::Range<usize>,
) {
    let f = p.as_fc();
    let (k, cout) = (f.k, f.n);
    // Uninitialized (18 KB on every call otherwise): only each row's K patch bytes are
    // written, and only those are read.
    let mut patches = MaybeUninit::<[i8; PIXELS * IM2COL_MAX_K]>::uninit();
    let rows = patches.as_mut_ptr() as *mut i8;
    for p0 in pixels.clone().step_by(PIXELS) {
        let n = (pixels.end - p0).min(PIXELS);
        for i in 0..n {
            gather.write(x, p0 + i, rows.add(i * k));
        }
        packed_rows(&f, w, n, |i| {
            (rows.add(i * k), y.wrapping_add((p0 + i) * cout))
        });
    }
}

/// Input channels up to which [`Gather`] holds a tap of pad values.
const GATHER_MAX_CIN: usize = if AMX_MAX_K > IM2COL_MAX_K {
    AMX_MAX_K
} else {
    IM2COL_MAX_K
};

/// Output pixels' patches of a uniform conv written as rows of K bytes (`patch_pieces`): the
/// input's pieces copied, the pad values where a tap leaves the input. The packed convs' (this
/// one's and the AMX set's) gather.
pub(crate) struct Gather<'p, 'a> {
    p: &'p ConvParams<'a>,
    /// One tap of padding: every channel's pad value (only those C_in bytes are written and
    /// read; uninitialized past them).
    pad: MaybeUninit<[i8; GATHER_MAX_CIN]>,
}

impl<'p, 'a> Gather<'p, 'a> {
    /// The gather of `p`, where it is uniform with C_in ≤ [`GATHER_MAX_CIN`].
    pub(crate) fn new(p: &'p ConvParams<'a>) -> Option<Self> {
        if !p.is_uniform() || p.input.c > GATHER_MAX_CIN {
            return None;
        }
        let mut pad = MaybeUninit::<[i8; GATHER_MAX_CIN]>::uninit();
        let at = pad.as_mut_ptr() as *mut i8;
        for c in 0..p.input.c {
            // SAFETY: c < C_in ≤ GATHER_MAX_CIN.
            unsafe { at.add(c).write(p.pad_value(c)) };
        }
        Some(Gather { p, pad })
    }

    /// Pixel `pi`'s patch of the input `x` at `dst` (K bytes).
    ///
    /// # Safety
    /// The CPU must support AVX-512 F, BW and VL; `x` holds the conv's input, `dst` K bytes.
    #[inline]
    #[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl")]
    pub(crate) unsafe fn write(&self, x: *const i8, pi: usize, dst: *mut i8) {
        let (pad, cin) = (self.pad.as_ptr() as *const i8, self.p.input.c);
        self.p.patch_pieces(pi, |at, piece| match piece {
            PatchPiece::Input { start, n } => copy(x.add(start), dst.add(at), n),
            PatchPiece::Pad => copy(pad, dst.add(at), cin),
        });
    }
}

/// `n` bytes from `src` to `dst`, 64 at a time through masks (a copy of a runtime length is
/// otherwise a call to memcpy, per piece of a patch).
#[inline]
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl")]
pub(crate) unsafe fn copy(src: *const i8, dst: *mut i8, n: usize) {
    copy_xor(src, dst, n, 0)
}

/// [`copy`], each byte xor `x` (−128: offset to u8, x + 128).
#[inline]
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl")]
pub(crate) unsafe fn copy_xor(src: *const i8, dst: *mut i8, n: usize, x: i8) {
    let x = _mm512_set1_epi8(x);
    let mut at = 0;
    // Plain loads and stores where 64 bytes remain (masked stores are slower on Zen 4).
    while at + 64 <= n {
        let v = _mm512_loadu_si512(src.add(at) as *const _);
        _mm512_storeu_si512(dst.add(at) as *mut _, _mm512_xor_si512(v, x));
        at += 64;
    }
    if at < n {
        let mask: __mmask64 = (1u64 << (n - at)) - 1;
        let v = _mm512_maskz_loadu_epi8(mask, src.add(at));
        _mm512_mask_storeu_epi8(dst.add(at), mask, _mm512_xor_si512(v, x));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::test_util::{
        packed_groups_match_scalar, ConvCase, ConvData, PackedConvShape,
    };
    use crate::kernels::{FcParams, Kernels};

    /// The models' shapes and edge ones (1 to 9 images, 9 to 2 304 pixels, C 1 to 256,
    /// pointwise and gathered patches with padding and strides).
    const SHAPES: &[PackedConvShape] = &[
        (8, 16, 48, 1, 1, 0, 1),
        (64, 64, 5, 1, 1, 0, 3),
        (128, 256, 6, 1, 1, 0, 2),
        (256, 256, 3, 1, 1, 0, 5),
        (20, 36, 4, 1, 1, 0, 4),
        (3, 5, 7, 1, 1, 0, 9),
        (16, 16, 8, 3, 1, 1, 2),
        (16, 32, 9, 3, 2, 1, 3),
        (1, 64, 12, 4, 2, 0, 2),
        (3, 8, 10, 3, 2, 1, 1),
        (64, 64, 4, 1, 2, 0, 2),
        (224, 24, 3, 3, 1, 1, 1),
    ];

    /// [`SHAPES`] packed, over groups of images: each image's bytes as the reference's, in
    /// both roundings.
    /// `f`'s weights in the VNNI layout.
    fn vnni_pack(f: &FcParams) -> (Vec<u8>, Layout) {
        let mut buf = vec![0u8; PackedFc { k: f.k, n: f.n }.bytes()];
        PackedFc::pack(f, &mut buf);
        (buf, Layout::VnniFc)
    }

    #[test]
    fn equals_scalar() {
        if !Kernels::vnni_available() {
            println!("SKIP: no AVX-512 VNNI");
            return;
        }
        // SAFETY: AVX-512 VNNI is available.
        packed_groups_match_scalar(SHAPES, 31, &vnni_pack, &mut |p, imgs| unsafe {
            conv2d_packed(p, imgs)
        });
        // A 3×3 window is no pointwise conv.
        let d = ConvData::typical(&ConvCase::square(8, 16, 6, 3, 1, 1, 1)).unwrap();
        assert!(d.params().pointwise_fc().is_none());
    }

    /// In three bands of output rows (some empty on short outputs), each image's bands into
    /// their rows, as threads sharing an image run it: the same bytes.
    #[test]
    fn bands_equal_scalar() {
        if !Kernels::vnni_available() {
            println!("SKIP: no AVX-512 VNNI");
            return;
        }
        packed_groups_match_scalar(SHAPES, 37, &vnni_pack, &mut |p, imgs| {
            assert!(packed_rows_covered(p), "{p:?}");
            let (h, row) = (p.output.h, p.output.w * p.output.c);
            let cuts = [0, h / 3, (2 * h).div_ceil(3), h];
            imgs.iter_mut().all(|m| {
                (0..3).all(|b| {
                    let out = &mut m.output[cuts[b] * row..cuts[b + 1] * row];
                    // SAFETY: the VNNI set is available.
                    unsafe { conv2d_packed_rows(p, m.input, out, cuts[b]..cuts[b + 1]) }
                })
            })
        });
    }
}
