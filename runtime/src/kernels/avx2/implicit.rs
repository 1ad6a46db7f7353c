//! conv2d, AVX2, as an implicit GEMM over weights packed at prepare ([`Layout::Avx2Conv`]: the
//! implicit VNNI conv's blocks, the bias not folded): output channels in the lanes (a block of
//! 16 as two vectors), [`MR`] output pixels at a time, each step four input bytes of one pixel,
//! broadcast, read where they lie in the input padded once per call into scratch (only the
//! rows a band of output rows reads; signed, the border the pad values). The product and the
//! output stage are the packed fully connected layer's ([`super::packed`]); the scratch is
//! the implicit VNNI conv's (`vnni::implicit_scratch`), which the x86 rule gives every conv
//! this set packs for it.

use core::ops::Range;

use super::packed::{Clamp, Outputs, Steps};
use crate::kernels::vnni::{
    band_rows, implicit_fits, implicit_packed, implicit_scratch, row_bytes,
};
use crate::kernels::{ConvImage, ConvParams, Layout, PackedFc, FC_STEP};
use crate::requant::Rounding;

/// Output pixels per tile.
const MR: usize = 4;

/// The packed weights, where `p` has them in this layout and is covered.
fn weights<'a>(p: &ConvParams<'a>) -> Option<&'a [u8]> {
    implicit_packed(p, Layout::Avx2Conv)
}

/// Whether [`conv2d_implicit_rows`] covers `p` with `scratch` bytes, for any band.
pub fn implicit_rows_covered(p: &ConvParams, scratch: usize) -> bool {
    weights(p).is_some() && scratch >= implicit_scratch(p, p.output.h)
}

/// Output rows `rows` of `p` into `im.output` (those rows, HWC), where `p` was packed for this
/// kernel and the buffers and scratch hold them; `false` (nothing written) else.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub unsafe fn conv2d_implicit_rows(p: &ConvParams, im: ConvImage, rows: Range<usize>) -> bool {
    implicit_rows(p, im, rows, false)
}

/// [`conv2d_implicit_rows`] with AVX-VNNI's `vpdpbusd`.
///
/// # Safety
/// The CPU must support AVX2 and AVX-VNNI.
#[target_feature(enable = "avx2,avxvnni")]
pub unsafe fn conv2d_implicit_rows_vnni(p: &ConvParams, im: ConvImage, rows: Range<usize>) -> bool {
    implicit_rows(p, im, rows, true)
}

/// [`conv2d_implicit_rows`], the products on AVX-VNNI where `vnni`.
#[target_feature(enable = "avx2")]
unsafe fn implicit_rows(p: &ConvParams, im: ConvImage, rows: Range<usize>, vnni: bool) -> bool {
    let Some(w) = weights(p) else {
        return false;
    };
    if !implicit_fits(p, &im, &rows) {
        return false;
    }
    if rows.start < rows.end {
        band(
            p,
            w,
            im.input,
            im.output.as_mut_ptr(),
            im.scratch,
            rows,
            vnni,
        );
    }
    true
}

/// Padded rows `rows` (of `h + 2·pad`) of `p`'s input, [`row_bytes`] each, from `img` on: the
/// border the pad values.
///
/// # Safety
/// `input` holds `p`'s input, `p` is uniform, `rows` lies within the padded height and `img`
/// has room for those rows.
unsafe fn pad(p: &ConvParams, input: &[i8], img: *mut i8, rows: Range<usize>) {
    let (cin, h, w, pad) = (p.input.c, p.input.h, p.input.w, p.pad());
    let row = row_bytes(p);
    let one = p.pad_value(0);
    let same = (1..cin).all(|c| p.pad_value(c) == one);
    let fill = |dst: *mut i8, pixels: usize| {
        if same {
            core::ptr::write_bytes(dst, one as u8, pixels * cin);
            return;
        }
        for x in 0..pixels {
            for c in 0..cin {
                dst.add(x * cin + c).write(p.pad_value(c));
            }
        }
    };
    for (i, yp) in rows.enumerate() {
        let dst = img.add(i * row);
        if yp < pad || yp >= h + pad {
            fill(dst, w + 2 * pad);
            continue;
        }
        fill(dst, pad);
        let src = input.as_ptr().add((yp - pad) * w * cin);
        core::ptr::copy_nonoverlapping(src, dst.add(pad * cin), w * cin);
        fill(dst.add((w + pad) * cin), pad);
    }
}

/// Output rows `rows` into `y` (their first pixel's outputs), the checks done.
#[target_feature(enable = "avx2")]
unsafe fn band(
    p: &ConvParams,
    w: &[u8],
    input: &[i8],
    y: *mut i8,
    scratch: &mut [u8],
    rows: Range<usize>,
    vnni: bool,
) {
    let (cin, s, cout, wo) = (p.input.c, p.stride(), p.output.c, p.output.w);
    let row = row_bytes(p);
    let first = rows.start * s;
    // Unpadded, with whole steps to a kernel row: the input is read where it lies (no step
    // reads past its row). Else padded into scratch.
    let img = if p.pad() == 0 && (p.window.kernel_w * cin).is_multiple_of(FC_STEP) {
        input.as_ptr().add(first * row)
    } else {
        let img = scratch.as_mut_ptr().add(scratch.as_ptr().align_offset(64)) as *mut i8;
        let in_rows = band_rows(p, rows.len());
        pad(p, input, img, first..first + in_rows);
        // What the last kernel row's last step reads past the rows meets zero weights.
        core::ptr::write_bytes(img.add(in_rows * row), 0, FC_STEP);
        img as *const i8
    };
    let l = PackedFc::of_conv(p);
    let steps = Steps {
        kh: p.window.kernel_h,
        row,
        kwc: PackedFc::row_bytes(p),
        tail: 0,
    };
    let out = Outputs {
        w: w.as_ptr(),
        bb: l.block_bytes(),
        n: cout,
        clamp: Clamp::new(&p.out),
        double: p.out.rounding == Rounding::Double,
        vnni,
    };
    let npx = rows.len() * wo;
    // Block by block: its weights stay in L1 over every pixel of the band.
    for b in 0..l.blocks() {
        let o = out.block_out(b);
        // The next pixel's output row and column, stepped (no division).
        let (mut oy, mut ox) = (0, 0);
        for p0 in (0..npx).step_by(MR) {
            // Pixels past n repeat the last one: their sums are dropped.
            let n = (npx - p0).min(MR);
            let mut x = [img; MR];
            for x in x.iter_mut().take(n) {
                *x = img.add(oy * s * row + ox * s * cin);
                ox += 1;
                if ox == wo {
                    (oy, ox) = (oy + 1, 0);
                }
            }
            let last = x[n - 1];
            x[n..].fill(last);
            let y: [*mut i8; MR] = core::array::from_fn(|r| y.add((p0 + r.min(n - 1)) * cout));
            out.block(&o, &x, &y, n, steps);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::test_util::{check_conv_rows, conv_suite, ConvCase};
    use crate::kernels::{Kernels, Packed};

    /// Packed, then run whole and in bands, the products on AVX-VNNI where `vnni`. It declines
    /// only what it does not cover: windows that are not uniform, or too little scratch for
    /// the padded input (where the x86 rule sizes the conv for another kernel).
    fn check_with(c: &ConvCase, vnni: bool) {
        check_conv_rows(
            c,
            &mut |p, im, rows| {
                let mut buf = vec![0u8; PackedFc::of_conv(p).bytes()];
                PackedFc::pack_conv_signed(p, &mut buf);
                let q = ConvParams {
                    packed: Packed {
                        layout: Layout::Avx2Conv,
                        bytes: &buf,
                    },
                    ..*p
                };
                // SAFETY: the features are here (the callers check).
                unsafe { implicit_rows(&q, im, rows, vnni) }
            },
            &|p, s| !p.is_uniform() || s < implicit_scratch(p, p.output.h),
        );
    }

    fn check(c: &ConvCase) {
        if Kernels::avx2_available() {
            check_with(c, false);
        }
    }

    conv_suite!(check);

    /// The products on AVX-VNNI's `vpdpbusd`.
    mod vnni {
        use super::*;

        fn check(c: &ConvCase) {
            if Kernels::avx_vnni_available() {
                check_with(c, true);
            }
        }

        conv_suite!(check);

        #[test]
        fn avx_vnni_here() {
            if !Kernels::avx_vnni_available() {
                println!("SKIP: no AVX-VNNI on this CPU, the implicit conv's vpdpbusd is not run");
            }
        }
    }
}
