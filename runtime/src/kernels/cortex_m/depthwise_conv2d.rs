//! depthwise_conv2d (depth multiplier 1, any window without dilation), channel by channel:
//! the channel's padded input is widened into one plane of 16-bit values (the scratch stated
//! at prepare, [`CortexMDepthwise`]), so that two horizontal taps are one word (`LDR`, any
//! alignment) multiplied in by one `SMLAD` against the two taps' weights as 16-bit pairs (an
//! odd last tap paired with 0, against the plane's spare column). The channel's weights and
//! requantization are then set up once for all its outputs; pixel pairs share the two-lane
//! epilogue ([`Requant2`]); 3×3 windows keep their six weight words in registers.
//!
//! Padded taps read the input zero point, as the reference's do (the bias holds −z_in·Σw).

use super::{
    instance, load, smlad, Bounds, Clamp, Double, Epilogue, Full, Requant, Requant2, Round, Single,
};
use crate::kernels::{depthwise_covered, scalar, CortexMDepthwise, DepthwiseParams, Rounding};

/// Weight words of a channel the kernel keeps on the stack: kernel rows × pairs of taps up to
/// 8 × 8 taps (larger windows run the scalar reference).
const MAX_WORDS: usize = 32;

/// Same bytes as [`scalar::depthwise_conv2d`]. `scratch` should hold
/// `Kernels::CortexM.scratch_bytes` of the op (the scalar kernel runs with less, and for what
/// [`depthwise_covered`] excludes: a depth multiplier above 1, dilation).
pub fn depthwise_conv2d(p: &DepthwiseParams, input: &[i8], output: &mut [i8], scratch: &mut [u8]) {
    let g = p.geometry();
    let l = CortexMDepthwise::new(&g);
    let (kh, kw, c) = (p.window.kernel_h, p.window.kernel_w, p.output.c);
    let covered = depthwise_covered(&g)
        && p.depth_multiplier == 1
        && kh * kw.div_ceil(2) <= MAX_WORDS
        && scratch.len() >= l.bytes()
        && input.len() >= p.input.len()
        && output.len() >= p.output.len()
        && p.weights.len() >= kh * kw * c;
    if !covered {
        return scalar::depthwise_conv2d(p, input, output);
    }
    if p.output.is_empty() {
        return;
    }
    // SAFETY: every bit pattern is a valid i16; `l.bytes()` counts the byte aligning skips.
    let (_, plane, _) = unsafe { scratch.align_to_mut::<i16>() };
    let plane = &mut plane[..l.rows * l.cols];
    let channel: Channel = instance!(&p.out, channel);
    fill_padding(p, plane, l.cols);
    for ch in 0..c {
        fill_body(p, input, ch, plane, l.cols);
        channel(p, ch, plane, l.cols, output);
    }
}

/// [`channel`] in one rounding and clamp.
type Channel = fn(&DepthwiseParams, usize, &[i16], usize, &mut [i8]);

/// Channel `ch`'s outputs from its plane (`cols` values a row) in rounding `R`, clamp `C`.
#[inline(never)]
fn channel<R: Round, C: Clamp>(
    p: &DepthwiseParams,
    ch: usize,
    plane: &[i16],
    cols: usize,
    out: &mut [i8],
) {
    let (kh, kw, c) = (p.window.kernel_h, p.window.kernel_w, p.output.c);
    let (sh, sw, wo) = (p.window.stride_h, p.window.stride_w, p.output.w);
    let pairs = kw.div_ceil(2);
    let mut wt = [0u32; MAX_WORDS];
    let taps = &p.weights[ch..];
    let w16 = |ky: usize, kx: usize| match kx < kw {
        true => taps[(ky * kw + kx) * c] as i16 as u16 as u32,
        false => 0,
    };
    for ky in 0..kh {
        for (j, d) in wt[ky * pairs..][..pairs].iter_mut().enumerate() {
            *d = w16(ky, 2 * j) | w16(ky, 2 * j + 1) << 16;
        }
    }
    let q = Requant::<R>::new(p.multiplier.get(ch), p.shift.get(ch));
    let e = Epilogue::new(&p.out);
    let o = Outputs {
        q,
        q2: Requant2::<R, C>::new([q, q], &e),
        e,
        bias: p.bias.get(ch),
        ch,
        c,
    };
    let mut sums = [0i32; CHUNK];
    let (ho, step) = (p.output.h, sh * cols);
    if kh == 3 && kw == 3 && wo <= CHUNK {
        // As many whole output rows at once as the sums hold.
        let w: &[u32; 6] = wt[..6].try_into().unwrap();
        let at_once = CHUNK / wo;
        for oy in (0..ho).step_by(at_once) {
            let n = at_once.min(ho - oy) * wo;
            sums3x3(&plane[oy * step..], cols, step, w, sw, wo, &mut sums[..n]);
            o.put(&mut out[oy * wo * c..], &sums[..n]);
        }
        return;
    }
    for (oy, out) in out.chunks_exact_mut(wo * c).take(ho).enumerate() {
        let rows = &plane[oy * step..][..kh * cols];
        for x0 in (0..wo).step_by(CHUNK) {
            let sums = &mut sums[..(wo - x0).min(CHUNK)];
            let n = sums.len();
            if kh == 3 && kw == 3 {
                let w: &[u32; 6] = wt[..6].try_into().unwrap();
                sums3x3(&rows[x0 * sw..], cols, step, w, sw, n, sums);
            } else {
                for (i, s) in sums.iter_mut().enumerate() {
                    *s = dot_any(rows, cols, &wt[..kh * pairs], pairs, (x0 + i) * sw, 0);
                }
            }
            o.put(&mut out[x0 * c..], sums);
        }
    }
}

/// Output pixels whose sums a channel keeps at once (on the stack).
const CHUNK: usize = 48;

/// What a channel's outputs need: its requantization (and the two-lane form where it
/// applies), bias, its index among the `c` channels of a pixel.
struct Outputs<R: Round, C: Clamp> {
    q: Requant<R>,
    q2: Option<Requant2<R, C>>,
    e: Epilogue,
    bias: i32,
    ch: usize,
    c: usize,
}

impl<R: Round, C: Clamp> Outputs<R, C> {
    /// Consecutive output pixels (`out`: from the first, all channels) from their sums less
    /// the bias, requantized, pairs through the two-lane epilogue.
    #[inline(always)]
    fn put(&self, out: &mut [i8], sums: &[i32]) {
        let (c, b, n) = (self.c, self.bias, sums.len());
        if n == 0 {
            return;
        }
        let out = &mut out[self.ch..];
        assert!((n - 1) * c < out.len());
        let (mut y, mut k) = (out.as_mut_ptr(), 0);
        if let Some(q2) = &self.q2 {
            for s in sums.chunks_exact(2) {
                let [y0, y1] = q2.apply(s[0].wrapping_add(b), s[1].wrapping_add(b));
                // SAFETY: pixels k, k + 1 < n of `out` (asserted).
                unsafe {
                    *y = y0;
                    *y.add(c) = y1;
                    y = y.add(2 * c);
                }
            }
            k = n & !1;
        }
        for &s in &sums[k..] {
            let v = self.q.apply(s.wrapping_add(b), &self.e);
            // SAFETY: pixel k < n of `out` (asserted).
            unsafe {
                *y = v;
                y = y.add(c);
            }
        }
    }
}

/// The sums of a 3×3 window at `sums.len()` output pixels, rows of `wo` pixels `sw` values
/// apart, `step` values from one output row's first pixel to the next's, the first at the
/// start of `rows` (its three kernel rows `cols` apart): per kernel row, taps 0 and 1 as one
/// word, tap 2 with the column after it against a zero weight. Strides 1 and 2 on Arm with DSP
/// run [`rows3x3_words`].
#[inline(never)]
fn sums3x3(
    rows: &[i16],
    cols: usize,
    step: usize,
    w: &[u32; 6],
    sw: usize,
    wo: usize,
    sums: &mut [i32],
) {
    let n = sums.len();
    assert!(n > 0 && wo > 0 && n.is_multiple_of(wo) && step >= wo * sw);
    let last = (n / wo - 1) * step + (wo - 1) * sw;
    assert!(last + 4 + 2 * cols <= rows.len());
    // SAFETY: pixel (r, x) reads values r·step + x·sw .. + 4 of the three kernel rows, within
    // `rows` (asserted for the last, the furthest).
    unsafe {
        let r = rows.as_ptr();
        #[cfg(octet_arm_dsp)]
        match sw {
            1 => return rows3x3_words::<2>(r, cols, step - wo, w, wo, sums),
            2 => return rows3x3_words::<4>(r, cols, step - 2 * wo, w, wo, sums),
            _ => {}
        }
        let [w0, w1, w2, w3, w4, w5] = *w;
        for (row, sums) in sums.chunks_exact_mut(wo).enumerate() {
            let mut r = r.add(row * step);
            for s in sums {
                let (r1, r2) = (r.add(cols), r.add(2 * cols));
                let mut a = smlad(load(r.cast()), w0, 0);
                a = smlad(load(r.add(2).cast()), w1, a);
                a = smlad(load(r1.cast()), w2, a);
                a = smlad(load(r1.add(2).cast()), w3, a);
                a = smlad(load(r2.cast()), w4, a);
                *s = smlad(load(r2.add(2).cast()), w5, a);
                r = r.add(sw);
            }
        }
    }
}

/// [`sums3x3`]'s loops written out, the pixels `STEP` bytes apart (stride 1 or 2) and `skip`
/// values from a row's end to the next row's start: the six weight words, three kernel-row
/// pointers (post-incremented), the sum, a loaded word and the output pointer take the 12
/// registers `asm!` may use; the row's end and the skip take r6 and r7 (which LLVM reserves:
/// saved and restored), the end and the row's bytes live on the stack. 15 instructions a pixel
/// (left to itself, LLVM spilled the weights: 30), 8 a row.
///
/// # Safety
/// As [`sums3x3`] asserts: `r` and the kernel rows `cols` and `2·cols` values further are valid
/// for the reads of `sums.len()` pixels, rows of `wo`; `sums` is a non-empty multiple of `wo`.
#[cfg(octet_arm_dsp)]
#[inline(always)]
unsafe fn rows3x3_words<const STEP: usize>(
    r: *const i16,
    cols: usize,
    skip: usize,
    w: &[u32; 6],
    wo: usize,
    sums: &mut [i32],
) {
    let out = sums.as_mut_ptr();
    let ctl = [4 * wo, 2 * skip, out.wrapping_add(sums.len()) as usize];
    // SAFETY: the caller's guarantee; r6 and r7 are restored, the stack taken given back.
    unsafe {
        core::arch::asm!(
            "push {{r6, r7}}",
            "ldr r7, [r4, #4]",
            "ldr r5, [r4, #8]",
            "str r5, [sp, #-8]!",
            "ldr r5, [r4]",
            "str r5, [sp, #4]",
            "add r6, r3, r5",
            "2:",
            "ldr r4, [r0, #4]",
            "smuad r5, r4, r9",
            "ldr r4, [r0], #{step}",
            "smlad r5, r4, r8, r5",
            "ldr r4, [r1, #4]",
            "smlad r5, r4, r11, r5",
            "ldr r4, [r1], #{step}",
            "smlad r5, r4, r10, r5",
            "ldr r4, [r2, #4]",
            "smlad r5, r4, lr, r5",
            "ldr r4, [r2], #{step}",
            "smlad r5, r4, r12, r5",
            "str r5, [r3], #4",
            "cmp r3, r6",
            "bne 2b",
            "add r0, r0, r7",
            "add r1, r1, r7",
            "add r2, r2, r7",
            "ldr r4, [sp, #4]",
            "add r6, r6, r4",
            "ldr r4, [sp]",
            "cmp r3, r4",
            "bne 2b",
            "add sp, sp, #8",
            "pop {{r6, r7}}",
            step = const STEP,
            inout("r0") r => _,
            inout("r1") r.wrapping_add(cols) => _,
            inout("r2") r.wrapping_add(2 * cols) => _,
            inout("r3") out => _,
            inout("r4") ctl.as_ptr() => _,
            out("r5") _,
            in("r8") w[0],
            in("r9") w[1],
            in("r10") w[2],
            in("r11") w[3],
            in("r12") w[4],
            in("lr") w[5],
        );
    }
}

/// Any window's sum from `acc` at column `x` of `rows` (kh rows of `cols`; `wt`: kh rows of
/// `pairs` weight words).
#[inline(always)]
fn dot_any(rows: &[i16], cols: usize, wt: &[u32], pairs: usize, x: usize, mut acc: i32) -> i32 {
    for (row, w) in rows.chunks_exact(cols).zip(wt.chunks_exact(pairs)) {
        let taps = &row[x..x + 2 * pairs];
        for (t, &w) in taps.chunks_exact(2).zip(w) {
            acc = smlad(t[0] as u16 as u32 | (t[1] as u16 as u32) << 16, w, acc);
        }
    }
    acc
}

/// The plane's padding, every value no input value covers: the input zero point (padded taps
/// read it, as the reference's do; the spare column's is multiplied by 0). The same for every
/// channel, so written once per call.
fn fill_padding(p: &DepthwiseParams, plane: &mut [i16], cols: usize) {
    let z = p.input_zero_point.clamp(-128, 127) as i16;
    let (top, left) = (p.window.pad_top, p.window.pad_left);
    let (h, w) = (p.input.h, p.input.w);
    for (t, row) in plane.chunks_exact_mut(cols).enumerate() {
        let input_row = t >= top && t - top < h;
        for (x, v) in row.iter_mut().enumerate() {
            if !(input_row && x >= left && x - left < w) {
                *v = z;
            }
        }
    }
}

/// Channel `ch` of the input into the plane's body: input row y, column x at plane row
/// y + pad_top, column x + pad_left (what of the input the plane holds), in one pass over the
/// input's pixels.
fn fill_body(p: &DepthwiseParams, input: &[i8], ch: usize, plane: &mut [i16], cols: usize) {
    let (c, h, w) = (p.input.c, p.input.h, p.input.w);
    let (top, left) = (p.window.pad_top, p.window.pad_left);
    let rows = (plane.len() / cols).saturating_sub(top).min(h);
    let n = (left + w).min(cols).saturating_sub(left);
    if rows == 0 || n == 0 {
        return;
    }
    // The last value read and written lie in the buffers.
    assert!(((rows - 1) * w + n - 1) * c + ch < input.len());
    assert!((top + rows - 1) * cols + left + n <= plane.len());
    // SAFETY: rows × n values, the last within both buffers (asserted); the pointers step
    // past them only after the last (wrapping, never read).
    unsafe {
        let x = input.as_ptr().add(ch);
        let d = plane.as_mut_ptr().add(top * cols + left);
        fill_rows(x, c, d, [n, rows, cols - n, (w - n) * c]);
    }
}

/// `rows` rows of `n` values `c` bytes apart from `x` into `d`, widened, `d` skipping `dskip`
/// values and `x` `xskip` bytes after each row (`shape`: n, rows, dskip, xskip). On Arm with
/// DSP the loops over rows and values written out, four values at a time (`LDRSB`s, two
/// `PKHBT`s, two `STR`s: 12 instructions), the rest one at a time (5), 9 a row besides; the
/// loop LLVM made took 45 a DS-CNN row of 5 values.
///
/// # Safety
/// `x` is valid for reads of the values, `d` for writes of the rows; `n`, `rows` ≥ 1.
#[inline(always)]
unsafe fn fill_rows(x: *const i8, c: usize, d: *mut i16, shape: [usize; 4]) {
    let [n, rows, dskip, xskip] = shape;
    #[cfg(octet_arm_dsp)]
    {
        // The row's counts and skips, read per row: the pointers, the stride, the counters and
        // four loaded values take the registers.
        let ctl = [n / 4, n % 4, 2 * dskip, xskip];
        // SAFETY: the caller's guarantee; Armv7-M stores unaligned words with STR.
        unsafe {
            core::arch::asm!(
                "2:",
                "ldr {k}, [{ctl}]",
                "cmp {k}, #0",
                "beq 4f",
                "3:",
                "ldrsb {t}, [{x}]",
                "ldrsb {u}, [{x}, {c}]",
                "add {x}, {x}, {c}, lsl #1",
                "ldrsb {v}, [{x}]",
                "ldrsb {w}, [{x}, {c}]",
                "add {x}, {x}, {c}, lsl #1",
                "pkhbt {t}, {t}, {u}, lsl #16",
                "pkhbt {v}, {v}, {w}, lsl #16",
                "str {t}, [{d}], #4",
                "str {v}, [{d}], #4",
                "subs {k}, {k}, #1",
                "bne 3b",
                "4:",
                "ldr {k}, [{ctl}, #4]",
                "cmp {k}, #0",
                "beq 6f",
                "5:",
                "ldrsb {t}, [{x}]",
                "add {x}, {x}, {c}",
                "strh {t}, [{d}], #2",
                "subs {k}, {k}, #1",
                "bne 5b",
                "6:",
                "ldr {t}, [{ctl}, #8]",
                "add {d}, {d}, {t}",
                "ldr {t}, [{ctl}, #12]",
                "add {x}, {x}, {t}",
                "subs {rows}, {rows}, #1",
                "bne 2b",
                x = inout(reg) x => _,
                d = inout(reg) d => _,
                rows = inout(reg) rows => _,
                c = in(reg) c,
                ctl = in(reg) ctl.as_ptr(),
                k = out(reg) _,
                t = out(reg) _,
                u = out(reg) _,
                v = out(reg) _,
                w = out(reg) _,
                options(nostack)
            );
        }
    }
    #[cfg(not(octet_arm_dsp))]
    for r in 0..rows {
        for i in 0..n {
            // SAFETY: the caller's guarantee.
            unsafe { *d.add(r * (n + dskip) + i) = *x.add(r * (n * c + xskip) + i * c) as i16 };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::test_util::{depthwise_matches_scalar_in, depthwise_suite, ConvCase};
    use crate::kernels::{cortex_m_scratch_bytes, OpGeometry};

    /// The kernel against the reference with the scratch the set states, which is some
    /// wherever the depth multiplier is 1 (the kernel's own path, not the fallback).
    fn check(c: &ConvCase) {
        let stated = |g: &OpGeometry| {
            let n = cortex_m_scratch_bytes(g);
            assert!(c.cout != c.cin || n > 0, "{c:?}");
            n
        };
        depthwise_matches_scalar_in(c, &stated, &mut |p, x, y, s| depthwise_conv2d(p, x, y, s));
    }

    depthwise_suite!(check);

    /// Less scratch than stated: the scalar kernel, same bytes.
    #[test]
    fn short_scratch_falls_back() {
        let c = ConvCase::square(5, 5, 6, 3, 1, 1, 3);
        depthwise_matches_scalar_in(&c, &|g| cortex_m_scratch_bytes(g) - 1, &mut |p, x, y, s| {
            depthwise_conv2d(p, x, y, s)
        });
    }
}
