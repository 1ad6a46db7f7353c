//! conv2d, NEON, for inputs with few channels (C_in ≤ 3: the first conv of every model).
//!
//! With K = kh·kw·C_in this small, packing a 16-byte-aligned patch row per output pixel costs
//! as much as the products. Here output pixels sit in the vector lanes (4 consecutive pixels
//! of an output row per vector) and the unit of a multiply-add is a quad of 4 consecutive
//! bytes of a kernel row (`kw·C_in` contiguous bytes of the HWC input): a kernel row takes
//! `G = ⌈kw·C_in / 4⌉` quads, so a 5×5 kernel over 1 channel is 10 quads per output pixel.
//! The padded input is copied once into scratch; each vector's quads are picked out of 32
//! input bytes by one `TBL` per kernel row and quad: with more than 8 output channels once per
//! pass of up to 128 pixels, into a panel shared by every channel group, else by each tile
//! itself (cheaper than a panel row for 1 or 2 groups). The weights' quads (zero past the
//! kernel row) are built once per call and broadcast with `LD1R`. Tiles of 4 vectors × 4
//! channels keep 16 accumulators; a 4×4 transpose puts a pixel's 4 channels in one vector for
//! the requantization shared with the packed kernel.
//!
//! With `dotprod` the lane of pixel j holds its quad's bytes at 4j..4j+3 (`SDOT` sums them
//! into lane j). Without, `SMULL`/`SMULL2` then `SADALP` sum bytes 2j, 2j+1 of each half into
//! lane j, so the quad's first pair sits at 2j in the low half (weights w0 w1 repeated) and
//! its second pair at 8 + 2j in the high half (w2 w3 repeated): exact, like the packed kernel.

use core::arch::aarch64::*;

use super::{mac, Epilogue, Requant4};
use crate::kernels::valid::pad_rows;
use crate::kernels::{
    neon_narrow_supported, ConvImage, ConvParams, NeonNarrow, NEON_NARROW_MAX_PASS,
    NEON_NARROW_PIXELS, NEON_NARROW_TILE,
};

/// Output pixels per vector.
const V: usize = NEON_NARROW_PIXELS;
/// Pixel vectors per register tile.
const PV: usize = NEON_NARROW_TILE;

/// Whether [`conv`] covers this conv (given enough scratch): [`neon_narrow_supported`] (1 to 3
/// input channels, the windows of 4 pixels' quads within 32 bytes, stride·C_in ≤ 9) and a
/// consistent output shape.
pub(super) fn supported(p: &ConvParams) -> bool {
    let s = p.stride();
    let (hp, wp) = (p.input.h + 2 * p.pad(), p.input.w + 2 * p.pad());
    neon_narrow_supported(&p.geometry())
        && p.output.h == (hp - p.window.kernel_h) / s + 1
        && p.output.w == (wp - p.window.kernel_w) / s + 1
}

/// The pixel vectors a pass of [`conv`] takes with `len` bytes of scratch whose 16-aligned base
/// is `base` bytes in (`r`: the conv's regions): with tiles picking from the image, every
/// vector of the conv; else as many panel rows as fit, up to [`NEON_NARROW_MAX_PASS`], in whole
/// tiles. 0 where not even the image and the weight quads fit, or no tile of panel rows.
fn pass(p: &ConvParams, r: &NeonNarrow, len: usize, base: usize) -> usize {
    let fixed = base.saturating_add(r.img).saturating_add(r.wq);
    if fixed > len {
        return 0;
    }
    if r.direct {
        let nvec = p.output.h * p.output.w.div_ceil(V);
        return nvec.next_multiple_of(PV);
    }
    let room = (len - fixed) / r.per_vec;
    room.min(NEON_NARROW_MAX_PASS) / PV * PV
}

/// Same bytes as `scalar::conv2d`, or `false` (output untouched) when [`supported`] fails or
/// `scratch` cannot hold the padded image (+ 32 bytes), the weight quads and, past 8 output
/// channels, a panel of at least 16 pixels: the caller then runs the packed kernel.
///
/// `Q`: the epilogue of the op's rounding.
///
/// # Safety
/// NEON, and `dotprod` when `DOT`.
#[inline(always)]
pub(super) unsafe fn conv<const DOT: bool, Q: Requant4>(p: &ConvParams, im: ConvImage) -> bool {
    if !supported(p) {
        return false;
    }
    let (input, output, scratch) = (im.input, im.output, im.scratch);
    let (cin, s, kh, kw) = (p.input.c, p.stride(), p.window.kernel_h, p.window.kernel_w);
    let (cout, ho, wo) = (p.output.c, p.output.h, p.output.w);
    let wp = p.input.w + 2 * p.pad();
    let (run, k) = (kw * cin, p.k());
    let g = run.div_ceil(4);
    let taps = kh * g;
    // Scratch from a 16-aligned base: the padded image, the weight quads `[tap][channel]`
    // (4-aligned, for LD1R), the panel `[tap][vector]` of 16-byte vectors. Up to 2 channel
    // groups the tiles pick their quads from the image themselves (a pick serves at most 2
    // tiles; a panel row costs more); more groups share a pass's panel.
    let r = NeonNarrow::new(&p.geometry());
    let (img_len, wq_len, direct) = (r.img, r.wq, r.direct);
    let base = scratch.as_ptr().align_offset(16);
    let fixed = base + img_len + wq_len;
    let nvw = wo.div_ceil(V);
    let nvec = ho * nvw;
    let pass = pass(p, &r, scratch.len(), base);
    let panel_len = if direct { 0 } else { pass * r.per_vec };
    if pass == 0
        || input.len() < p.input.len()
        || output.len() < ho * wo * cout
        || p.weights.len() < cout * k
    {
        return false;
    }
    let area = crate::as_i8_mut(&mut scratch[base..fixed + panel_len]);
    let (img, rest) = area.split_at_mut(img_len);
    let (wq, panel) = rest.split_at_mut(wq_len);
    pad_input(p, input, img);
    weight_quads(p, wq);
    // SAFETY: NEON (the caller's contract).
    let idx = unsafe { quad_index::<DOT>(s * cin) };
    let e = Epilogue::new(&p.out);
    let mut v0 = 0;
    while v0 < nvec {
        let nv = (nvec - v0).min(pass);
        for v in 0..if direct { 0 } else { nv } {
            let (oy, ox0) = ((v0 + v) / nvw, (v0 + v) % nvw * V);
            let mut dst = v * 16;
            for ky in 0..kh {
                let row = ((oy * s + ky) * wp + ox0 * s) * cin;
                // ox0·s ≤ (wo − 1)·s ≤ wp − kw and 4(g − 1) < kw·C_in, so every load below
                // ends by row + 4(g − 1) + 32 ≤ hp·wp·C_in + 31 < img.len().
                debug_assert!(row + 4 * (g - 1) + 32 <= img.len());
                // SAFETY: 32 bytes from each `src` lie in `img` (above); the stores write
                // panel rows (ky·g + q)·pass + v < taps·pass, inside the panel.
                unsafe {
                    let mut src = img.as_ptr().add(row);
                    for _ in 0..g {
                        let x = vqtbl2q_s8(vld1q_s8_x2(src), idx);
                        vst1q_s8(panel.as_mut_ptr().add(dst), x);
                        src = src.add(4);
                        dst += pass * 16;
                    }
                }
            }
        }
        let job = Job {
            panel,
            img,
            idx,
            wq,
            taps,
            g,
            row: wp * cin,
            step: s * cin,
            stride: s,
            pass,
            cout,
            co: 0,
            v0,
            nv,
            nvw,
            wo,
        };
        // SAFETY: the caller's target features (NEON, dotprod when DOT).
        unsafe { groups::<DOT, Q>(p, &job, &e, output, direct) };
        v0 += nv;
    }
    true
}

/// The weight quads `[tap][channel]`: 4 consecutive bytes of a kernel row each, zero past it.
#[inline(always)]
fn weight_quads(p: &ConvParams, wq: &mut [i8]) {
    let (run, k, cout) = (p.window.kernel_w * p.input.c, p.k(), p.output.c);
    let g = run.div_ceil(4);
    for t in 0..p.window.kernel_h * g {
        let (ky, q) = (t / g, t % g);
        for co in 0..cout {
            let w = &p.weights[co * k + ky * run..][..run];
            for b in 0..4 {
                let i = 4 * q + b;
                wq[(t * cout + co) * 4 + b] = if i < run { w[i] } else { 0 };
            }
        }
    }
}

/// The `TBL` indices that pick 4 pixels' quads (windows `step` bytes apart) out of 32 input
/// bytes, in the lane order of `SDOT` (`DOT`) or of `SMULL` + `SADALP` (see the module doc).
///
/// # Safety
/// NEON.
#[inline(always)]
unsafe fn quad_index<const DOT: bool>(step: usize) -> uint8x16_t {
    let idx: [u8; 16] = core::array::from_fn(|i| {
        let (j, b) = if DOT {
            (i / 4, i % 4)
        } else {
            ((i % 8) / 2, 2 * (i / 8) + i % 2)
        };
        (j * step + b) as u8
    });
    // SAFETY: a load of a local 16-byte array; NEON (the caller's contract).
    unsafe { vld1q_u8(idx.as_ptr()) }
}

/// Every channel group of one pass (`job` with its `co` set per group), 4 channels a tile.
///
/// # Safety
/// NEON, and `dotprod` when `DOT`.
#[inline(always)]
unsafe fn groups<const DOT: bool, Q: Requant4>(
    p: &ConvParams,
    job: &Job,
    e: &Epilogue,
    output: &mut [i8],
    direct: bool,
) {
    let mut co = 0;
    while co < job.cout {
        let nc = (job.cout - co).min(4);
        let job = Job { co, ..*job };
        // SAFETY: the caller's target features (NEON, dotprod when DOT).
        unsafe {
            match (nc, direct) {
                (4, false) => group::<DOT, 4, false, Q>(p, &job, e, output),
                (3, false) => group::<DOT, 3, false, Q>(p, &job, e, output),
                (2, false) => group::<DOT, 2, false, Q>(p, &job, e, output),
                (_, false) => group::<DOT, 1, false, Q>(p, &job, e, output),
                (4, true) => group::<DOT, 4, true, Q>(p, &job, e, output),
                (3, true) => group::<DOT, 3, true, Q>(p, &job, e, output),
                (2, true) => group::<DOT, 2, true, Q>(p, &job, e, output),
                (_, true) => group::<DOT, 1, true, Q>(p, &job, e, output),
            }
        }
        co += nc;
    }
}

/// One pass's channel group: the panel (or the padded image and the quads' byte indices),
/// the weight quads and where the pass sits.
#[derive(Clone, Copy)]
struct Job<'a> {
    panel: &'a [i8],
    img: &'a [i8],
    idx: uint8x16_t,
    wq: &'a [i8],
    taps: usize,
    /// Quads per kernel row.
    g: usize,
    /// Bytes per padded image row.
    row: usize,
    /// Bytes between the windows of neighbouring output pixels (stride·C_in).
    step: usize,
    /// The conv's stride.
    stride: usize,
    pass: usize,
    cout: usize,
    co: usize,
    v0: usize,
    nv: usize,
    nvw: usize,
    wo: usize,
}

/// The accumulators of the tile of vectors `t0..t0 + PV` of the pass for channels
/// `co..co + NC`, the quads picked from the image as the panel does (vectors past `nv`
/// repeat the pass's last one).
///
/// # Safety
/// NEON, and `dotprod` when `DOT`; `j` as `conv` builds it (`t0 < nv`).
#[inline(always)]
unsafe fn tile_direct<const DOT: bool, const NC: usize>(
    j: &Job,
    t0: usize,
) -> [[int32x4_t; NC]; PV] {
    // The window of kernel row 0 of each vector (row ky: + ky·row).
    let base: [usize; PV] = core::array::from_fn(|v| {
        let vi = j.v0 + (t0 + v).min(j.nv - 1);
        let (oy, ox0) = (vi / j.nvw, vi % j.nvw * V);
        oy * j.stride * j.row + ox0 * j.step
    });
    // SAFETY: see the panel loop of `conv`: each window's 32 bytes lie in `img`; weight
    // quads t·cout + co + c < taps·cout at 4-aligned addresses.
    unsafe {
        let mut a = [[vdupq_n_s32(0); NC]; PV];
        let mut wp = j.wq.as_ptr().add(j.co * 4);
        for ky in 0..j.taps / j.g {
            let mut src: [*const i8; PV] =
                core::array::from_fn(|v| j.img.as_ptr().add(base[v] + ky * j.row));
            for _ in 0..j.g {
                let x: [int8x16_t; PV] =
                    core::array::from_fn(|v| vqtbl2q_s8(vld1q_s8_x2(src[v]), j.idx));
                let w: [Wq; NC] = core::array::from_fn(|c| load_wq::<DOT>(wp.add(4 * c)));
                src = src.map(|p| p.wrapping_add(4));
                wp = wp.wrapping_add(j.cout * 4);
                for (av, &xv) in a.iter_mut().zip(&x) {
                    for (acc, &wc) in av.iter_mut().zip(&w) {
                        *acc = mac_q::<DOT>(*acc, xv, wc);
                    }
                }
            }
        }
        a
    }
}

/// A weight quad broadcast for [`mac_q`]: with `DOT` the quad in every lane (`a`); without,
/// its bytes 0, 1 repeated (`b`, for the low half) and 2, 3 repeated (`a`, for the high half).
#[derive(Clone, Copy)]
struct Wq {
    a: int8x16_t,
    b: int8x8_t,
}

/// # Safety
/// NEON; `at` 4-aligned with 4 readable bytes.
#[inline(always)]
unsafe fn load_wq<const DOT: bool>(at: *const i8) -> Wq {
    // SAFETY: 4 readable bytes at a 4-aligned address (the caller's contract), so the i32
    // and both i16 reads are aligned and in bounds.
    unsafe {
        if DOT {
            Wq {
                a: vreinterpretq_s8_s32(vld1q_dup_s32(at.cast::<i32>())),
                b: vdup_n_s8(0),
            }
        } else {
            Wq {
                a: vreinterpretq_s8_s16(vld1q_dup_s16(at.add(2).cast::<i16>())),
                b: vreinterpret_s8_s16(vld1_dup_s16(at.cast::<i16>())),
            }
        }
    }
}

/// Lane j += the dot product of pixel j's quad in `x` with the weight quad (module doc).
///
/// # Safety
/// NEON, and `dotprod` when `DOT`.
#[inline(always)]
unsafe fn mac_q<const DOT: bool>(acc: int32x4_t, x: int8x16_t, w: Wq) -> int32x4_t {
    // SAFETY: register-only operations; SDOT only when DOT (the caller's contract).
    unsafe {
        if DOT {
            mac::<true>(acc, x, w.a)
        } else {
            let lo = vmull_s8(vget_low_s8(x), w.b);
            let hi = vmull_high_s8(x, w.a);
            vpadalq_s16(vpadalq_s16(acc, lo), hi)
        }
    }
}

/// Output channels `co..co + NC` of the pass's `nv` pixel vectors, in tiles of [`PV`]
/// vectors (panel rows past `nv` are stale bytes, and with `DIRECT` vectors past `nv` repeat
/// the last one: their results are dropped).
///
/// # Safety
/// NEON, and `dotprod` when `DOT`.
#[inline(always)]
unsafe fn group<const DOT: bool, const NC: usize, const DIRECT: bool, Q: Requant4>(
    p: &ConvParams,
    j: &Job,
    e: &Epilogue,
    output: &mut [i8],
) {
    let q = Q::new(&(p.bias, p.multiplier, p.shift), j.co, NC, e);
    let mut t0 = 0;
    while t0 < j.nv {
        let a = if DIRECT {
            // SAFETY: the caller's target features; see `tile_direct`.
            unsafe { tile_direct::<DOT, NC>(j, t0) }
        } else {
            // SAFETY: the caller's target features; panel reads are rows t·pass + t0 + v
            // with t0 + v < pass (a multiple of PV), weight reads quads t·cout + co + c <
            // taps·cout at 4-aligned addresses (wq starts 16-aligned).
            unsafe {
                let mut a = [[vdupq_n_s32(0); NC]; PV];
                // Tap t's rows: panel (t·pass + t0 + v)·16, weights (t·cout + co + c)·4; the
                // pointers step by a tap (wrapping: the last step may leave the slices unread).
                let mut xp = j.panel.as_ptr().add(t0 * 16);
                let mut wp = j.wq.as_ptr().add(j.co * 4);
                for _ in 0..j.taps {
                    let x: [int8x16_t; PV] = core::array::from_fn(|v| vld1q_s8(xp.add(16 * v)));
                    let w: [Wq; NC] = core::array::from_fn(|c| load_wq::<DOT>(wp.add(4 * c)));
                    xp = xp.wrapping_add(j.pass * 16);
                    wp = wp.wrapping_add(j.cout * 4);
                    for (av, &xv) in a.iter_mut().zip(&x) {
                        for (acc, &wc) in av.iter_mut().zip(&w) {
                            *acc = mac_q::<DOT>(*acc, xv, wc);
                        }
                    }
                }
                a
            }
        };
        for (v, av) in a.iter().enumerate().take(j.nv - t0) {
            let vi = j.v0 + t0 + v;
            let (oy, ox0) = (vi / j.nvw, vi % j.nvw * V);
            let n = (j.wo - ox0).min(V);
            let px = transpose(av);
            let at = (oy * j.wo + ox0) * j.cout + j.co;
            // The last byte written, of pixel oy·wo + ox0 + n − 1 < ho·wo, channel
            // co + NC − 1 < cout, is inside the output (checked once by `conv`).
            debug_assert!(at + (n - 1) * j.cout + NC <= output.len());
            for (r, &sr) in px.iter().enumerate().take(n) {
                let b = q.apply(sr, e);
                // SAFETY: NC ≤ 4 bytes inside `output` (above), from a local array.
                unsafe {
                    let dst = output.as_mut_ptr().add(at + r * j.cout);
                    core::ptr::copy_nonoverlapping(b.as_ptr(), dst, NC);
                }
            }
        }
        t0 += PV;
    }
}

/// `NC` channel vectors of 4 pixels → 4 pixel vectors of the channels (zero past NC).
#[inline(always)]
fn transpose<const NC: usize>(ch: &[int32x4_t; NC]) -> [int32x4_t; 4] {
    // SAFETY: register-only NEON operations; NEON: reached only from the entry points.
    unsafe {
        let z = vdupq_n_s32(0);
        let c: [int32x4_t; 4] = core::array::from_fn(|i| if i < NC { ch[i] } else { z });
        let t0 = vreinterpretq_s64_s32(vtrn1q_s32(c[0], c[1]));
        let t1 = vreinterpretq_s64_s32(vtrn2q_s32(c[0], c[1]));
        let t2 = vreinterpretq_s64_s32(vtrn1q_s32(c[2], c[3]));
        let t3 = vreinterpretq_s64_s32(vtrn2q_s32(c[2], c[3]));
        [
            vreinterpretq_s32_s64(vtrn1q_s64(t0, t2)),
            vreinterpretq_s32_s64(vtrn1q_s64(t1, t3)),
            vreinterpretq_s32_s64(vtrn2q_s64(t0, t2)),
            vreinterpretq_s32_s64(vtrn2q_s64(t1, t3)),
        ]
    }
}

/// The input with `pad` pixels of pad values on every side, `(h + 2·pad)·(w + 2·pad)·C_in`
/// bytes at the start of `img` (`valid::pad_rows`); the slack after it zeroed (read only into
/// dropped lanes or against zero weights).
fn pad_input(p: &ConvParams, input: &[i8], img: &mut [i8]) {
    let (h, w, pad) = (p.input.h, p.input.w, p.pad());
    let (hp, wp) = (h + 2 * pad, w + 2 * pad);
    let (body, slack) = img.split_at_mut(hp * wp * p.input.c);
    slack.fill(0);
    pad_rows(p, input, (pad, pad), wp, 0..hp, body);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::test_util::{
        check_conv_in, conv_matches_scalar, conv_matches_scalar_in, conv_suite, ConvCase,
    };
    use crate::kernels::{neon_conv_scratch_bytes, Kernels, Rounding};
    use proptest::prelude::*;

    /// [`conv`] with the epilogue of the op's rounding, as `neon::conv2d` picks it.
    unsafe fn conv_any<const DOT: bool>(p: &ConvParams, im: ConvImage) -> bool {
        use super::super::{Double4, Single4};
        // SAFETY: the caller's target features.
        unsafe {
            match p.out.rounding {
                Rounding::Single => conv::<DOT, Single4>(p, im),
                Rounding::Double => conv::<DOT, Double4>(p, im),
            }
        }
    }

    /// The scratch [`conv`] takes whatever the slice's alignment: the image, the weight quads
    /// and, with a panel, one tile of rows (the least; the NEON sets state more, the best).
    fn min_scratch(p: &ConvParams) -> usize {
        let r = NeonNarrow::new(&p.geometry());
        r.bytes(if r.direct { 0 } else { PV })
    }

    /// Runs the narrow path itself (both inner products where the CPU has them) with exactly
    /// the scratch the NEON sets state; asserts it took every conv it supports, else the packed
    /// kernel ran.
    fn check(c: &ConvCase) {
        assert!(Kernels::neon_available());
        let run = |dot: bool| {
            conv_matches_scalar_in(c, &neon_conv_scratch_bytes, &mut |p, x, y, s| {
                // SAFETY: NEON checked above; dotprod when `dot`.
                let took = unsafe {
                    if dot {
                        super::super::conv2d::conv2d_dot(p, x, y, s);
                        conv_any::<true>(p, ConvImage::new(x, y, s))
                    } else {
                        super::super::conv2d::conv2d(p, x, y, s);
                        conv_any::<false>(p, ConvImage::new(x, y, s))
                    }
                };
                assert_eq!(took, supported(p) && c.cin <= 3);
            })
        };
        run(false);
        if Kernels::dotprod_available() {
            run(true);
        }
    }

    #[test]
    fn fixed_shapes() {
        for &(cin, cout, hw, k, s, pad) in &[
            (1, 6, 32, 5, 1, 0),
            (3, 64, 32, 3, 1, 1),
            (3, 17, 9, 7, 2, 3),
            (2, 5, 11, 1, 2, 0),
            (1, 1, 1, 1, 1, 0),
            (3, 8, 7, 3, 3, 2),
        ] {
            check(&ConvCase::square(cin, cout, hw, k, s, pad, 7 + cin as u64));
        }
    }

    /// The panel of the fewest vectors (4) the scratch allows, 17 channels: same bytes.
    #[test]
    fn smallest_panel() {
        for (cin, k, s) in [(1, 5, 1), (3, 3, 1), (3, 7, 2), (2, 1, 3)] {
            let c = ConvCase {
                w: 11,
                ..ConvCase::square(cin, 17, 9, k, s, 1, 5)
            };
            conv_matches_scalar(&c, &mut |p, x, y, sc| {
                let r = NeonNarrow::new(&p.geometry());
                let need = sc.as_ptr().align_offset(16) + r.img + r.wq + PV * r.per_vec;
                // SAFETY: NEON is the aarch64 Linux baseline.
                unsafe {
                    assert!(!conv_any::<false>(
                        p,
                        ConvImage::new(x, y, &mut sc[..need - 1])
                    ));
                    assert!(conv_any::<false>(p, ConvImage::new(x, y, &mut sc[..need])));
                }
                if Kernels::dotprod_available() {
                    y.fill(0);
                    // SAFETY: dotprod checked.
                    unsafe { assert!(conv_any::<true>(p, ConvImage::new(x, y, &mut sc[..need]))) };
                }
            });
        }
    }

    /// The shared conv suite, both inner products, with the NEON sets' scratch: declined only
    /// where [`supported`] fails (the stated scratch is never short of [`min_scratch`]).
    fn suite(c: &ConvCase) {
        assert!(Kernels::neon_available());
        let may = |p: &ConvParams, len: usize| {
            assert!(!supported(p) || len >= min_scratch(p));
            !supported(p)
        };
        let rule = &neon_conv_scratch_bytes;
        // SAFETY: NEON checked above.
        check_conv_in(
            c,
            rule,
            &mut |p, x, y, s| unsafe { conv_any::<false>(p, ConvImage::new(x, y, s)) },
            &may,
        );
        if Kernels::dotprod_available() {
            // SAFETY: dotprod checked.
            check_conv_in(
                c,
                rule,
                &mut |p, x, y, s| unsafe { conv_any::<true>(p, ConvImage::new(x, y, s)) },
                &may,
            );
        }
    }

    conv_suite!(suite);

    /// The scratch the NEON sets state for a conv this kernel supports holds its best pass
    /// (every pixel vector, up to the most a pass takes) at any alignment of the slice, over
    /// geometries up to wide images; one slice less, the pass is smaller or declined.
    #[test]
    fn stated_scratch_is_the_best_pass() {
        let mut rng = crate::kernels::test_util::Rng(11);
        let mut seen = [0usize; 2];
        for _ in 0..3000 {
            let (cin, s) = (rng.range(1, 3) as usize, rng.range(1, 3) as usize);
            let (kh, kw, pad) = (
                rng.range(1, 7) as usize,
                rng.range(1, 7) as usize,
                rng.range(0, 3) as usize,
            );
            let (h, w) = (rng.range(1, 230) as usize, rng.range(1, 230) as usize);
            let cout = [1, 3, 8, 9, 16, 17, 64][rng.range(0, 6) as usize];
            let c = ConvCase {
                cin,
                cout,
                h,
                w,
                kh,
                kw,
                stride: s,
                pad,
                same: false,
                seed: 0,
                rounding: None,
            };
            let Some(p) = crate::kernels::test_util::conv_shape(&c) else {
                continue;
            };
            if !supported(&p) {
                continue;
            }
            let r = NeonNarrow::new(&p.geometry());
            let len = neon_conv_scratch_bytes(&p.geometry());
            let nvec = p.output.h * p.output.w.div_ceil(V);
            let best = if r.direct {
                nvec.next_multiple_of(PV)
            } else {
                r.best_pass
            };
            assert!(best >= PV && (r.direct || best <= NEON_NARROW_MAX_PASS));
            assert!(r.direct || best >= nvec.min(NEON_NARROW_MAX_PASS));
            for base in 0..16 {
                assert_eq!(
                    pass(&p, &r, len - (15 - base), base),
                    best,
                    "{c:?} base {base}"
                );
            }
            assert!(
                pass(&p, &r, len - 16, 15) < best,
                "{c:?}: the rule states more than it takes"
            );
            seen[r.direct as usize] += 1;
        }
        assert!(seen[0] > 100 && seen[1] > 100, "{seen:?}");
    }

    /// Scratch too small for a panel of 4 vectors: declined, output untouched.
    #[test]
    fn small_scratch_declines() {
        let mut calls = 0;
        conv_matches_scalar(
            &ConvCase::square(1, 6, 12, 5, 1, 0, 3),
            &mut |p, x, y, s| {
                calls += 1;
                // SAFETY: NEON is the aarch64 Linux baseline.
                unsafe {
                    assert!(!conv_any::<false>(p, ConvImage::new(x, y, &mut s[..200])));
                    assert!(conv_any::<false>(p, ConvImage::new(x, y, s)));
                }
            },
        );
        assert_eq!(calls, 1);
    }

    proptest! {
        #[test]
        fn narrow_equals_scalar(
            cin in 1usize..=4,
            cout in 1usize..=17,
            h in 1usize..12, w in 1usize..12,
            kh in 1usize..=7, kw in 1usize..=7,
            stride in 1usize..=2, pad in 0usize..=3, seed in any::<u64>(),
        ) {
            check(&ConvCase { w, kw, ..ConvCase::square(cin, cout, h, kh, stride, pad, seed) });
        }
    }
}
