//! conv2d on AMX tiles: the conv as the fully connected layer it applies to each output pixel's
//! patch (`ConvParams::as_fc`, K = kh·kw·C_in, N = C_out), over weights packed at prepare
//! ([`AmxFc`]), the rows the pixels of every image of a group (so a 3×3 late layer still
//! fills the tiles at batch 64). A pointwise conv's rows are copied from its pixels; any other
//! conv's are its patches gathered (pad values included).
//!
//! Where every step of 64 inputs is 64 channels of one tap (C_in a multiple of 64) and the
//! output rows are whole tiles of 16 pixels, nothing is staged: each input tile is read where
//! its 16 pixels' bytes lie, in the input padded once into scratch (or the input itself where
//! there is no padding), at a stride of one output pixel ([`Implicit`]). Gathering the patches
//! had cost as much as a quarter of ResNet-18's 64-channel 3×3 convs on a Sapphire Rapids core.

use core::arch::x86_64::*;

use super::gemm::{self, Inputs, PassRows};
use crate::kernels::valid::pad_rows;
use crate::kernels::vnni::{band_rows, copy, row_bytes, Gather};
use crate::kernels::{
    AmxFc, ConvImage, ConvParams, FcParams, Layout, PackedFc, AMX_K_STEP, AMX_MAX_K,
};

/// `p` over every image of `images` (their scratch holding the padded input where the tiles
/// read it in place), where `p` was packed for the AMX set, is uniform where not pointwise (the
/// dispatch pads other convs first) and the buffers hold its tensors; `false` (nothing written)
/// else.
///
/// # Safety
/// [`super::available`] must hold.
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn conv2d(p: &ConvParams, images: &mut [ConvImage]) -> bool {
    let fits = |m: &ConvImage| m.input.len() >= p.input.len() && m.output.len() >= p.output.len();
    let Some((f, w)) = tile_weights(p) else {
        return false;
    };
    if images.is_empty() || !images.iter().all(fits) {
        return false;
    }
    if let Some(mut imp) = Implicit::new(p) {
        if images.iter().all(|m| imp.fits(p, m.scratch.len())) {
            for m in images.iter_mut() {
                let y = m.output.as_mut_ptr();
                imp.run(p, (&f, w), m.input, y, m.scratch, 0..p.output.h);
            }
            return true;
        }
    }
    let Some(rows) = Patches::new(p, f.k) else {
        return false;
    };
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
/// only its own pixels' patches (or reads its input in place, padded into its `scratch`).
/// `false` (nothing written) else.
///
/// # Safety
/// [`super::available`] must hold.
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn conv2d_rows(
    p: &ConvParams,
    input: &[i8],
    output: &mut [i8],
    scratch: &mut [u8],
    band: core::ops::Range<usize>,
) -> bool {
    let Some((f, w)) = tile_weights(p) else {
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
    if let Some(mut imp) = Implicit::new(p) {
        if imp.fits(p, scratch.len()) {
            imp.run(p, (&f, w), input, output.as_mut_ptr(), scratch, band);
            return true;
        }
    }
    let Some(rows) = Patches::new(p, f.k) else {
        return false;
    };
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

/// The layer of `p` and its weights packed for the tiles, where it was packed so (K up to
/// [`AMX_MAX_K`]).
fn tile_weights<'a>(p: &ConvParams<'a>) -> Option<(FcParams<'a>, &'a [u8])> {
    let w = p.packed.of(Layout::AmxFc)?;
    let f = p.as_fc();
    (w.len() >= tile_layout(&f).bytes() && f.k <= AMX_MAX_K).then_some((f, w))
}

/// The blocks of `f` packed for the tiles.
fn tile_layout(f: &FcParams) -> PackedFc {
    AmxFc { k: f.k, n: f.n }.padded()
}

/// Whether the tiles read conv `p`'s input in place ([`Implicit`]): uniform, every step of 64
/// inputs 64 channels of one tap, output rows of whole tiles (16 pixels), K up to
/// [`AMX_MAX_K`].
pub fn reads_in_place(p: &ConvParams) -> bool {
    let k = p.window.kernel_h * p.window.kernel_w * p.input.c;
    p.is_uniform()
        && p.input.c.is_multiple_of(AMX_K_STEP)
        && p.input.c > 0
        && p.output.w.is_multiple_of(16)
        && p.output.w > 0
        && p.output.h > 0
        && k <= AMX_MAX_K
}

/// Input tiles read in place: a conv's (padded) input at a stride of one output pixel, 16
/// pixels of one output row per tile.
struct Implicit {
    /// The band's padded input rows (or the input itself).
    img: *const i8,
    /// Bytes from one output pixel's window to the next one's (stride · C_in): the tiles' row
    /// stride.
    pixel: usize,
    /// Bytes of a padded input row.
    row: usize,
    /// Bytes from one output row's windows to the next one's (stride padded rows).
    out_row: usize,
    wo: usize,
    cout: usize,
    /// The band's first output.
    y: *mut i8,
    /// Per step of 64 inputs, its bytes' offset from a pixel's window (tap, then channels).
    offs: [usize; AMX_MAX_K / AMX_K_STEP],
    /// The current pass's two tiles' first pixels' windows.
    base: [*const i8; 2],
}

impl Implicit {
    /// The plan for `p`, where [`reads_in_place`].
    fn new(p: &ConvParams) -> Option<Self> {
        if !reads_in_place(p) {
            return None;
        }
        let (c, wo) = (p.input.c, p.output.w);
        let k = p.window.kernel_h * p.window.kernel_w * c;
        let row = row_bytes(p);
        let mut offs = [0; AMX_MAX_K / AMX_K_STEP];
        let per_tap = c / AMX_K_STEP;
        for (s, o) in offs.iter_mut().take(k / AMX_K_STEP).enumerate() {
            let (tap, c0) = (s / per_tap, (s % per_tap) * AMX_K_STEP);
            let (ky, kx) = (tap / p.window.kernel_w, tap % p.window.kernel_w);
            *o = ky * row + kx * c + c0;
        }
        Some(Implicit {
            img: core::ptr::null(),
            pixel: p.stride() * c,
            row,
            out_row: p.stride() * row,
            wo,
            cout: p.output.c,
            y: core::ptr::null_mut(),
            offs,
            base: [core::ptr::null(); 2],
        })
    }

    /// Output rows per band with `scratch` bytes: every row where nothing is padded.
    fn band(&self, p: &ConvParams, scratch: usize) -> usize {
        if p.pad() == 0 {
            return p.output.h;
        }
        // The most output rows whose padded rows (band_rows) fit.
        let rows = scratch / self.row;
        if rows < band_rows(p, 1) {
            0
        } else {
            ((rows - band_rows(p, 1)) / p.stride() + 1).min(p.output.h)
        }
    }

    /// Whether an image's scratch of `scratch` bytes holds a band of one row at least.
    fn fits(&self, p: &ConvParams, scratch: usize) -> bool {
        self.band(p, scratch) > 0
    }

    /// Output rows `rows` of `p` from `input` into `y` (those rows), band by band through
    /// `scratch` ([`Implicit::fits`]; the buffers checked).
    ///
    /// # Safety
    /// [`super::available`] holds; `w` holds `f`'s packing for the tiles.
    #[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn run(
        &mut self,
        p: &ConvParams,
        (f, w): (&FcParams, &[u8]),
        input: &[i8],
        y: *mut i8,
        scratch: &mut [u8],
        rows: core::ops::Range<usize>,
    ) {
        let (s, pad) = (p.stride(), p.pad());
        let nb = self.band(p, scratch.len());
        let mut r0 = rows.start;
        while r0 < rows.end {
            let n = nb.min(rows.end - r0);
            self.y = y.add((r0 - rows.start) * self.wo * self.cout);
            if pad == 0 {
                self.img = input.as_ptr().add(r0 * self.out_row);
            } else {
                // The padded rows from r0·s that n output rows read, at the front of the scratch.
                let padded = band_rows(p, n);
                let band = core::slice::from_raw_parts_mut(
                    scratch.as_mut_ptr() as *mut i8,
                    padded * self.row,
                );
                pad_rows(
                    p,
                    input,
                    (pad.wrapping_sub(r0 * s), pad),
                    self.row / p.input.c,
                    0..padded,
                    band,
                );
                self.img = band.as_ptr();
            }
            gemm::product::<true>(f, w, tile_layout(f), n * self.wo, self);
            r0 += n;
        }
    }
}

impl Inputs for Implicit {
    #[inline(always)]
    unsafe fn pass(&mut self, r0: usize, m: usize, rows: &mut PassRows) {
        for t in 0..2 {
            // A pass of 16 rows reads its one tile twice (the second's sums dropped).
            let q = r0 + if 16 * t < m { 16 * t } else { 0 };
            let (y, x) = (q / self.wo, q % self.wo);
            self.base[t] = self.img.add(y * self.out_row + x * self.pixel);
        }
        for i in 0..m {
            (rows.out[i], rows.corr[i]) =
                (self.y.add((r0 + i) * self.cout), _mm512_setzero_si512());
        }
    }

    #[inline(always)]
    fn tiles(&self, s: usize) -> (*const i8, *const i8, usize) {
        let o = self.offs[s];
        (
            self.base[0].wrapping_add(o),
            self.base[1].wrapping_add(o),
            self.pixel,
        )
    }
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
    /// How the rows (`k` bytes each) of `p` are written, where it is uniform or pointwise;
    /// `None` else. Built only where the tiles do not read the input in place.
    fn new(p: &'p ConvParams<'a>, k: usize) -> Option<Self> {
        Some(match p.pointwise_fc() {
            Some(_) => Patches::Pixels(k),
            None => Patches::Gathered(Gather::new(p)?),
        })
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
            // Read in place (no scratch here): pointwise, strided, a 3×3 window unpadded.
            (64, 48, 16, 1, 1, 0, 2),
            (128, 32, 32, 1, 2, 0, 1),
            (64, 32, 18, 3, 1, 0, 3),
        ];
        // SAFETY: the tiles may run (skip() is false).
        packed_groups_match_scalar(shapes, 37, &amx_packed, &mut |p, imgs| unsafe {
            conv2d(p, imgs)
        });
    }

    /// Input tiles read in place from the input padded into scratch, band by band: scratch for
    /// one output row, two, all of them, and none (the patches then gathered); 1 to 3 images,
    /// 1 to 3 steps per tap, strides 1 and 2, both roundings: each image's bytes as the
    /// reference's.
    #[test]
    fn implicit_bands_equal_scalar() {
        if skip() {
            return;
        }
        for (i, &(cin, cout, hw, kk, st, pad)) in [
            (64, 64, 16, 3, 1, 1),
            (64, 32, 32, 3, 2, 1),
            (128, 48, 16, 3, 1, 1),
            (192, 32, 16, 3, 1, 1),
            (64, 32, 32, 5, 1, 2),
            (64, 48, 32, 1, 2, 0),
        ]
        .iter()
        .enumerate()
        {
            for r in Rounding::ALL {
                let n = 1 + i % 3;
                let data: Vec<ConvData> = (0..n)
                    .map(|j| {
                        let c = ConvCase::square(cin, cout, hw, kk, st, pad, (7 * i + j) as u64);
                        ConvData::typical(&c.with_rounding(r)).unwrap()
                    })
                    .collect();
                let mut p = data[0].params();
                let (buf, layout) = amx_packed(&p.as_fc());
                p.packed = crate::kernels::Packed {
                    layout,
                    bytes: &buf,
                };
                let plan = Implicit::new(&p).expect("covered");
                let row = plan.row;
                let want: Vec<Vec<i8>> = data
                    .iter()
                    .map(|d| {
                        let mut y = vec![0i8; p.output.len()];
                        scalar::conv2d(&p, &d.input, &mut y);
                        y
                    })
                    .collect();
                let rows_in = |n: usize| (n - 1) * st + kk;
                for scratch in [
                    0,
                    row * rows_in(1),
                    row * rows_in(2) + 5,
                    row * (hw + 2 * pad),
                ] {
                    let mut got = vec![vec![0x55i8; p.output.len()]; n];
                    let mut s = vec![vec![0u8; scratch]; n];
                    let mut imgs: Vec<ConvImage> = data
                        .iter()
                        .zip(got.iter_mut())
                        .zip(s.iter_mut())
                        .map(|((d, y), s)| ConvImage::new(&d.input, y, s))
                        .collect();
                    // SAFETY: the tiles may run (skip() is false).
                    assert!(unsafe { conv2d(&p, &mut imgs) });
                    assert_eq!(want, got, "{cin}→{cout} {hw}² {kk}/{st} {r:?}, {scratch} B");
                    // Threads' bands of the first image, each through its own scratch.
                    let (h, row_out) = (p.output.h, p.output.w * p.output.c);
                    for band in [0..1, 1..h / 2, h / 2..h] {
                        let mut got = vec![0x55i8; band.len() * row_out];
                        // SAFETY: as above.
                        assert!(unsafe {
                            conv2d_rows(&p, &data[0].input, &mut got, &mut s[0], band.clone())
                        });
                        assert_eq!(
                            got,
                            want[0][band.start * row_out..band.end * row_out],
                            "{cin}→{cout} {hw}² {kk}/{st} {r:?}, {scratch} B, rows {band:?}"
                        );
                    }
                }
            }
        }
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
                    assert!(unsafe { conv2d_rows(&p, &d.input, &mut got, &mut [], band.clone()) });
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
