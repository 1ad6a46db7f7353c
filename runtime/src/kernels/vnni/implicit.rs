//! conv2d, AVX-512 VNNI, as an implicit GEMM over weights packed at prepare
//! ([`Layout::VnniConv`]): output channels in the lanes (a block of 16 per vector), [`MR`]
//! output pixels at a time, each `vpdpbusd` multiplying four input bytes of one pixel,
//! broadcast, by a step of a block's weights. Nothing is gathered: a step's four bytes are read
//! where they lie in the input, which is padded and offset to u8 (x + 128) once per call into
//! scratch (only the rows a band of output rows reads), so the weights stay int8 and the
//! −128·Σw correction is folded into the packed bias. Any C_in (a step is four bytes of one
//! kernel row, the rows padded with zero weights to whole steps), uniform windows (the
//! dispatch pads the others first), either rounding (the packed fully connected layer's
//! epilogue, [`BlockEpi`]).
//!
//! Against the gathered packed conv this saves the copies and the per-pixel Σx; against the
//! pixels-in-lanes kernel, the input's rearrangement and the transpose of the outputs.

use core::arch::x86_64::*;
use core::ops::Range;

use super::fully_connected::{BlockEpi, Limits};
use super::padded::{band_rows, pad_flipped, row_bytes};
use crate::kernels::{
    ConvImage, ConvParams, FcEpi, Layout, PackedFc, FC_BLOCK_ROWS, FC_EPI_BYTES, FC_STEP,
};
use crate::requant::Rounding;

/// Output pixels per tile (of one band, across its rows).
const MR: usize = 8;
/// Blocks of output channels per tile at most.
const NB: usize = 2;

/// Whether [`conv2d_implicit`] covers conv `p`'s shape (given its packed weights and the
/// scratch): a uniform window.
fn implicit_supported(p: &ConvParams) -> bool {
    p.is_uniform() && p.input.c > 0 && p.output.c > 0 && p.output.h > 0 && p.output.w > 0
}

/// Scratch bytes [`conv2d_implicit_rows`] needs for `rows` output rows: the padded input rows
/// they read, 64 to align them and [`FC_STEP`] that a kernel row's last step may read past the
/// last ([`PackedFc::row_bytes`]). The AVX2 implicit conv's too.
pub(crate) fn implicit_scratch(p: &ConvParams, rows: usize) -> usize {
    // Saturating: a conv too large for memory is declined, never wrapped.
    band_rows(p, rows)
        .saturating_mul(row_bytes(p))
        .saturating_add(64 + FC_STEP)
}

/// `p`'s weights packed in `layout` (this kernel's or the AVX2 implicit conv's), where it has
/// them whole and its shape is covered.
pub(crate) fn implicit_packed<'a>(p: &ConvParams<'a>, layout: Layout) -> Option<&'a [u8]> {
    let w = p.packed.of(layout)?;
    (implicit_supported(p) && w.len() >= PackedFc::of_conv(p).bytes()).then_some(w)
}

/// The packed weights, where `p` has them in this layout and is covered.
fn weights<'a>(p: &ConvParams<'a>) -> Option<&'a [u8]> {
    implicit_packed(p, Layout::VnniConv)
}

/// Whether [`conv2d_implicit_rows`] covers `p` with `scratch` bytes, for any band.
pub fn implicit_rows_covered(p: &ConvParams, scratch: usize) -> bool {
    weights(p).is_some() && scratch >= implicit_scratch(p, p.output.h)
}

/// Whether `im`'s buffers hold output rows `rows` of `p` (the output only those rows).
pub(crate) fn implicit_fits(p: &ConvParams, im: &ConvImage, rows: &Range<usize>) -> bool {
    let n = rows.end.saturating_sub(rows.start);
    rows.start <= rows.end
        && rows.end <= p.output.h
        && im.input.len() >= p.input.len()
        && im.output.len() >= n * p.output.w * p.output.c
        && im.scratch.len() >= implicit_scratch(p, n)
}

/// `p` over every image of `images`, where it was packed for this kernel and every image's
/// buffers and scratch hold it; `false` (nothing written) else.
///
/// # Safety
/// The CPU must support AVX-512 F, BW, VL and VNNI.
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn conv2d_implicit(p: &ConvParams, images: &mut [ConvImage]) -> bool {
    let Some(w) = weights(p) else {
        return false;
    };
    let all = 0..p.output.h;
    if !images.iter().all(|m| implicit_fits(p, m, &all)) {
        return false;
    }
    for m in images.iter_mut() {
        band(p, w, m.input, m.output.as_mut_ptr(), m.scratch, all.clone());
    }
    true
}

/// Output rows `rows` of `p` into `im.output` (those rows, HWC), for threads sharing an image;
/// `false` (nothing written) where [`conv2d_implicit`] would decline or the buffers are short.
///
/// # Safety
/// The CPU must support AVX-512 F, BW, VL and VNNI.
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn conv2d_implicit_rows(p: &ConvParams, im: ConvImage, rows: Range<usize>) -> bool {
    let Some(w) = weights(p) else {
        return false;
    };
    if !implicit_fits(p, &im, &rows) {
        return false;
    }
    band(p, w, im.input, im.output.as_mut_ptr(), im.scratch, rows);
    true
}

/// Output rows `rows` into `y` (their first pixel's outputs), the checks done.
#[inline]
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn band(
    p: &ConvParams,
    w: &[u8],
    input: &[i8],
    y: *mut i8,
    scratch: &mut [u8],
    rows: Range<usize>,
) {
    if rows.is_empty() {
        return;
    }
    let (cin, s, cout, wo) = (p.input.c, p.stride(), p.output.c, p.output.w);
    let row = row_bytes(p);
    let img = scratch.as_mut_ptr().add(scratch.as_ptr().align_offset(64));
    let first = rows.start * s;
    let in_rows = band_rows(p, rows.len());
    pad_flipped(p, input, img, first..first + in_rows);
    // What the last kernel row's last step reads past the rows meets zero weights.
    core::ptr::write_bytes(img.add(in_rows * row), 0, FC_STEP);
    let l = PackedFc::of_conv(p);
    let at = Tiles {
        img,
        row,
        pixel: s * cin,
        out_row: s * row,
        wo,
        kh: p.window.kernel_h,
        kwc: PackedFc::row_bytes(p),
        bb: l.block_bytes(),
        cout,
        lim: Limits::new(&p.out),
        double: p.out.rounding == Rounding::Double,
        y,
    };
    let npx = rows.len() * wo;
    let mut b0 = 0;
    while b0 < l.blocks() {
        // The block group's weights stay in L1 over every pixel of the band.
        let nb = (l.blocks() - b0).min(NB);
        let wb = w.as_ptr().add(b0 * l.block_bytes());
        for p0 in (0..npx).step_by(MR) {
            // A band's last tile in as few lanes as cover it (tiny images: 9 pixels are 8 + 1).
            let n = (npx - p0).min(MR);
            match (nb, n) {
                (1, 1) => at.tile::<1, 1>(wb, b0, p0, n),
                (1, 2) => at.tile::<1, 2>(wb, b0, p0, n),
                (1, 3..=4) => at.tile::<1, 4>(wb, b0, p0, n),
                (1, _) => at.tile::<1, MR>(wb, b0, p0, n),
                (_, 1) => at.tile::<NB, 1>(wb, b0, p0, n),
                (_, 2) => at.tile::<NB, 2>(wb, b0, p0, n),
                (_, 3..=4) => at.tile::<NB, 4>(wb, b0, p0, n),
                (_, _) => at.tile::<NB, MR>(wb, b0, p0, n),
            }
        }
        b0 += nb;
    }
}

/// One band's geometry.
struct Tiles {
    /// The band's padded input rows (u8).
    img: *const u8,
    /// Bytes per padded row.
    row: usize,
    /// Bytes from one output pixel's window to the next one's in a row (stride · C_in).
    pixel: usize,
    /// Bytes from one output row's windows to the next one's (stride padded rows).
    out_row: usize,
    wo: usize,
    kh: usize,
    /// Bytes of a kernel row's steps (kw · C_in up to a multiple of 4).
    kwc: usize,
    /// Bytes per block.
    bb: usize,
    cout: usize,
    lim: Limits,
    double: bool,
    /// The band's first output pixel.
    y: *mut i8,
}

impl Tiles {
    /// Pixels `p0..p0 + n` of the band (n ≤ `M` ≤ [`MR`]) for the `B` blocks from `b0` (at
    /// `wb`).
    #[inline]
    #[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn tile<const B: usize, const M: usize>(
        &self,
        wb: *const u8,
        b0: usize,
        p0: usize,
        n: usize,
    ) {
        // Pixels past n repeat the last one: their sums are dropped. One division per tile,
        // the windows then walked (eight divisions were 1% of image classification's time).
        let (mut oy, mut ox) = (p0 / self.wo, p0 % self.wo);
        let mut x = [self.img; M];
        for (r, x) in x.iter_mut().enumerate() {
            *x = self.img.add(oy * self.out_row + ox * self.pixel);
            if r + 1 < n {
                ox += 1;
                if ox == self.wo {
                    (oy, ox) = (oy + 1, 0);
                }
            }
        }
        let acc = self.sums::<B, M>(&x, wb);
        for b in 0..B {
            let r0 = (b0 + b) * FC_BLOCK_ROWS;
            let mask = ((1u32 << (self.cout - r0).min(FC_BLOCK_ROWS)) - 1) as u16;
            let epi = BlockEpi::load(wb.add(b * self.bb));
            for (r, a) in acc.iter().enumerate().take(n) {
                let v = epi.apply_biased(a[b], &self.lim, self.double);
                _mm_mask_storeu_epi8(self.y.add((p0 + r) * self.cout + r0), mask, v);
            }
        }
    }

    /// The sums of the `B` blocks at `wb` for the pixels whose windows start at `x`. Not
    /// inlined, as the packed fully connected layer's (the epilogue's loops would otherwise
    /// keep the accumulators on the stack).
    #[inline(never)]
    #[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn sums<const B: usize, const M: usize>(
        &self,
        x: &[*const u8; M],
        wb: *const u8,
    ) -> [[__m512i; B]; M] {
        // The sums start at the bias: the epilogue does not add it.
        let mut acc = [[_mm512_setzero_si512(); B]; M];
        for a in acc.iter_mut() {
            for (b, a) in a.iter_mut().enumerate() {
                *a = _mm512_loadu_si512(wb.add(b * self.bb + FcEpi::BIAS) as *const _);
            }
        }
        let mut wp = wb.add(FC_EPI_BYTES);
        for ky in 0..self.kh {
            let o = ky * self.row;
            for j in (0..self.kwc).step_by(4) {
                let wv: [__m512i; B] =
                    core::array::from_fn(|b| _mm512_loadu_si512(wp.add(b * self.bb) as *const _));
                for (r, a) in acc.iter_mut().enumerate() {
                    let q = (x[r].add(o + j) as *const i32).read_unaligned();
                    let xb = _mm512_set1_epi32(q);
                    for (b, a) in a.iter_mut().enumerate() {
                        *a = _mm512_dpbusd_epi32(*a, xb, wv[b]);
                    }
                }
                wp = wp.add(64);
            }
        }
        acc
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::test_util::{as_single, check_conv_rows, conv_suite, ConvCase};
    use crate::kernels::{lanes_supported, Kernels, Packed};

    /// Packed, then run whole and in bands. It declines only what it does not support or, for
    /// a conv whose C_out the lanes geometry does not cover, where the x86 scratch rule leaves
    /// it short (the lanes kernel's input copy is room enough for the padded input).
    fn check(c: &ConvCase) {
        if !Kernels::vnni_available() {
            return;
        }
        check_conv_rows(
            c,
            &mut |p, im, rows| {
                let mut buf = vec![0u8; PackedFc::of_conv(p).bytes()];
                PackedFc::pack_conv(p, &mut buf);
                let bytes = &buf;
                let layout = Layout::VnniConv;
                let q = ConvParams {
                    packed: Packed { layout, bytes },
                    ..*p
                };
                // SAFETY: AVX-512 VNNI is available.
                unsafe { conv2d_implicit_rows(&q, im, rows) }
            },
            &|p, s| {
                !implicit_supported(&as_single(p))
                    || (!lanes_supported(&p.geometry()) && s < implicit_scratch(p, p.output.h))
            },
        );
    }

    conv_suite!(check);

    #[test]
    fn vnni_here() {
        if !Kernels::vnni_available() {
            println!("SKIP: no AVX-512 VNNI on this CPU, the implicit conv is not run");
        }
    }
}
