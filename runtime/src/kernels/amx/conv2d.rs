//! conv2d on AMX tiles: the conv as the fully connected layer it applies to each output pixel's
//! patch (`ConvParams::as_fc`, K = kh·kw·C_in, N = C_out), over weights packed at prepare
//! ([`AmxFc`]), the rows the pixels of every image of a group (so a 3×3 late layer still
//! fills the tiles at batch 64). A pointwise conv's rows are copied from its pixels; any other
//! conv's are its patches gathered (pad values included).

use super::gemm;
use crate::kernels::vnni::{copy, Gather};
use crate::kernels::{AmxFc, ConvImage, ConvParams, FcParams, Layout, PackedFc, AMX_MAX_K};

/// `p` over every image of `images` (their scratch unused), where `p` was packed for the AMX
/// set, is uniform where not pointwise (the dispatch pads other convs first) and the buffers
/// hold its tensors; `false` (nothing written) else.
///
/// # Safety
/// [`super::available`] must hold.
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn conv2d(p: &ConvParams, images: &mut [ConvImage]) -> bool {
    let fits = |m: &ConvImage| m.input.len() >= p.input.len() && m.output.len() >= p.output.len();
    let Some((f, w, rows)) = Patches::new(p) else {
        return false;
    };
    if images.is_empty() || !images.iter().all(fits) {
        return false;
    }
    let (px, cout) = (p.output.h * p.output.w, f.n);
    // Rows come in order: the image and pixel of the next one, without a division per row.
    let (mut img, mut pix) = (0usize, 0usize);
    gemm::rows::<true>(&f, w, tile_layout(&f), images.len() * px, |i, dst| {
        debug_assert_eq!(i, img * px + pix);
        let m = &mut images[img];
        rows.write(m.input.as_ptr(), pix, dst);
        let y = m.output.as_mut_ptr().add(pix * cout);
        pix += 1;
        if pix == px {
            (img, pix) = (img + 1, 0);
        }
        (y, 0)
    });
    true
}

/// Output rows `band` of `p` (all its columns) into `output` (those rows, HWC), where
/// [`conv2d`] would run it: threads sharing an image each take a band of rows, so each stages
/// only its own pixels' patches. `false` (nothing written) else.
///
/// # Safety
/// [`super::available`] must hold.
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn conv2d_rows(
    p: &ConvParams,
    input: &[i8],
    output: &mut [i8],
    band: core::ops::Range<usize>,
) -> bool {
    let Some((f, w, rows)) = Patches::new(p) else {
        return false;
    };
    let (w_out, cout) = (p.output.w, f.n);
    if band.start > band.end
        || band.end > p.output.h
        || input.len() < p.input.len()
        || output.len() < band.len() * w_out * cout
    {
        return false;
    }
    let (px0, y) = (band.start * w_out, output.as_mut_ptr());
    gemm::rows::<true>(&f, w, tile_layout(&f), band.len() * w_out, |i, dst| {
        rows.write(input.as_ptr(), px0 + i, dst);
        (y.add(i * cout), 0)
    });
    true
}

/// Whether threads may split conv `p` by bands of rows ([`conv2d_rows`]): packed for the tiles
/// and uniform.
pub fn rows_covered(p: &ConvParams) -> bool {
    p.packed.of(Layout::AmxFc).is_some() && p.is_uniform()
}

/// The blocks of `f` packed for the tiles.
fn tile_layout(f: &FcParams) -> PackedFc {
    AmxFc { k: f.k, n: f.n }.padded()
}

/// How a pixel's row of the product is written: the pixel itself (pointwise), else its patch.
// One per call, on the stack (no heap to box the gather's pad values in).
#[allow(clippy::large_enum_variant)]
enum Patches<'p, 'a> {
    /// K = C_in bytes of the pixel.
    Pixels(usize),
    Gathered(Gather<'p, 'a>),
}

impl<'p, 'a> Patches<'p, 'a> {
    /// The layer and packed weights of `p`, and how its rows are written, where `p` was
    /// packed for the tiles and is uniform or pointwise; `None` else.
    fn new(p: &'p ConvParams<'a>) -> Option<(FcParams<'a>, &'a [u8], Self)> {
        let w = p.packed.of(Layout::AmxFc)?;
        let f = p.as_fc();
        if w.len() < tile_layout(&f).bytes() || f.k > AMX_MAX_K {
            return None;
        }
        let rows = match p.pointwise_fc() {
            Some(_) => Patches::Pixels(f.k),
            None => Patches::Gathered(Gather::new(p)?),
        };
        Some((f, w, rows))
    }

    /// Pixel `pi`'s row of the input `x` at `dst` (K bytes).
    ///
    /// # Safety
    /// The CPU must support AVX-512 F, BW and VL; `x` holds the conv's input, `dst` K bytes.
    #[inline]
    #[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl")]
    unsafe fn write(&self, x: *const i8, pi: usize, dst: *mut i8) {
        match self {
            Patches::Pixels(k) => copy(x.add(pi * k), dst, *k),
            Patches::Gathered(g) => g.write(x, pi, dst),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::amx::skip;
    use crate::kernels::test_util::{
        conv_matches_scalar, conv_suite, packed_groups_match_scalar, ConvCase, ConvData,
        PackedConvShape,
    };
    use crate::kernels::{conv_packing, pack, scalar, PackOp, Resolved, Rounding};

    /// `p` packed as the AMX set packs it, then run by that set's conv dispatch: the tiles,
    /// or the VNNI kernels for what is not packed.
    fn amx_set(p: &ConvParams, x: &[i8], y: &mut [i8], s: &mut [u8]) {
        let mut buf = Vec::new();
        let q = match conv_packing(Resolved::Amx, p) {
            Some((layout, n)) => {
                buf.resize(n, 0);
                ConvParams {
                    packed: pack(layout, PackOp::Conv(p), &mut buf),
                    ..*p
                }
            }
            None => *p,
        };
        crate::kernels::conv2d(Resolved::Amx, &q, x, y, s);
    }

    fn check(c: &ConvCase) {
        if !skip() {
            conv_matches_scalar(c, &mut amx_set);
        }
    }

    conv_suite!(check);

    /// `f` packed for the tiles.
    fn amx_packed(f: &FcParams) -> (Vec<u8>, Layout) {
        let mut buf = vec![0u8; AmxFc { k: f.k, n: f.n }.padded().bytes()];
        AmxFc::pack(f, &mut buf);
        (buf, Layout::AmxFc)
    }

    /// The tiles themselves over groups of images (1 to 9; 9 to 2 304 pixels a image, C 1 to
    /// 512, K up to 4 608; pointwise and gathered patches with padding and strides; block
    /// counts odd and even; rows not a multiple of 32): each image's bytes as the reference's,
    /// in both roundings.
    #[test]
    fn groups_equal_scalar() {
        if skip() {
            return;
        }
        let shapes: &[PackedConvShape] = &[
            (8, 16, 48, 1, 1, 0, 1),
            (64, 64, 5, 1, 1, 0, 3),
            (128, 256, 6, 1, 1, 0, 2),
            (256, 48, 3, 1, 1, 0, 5),
            (20, 36, 4, 1, 1, 0, 4),
            (3, 16, 32, 3, 1, 1, 1),
            (16, 16, 8, 3, 1, 1, 2),
            (16, 32, 9, 3, 2, 1, 3),
            (1, 64, 12, 4, 2, 0, 2),
            (3, 24, 10, 3, 2, 1, 9),
            (64, 64, 4, 1, 2, 0, 2),
            (224, 24, 3, 3, 1, 1, 1),
            (512, 32, 4, 3, 1, 1, 2),
        ];
        // SAFETY: the tiles may run (skip() is false).
        packed_groups_match_scalar(shapes, 37, &amx_packed, &mut |p, imgs| unsafe {
            conv2d(p, imgs)
        });
    }

    /// Bands of rows (threads sharing an image): each the reference's bytes for its rows, in
    /// both roundings, pointwise and gathered, bands of one row to all of them.
    #[test]
    fn bands_equal_scalar() {
        if skip() {
            return;
        }
        for &(cin, cout, hw, kk, st, pad) in &[
            (64, 64, 9, 3, 1, 1),
            (256, 48, 6, 1, 1, 0),
            (32, 32, 11, 3, 2, 1),
        ] {
            for r in Rounding::ALL {
                let c = ConvCase::square(cin, cout, hw, kk, st, pad, 5).with_rounding(r);
                let d = ConvData::typical(&c).unwrap();
                let mut p = d.params();
                let (buf, layout) = amx_packed(&p.as_fc());
                p.packed = crate::kernels::Packed {
                    layout,
                    bytes: &buf,
                };
                assert!(rows_covered(&p));
                let mut want = vec![0i8; p.output.len()];
                scalar::conv2d(&p, &d.input, &mut want);
                let (h, row) = (p.output.h, p.output.w * p.output.c);
                for band in [0..1, 0..h / 2, h / 2..h, 0..h, h - 1..h] {
                    let mut got = vec![0x55i8; band.len() * row];
                    // SAFETY: the tiles may run (skip() is false).
                    assert!(unsafe { conv2d_rows(&p, &d.input, &mut got, band.clone()) });
                    assert_eq!(
                        got,
                        want[band.start * row..band.end * row],
                        "{c:?} {band:?}"
                    );
                }
            }
        }
    }
}
