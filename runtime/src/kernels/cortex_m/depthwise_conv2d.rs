//! depthwise_conv2d (depth multiplier 1, any window without dilation), channel by channel:
//! the channel's padded input is widened into one plane of 16-bit values (the scratch stated
//! at prepare, [`CortexMDepthwise`]), so that two horizontal taps are one word (`LDR`, any
//! alignment) multiplied in by one `SMLAD` against the two taps' weights as 16-bit pairs (an
//! odd last tap paired with 0, against the plane's spare column). The channel's weights and
//! requantization are then set up once for all its outputs; pixel pairs share the two-lane
//! epilogue ([`Requant2`]); 3×3 windows keep their six weight words in registers.
//!
//! Padded taps read the input zero point, as the reference's do (the bias holds −z_in·Σw).

use super::{load, smlad, Double, Epilogue, Requant, Requant2, Round, Single};
use crate::kernels::{
    cortex_m_depthwise_covered, scalar, CortexMDepthwise, DepthwiseParams, Rounding,
};

/// Weight words of a channel the kernel keeps on the stack: kernel rows × pairs of taps up to
/// 8 × 8 taps (larger windows run the scalar reference).
const MAX_WORDS: usize = 32;

/// Same bytes as [`scalar::depthwise_conv2d`]. `scratch` should hold
/// `Kernels::CortexM.scratch_bytes` of the op (the scalar kernel runs with less, and for what
/// [`cortex_m_depthwise_covered`] excludes: a depth multiplier above 1, dilation).
pub fn depthwise_conv2d(p: &DepthwiseParams, input: &[i8], output: &mut [i8], scratch: &mut [u8]) {
    let g = p.geometry();
    let l = CortexMDepthwise::new(&g);
    let (kh, kw, c) = (p.window.kernel_h, p.window.kernel_w, p.output.c);
    let covered = cortex_m_depthwise_covered(&g)
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
    let channel = match p.out.rounding {
        Rounding::Single => channel::<Single>,
        Rounding::Double => channel::<Double>,
    };
    for ch in 0..c {
        fill_plane(p, input, ch, plane, l.cols);
        channel(p, ch, plane, l.cols, output);
    }
}

/// Channel `ch`'s outputs from its plane (`cols` values a row) in rounding `R`.
#[inline(never)]
fn channel<R: Round>(p: &DepthwiseParams, ch: usize, plane: &[i16], cols: usize, out: &mut [i8]) {
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
        q2: Requant2::new([q, q], &e),
        e,
        bias: p.bias.get(ch),
        ch,
        c,
    };
    let mut sums = [0i32; CHUNK];
    let three = kh == 3 && kw == 3;
    // Pixels a plane row holds at stride sw: consecutive output rows (sh = 1) are then
    // consecutive runs of `per_row` pixels, the last cols/sw − wo of each a sum nobody reads.
    let per_row = cols / sw;
    if three && sh == 1 && cols.is_multiple_of(sw) && wo <= CHUNK {
        let at_once = (CHUNK - wo) / per_row + 1;
        let mut oy = 0;
        while oy < p.output.h {
            let group: usize = at_once.min(p.output.h - oy);
            let n = (group - 1) * per_row + wo;
            let w: &[u32; 6] = wt[..6].try_into().unwrap();
            sums3x3(&plane[oy * cols..], cols, w, sw, &mut sums[..n]);
            // The group's pixels are consecutive outputs.
            let out = &mut out[oy * wo * c..][..group * wo * c];
            o.put(out, &sums[..n], group * wo, wo, per_row);
            oy += group;
        }
        return;
    }
    for (oy, out) in out.chunks_exact_mut(wo * c).take(p.output.h).enumerate() {
        let rows = &plane[oy * sh * cols..][..kh * cols];
        for x0 in (0..wo).step_by(CHUNK) {
            let sums = &mut sums[..(wo - x0).min(CHUNK)];
            if three {
                let w: &[u32; 6] = wt[..6].try_into().unwrap();
                sums3x3(&rows[x0 * sw..], cols, w, sw, sums);
            } else {
                for (i, s) in sums.iter_mut().enumerate() {
                    *s = dot_any(rows, cols, &wt[..kh * pairs], pairs, (x0 + i) * sw, 0);
                }
            }
            let n = sums.len();
            o.put(&mut out[x0 * c..], sums, n, n, n);
        }
    }
}

/// Output pixels whose sums a channel keeps at once (on the stack).
const CHUNK: usize = 48;

/// What a channel's outputs need: its requantization (and the two-lane form where it
/// applies), bias, its index among the `c` channels of a pixel.
struct Outputs<R: Round> {
    q: Requant<R>,
    q2: Option<Requant2<R>>,
    e: Epilogue,
    bias: i32,
    ch: usize,
    c: usize,
}

impl<R: Round> Outputs<R> {
    /// `n` consecutive output pixels (`out`: theirs, all channels) from their sums less the
    /// bias, requantized, pairs through the two-lane epilogue: pixel k's sum at
    /// (k / wo)·stride + k mod wo (rows of `wo` pixels among runs of `stride` sums).
    #[inline(always)]
    fn put(&self, out: &mut [i8], sums: &[i32], n: usize, wo: usize, stride: usize) {
        let (c, b) = (self.c, self.bias);
        if n == 0 {
            return;
        }
        let out = &mut out[self.ch..];
        assert!(
            wo > 0
                && stride >= wo
                && (n - 1) * c < out.len()
                && (n - 1) / wo * stride + (n - 1) % wo < sums.len()
        );
        let (mut s, mut col) = (sums.as_ptr(), 0);
        let mut next = || {
            // SAFETY: the n sums lie in `sums` (asserted); `s` moves to the next one.
            unsafe {
                let v = (*s).wrapping_add(b);
                col += 1;
                s = s.add(if col == wo { stride - wo + 1 } else { 1 });
                col = if col == wo { 0 } else { col };
                v
            }
        };
        let mut y = out.as_mut_ptr();
        let mut k = 0;
        if let Some(q2) = &self.q2 {
            while k + 2 <= n {
                let (a0, a1) = (next(), next());
                let [y0, y1] = q2.apply(a0, a1);
                // SAFETY: pixels k, k + 1 < n of `out` (asserted).
                unsafe {
                    *y = y0;
                    *y.add(c) = y1;
                    y = y.add(2 * c);
                }
                k += 2;
            }
        }
        while k < n {
            let v = self.q.apply(next(), &self.e);
            // SAFETY: pixel k < n of `out` (asserted).
            unsafe {
                *y = v;
                y = y.add(c);
            }
            k += 1;
        }
    }
}

/// The sums of a 3×3 window at `sums.len()` output pixels `sw` values apart, the first at the
/// start of `rows` (its three rows `cols` apart): per row, taps 0 and 1 as one word, tap 2
/// with the column after it against a zero weight. Strides 1 and 2 on Arm with DSP run
/// [`row3x3_words`].
#[inline(never)]
fn sums3x3(rows: &[i16], cols: usize, w: &[u32; 6], sw: usize, sums: &mut [i32]) {
    let n = sums.len();
    assert!(n > 0 && (n - 1) * sw + 4 + 2 * cols <= rows.len());
    // SAFETY: pixel i reads values i·sw .. i·sw + 4 of the three rows, within `rows`
    // (asserted).
    unsafe {
        let r = rows.as_ptr();
        #[cfg(octet_arm_dsp)]
        match sw {
            1 => return row3x3_words::<2>(r, cols, w, sums),
            2 => return row3x3_words::<4>(r, cols, w, sums),
            _ => {}
        }
        let [w0, w1, w2, w3, w4, w5] = *w;
        let mut r = r;
        for s in sums.iter_mut() {
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

/// [`sums3x3`]'s loop written out, the pixels `STEP` bytes apart (stride 1 or 2): the six
/// weight words, three row pointers (post-incremented), the sum, a loaded word and the output
/// pointer take the 12 registers `asm!` may use, the end on the stack; 16 instructions a pixel
/// (left to itself, LLVM spilled the weights: 30).
///
/// # Safety
/// `r` and the rows `cols` and `2·cols` values further are valid for reads of
/// (sums.len() − 1)·STEP + 8 bytes; `sums` is not empty.
#[cfg(octet_arm_dsp)]
#[inline(always)]
unsafe fn row3x3_words<const STEP: usize>(
    r: *const i16,
    cols: usize,
    w: &[u32; 6],
    sums: &mut [i32],
) {
    let out = sums.as_mut_ptr();
    let end = out.wrapping_add(sums.len());
    // SAFETY: the caller's guarantee; the stack word pushed is popped before the end.
    unsafe {
        core::arch::asm!(
            "str {t}, [sp, #-8]!",
            "2:",
            "ldr {t}, [{p0}, #4]",
            "smuad {a}, {t}, {w1}",
            "ldr {t}, [{p0}], #{step}",
            "smlad {a}, {t}, {w0}, {a}",
            "ldr {t}, [{p1}, #4]",
            "smlad {a}, {t}, {w3}, {a}",
            "ldr {t}, [{p1}], #{step}",
            "smlad {a}, {t}, {w2}, {a}",
            "ldr {t}, [{p2}, #4]",
            "smlad {a}, {t}, {w5}, {a}",
            "ldr {t}, [{p2}], #{step}",
            "smlad {a}, {t}, {w4}, {a}",
            "str {a}, [{out}], #4",
            "ldr {t}, [sp]",
            "cmp {out}, {t}",
            "bne 2b",
            "add sp, sp, #8",
            step = const STEP,
            p0 = inout(reg) r => _,
            p1 = inout(reg) r.wrapping_add(cols) => _,
            p2 = inout(reg) r.wrapping_add(2 * cols) => _,
            out = inout(reg) out => _,
            t = inout(reg) end => _,
            a = out(reg) _,
            w0 = in(reg) w[0],
            w1 = in(reg) w[1],
            w2 = in(reg) w[2],
            w3 = in(reg) w[3],
            w4 = in(reg) w[4],
            w5 = in(reg) w[5],
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

/// Channel `ch` of the padded input as a plane of `cols` values a row: input row t − pad_top,
/// column x − pad_left at (t, x), the input zero point elsewhere (padding, the spare column).
fn fill_plane(p: &DepthwiseParams, input: &[i8], ch: usize, plane: &mut [i16], cols: usize) {
    let (c, h, w) = (p.input.c, p.input.h, p.input.w);
    let z = p.input_zero_point.clamp(-128, 127) as i16;
    let (top, pad) = (p.window.pad_top, p.window.pad_left);
    // Padded columns [lo, hi) hold input columns 0 .. hi − lo.
    let (lo, hi) = (pad.min(cols), (w + pad).min(cols));
    for (t, row) in plane.chunks_exact_mut(cols).enumerate() {
        let iy = t.wrapping_sub(top);
        if iy >= h {
            row.fill(z);
            continue;
        }
        let src = &input[(iy * w) * c + ch..];
        let body = hi.max(lo) - lo;
        assert!(body == 0 || (body - 1) * c < src.len());
        let (left, rest) = row.split_at_mut(lo);
        let (mid, right) = rest.split_at_mut(body);
        for d in left.iter_mut().chain(right) {
            *d = z;
        }
        let mut x = src.as_ptr();
        for d in mid {
            // SAFETY: the body's values lie within `src` (asserted): at most w of them.
            unsafe {
                *d = *x as i16;
                x = x.add(c);
            }
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
