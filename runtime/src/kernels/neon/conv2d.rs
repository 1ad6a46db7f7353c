//! conv2d, NEON: implicit GEMM over HWC input and OHWI weights.
//!
//! For each block of up to [`BLOCK`] output pixels the patches are packed into scratch, one
//! row of `align16(K)` int8 values per pixel (kh runs of kw·C_in values, padded taps filled
//! with the pad values), so K = kh·kw·C_in is contiguous whatever C_in (1 and 3 included).
//! Then for each group of 4 output channels (loaded once per block, from L1 for the block's
//! other pixels) tiles of 4 pixels × 4 channels keep 16 accumulators: each loaded patch vector
//! serves 4 channels, each weight vector 4 pixels. The sums of a tile come out with the 4
//! channels of a pixel in one vector and are requantized 4 lanes at a time.

use core::arch::aarch64::*;

use super::{dot_tile, Double4, Epilogue, Requant4, Single4, Tail};
use crate::kernels::{scalar, ConvImage, ConvParams, Rounding};

/// Output pixels packed per pass: the NEON sets' scratch rule
/// (`kernels::neon_conv_scratch_bytes`) holds this many rows of `align16(K)` bytes.
pub const BLOCK: usize = crate::kernels::NEON_PIXEL_BLOCK;

/// Output pixels per register tile.
const TP: usize = 4;

/// Same bytes as [`scalar::conv2d`], plain NEON (no `dotprod`). `scratch` must hold
/// `Kernels::Neon.scratch_bytes` of the conv (falls back to the scalar kernel otherwise).
///
/// # Safety
/// The CPU must support NEON.
#[target_feature(enable = "neon")]
pub unsafe fn conv2d(p: &ConvParams, input: &[i8], output: &mut [i8], scratch: &mut [u8]) {
    // SAFETY: NEON is enabled here; DOT = false needs nothing more.
    unsafe { conv::<false>(p, ConvImage::new(input, output, scratch)) }
}

/// [`conv2d`] with `SDOT`.
///
/// # Safety
/// The CPU must support NEON and `dotprod`.
#[target_feature(enable = "neon,dotprod")]
pub unsafe fn conv2d_dot(p: &ConvParams, input: &[i8], output: &mut [i8], scratch: &mut [u8]) {
    // SAFETY: NEON and dotprod are enabled here.
    unsafe { conv::<true>(p, ConvImage::new(input, output, scratch)) }
}

#[inline(always)]
unsafe fn conv<const DOT: bool>(p: &ConvParams, im: ConvImage) {
    // SAFETY (both): the caller's target features (NEON, dotprod when DOT).
    match p.out.rounding {
        Rounding::Single => unsafe { conv_q::<DOT, Single4>(p, im) },
        Rounding::Double => unsafe { conv_q::<DOT, Double4>(p, im) },
    }
}

/// The conv with the epilogue `Q` (the op's rounding).
///
/// # Safety
/// NEON, and `dotprod` when `DOT`.
#[inline(always)]
unsafe fn conv_q<const DOT: bool, Q: Requant4>(p: &ConvParams, im: ConvImage) {
    // SAFETY: the caller's target features (NEON, dotprod when DOT).
    if !unsafe { covered::<DOT, Q>(p, ConvImage::new(im.input, im.output, im.scratch)) } {
        scalar::conv2d(p, im.input, im.output)
    }
}

/// The conv by the few-channel kernel (`narrow`: pixels in lanes, kernel rows in quads) where
/// it covers the conv and its scratch fits, else by the packed one; `false` (nothing written)
/// where neither takes it: a window other than the uniform one (the patch walks are its), or
/// less scratch than `Kernels::Neon.scratch_bytes` states.
///
/// # Safety
/// NEON, and `dotprod` when `DOT`.
#[inline(always)]
unsafe fn covered<const DOT: bool, Q: Requant4>(p: &ConvParams, im: ConvImage) -> bool {
    let (input, output, scratch) = (im.input, im.output, im.scratch);
    if !p.is_uniform() {
        return false;
    }
    // SAFETY: the caller's target features (NEON, dotprod when DOT).
    if unsafe { super::narrow::conv::<DOT, Q>(p, ConvImage::new(input, output, scratch)) } {
        return true;
    }
    let k = p.k();
    let kp = crate::align16(k);
    let cout = p.output.c;
    let npix = p.output.h * p.output.w;
    if scratch.len() < BLOCK * kp
        || input.len() < p.input.len()
        || output.len() < npix * cout
        || p.weights.len() < cout * k
    {
        return false;
    }
    let rows = crate::as_i8_mut(&mut scratch[..BLOCK * kp]);
    let e = Epilogue::new(&p.out);
    let tail = Tail::new(k);
    let mut p0 = 0;
    while p0 < npix {
        let np = (npix - p0).min(BLOCK);
        for r in 0..np {
            pack_patch(p, input, p0 + r, &mut rows[r * kp..]);
        }
        let b = Block { rows, kp, np, p0 };
        let mut co = 0;
        while co < cout {
            let nc = (cout - co).min(4);
            // SAFETY: the caller's target features (NEON, dotprod when DOT).
            unsafe {
                match nc {
                    4 => group::<DOT, 4, Q>(p, &b, co, &e, &tail, output),
                    3 => group::<DOT, 3, Q>(p, &b, co, &e, &tail, output),
                    2 => group::<DOT, 2, Q>(p, &b, co, &e, &tail, output),
                    _ => group::<DOT, 1, Q>(p, &b, co, &e, &tail, output),
                }
            }
            co += nc;
        }
        p0 += np;
    }
    true
}

/// A block of packed patches: output pixels `p0..p0 + np`, one row of `kp` values each (rows
/// past `np` up to the tile are stale scratch bytes whose results are dropped).
struct Block<'a> {
    rows: &'a [i8],
    kp: usize,
    np: usize,
    p0: usize,
}

/// Output channels `co..co + NC` of the block's pixels.
#[inline(always)]
unsafe fn group<const DOT: bool, const NC: usize, Q: Requant4>(
    p: &ConvParams,
    b: &Block,
    co: usize,
    e: &Epilogue,
    tail: &Tail,
    output: &mut [i8],
) {
    let Block { rows, kp, np, p0 } = *b;
    let (k, cout) = (p.k(), p.output.c);
    let w: [&[i8]; NC] = core::array::from_fn(|c| &p.weights[(co + c) * k..][..k]);
    let wtail: [int8x16_t; NC] = core::array::from_fn(|c| tail.load(w[c]));
    let q = Q::new(&(p.bias, p.multiplier, p.shift), co, NC, e);
    let mut t = 0;
    while t < np {
        let x: [&[i8]; TP] = core::array::from_fn(|r| &rows[(t + r) * kp..][..kp]);
        // SAFETY: the caller's target features; rows hold kp ≥ align16(k) values.
        let s = unsafe { dot_tile::<DOT, TP, NC>(x, w, &wtail, tail, k) };
        for (r, &sr) in s.iter().enumerate().take(np - t) {
            let b = q.apply(sr, e);
            output[(p0 + t + r) * cout + co..][..NC].copy_from_slice(&b[..NC]);
        }
        t += TP;
    }
}

/// Its own walk rather than `ConvParams::patch_pieces` (the x86 kernels'): through that walk
/// this kernel ran 5–8% more instructions per image under QEMU (`bench/arm_insn.sh`).
///
/// Writes the patch of output pixel `pi` (K values) at the start of `row`, which runs to the
/// end of the packed rows: runs are copied 16 bytes at a time, the last copy of a run may
/// spill past it into bytes written later (the next taps, the next rows) or never read as
/// data (past K, where the weights' tail is zero).
#[inline(always)]
fn pack_patch(p: &ConvParams, input: &[i8], pi: usize, row: &mut [i8]) {
    let (cin, h, w) = (p.input.c, p.input.h as isize, p.input.w as isize);
    let (kh, kw, s, pad) = (
        p.window.kernel_h,
        p.window.kernel_w,
        p.stride(),
        p.pad() as isize,
    );
    let wo = p.output.w;
    let (oy, ox) = (pi / wo, pi % wo);
    let run = kw * cin;
    let ix0 = (ox * s) as isize - pad;
    for ky in 0..kh {
        let at = ky * run;
        let iy = (oy * s + ky) as isize - pad;
        if iy < 0 || iy >= h {
            for d in row[at..at + run].chunks_exact_mut(cin) {
                fill_pad(p, d);
            }
            continue;
        }
        let rowbase = iy as usize * w as usize;
        if ix0 >= 0 && ix0 + kw as isize <= w {
            copy_run(
                &mut row[at..],
                &input[(rowbase + ix0 as usize) * cin..],
                run,
            );
        } else {
            for kx in 0..kw {
                let ix = ix0 + kx as isize;
                let d = at + kx * cin;
                if ix >= 0 && ix < w {
                    copy_run(&mut row[d..], &input[(rowbase + ix as usize) * cin..], cin);
                } else {
                    fill_pad(p, &mut row[d..d + cin]);
                }
            }
        }
    }
}

/// `dst[..n] = src[..n]` in 16-byte vectors; the last one may write up to 15 bytes past `n`
/// (and read past `n` in `src`) where both slices have room, else the rest is copied exactly.
#[inline(always)]
fn copy_run(dst: &mut [i8], src: &[i8], n: usize) {
    let mut i = 0;
    while i < n {
        if i + 16 <= src.len() && i + 16 <= dst.len() {
            // SAFETY: 16 bytes in bounds of both slices (checked above); NEON: reached only
            // from the entry points.
            unsafe { vst1q_s8(dst.as_mut_ptr().add(i), vld1q_s8(src.as_ptr().add(i))) };
            i += 16;
        } else {
            dst[i..n].copy_from_slice(&src[i..n]);
            return;
        }
    }
}

#[inline(always)]
fn fill_pad(p: &ConvParams, d: &mut [i8]) {
    for (ci, v) in d.iter_mut().enumerate() {
        *v = p.pad_value(ci);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::test_util::{
        conv_matches_scalar, conv_matches_scalar_in, conv_suite, ConvCase,
    };
    use crate::kernels::{neon_conv_scratch_bytes, Kernels};

    /// Both inner products, each forced: plain NEON always, SDOT when the CPU has it, with
    /// exactly the scratch the NEON sets state: a uniform conv is never left to the scalar
    /// kernel (the narrow or the packed kernel takes it); others (TensorFlow's SAME) are, and
    /// the scalar kernel's bytes are compared then.
    fn check(c: &ConvCase) {
        assert!(Kernels::neon_available());
        for dot in [false, true] {
            if dot && !Kernels::dotprod_available() {
                continue;
            }
            conv_matches_scalar_in(c, &neon_conv_scratch_bytes, &mut |p, x, y, s| {
                // SAFETY: NEON checked above; SDOT only when dotprod is there.
                let took = unsafe {
                    let im = ConvImage::new(x, y, s);
                    match (dot, p.out.rounding) {
                        (false, Rounding::Single) => covered::<false, Single4>(p, im),
                        (false, Rounding::Double) => covered::<false, Double4>(p, im),
                        (true, Rounding::Single) => covered::<true, Single4>(p, im),
                        (true, Rounding::Double) => covered::<true, Double4>(p, im),
                    }
                };
                if !took {
                    assert!(!p.is_uniform(), "left to the scalar kernel: {c:?}");
                    crate::kernels::scalar::conv2d(p, x, y);
                }
            });
        }
    }

    conv_suite!(check);

    /// The entry points, both inner products: the same bytes.
    #[test]
    fn entry_points() {
        for c in crate::kernels::test_util::model_convs() {
            conv_matches_scalar_in(&c, &neon_conv_scratch_bytes, &mut |p, x, y, s| unsafe {
                conv2d(p, x, y, s)
            });
            if Kernels::dotprod_available() {
                conv_matches_scalar_in(&c, &neon_conv_scratch_bytes, &mut |p, x, y, s| unsafe {
                    conv2d_dot(p, x, y, s)
                });
            }
        }
    }

    /// Scratch smaller than a block of rows: the scalar fallback, same bytes.
    #[test]
    fn small_scratch_falls_back() {
        let mut calls = 0;
        conv_matches_scalar(&ConvCase::square(4, 5, 6, 3, 1, 1, 7), &mut |p, x, y, s| {
            calls += 1;
            let short = BLOCK * crate::align16(p.k()) - 1;
            // SAFETY: NEON is the aarch64 Linux baseline.
            unsafe {
                assert!(!covered::<false, Single4>(
                    p,
                    ConvImage::new(x, y, &mut s[..short])
                ));
                conv2d(p, x, y, &mut s[..short])
            }
        });
        assert_eq!(calls, 1);
    }
}
