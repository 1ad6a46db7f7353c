//! depthwise_conv2d, NEON (with and without `dotprod`, the same kernel): depth multiplier 1,
//! channels in lanes.
//!
//! The padded input the outputs read is widened once into scratch as i16, padding with the
//! input zero point, 16 channels per block ([`SimdDepthwise`]), and the weights as i16 per tap.
//! Each tap is four `SMLAL`/`SMLAL2` of 4 channels into i32 lanes (exact: |x·w| ≤ 128·128), so
//! the sums are the reference's; the requantization is the conv's ([`Requant4`], per rounding),
//! its constants decoded once per block of channels.

use core::arch::aarch64::*;

use super::{Double4, Epilogue, Requant4, Single4};
use crate::kernels::{scalar, DepthwiseParams, Rounding, SimdDepthwise, DW_BLOCK, DW_MAX_TAPS};

/// Same bytes as [`scalar::depthwise_conv2d`]; `scratch` holds `SimdDepthwise::bytes` (with
/// less, or an op it does not cover, the scalar reference runs).
///
/// # Safety
/// The CPU must support NEON.
#[target_feature(enable = "neon")]
pub unsafe fn depthwise_conv2d(
    p: &DepthwiseParams,
    input: &[i8],
    output: &mut [i8],
    scratch: &mut [u8],
) {
    let Some(l) = SimdDepthwise::for_call(p, input.len(), output.len(), scratch.len()) else {
        return scalar::depthwise_conv2d(p, input, output);
    };
    let (c, taps) = (p.output.c, p.window.kernel_h * p.window.kernel_w);
    let base = scratch.as_mut_ptr();
    let base = base.add(base.align_offset(32));
    let image = base as *mut i16;
    let weights = base.add(l.image_bytes()) as *mut i16;
    widen(p, &l, input, image);
    let blk = l.blocks * DW_BLOCK;
    for t in 0..taps {
        for ch in 0..blk {
            let w = if ch < c { p.weights[t * c + ch] } else { 0 };
            *weights.add(t * blk + ch) = w as i16;
        }
    }
    let job = Job {
        p,
        l,
        image,
        weights,
        taps,
        out: output.as_mut_ptr(),
    };
    match p.out.rounding {
        Rounding::Single => job.blocks::<Single4>(),
        Rounding::Double => job.blocks::<Double4>(),
    }
}

/// One call's prepared scratch and output.
struct Job<'p> {
    p: &'p DepthwiseParams<'p>,
    l: SimdDepthwise,
    image: *const i16,
    weights: *const i16,
    taps: usize,
    out: *mut i8,
}

impl Job<'_> {
    /// Every block of channels over every output pixel, its requantization decoded once.
    #[inline]
    #[target_feature(enable = "neon")]
    unsafe fn blocks<Q: Requant4>(&self) {
        let (p, l) = (self.p, &self.l);
        let (c, ho, wo) = (p.output.c, p.output.h, p.output.w);
        let (sh, sw, kw) = (p.window.stride_h, p.window.stride_w, p.window.kernel_w);
        let blk = l.blocks * DW_BLOCK;
        let mut offsets = [0usize; DW_MAX_TAPS];
        for (t, o) in offsets.iter_mut().take(self.taps).enumerate() {
            *o = ((t / kw) * l.cols + t % kw) * blk;
        }
        let e = Epilogue::new(&p.out);
        let arrays = (p.bias, p.multiplier, p.shift);
        for b in 0..l.blocks {
            let c0 = b * DW_BLOCK;
            let n = (c - c0).min(DW_BLOCK);
            let q: [Q; 4] = core::array::from_fn(|i| {
                let at = c0 + 4 * i;
                Q::new(&arrays, at.min(c), n.saturating_sub(4 * i).min(4), &e)
            });
            for oy in 0..ho {
                for ox in 0..wo {
                    let xb = self.image.add((oy * sh * l.cols + ox * sw) * blk + c0);
                    let wb = self.weights.add(c0);
                    let mut acc = [vdupq_n_s32(0); 4];
                    for (t, &o) in offsets[..self.taps].iter().enumerate() {
                        let x0 = vld1q_s16(xb.add(o));
                        let x1 = vld1q_s16(xb.add(o + 8));
                        let w0 = vld1q_s16(wb.add(t * blk));
                        let w1 = vld1q_s16(wb.add(t * blk + 8));
                        acc[0] = vmlal_s16(acc[0], vget_low_s16(x0), vget_low_s16(w0));
                        acc[1] = vmlal_high_s16(acc[1], x0, w0);
                        acc[2] = vmlal_s16(acc[2], vget_low_s16(x1), vget_low_s16(w1));
                        acc[3] = vmlal_high_s16(acc[3], x1, w1);
                    }
                    let mut bytes = [0i8; DW_BLOCK];
                    for i in 0..4 {
                        bytes[4 * i..4 * i + 4].copy_from_slice(&q[i].apply(acc[i], &e));
                    }
                    let y = self.out.add((oy * wo + ox) * c + c0);
                    core::ptr::copy_nonoverlapping(bytes.as_ptr(), y, n);
                }
            }
        }
    }
}

/// The padded input as i16, the zero point (as the reference pads) outside the input and 0
/// past C.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn widen(p: &DepthwiseParams, l: &SimdDepthwise, input: &[i8], image: *mut i16) {
    let blk = l.blocks * DW_BLOCK;
    let (c, h, w) = (p.input.c, p.input.h, p.input.w);
    let (top, left) = (p.window.pad_top, p.window.pad_left);
    let z = p.input_zero_point.clamp(-128, 127) as i16;
    for r in 0..l.rows {
        let iy = r.wrapping_sub(top);
        for col in 0..l.cols {
            let dst = image.add((r * l.cols + col) * blk);
            let ix = col.wrapping_sub(left);
            if iy >= h || ix >= w {
                for k in 0..blk {
                    *dst.add(k) = if k < c { z } else { 0 };
                }
                continue;
            }
            let src = input.as_ptr().add((iy * w + ix) * c);
            let mut ci = 0;
            while ci + 16 <= c {
                let v = vld1q_s8(src.add(ci));
                vst1q_s16(dst.add(ci), vmovl_s8(vget_low_s8(v)));
                vst1q_s16(dst.add(ci + 8), vmovl_high_s8(v));
                ci += 16;
            }
            for k in ci..blk {
                *dst.add(k) = if k < c { *src.add(k) as i16 } else { 0 };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::test_util::{depthwise_matches_scalar_in, depthwise_suite, ConvCase};
    use crate::kernels::{neon_scratch_bytes, Kernels, OpGeometry};

    fn check(c: &ConvCase) {
        assert!(Kernels::neon_available());
        let stated = |g: &OpGeometry| {
            let n = neon_scratch_bytes(g);
            assert!(c.cout != c.cin || n > 0, "{c:?}");
            n
        };
        // SAFETY: NEON checked above.
        depthwise_matches_scalar_in(c, &stated, &mut |p, x, y, s| unsafe {
            depthwise_conv2d(p, x, y, s)
        });
    }

    depthwise_suite!(check);

    /// Less scratch than stated: the scalar kernel, same bytes.
    #[test]
    fn short_scratch_falls_back() {
        let c = ConvCase::square(5, 5, 6, 3, 1, 1, 3);
        // SAFETY: NEON is the aarch64 Linux baseline.
        depthwise_matches_scalar_in(
            &c,
            &|g| neon_scratch_bytes(g) - 1,
            &mut |p, x, y, s| unsafe { depthwise_conv2d(p, x, y, s) },
        );
    }
}
