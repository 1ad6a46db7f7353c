//! conv2d: output rows from a band of the kh input rows they read, widened to 16 bits, in 2×2
//! register blocks (two output channels × two pixels) of `SMLAD`s, after CMSIS-NN's
//! `arm_convolve_s8`.
//!
//! In HWC, kernel row ky of output pixel ox reads kw·C_in consecutive values of one input row,
//! from (ox·s_w − pad_left)·C_in on. Any window without dilation is covered (strides, kernel
//! sides and padding per axis, TensorFlow's SAME with its odd row and column at the bottom and
//! right): the band holds the kh input rows of an output row with their padding (the pad
//! values in its columns, rows of them above and below the input), widened
//! (`SXTB16`, `SXTB16 ROR #8`, and `PKHBT`/`PKHTB` to restore the order) in natural order, so
//! every kernel row of every pixel is a contiguous segment of it that reads as 16-bit pairs
//! from any offset (unaligned words: one `LDR` on Armv7-M). A pixel's patch is then its kh
//! segments, each padded to a whole word (the weights hold a zero there). For a block of pixels
//! the patches of each pixel pair are gathered word by word from the band, interleaved (one
//! 8-byte word per patch word: the pair's two words). The weights are widened the same way, a
//! channel pair's rows interleaved. So the inner loop is one flat run over the patch: per step
//! an 8-byte word of patches and one of weights feed four `SMLAD`s, 8 multiply-adds, two steps
//! loaded by one `LDM` from each side (10 instructions per 16 multiply-adds: [`dot2x2_run`], one
//! `asm!` for a run of pixel pairs); the epilogue then requantizes the run's sums a channel at a
//! time (its constants in registers: `QADD`, `SSAT`, about 10 instructions an output). An odd
//! last pixel of a block is gathered twice and an odd last channel pairs with zero weights;
//! their extra sums are dropped.
//!
//! The kernel fits itself into the scratch it is given, as [`plan`] decides from its length:
//! where whole widened rows fit, the band is a ring of them, each input row widened once per
//! call (held twice, so that any kh consecutive rows are contiguous), blocks are up to a whole
//! output row and, where they fit too, all the weights are widened once per call; else (wide
//! rows) the band is a strip of the padded columns one block reads, widened again per block,
//! and the weights one channel pair per block. The Cortex-M set states the plan's bytes
//! (`kernels::cortex_m_conv_scratch_bytes`: the ring, whole-row blocks, every weight pair
//! where they fit `kernels::CORTEX_M_WEIGHTS_BUDGET`, else one; the sizes are
//! `kernels::CortexMConv`'s, shared with this plan); the least it takes, a one-pixel strip, is
//! far less.

use super::{
    instance, load, widen, word, Bounds, Clamp, Double, Epilogue, Full, Requant, Round, Single,
};
use crate::kernels::{scalar, ConvParams, CortexMConv, Rounding};

/// Output pixels per block at least when the band holds whole rows (else strips are used).
const PIXEL_BLOCK: usize = 8;

/// Same bytes as [`scalar::conv2d`]. `scratch` should hold `Kernels::CortexM.scratch_bytes` of
/// the conv (runs a lesser plan with less, and the scalar kernel where it holds less than
/// [`plan`] needs at least).
pub fn conv2d(p: &ConvParams, input: &[i8], output: &mut [i8], scratch: &mut [u8]) {
    let (k, cout, wo) = (p.k(), p.output.c, p.output.w);
    if p.output.is_empty() {
        return;
    }
    // Any window without dilation: the band holds its padded rows and columns.
    let w = &p.window;
    if w.dilation_h != 1 || w.dilation_w != 1 || w.stride_h == 0 || w.stride_w == 0 {
        return scalar::conv2d(p, input, output);
    }
    let (sh, sw) = (w.stride_h, w.stride_w);
    let l = CortexMConv::new(&p.geometry());
    if l.pointwise && super::pointwise::pointwise(p, &l, input, output, scratch) {
        return;
    }
    let plan = match plan(p, scratch.len()) {
        Some(plan)
            if input.len() >= p.input.len()
                && output.len() >= p.output.len()
                && p.weights.len() >= cout * k =>
        {
            plan
        }
        _ => return scalar::conv2d(p, input, output),
    };
    let (band, rest) = scratch.split_at_mut(plan.band);
    let band = crate::as_i8_mut(band);
    // SAFETY: every bit pattern is a valid u64; `plan` counts the 7 bytes aligning may skip.
    let (_, words, _) = unsafe { rest.align_to_mut::<u64>() };
    let len = plan.pair / 8;
    // The weights at the end (every channel pair's, or room for one), the patches before.
    let pairs = if plan.all_weights {
        cout.div_ceil(2)
    } else {
        1
    };
    let (cols, wts) = words.split_at_mut(words.len() - pairs * len);
    if plan.all_weights {
        for (cp, dst) in wts.chunks_exact_mut(len).enumerate() {
            widen_weights(p, 2 * cp, dst);
        }
    }
    let g = Geometry {
        kh: p.window.kernel_h,
        rw: (p.window.kernel_w * p.input.c).div_ceil(2),
        row: plan.row,
        step: 2 * sw * p.input.c,
    };
    let e = Epilogue::new(&p.out);
    // The channel pairs' loop in the op's rounding, chosen once.
    let block: Block = instance!(&p.out, block);
    let mut sums: Sums = [[0; 4]; RUN];
    let mut run_block = |band: &[i8], px: Pixels, np: usize, out: &mut [i8]| {
        let cols = &mut cols[..np.div_ceil(2) * len];
        gather_any(band, px, np, &g, cols);
        for c0 in (0..cout).step_by(2) {
            let wt: &[u64] = if plan.all_weights {
                &wts[c0 / 2 * len..][..len]
            } else {
                widen_weights(p, c0, wts);
                wts
            };
            block(p, cols, wt, out, c0, &e, &mut sums);
        }
    };
    if plan.image {
        // The whole padded image once, then blocks of pixels in flat order across rows.
        for (t, dst) in band.chunks_exact_mut(g.row).enumerate() {
            fill_row(p, input, t, 0, dst);
        }
        let n = p.output.h * wo;
        for k0 in (0..n).step_by(plan.block) {
            let np = (n - k0).min(plan.block);
            let px = Pixels {
                first: k0,
                wo,
                row_step: sh * g.row,
            };
            run_block(band, px, np, &mut output[k0 * cout..][..np * cout]);
        }
        return;
    }
    for (oy, out) in output
        .chunks_exact_mut(wo * cout)
        .take(p.output.h)
        .enumerate()
    {
        if plan.ring {
            advance_ring(p, input, oy, band, g.row);
        }
        for x0 in (0..wo).step_by(plan.block) {
            let np = (wo - x0).min(plan.block);
            // Band row ky (kernel row ky's input row) and the block's first pixel there.
            let (view, first): (&[i8], usize) = if plan.ring {
                (&band[oy * sh % g.kh * g.row..], x0)
            } else {
                for (ky, dst) in band.chunks_exact_mut(g.row).enumerate() {
                    fill_row(p, input, oy * sh + ky, x0 * sw, dst);
                }
                (band, 0)
            };
            let px = Pixels {
                first,
                wo: usize::MAX,
                row_step: 0,
            };
            run_block(view, px, np, &mut out[x0 * cout..][..np * cout]);
        }
    }
}

/// How a call lays out its scratch: the band (`band` bytes: its rows of `row` bytes and 2 bytes
/// for the last segment's read past the last row), up to 7 bytes to align the 8-byte words that
/// follow, the patches of a block of `block` pixels and the widened weights, each pixel pair or
/// channel pair `pair` bytes (kh kernel rows of ⌈kw·C_in/2⌉ words for each).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Plan {
    /// The whole padded image in the band, blocks of pixels in flat order.
    image: bool,
    ring: bool,
    row: usize,
    band: usize,
    pair: usize,
    block: usize,
    all_weights: bool,
}

/// The plan for `len` bytes of scratch, the first that fits of: a ring of whole rows (twice kh
/// rows) with [`PIXEL_BLOCK`] pixels (or the whole row) and every channel pair's weights (where
/// they fit `CORTEX_M_WEIGHTS_BUDGET`); the same with one pair's; a strip of the padded columns of the widest block that fits, one
/// pair's weights. The block takes whatever room is left, up to a whole output row. `None`
/// where not even a one-pixel strip fits, which the Cortex-M set's scratch never gives.
fn plan(p: &ConvParams, len: usize) -> Option<Plan> {
    let (kh, kw, cin, s) = (
        p.window.kernel_h,
        p.window.kernel_w,
        p.input.c,
        p.window.stride_w,
    );
    let wo = p.output.w;
    let l = CortexMConv::new(&p.geometry());
    let (pair, row, ring) = (l.pair, l.row, l.ring);
    if pair == 0 || s == 0 || p.window.stride_h == 0 {
        return None;
    }
    // Bytes for a band of `band` bytes, `px` pixels' patches and `wp` weight pairs.
    let need = |band: usize, px: usize, wp: usize| l.bytes(band, px, wp);
    let weights = [(p.output.c.div_ceil(2), true), (1, false)];
    let weights = weights
        .into_iter()
        .filter(|&(_, all)| !all || l.all_weights());
    if l.image_fits() {
        for (wp, all_weights) in weights.clone() {
            if need(l.image, l.flat_block(), wp) <= len {
                return Some(Plan {
                    image: true,
                    ring: false,
                    row,
                    band: l.image + 2,
                    pair,
                    block: l.flat_block(),
                    all_weights,
                });
            }
        }
    }
    for (wp, all_weights) in weights {
        if need(ring, wo.min(PIXEL_BLOCK), wp) <= len {
            // The rest holds this many pixels.
            let block = ((len - need(ring, 0, wp)) / pair * 2).min(wo);
            let band = ring + 2;
            return Some(Plan {
                image: false,
                ring: true,
                row,
                band,
                pair,
                block,
                all_weights,
            });
        }
    }
    // Strips: a block of b pixels reads (b − 1)·s + kw padded columns.
    let strip_row =
        |b: usize| ((b - 1).saturating_mul(s).saturating_add(kw)).saturating_mul(cin * 2);
    let fits = |b: usize| need(kh.saturating_mul(strip_row(b)), b, 1) <= len;
    if !fits(1) {
        return None;
    }
    // The widest block that fits (`fits` holds for 1 and is monotone).
    let (mut lo, mut hi) = (1, wo);
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if fits(mid) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    let row = strip_row(lo);
    Some(Plan {
        image: false,
        ring: false,
        row,
        band: kh * row + 2,
        pair,
        block: lo,
        all_weights: false,
    })
}

/// Where the segments lie in the band: kh rows of `row` bytes, each kernel row `rw` words of
/// 16-bit pairs, consecutive output pixels `step` bytes apart.
struct Geometry {
    kh: usize,
    rw: usize,
    row: usize,
    step: usize,
}

/// Where a block's pixels lie in the band: pixel i of the block is pixel `first + i` of the
/// conv's flat order (rows of `wo`), its window's top left `(k / wo)·row_step + (k mod wo)·step`
/// bytes in (a ring's or strip's block: within one row, `wo` unbounded).
#[derive(Clone, Copy)]
struct Pixels {
    first: usize,
    wo: usize,
    row_step: usize,
}

impl Pixels {
    /// Byte offset of the block's pixel `i` in the band, `step` bytes a pixel within a row.
    #[inline(always)]
    fn at(&self, i: usize, step: usize) -> usize {
        let k = self.first + i;
        (k / self.wo) * self.row_step + (k % self.wo) * step
    }
}

/// [`gather`] with kernel rows of up to 8 words (kw·C_in ≤ 16: few input channels) unrolled.
fn gather_any(band: &[i8], px: Pixels, np: usize, g: &Geometry, cols: &mut [u64]) {
    match g.rw {
        1 => gather::<1>(band, px, np, g, cols),
        2 => gather::<2>(band, px, np, g, cols),
        3 => gather::<3>(band, px, np, g, cols),
        4 => gather::<4>(band, px, np, g, cols),
        5 => gather::<5>(band, px, np, g, cols),
        6 => gather::<6>(band, px, np, g, cols),
        7 => gather::<7>(band, px, np, g, cols),
        8 => gather::<8>(band, px, np, g, cols),
        _ => gather::<0>(band, px, np, g, cols),
    }
}

/// The patches of `np` pixels (`px`: where they lie in the band's rows) into `cols`, a pair
/// of pixels per `cols.len() / ⌈np/2⌉` words (an odd last pixel twice). `RW`: `g.rw` when not
/// 0, a constant so the loop over a kernel row unrolls.
#[inline(always)]
fn gather<const RW: usize>(band: &[i8], px: Pixels, np: usize, g: &Geometry, cols: &mut [u64]) {
    let rw = if RW > 0 { RW } else { g.rw };
    let len = cols.len() / np.div_ceil(2);
    // The last pixel's last kernel row ends inside the band (`plan`); pixels lie in order.
    let need = (g.kh - 1) * g.row + px.at(np - 1, g.step) + 4 * rw;
    assert!(band.len() >= need && len >= g.kh * rw);
    for (i, dst) in cols.chunks_exact_mut(len).enumerate() {
        let p0 = px.at(2 * i, g.step);
        let d = if 2 * i + 1 < np {
            px.at(2 * i + 1, g.step) - p0
        } else {
            0
        };
        for (ky, dst) in dst.chunks_exact_mut(rw).take(g.kh).enumerate() {
            let at = ky * g.row + p0;
            for (t, w) in dst.iter_mut().enumerate() {
                // SAFETY: at most `need` bytes into the band, asserted above.
                let (a, b) = unsafe {
                    let x = band.as_ptr().add(at + 4 * t);
                    (load(x), load(x.add(d)))
                };
                *w = a as u64 | (b as u64) << 32;
            }
        }
    }
}

/// [`block`] in one rounding and clamp.
pub(super) type Block = fn(&ConvParams, &[u64], &[u64], &mut [i8], usize, &Epilogue, &mut Sums);

/// The sums of a run of pixel pairs ([`dot2x2_run`]'s), a call's buffer (zeroed once per call).
pub(super) type Sums = [[i32; 4]; RUN];

/// Channels `c0`, `c0 + 1` (when below C_out) of the block's pixels: `cols` holds their patches
/// by pairs, `wt` the channels' weights, `out` the block's outputs (pixels × C_out); `R` is the
/// op's rounding, `C` its clamp. Each run's sums are requantized a channel at a time
/// ([`channel`]), so the loop keeps that channel's constants in registers.
#[inline(never)]
pub(super) fn block<R: Round, C: Clamp>(
    p: &ConvParams,
    cols: &[u64],
    wt: &[u64],
    out: &mut [i8],
    c0: usize,
    e: &Epilogue,
    sums: &mut Sums,
) {
    let cout = p.output.c;
    let np = out.len() / cout;
    let q = [c0, c0 + 1].map(|c| Requant::<R>::new(p.multiplier.get(c), p.shift.get(c)));
    let two = c0 + 1 < cout;
    let bias = [p.bias.get(c0), if two { p.bias.get(c0 + 1) } else { 0 }];
    let fast = q[0].fast() && (!two || q[1].fast());
    pixels(cols, wt, np, sums, bias, |s, px, n| {
        let o = &mut out[px * cout + c0..];
        if !fast {
            return slow(s, n, o, cout, &q[..1 + two as usize], e);
        }
        channel::<0>(s, n, o, cout, |a| q[0].fast_apply::<C>(a, e));
        if two {
            channel::<1>(s, n, &mut o[1..], cout, |a| q[1].fast_apply::<C>(a, e));
        }
    });
}

/// [`block`]'s channels (one or two, `q`) where a multiplier leaves the high-word path: each
/// output through [`Requant::apply`], out of line (rare: multipliers of 2^−2 and more, or
/// zero).
#[inline(never)]
fn slow<R: Round>(
    sums: &[[i32; 4]],
    n: usize,
    out: &mut [i8],
    cout: usize,
    q: &[Requant<R>],
    e: &Epilogue,
) {
    channel::<0>(sums, n, out, cout, |a| q[0].apply(a, e));
    if let Some(q1) = q.get(1) {
        channel::<1>(sums, n, &mut out[1..], cout, |a| q1.apply(a, e));
    }
}

/// Pixel pairs whose sums [`dot2x2_run`] computes per call (a conv call's [`Sums`], 16 bytes
/// each).
pub(super) const RUN: usize = 16;

/// For the `np` pixels of the block by pairs, the sums of [`dot2x2`] from `bias`, runs of
/// [`RUN`] pairs at a time ([`dot2x2_run`]), then `pass(the run's sums, its first pixel, its
/// pixels)`.
#[inline(always)]
fn pixels(
    cols: &[u64],
    wt: &[u64],
    np: usize,
    sums: &mut Sums,
    bias: [i32; 2],
    mut pass: impl FnMut(&[[i32; 4]], usize, usize),
) {
    let len = wt.len();
    let mut px = 0;
    for x in cols[..np.div_ceil(2) * len].chunks(RUN * len) {
        let sums = &mut sums[..x.len() / len];
        dot2x2_run(x, wt, bias, sums);
        let n = (2 * sums.len()).min(np - px);
        pass(sums, px, n);
        px += n;
    }
}

/// Channel `L` (0: the pair's first) of `n` pixels from a run's sums (pixel 2i: `a[2L]` of
/// pair i, pixel 2i + 1: `a[2L + 1]`) through `y` into `out`, the first pixel's value first,
/// `cout` values a pixel.
#[inline(always)]
fn channel<const L: usize>(
    sums: &[[i32; 4]],
    n: usize,
    out: &mut [i8],
    cout: usize,
    y: impl Fn(i32) -> i8,
) {
    assert!(n > 0 && n <= 2 * sums.len() && (n - 1) * cout < out.len());
    let o = out.as_mut_ptr();
    // SAFETY: pixels k < n, at k·cout < out.len() (asserted).
    unsafe {
        for (i, a) in sums[..n / 2].iter().enumerate() {
            *o.add(2 * i * cout) = y(a[2 * L]);
            *o.add((2 * i + 1) * cout) = y(a[2 * L + 1]);
        }
        if n % 2 == 1 {
            *o.add((n - 1) * cout) = y(sums[n / 2][2 * L]);
        }
    }
}

/// Pairs of steps [`dot2x2_run`]'s written-out run holds: 16 (640 bytes of code).
#[cfg(octet_arm_dsp)]
const CHUNK_PAIRS: usize = 16;

/// One step's four `SMLAD`s into [`dot2x2_run`]'s sums (r10, r11: channel 0 × pixels 0, 1;
/// r12, lr: channel 1): weight words `$w0`, `$w1` (the channels'), patch words `$v0`, `$v1`
/// (the pixels').
#[cfg(octet_arm_dsp)]
macro_rules! step_sums {
    ($w0:literal, $w1:literal, $v0:literal, $v1:literal) => {
        concat!(
            "smlad r10, ",
            $w0,
            ", ",
            $v0,
            ", r10\n",
            "smlad r11, ",
            $w0,
            ", ",
            $v1,
            ", r11\n",
            "smlad r12, ",
            $w1,
            ", ",
            $v0,
            ", r12\n",
            "smlad lr, ",
            $w1,
            ", ",
            $v1,
            ", lr\n",
        )
    };
}

/// [`dot2x2_run`]'s `asm!`, `$odd` the odd first step of each pixel pair (or nothing). The
/// stack frame: the current pixel pair's end of steps, the computed branch's offset, the
/// weights' start, the bytes of a pixel pair's paired steps, the next sums and their end, the
/// two biases.
#[cfg(octet_arm_dsp)]
macro_rules! run_asm {
    ($odd:expr, $x:expr, $w:expr, $pairs:expr, $sums:expr, $bias:expr) => {{
        // A pair of steps: both pixels' patch words (r0, r1 then r2, r3) and both channels'
        // weight words (r4, r5 then r8, r9); 40 bytes (every instruction 32-bit: `.w`).
        macro_rules! pair {
            () => {
                concat!(
                    "ldm.w r6!, {{r0, r1, r2, r3}}\n",
                    "ldm.w r7!, {{r4, r5, r8, r9}}\n",
                    step_sums!("r4", "r5", "r0", "r1"),
                    step_sums!("r8", "r9", "r2", "r3"),
                )
            };
        }
        const _: () = assert!(CHUNK_PAIRS == 16);
        let n = $sums.len();
        core::arch::asm!(
            "push {{r6, r7}}",
            "sub sp, #32",
            "mov r6, r0",
            "mov r7, r1",
            "str r1, [sp, #8]",
            "lsls r1, r2, #4",
            "str r1, [sp, #12]",
            "add.w r4, r3, r4, lsl #4",
            "strd r3, r4, [sp, #16]",
            "ldrd r8, r9, [r5]",
            "strd r8, r9, [sp, #24]",
            // The branch enters 40·(pairs mod 16) bytes before the run's end: 40·(16 − that)
            // after its start, which lies 4 bytes past the PC `mov` reads (its address + 4;
            // `ADR` would align that, and the linker places code at any halfword); + 1: Thumb.
            "and r3, r2, #15",
            "rsb.w r3, r3, #16",
            "add.w r3, r3, r3, lsl #2",
            "lsls r3, r3, #3",
            "adds r3, r3, #5",
            "str r3, [sp, #4]",
            "4:",
            "ldrd r10, r12, [sp, #24]",
            "mov r11, r10",
            "mov lr, r12",
            $odd,
            "ldr r0, [sp, #12]",
            "add r0, r0, r6",
            "str r0, [sp]",
            "ldr r3, [sp, #4]",
            "mov r0, pc",
            "add.w r0, r0, r3",
            "bx r0",
            "2:",
            pair!(), pair!(), pair!(), pair!(), pair!(), pair!(), pair!(), pair!(),
            pair!(), pair!(), pair!(), pair!(), pair!(), pair!(), pair!(), pair!(),
            "3:",
            "ldr r0, [sp]",
            "cmp r6, r0",
            "bne 2b",
            "ldr r0, [sp, #16]",
            "stm r0!, {{r10, r11, r12, lr}}",
            "str r0, [sp, #16]",
            "ldr r7, [sp, #8]",
            "ldr r1, [sp, #20]",
            "cmp r0, r1",
            "bne 4b",
            "add sp, #32",
            "pop {{r6, r7}}",
            inout("r0") $x.as_ptr() => _,
            inout("r1") $w.as_ptr() => _,
            inout("r2") $pairs => _,
            inout("r3") $sums.as_mut_ptr() => _,
            inout("r4") n => _,
            inout("r5") $bias.as_ptr() => _,
            out("r8") _,
            out("r9") _,
            out("r10") _,
            out("r11") _,
            out("r12") _,
            out("lr") _,
        )
    }};
}

/// [`dot2x2`] from `[b0, b0, b1, b1]` for each pixel pair of `x` (`w.len()` words each, as
/// many as `sums` holds) into `sums`. On Arm with DSP one `asm!` for all of them: per pixel
/// pair an odd first step (`LDRD`s), then the steps two at a time, 10 instructions a pair of
/// steps (16 multiply-adds: an `LDM` of four words from each side, eight `SMLAD`s) written out
/// [`CHUNK_PAIRS`] times with no loop inside, entered part-way for `pairs mod CHUNK_PAIRS` (a
/// computed branch) and repeated whole (3 instructions a repeat), then the four sums stored
/// (`STM`): about 20 instructions a pixel pair besides. The sums, two pointers and eight loaded
/// words take 14 registers: the 12 `asm!` may use and r6, r7 (which LLVM reserves), saved on
/// the stack and restored; the rest of the state lives on the stack beside them. Not inlined:
/// one copy of the 1.3 KB of code for every rounding and clamp.
#[inline(never)]
fn dot2x2_run(x: &[u64], w: &[u64], bias: [i32; 2], sums: &mut [[i32; 4]]) {
    let len = w.len();
    assert!(len > 0 && x.len() == sums.len() * len);
    if sums.is_empty() {
        return;
    }
    #[cfg(octet_arm_dsp)]
    // SAFETY: per pixel pair `len` words of `x` and of `w` (asserted), one element of `sums`.
    unsafe {
        match len % 2 {
            0 => run_asm!("", x, w, len / 2, sums, bias),
            _ => run_asm!(
                concat!(
                    "ldrd r0, r1, [r6], #8\n",
                    "ldrd r4, r5, [r7], #8\n",
                    step_sums!("r4", "r5", "r0", "r1"),
                ),
                x,
                w,
                len / 2,
                sums,
                bias
            ),
        }
    }
    #[cfg(not(octet_arm_dsp))]
    for (x, s) in x.chunks_exact(len).zip(sums) {
        let [b0, b1] = bias;
        *s = dot2x2([b0, b0, b1, b1], x, w);
    }
}

/// Sums of two channels × two pixels, starting from `a` = `[c0·p0, c0·p1, c1·p0, c1·p1]`:
/// each word of `x` holds the two pixels' patch words (pixel 0 in the low half), each of `w`
/// the two channels' weights (the model of [`dot2x2_run`]'s `asm!` elsewhere).
#[cfg(not(octet_arm_dsp))]
fn dot2x2(mut a: [i32; 4], x: &[u64], w: &[u64]) -> [i32; 4] {
    use super::smlad;
    for (&v, &w) in x.iter().zip(w) {
        let (v0, v1, w0, w1) = (v as u32, (v >> 32) as u32, w as u32, (w >> 32) as u32);
        a[0] = smlad(w0, v0, a[0]);
        a[1] = smlad(w0, v1, a[1]);
        a[2] = smlad(w1, v0, a[2]);
        a[3] = smlad(w1, v1, a[3]);
    }
    a
}

/// Brings the ring to output row `oy`: padded rows t = oy·s .. oy·s + kh (s the vertical
/// stride; input row t − pad_top, or pad values above and below the input) must be contiguous
/// from band row (oy·s) mod kh on, so each is written at row t mod kh and again kh rows
/// further; only the rows output row oy − 1 did not read are widened.
fn advance_ring(p: &ConvParams, input: &[i8], oy: usize, band: &mut [i8], row: usize) {
    let (kh, s) = (p.window.kernel_h, p.window.stride_h);
    let first = if oy == 0 {
        0
    } else {
        (oy * s).max((oy - 1) * s + kh)
    };
    let (ring, copy) = band[..2 * kh * row].split_at_mut(kh * row);
    for t in first..oy * s + kh {
        let dst = &mut ring[t % kh * row..][..row];
        fill_row(p, input, t, 0, dst);
        copy[t % kh * row..][..row].copy_from_slice(dst);
    }
}

/// Padded row `t` (input row t − pad_top, or pad values above and below the input) from padded
/// column `c0` on (input column c0 − pad_left), widened into `dst` (as many columns as it
/// holds): pad values in the padding, the input's values between.
fn fill_row(p: &ConvParams, input: &[i8], t: usize, c0: usize, dst: &mut [i8]) {
    let (cin, h, w) = (p.input.c, p.input.h, p.input.w);
    let (top, pad) = (p.window.pad_top, p.window.pad_left);
    let iy = t.wrapping_sub(top);
    if iy >= h {
        return fill_pad(p, dst);
    }
    let n = dst.len() / (2 * cin);
    // The padded columns holding input values, clipped to `dst`'s.
    let (lo, hi) = (c0.max(pad), (w + pad).min(c0 + n));
    if lo >= hi {
        return fill_pad(p, dst);
    }
    let (left, rest) = dst.split_at_mut(2 * cin * (lo - c0));
    let (body, right) = rest.split_at_mut(2 * cin * (hi - lo));
    fill_pad(p, left);
    fill_pad(p, right);
    widen_natural(body, &input[(iy * w + lo - pad) * cin..][..(hi - lo) * cin]);
}

/// `src` as little-endian i16 values into `dst` (twice as long), in order: each word of 4
/// values widened by `SXTB16` (values 0 and 2) and `SXTB16 ROR #8` (1 and 3), then repacked by
/// `PKHBT` (0, 1) and `PKHTB` (2, 3).
#[inline(always)]
fn widen_natural(dst: &mut [i8], src: &[i8]) {
    let mut d = dst.chunks_exact_mut(8);
    let mut s = src.chunks_exact(4);
    for (d, s) in (&mut d).zip(&mut s) {
        let [lo, hi] = natural(word(s));
        put(&mut d[..4], lo);
        put(&mut d[4..], hi);
    }
    for (d, &v) in d.into_remainder().chunks_exact_mut(2).zip(s.remainder()) {
        put16(d, v as i16);
    }
}

/// The second channel of the pair from `c0` whose weights [`widen_groups`] widens, and the
/// mask of its words: `c0 + 1`, or past C_out (`cout`) channel c0 again, masked to zero (one
/// loop for both cases).
pub(super) fn second_channel(c0: usize, cout: usize) -> (usize, u32) {
    match c0 + 1 < cout {
        true => (c0 + 1, u32::MAX),
        false => (c0, 0),
    }
}

/// Groups of four weights of two channels widened: `body.len() / 2` groups from each of `x0`,
/// `x1` into two 8-byte words each (channel `x0`'s in the low halves, `x1`'s masked by `mask`),
/// in order ([`natural`], as [`widen_weights`] needs) or not (the `SXTB16` halves, as the
/// pointwise conv's gather widens its pixels). On Arm with DSP written out (16 or 12
/// instructions per eight values; LLVM's loops took half as many again and more).
///
/// # Safety
/// `x0` and `x1` are valid for reads of `2 · body.len()` bytes.
#[inline(always)]
pub(super) unsafe fn widen_groups<const NATURAL: bool>(
    x0: *const i8,
    x1: *const i8,
    body: &mut [u64],
    mask: u32,
) {
    let groups = body.len() / 2;
    if groups == 0 {
        return;
    }
    #[cfg(octet_arm_dsp)]
    macro_rules! groups_asm {
        ($($line:literal),*; $($scratch:tt)*) => {
            core::arch::asm!(
                "2:",
                "ldr {a}, [{x0}], #4",
                "ldr {b}, [{x1}], #4",
                $($line,)*
                "and {v}, {v}, {m}",
                "and {b}, {b}, {m}",
                "strd {u}, {v}, [{d}], #8",
                "strd {a}, {b}, [{d}], #8",
                "subs {n}, {n}, #1",
                "bne 2b",
                x0 = inout(reg) x0 => _,
                x1 = inout(reg) x1 => _,
                d = inout(reg) body.as_mut_ptr() => _,
                n = inout(reg) groups => _,
                m = in(reg) mask,
                a = out(reg) _,
                b = out(reg) _,
                u = out(reg) _,
                v = out(reg) _,
                $($scratch)*
                options(nostack)
            )
        };
    }
    #[cfg(octet_arm_dsp)]
    // SAFETY: the caller's guarantee; `body` holds `2 · groups` words.
    unsafe {
        if NATURAL {
            groups_asm!(
                "sxtb16 {t}, {a}",
                "sxtb16 {a}, {a}, ror #8",
                "pkhbt {u}, {t}, {a}, lsl #16",
                "pkhtb {a}, {a}, {t}, asr #16",
                "sxtb16 {t}, {b}",
                "sxtb16 {b}, {b}, ror #8",
                "pkhbt {v}, {t}, {b}, lsl #16",
                "pkhtb {b}, {b}, {t}, asr #16";
                t = out(reg) _,
            );
        } else {
            groups_asm!(
                "sxtb16 {u}, {a}",
                "sxtb16 {a}, {a}, ror #8",
                "sxtb16 {v}, {b}",
                "sxtb16 {b}, {b}, ror #8";
            );
        }
    }
    #[cfg(not(octet_arm_dsp))]
    for (g, d) in body.chunks_exact_mut(2).enumerate() {
        let halves = |v: u32| match NATURAL {
            true => natural(v),
            false => {
                let (a, b) = widen(v);
                [a, b]
            }
        };
        // SAFETY: the caller's guarantee.
        let ([lo0, hi0], [lo1, hi1]) =
            unsafe { (halves(load(x0.add(4 * g))), halves(load(x1.add(4 * g)))) };
        d[0] = lo0 as u64 | ((lo1 & mask) as u64) << 32;
        d[1] = hi0 as u64 | ((hi1 & mask) as u64) << 32;
    }
}

/// The four int8 values of `v` as two words of i16 pairs in order: (0, 1) and (2, 3), from
/// `SXTB16`'s (0, 2) and (1, 3) by `PKHBT` and `PKHTB`.
#[inline(always)]
fn natural(v: u32) -> [u32; 2] {
    let (a, b) = widen(v);
    [(a & 0xFFFF) | (b << 16), (b & 0xFFFF_0000) | (a >> 16)]
}

/// Pixels of pad values (`pad_value(c)` for channel c) as i16, filling `dst`.
fn fill_pad(p: &ConvParams, dst: &mut [i8]) {
    for px in dst.chunks_exact_mut(2 * p.input.c) {
        for (c, d) in px.chunks_exact_mut(2).enumerate() {
            put16(d, p.pad_value(c) as i16);
        }
    }
}

/// `v` into `d` (4 bytes, any alignment): one `STR`.
#[inline(always)]
fn put(d: &mut [i8], v: u32) {
    d.copy_from_slice(&v.to_le_bytes().map(|b| b as i8));
}

/// `v` into `d` (2 bytes, any alignment): one `STRH`.
#[inline(always)]
fn put16(d: &mut [i8], v: i16) {
    d.copy_from_slice(&v.to_le_bytes().map(|b| b as i8));
}

/// Channels `c0` and `c0 + 1` (zeros past C_out) widened into `pair`: kernel row ky's kw·C_in
/// values as i16 pairs, a zero after an odd count; each element holds the two channels' words
/// (channel `c0` in the low half). Four values of each channel at a time, as [`widen_natural`]
/// widens the input, stored as two 8-byte words.
fn widen_weights(p: &ConvParams, c0: usize, pair: &mut [u64]) {
    let (k, run) = (p.k(), p.window.kernel_w * p.input.c);
    let rw = run.div_ceil(2);
    let (c1, mask) = second_channel(c0, p.output.c);
    let rows = |c: usize| p.weights[c * k..][..k].chunks_exact(run);
    let both = |a: u32, b: u32| a as u64 | ((b & mask) as u64) << 32;
    let pack = |v: &[i8]| {
        v[0] as i16 as u16 as u32 | (v.get(1).map_or(0, |&b| b as i16 as u16 as u32) << 16)
    };
    for ((dst, r0), r1) in pair.chunks_exact_mut(rw).zip(rows(c0)).zip(rows(c1)) {
        let (g0, g1) = (r0.chunks_exact(4), r1.chunks_exact(4));
        let (t0, t1) = (g0.remainder(), g1.remainder());
        let (body, tail) = dst.split_at_mut(2 * (run / 4));
        // SAFETY: `body` holds two words per group of four values of `r0` and of `r1`.
        unsafe { widen_groups::<true>(r0.as_ptr(), r1.as_ptr(), body, mask) };
        for ((d, v0), v1) in tail.iter_mut().zip(t0.chunks(2)).zip(t1.chunks(2)) {
            *d = both(pack(v0), pack(v1));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::test_util::{
        conv_matches_scalar, conv_matches_scalar_in, conv_shape, conv_suite, wrapping_layer,
        ConvCase, ConvData,
    };
    use crate::kernels::{cortex_m_conv_scratch_bytes, CORTEX_M_FLAT_BLOCK};

    /// The scratch the Cortex-M set states for a conv.
    fn scratch_bytes(p: &ConvParams) -> usize {
        crate::Kernels::CortexM.scratch_bytes(&p.geometry())
    }
    use proptest::prelude::*;

    /// Scratch lengths that select each plan: the op's own (`scratch_bytes`), a ring with one
    /// weight pair, strips of a few pixels, the one-pixel strip (the least `plan` takes).
    fn lengths(p: &ConvParams) -> [usize; 4] {
        let least = (1..=scratch_bytes(p))
            .find(|&n| plan(p, n).is_some())
            .unwrap();
        let row = CortexMConv::new(&p.geometry()).row;
        let pair = plan(p, least).unwrap().pair;
        let ring =
            2 * p.window.kernel_h * row + 9 + (p.output.w.min(PIXEL_BLOCK).div_ceil(2) + 1) * pair;
        [scratch_bytes(p), ring, 2 * least, least]
    }

    /// Every plan, each against the scalar reference, from the scratch the Cortex-M set states
    /// (the best plan: [`best`]) down to the least.
    fn check(c: &ConvCase) {
        if conv_shape(c).is_some_and(|p| CortexMConv::new(&p.geometry()).pointwise) {
            return check_pointwise(c);
        }
        for which in 0..4 {
            let mut run = |p: &ConvParams, x: &[i8], y: &mut [i8], s: &mut [u8]| {
                assert_eq!(plan(p, s.len()), Some(best(p)), "{c:?}");
                // The lesser plans' lengths may pass the best one's for small convs.
                let n = lengths(p)[which].min(s.len());
                conv2d(p, x, y, &mut s[..n]);
            };
            conv_matches_scalar_in(c, &cortex_m_conv_scratch_bytes, &mut run);
        }
    }

    /// A pointwise conv: with the scratch the set states (blocks of `CORTEX_M_FLAT_BLOCK` pixels,
    /// every weight pair where they fit the budget), with room for one pixel pair and one weight
    /// pair, and with less (the band kernel, or the scalar one).
    fn check_pointwise(c: &ConvCase) {
        for which in 0..3 {
            let mut run = |p: &ConvParams, x: &[i8], y: &mut [i8], s: &mut [u8]| {
                let pair = CortexMConv::new(&p.geometry()).pair;
                let n = [s.len(), 2 * pair + 7, 2 * pair - 1][which].min(s.len());
                conv2d(p, x, y, &mut s[..n]);
            };
            conv_matches_scalar_in(c, &cortex_m_conv_scratch_bytes, &mut run);
        }
    }

    /// The plan the set states: a ring of whole rows, blocks of a whole output row, every
    /// channel pair's weights widened once where they fit the budget, else one pair per block.
    fn best(p: &ConvParams) -> Plan {
        let l = CortexMConv::new(&p.geometry());
        let image = l.image_fits();
        Plan {
            image,
            ring: !image,
            row: l.row,
            band: if image { l.image } else { l.ring } + 2,
            pair: l.pair,
            block: if image { l.flat_block() } else { p.output.w },
            all_weights: l.all_weights(),
        }
    }

    conv_suite!(check);

    /// The lengths above select what they say, on a LeNet conv.
    #[test]
    fn plans_by_length() {
        conv_matches_scalar(
            &ConvCase::square(6, 16, 14, 5, 1, 0, 3),
            &mut |p, x, y, s| {
                let [full, ring, strips, least] = lengths(p).map(|n| plan(p, n).unwrap());
                assert!(full.image && full.all_weights && full.block == CORTEX_M_FLAT_BLOCK);
                assert!(ring.ring && !ring.all_weights && ring.block == PIXEL_BLOCK);
                assert!(!strips.ring && strips.block > 1);
                assert!(!least.ring && least.block == 1);
                conv2d(p, x, y, s);
            },
        );
    }

    /// Scratch smaller than the least plan: the scalar fallback, same bytes.
    #[test]
    fn small_scratch_falls_back() {
        let mut calls = 0;
        conv_matches_scalar(&ConvCase::square(3, 5, 6, 3, 1, 1, 7), &mut |p, x, y, s| {
            calls += 1;
            let short = lengths(p)[3] - 1;
            assert!(plan(p, short).is_none());
            conv2d(p, x, y, &mut s[..short])
        });
        assert_eq!(calls, 1);
    }

    /// Extreme sums: every product at its largest (−128·−128, past what validated models
    /// hold) over K = 576, with biases at i32::MAX and i32::MIN, so the i32 sums wrap.
    #[test]
    fn wrapping_sums() {
        let mut d = ConvData::typical(&ConvCase::square(64, 3, 4, 3, 1, 1, 1)).unwrap();
        d.input.fill(-128);
        d.layer = wrapping_layer(vec![-128; d.layer.weights.len()]);
        d.pads.clear();
        d.input_zero_point = -128;
        let (p, input, cout) = (d.params(), &d.input, 3);
        let mut want = vec![0i8; 16 * cout];
        scalar::conv2d(&p, input, &mut want);
        let mut got = vec![0i8; 16 * cout];
        let mut scratch = vec![0u8; scratch_bytes(&p)];
        conv2d(&p, input, &mut got, &mut scratch);
        assert_eq!(want, got);
    }

    proptest! {
        /// The scratch the Cortex-M set states holds the best plan whatever the geometry (wide
        /// rows, large strides, one-value kernels), and a byte less does not: the rule is the
        /// kernel's need, no more.
        #[test]
        fn stated_scratch_is_the_best_plan(
            (cin, cout) in (1usize..600, 1usize..600), (h, w) in (1usize..300, 1usize..300),
            (kh, kw) in (1usize..12, 1usize..12), stride in 1usize..40, pad in 0usize..6,
            same in any::<bool>(),
        ) {
            let c = ConvCase { cin, cout, h, w, kh, kw, stride, pad, same, seed: 0, rounding: None };
            let Some(p) = conv_shape(&c) else { return Ok(()) };
            // A pointwise conv has its own plan (`pointwise`).
            prop_assume!(!CortexMConv::new(&p.geometry()).pointwise);
            let len = scratch_bytes(&p);
            prop_assert_eq!(plan(&p, len), Some(best(&p)));
            prop_assert_ne!(plan(&p, len - 1), Some(best(&p)));
        }
    }
}
