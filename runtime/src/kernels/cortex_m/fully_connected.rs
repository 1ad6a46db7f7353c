//! fully_connected: [`ROWS`] output rows per pass share each widened word of the input. With
//! the weights packed at prepare ([`CortexMFc`]: firmware keeps them in flash,
//! `Model::write_packed_image`) two rows share each `SMLAD`, three instructions per four
//! multiply-adds plus the loads ([`packed_quads`]: 14 instructions per 16 in
//! `quad_group_ldm`); else each row's word is widened and multiplied in with two `SMLAD`s
//! (CMSIS-NN's `arm_nn_vec_mat_mult_t_s8` scheme), five. With the scratch the set states
//! ([`cortex_m_fc_scratch_bytes`]: the input widened once per call, in `SXTB16`'s order) a
//! step loads the input's two widened words with one `LDRD`, two steps a pass; with less, the
//! input is widened again for every pass (and packed weights are not read). Output pairs share
//! the two-lane epilogue.

use super::{
    instance, ldr_inc, smlad, tail_word, widen, word, Bounds, Clamp, Double, Epilogue, Full,
    Requant, Requant2, Round, Single,
};
use crate::kernels::{cortex_m_fc_scratch_bytes, scalar, CortexMFc, FcParams, Layout, Rounding};

/// Output rows per pass: the input's widening is shared by this many rows, and their
/// accumulators and row pointers still fit in the core's registers ([`dot4`]).
const ROWS: usize = 4;

/// One group of a packed quad (the loop body of [`quad`] and `quads_per_tensor`): the input's
/// two widened words
/// (`LDRD`), the quad's four words (`LDM`, into r0–r3: `LDM` needs its registers in ascending
/// order, so they are named), each multiplied in raw into its pair's s (`SMLAD`), unpacked to
/// its row-0-or-2 bytes in place (`UXTB16`) and multiplied in again into u: 14 instructions
/// for 16 multiply-adds.
#[cfg(octet_arm_dsp)]
macro_rules! quad_group_ldm {
    () => {
        concat!(
            "ldrd {xa}, {xb}, [{x}], #8\n",
            "ldm {w}!, {{r0, r1, r2, r3}}\n",
            "smlad {s0}, r0, {xa}, {s0}\n",
            "uxtb16 r0, r0\n",
            "smlad {u0}, r0, {xa}, {u0}\n",
            "smlad {s0}, r1, {xb}, {s0}\n",
            "uxtb16 r1, r1\n",
            "smlad {u0}, r1, {xb}, {u0}\n",
            "smlad {s1}, r2, {xa}, {s1}\n",
            "uxtb16 r2, r2\n",
            "smlad {u1}, r2, {xa}, {u1}\n",
            "smlad {s1}, r3, {xb}, {s1}\n",
            "uxtb16 r3, r3\n",
            "smlad {u1}, r3, {xb}, {u1}\n",
        )
    };
}

/// `$body` ([`quad_group_ldm`]s) in a loop until `x` reaches `$end` (at least one pass), which
/// waits on the stack (all 12 registers `asm!` may take are in use: `x`, `w`, `xa`, `xb`,
/// r0–r3 and the sums of `$acc` in `u0`, `s0`, `u1`, `s1`); `xa`, free between groups, reads it
/// back. The stack word pushed is popped before the end.
#[cfg(octet_arm_dsp)]
macro_rules! quad_loop_ldm {
    ($acc:expr, $x:expr, $w:expr, $end:expr; $($body:tt)+) => {{
        let [mut u0, mut s0, mut u1, mut s1] = $acc;
        core::arch::asm!(
            "str {xa}, [sp, #-8]!",
            "2:",
            $($body)+
            "ldr {xa}, [sp]",
            "cmp {x}, {xa}",
            "bne 2b",
            "add sp, sp, #8",
            x = inout(reg) $x,
            w = inout(reg) $w,
            xa = inout(reg) $end => _,
            xb = out(reg) _,
            out("r0") _,
            out("r1") _,
            out("r2") _,
            out("r3") _,
            u0 = inout(reg) u0,
            s0 = inout(reg) s0,
            u1 = inout(reg) u1,
            s1 = inout(reg) s1,
            options(readonly),
        );
        $acc = [u0, s0, u1, s1];
    }};
}

/// [`quad_loop_ldm`] over passes of 16 groups (227 instructions for 256 multiply-adds).
#[cfg(octet_arm_dsp)]
macro_rules! passes_of_16 {
    ($acc:expr, $x:expr, $w:expr, $end:expr) => {
        quad_loop_ldm!($acc, $x, $w, $end;
            quad_group_ldm!(), quad_group_ldm!(), quad_group_ldm!(), quad_group_ldm!(),
            quad_group_ldm!(), quad_group_ldm!(), quad_group_ldm!(), quad_group_ldm!(),
            quad_group_ldm!(), quad_group_ldm!(), quad_group_ldm!(), quad_group_ldm!(),
            quad_group_ldm!(), quad_group_ldm!(), quad_group_ldm!(), quad_group_ldm!(),
        )
    };
}

/// Same bytes as [`scalar::fully_connected`]. `scratch` should hold
/// [`cortex_m_fc_scratch_bytes`] of the layer's K (with less, the input is widened per pass).
pub fn fully_connected(p: &FcParams, input: &[i8], output: &mut [i8], scratch: &mut [u8]) {
    let fc: Fc = instance!(&p.out, fc);
    fc(p, input, output, scratch)
}

/// [`fc`] in one rounding and clamp.
type Fc = fn(&FcParams, &[i8], &mut [i8], &mut [u8]);

/// The layer with the epilogue of rounding `R` and clamp `C` (the op's).
fn fc<R: Round, C: Clamp>(p: &FcParams, input: &[i8], output: &mut [i8], scratch: &mut [u8]) {
    let (k, n) = (p.k, p.n);
    if input.len() < k || output.len() < n || p.weights.len() < n * k {
        return scalar::fully_connected(p, input, output);
    }
    let x = &input[..k];
    let groups = k / 4;
    // The quads packed at prepare, where they are whole and word-aligned (`LDM`, `LDRD`:
    // prepare and packed images place them at 64).
    let packed = p.packed.of(Layout::CortexMFc).filter(|w| {
        CortexMFc::of(p).is_some_and(|l| w.len() >= l.bytes())
            && w.as_ptr().cast::<u32>().is_aligned()
    });
    // The input's whole groups of 4 widened: `SXTB16` (values 0, 2), `SXTB16 ROR #8` (1, 3);
    // for packed weights also 128·Σx over them.
    let widened = match scratch.len() >= cortex_m_fc_scratch_bytes(k) && groups > 0 {
        true => {
            // SAFETY: every bit pattern is a valid u32; the stated bytes count the 3 aligning
            // skips.
            let (_, words, _) = unsafe { scratch.align_to_mut::<u32>() };
            let xw = &mut words[..2 * groups];
            let sum = match packed {
                Some(_) => widen_input::<true>(x, xw),
                None => widen_input::<false>(x, xw),
            };
            Some((&*xw, sum.wrapping_mul(128)))
        }
        false => None,
    };
    let quads = match (packed, widened) {
        (Some(w), Some((xw, sum))) => Some((w, xw, sum)),
        _ => None,
    };
    let e = Epilogue::new(&p.out);
    // A per-tensor layer (TFLite's fully connected) has one requantization: decoded once.
    let q1 = Requant::<R>::new(p.multiplier.get(0), p.shift.get(0));
    let one = match p.per_tensor {
        true => Requant2::<R, C>::new([q1, q1], &e),
        false => None,
    };
    let mut j = 0;
    if let Some((w, xw, sum)) = quads {
        j = packed_quads::<R, C>(p, x, (w, xw, sum), one.as_ref(), &e, output);
    }
    while j + ROWS <= n {
        let rows = &p.weights[j * k..][..ROWS * k];
        let bias = core::array::from_fn(|r| p.bias.get(j + r));
        let acc = match widened {
            Some((xw, _)) => dot4_widened(bias, xw, x, rows),
            None => dot4(bias, x, rows),
        };
        requant4(p, j, acc, one.as_ref(), &e, &mut output[j..j + ROWS]);
        j += ROWS;
    }
    while j < n {
        let [a] = dot([p.bias.get(j)], x, [&p.weights[j * k..][..k]]);
        output[j] = Requant::<R>::new(p.multiplier.get(j), p.shift.get(j)).apply(a, &e);
        j += 1;
    }
}

/// Rows 0..4·⌊N/4⌋ of layer `p` from its quads packed as [`CortexMFc`] (`w`), the input's
/// whole groups widened (`xw`, with 128·Σx over them): one pass over the quads, each one
/// [`quad`], its partial group (if K is not a multiple of 4, from the unpacked rows) and its
/// epilogue ([`requant4`]). The rows done.
#[inline(never)]
fn packed_quads<R: Round, C: Clamp>(
    p: &FcParams,
    x: &[i8],
    packed: (&[u8], &[u32], i32),
    one: Option<&Requant2<R, C>>,
    e: &Epilogue,
    output: &mut [i8],
) -> usize {
    // The usual layer, per tensor, one chunk of whole passes: its own loop, with no test in it
    // for chunks, a partial group or per-channel requantization (30 instructions a quad fewer).
    #[cfg(octet_arm_dsp)]
    if let Some(q2) = one {
        let groups = packed.1.len() / 2;
        if groups.is_multiple_of(16) && groups <= CortexMFc::CHUNK_GROUPS && p.k.is_multiple_of(4) {
            return quads_per_tensor(p, packed, q2, output);
        }
    }
    quads_of(p, x, packed, one, e, output)
}

/// [`packed_quads`] of a per-tensor layer (`q2`, its one requantization) whose groups are
/// whole passes of 16 in one chunk and whose K is a multiple of 4: per quad its four biases,
/// one `asm!` loop over the groups, the two second-row sums split off and one 4-byte store.
#[cfg(octet_arm_dsp)]
#[inline(never)]
fn quads_per_tensor<R: Round, C: Clamp>(
    p: &FcParams,
    (w, xw, sum128): (&[u8], &[u32], i32),
    q2: &Requant2<R, C>,
    output: &mut [i8],
) -> usize {
    let (quads, groups) = (p.n / ROWS, xw.len() / 2);
    if p.bias.len() < ROWS * quads {
        return 0;
    }
    let mut wp = w[..quads * 16 * groups].as_ptr();
    let end = xw.as_ptr_range().end;
    let bias = p.bias.bytes()[..16 * quads].as_chunks::<16>().0.iter();
    for (b, o) in bias.zip(output[..ROWS * quads].chunks_exact_mut(ROWS)) {
        let [b0, b1, b2, b3] = words4(b);
        let (r0, r2) = (b0.wrapping_sub(sum128), b2.wrapping_sub(sum128));
        let mut acc = [r0, r0, r2, r2];
        let mut x = xw.as_ptr();
        // SAFETY: the quad's `groups` groups (16 bytes each) lie from `wp` (`w` holds `quads`
        // of them, one after another), the input's from `x` to `end`; `groups` is a non-zero
        // multiple of 16 (the caller's test).
        unsafe {
            passes_of_16!(acc, x, wp, end);
        }
        let [u0, s0, u1, s1] = acc;
        let r1 = b1.wrapping_add(s0.wrapping_sub(u0) >> 8);
        let r3 = b3.wrapping_add(s1.wrapping_sub(u1) >> 8);
        o.copy_from_slice(&q2.apply4([u0, r1, u1, r3]).to_le_bytes().map(|b| b as i8));
    }
    ROWS * quads
}

/// [`packed_quads`] of any layer: per quad its sums ([`quad`], one copy for every instance of
/// the kernel), its partial group and its epilogue.
#[inline(always)]
fn quads_of<R: Round, C: Clamp>(
    p: &FcParams,
    x: &[i8],
    (w, xw, sum128): (&[u8], &[u32], i32),
    one: Option<&Requant2<R, C>>,
    e: &Epilogue,
    output: &mut [i8],
) -> usize {
    let (k, quads) = (p.k, p.n / ROWS);
    let groups = xw.len() / 2;
    if p.bias.len() < ROWS * quads {
        return 0;
    }
    let w = &w[..quads * 16 * groups];
    let mut wp = w.as_ptr();
    let bias = p.bias.bytes()[..16 * quads].as_chunks::<16>().0.iter();
    let output = &mut output[..ROWS * quads];
    for (q, (b, o)) in bias.zip(output.chunks_exact_mut(ROWS)).enumerate() {
        let j = ROWS * q;
        // SAFETY: quad q's 16·groups bytes lie from `wp` (`w` holds `quads` quads; `quad`
        // advances `wp` past each).
        let mut acc = unsafe { quad(words4(b), sum128, xw, &mut wp) };
        if k % 4 != 0 {
            let rows = &p.weights[j * k..][..ROWS * k];
            let rows: [&[i8]; 4] = core::array::from_fn(|r| &rows[r * k..][..k]);
            acc = tail(acc, x, rows, 4 * groups);
        }
        requant4(p, j, acc, one, e, o);
    }
    ROWS * quads
}

/// Four little-endian i32 from 16 bytes (a quad's biases).
#[inline(always)]
fn words4(b: &[u8; 16]) -> [i32; 4] {
    core::array::from_fn(|r| crate::format::le_i32(b, 4 * r))
}

/// The epilogue of rows j..j + 4 (sums `acc`) into `o`: two output pairs, through `one` for a
/// per-tensor layer, else each pair's own requantization.
#[inline(always)]
fn requant4<R: Round, C: Clamp>(
    p: &FcParams,
    j: usize,
    acc: [i32; 4],
    one: Option<&Requant2<R, C>>,
    e: &Epilogue,
    o: &mut [i8],
) {
    match one {
        Some(q2) => o[..4].copy_from_slice(&q2.apply4(acc).to_le_bytes().map(|b| b as i8)),
        None => requant4_channels::<R, C>(p, j, acc, e, o),
    }
}

/// [`requant4`] of a layer with a requantization per channel: each pair of rows' own, decoded
/// here. Not inlined: the unpacked and the packed loops share one copy per instance.
#[inline(never)]
fn requant4_channels<R: Round, C: Clamp>(
    p: &FcParams,
    j: usize,
    acc: [i32; 4],
    e: &Epilogue,
    o: &mut [i8],
) {
    for (i, (a, o)) in acc.chunks_exact(2).zip(o.chunks_exact_mut(2)).enumerate() {
        let c = j + 2 * i;
        let q = [c, c + 1].map(|c| Requant::<R>::new(p.multiplier.get(c), p.shift.get(c)));
        match Requant2::<R, C>::new(q, e) {
            Some(q2) => o.copy_from_slice(&q2.apply(a[0], a[1])),
            None => {
                o[0] = q[0].apply(a[0], e);
                o[1] = q[1].apply(a[1], e);
            }
        }
    }
}

/// The whole groups of `x` widened into `xw` (two words a group), and with `SUM` their Σx
/// (else 0).
#[inline(always)]
fn widen_input<const SUM: bool>(x: &[i8], xw: &mut [u32]) -> i32 {
    // Both halves 1: `SMLAD` with it adds a widened word's two values.
    const ONES: u32 = 0x0001_0001;
    let mut sum = 0;
    for (d, g) in xw.chunks_exact_mut(2).zip(x.chunks_exact(4)) {
        (d[0], d[1]) = widen(word(g));
        if SUM {
            sum = smlad(d[1], ONES, smlad(d[0], ONES, sum));
        }
    }
    sum
}

/// Rows 0..4 of a quad packed as [`CortexMFc`], from `*w`, which advances past the quad:
/// `acc` (their biases) plus Σ x·w over the input's whole groups (`xw`, widened; `sum128` =
/// 128·Σx over them). Each chunk of at most [`CortexMFc::CHUNK_GROUPS`] groups gives a pair's u
/// (row 0 or 2, its weights + 128) and s = u + 256·v (v: row 1 or 3), both started at row 0's
/// or 2's sum so far; v is exact from s − u (|v| < 2^23 in a chunk), u runs on. On Arm with
/// DSP a chunk runs in passes of 16 groups where it is a multiple of 16, else of 8 and then
/// one a pass ([`quad_group_ldm`]); not inlined, so that every instance of the kernel (per
/// rounding and clamp) shares these loops (they were 26 KB of flash inlined). Elsewhere
/// [`chunk`] computes the same sums.
///
/// # Safety
/// `*w` (4-aligned) is valid for reads of `16·groups` bytes (`xw.len() = 2·groups`).
#[cfg_attr(octet_arm_dsp, inline(never))]
#[cfg_attr(not(octet_arm_dsp), inline(always))]
unsafe fn quad(acc: [i32; 4], sum128: i32, xw: &[u32], w: &mut *const u8) -> [i32; 4] {
    let [mut r0, mut r1, mut r2, mut r3] = acc;
    (r0, r2) = (r0.wrapping_sub(sum128), r2.wrapping_sub(sum128));
    let (mut x, mut left) = (xw.as_ptr(), xw.len() / 2);
    #[cfg(octet_arm_dsp)]
    let mut wp = *w;
    while left > 0 {
        let len = left.min(CortexMFc::CHUNK_GROUPS);
        #[cfg_attr(not(octet_arm_dsp), allow(unused_mut))]
        let mut acc = [r0, r0, r2, r2];
        // SAFETY: `left` groups of `xw` (two words each) remain from `x` and of the quad (16
        // bytes each) from `*w` (the caller's guarantee; both advance by the groups done).
        #[cfg(octet_arm_dsp)]
        unsafe {
            if len.is_multiple_of(16) {
                let end = x.add(2 * len);
                passes_of_16!(acc, x, wp, end);
            } else {
                if len >= 8 {
                    let end = x.add(2 * (len - len % 8));
                    quad_loop_ldm!(acc, x, wp, end;
                        quad_group_ldm!(), quad_group_ldm!(), quad_group_ldm!(),
                        quad_group_ldm!(), quad_group_ldm!(), quad_group_ldm!(),
                        quad_group_ldm!(), quad_group_ldm!(),
                    );
                }
                if len % 8 > 0 {
                    let end = x.add(2 * (len % 8));
                    quad_loop_ldm!(acc, x, wp, end; quad_group_ldm!(),);
                }
            }
        }
        // SAFETY: as above.
        #[cfg(not(octet_arm_dsp))]
        let acc = unsafe { chunk(acc, &mut x, w, len) };
        let [u0, s0, u1, s1] = acc;
        r1 = r1.wrapping_add(s0.wrapping_sub(u0) >> 8);
        r3 = r3.wrapping_add(s1.wrapping_sub(u1) >> 8);
        (r0, r2) = (u0, u1);
        left -= len;
    }
    #[cfg(octet_arm_dsp)]
    {
        *w = wp;
    }
    [r0, r1, r2, r3]
}

/// `[u0, s0, u1, s1]` plus `len` (≥ 1) groups of a packed quad from `*xw` and `*w`, which
/// advance past them: u0 += Σ x·(w[0] + 128), s0 += Σ x·(w[0] + 128 + 256·w[1]), and u1, s1
/// of rows 2, 3 the same (each modulo 2^32): the Rust model of `packed_quads`' loops on Arm
/// with DSP ([`quad_group_ldm`]).
///
/// # Safety
/// `*xw` valid for reads of `8·len` bytes, `*w` of `16·len`.
#[cfg(not(octet_arm_dsp))]
#[inline(always)]
unsafe fn chunk(acc: [i32; 4], xw: &mut *const u32, w: &mut *const u8, len: usize) -> [i32; 4] {
    let [mut u0, mut s0, mut u1, mut s1] = acc;
    for _ in 0..len {
        // SAFETY: the caller's guarantee: the next group's two words and four words.
        let (xa, xb, word) = unsafe {
            let x = (**xw, *xw.add(1));
            let word = core::array::from_fn::<u32, 4, _>(|i| super::load(w.add(4 * i).cast()));
            (*xw, *w) = (xw.add(2), w.add(16));
            (x.0, x.1, word)
        };
        let unpack = |v: u32| v & 0x00FF_00FF;
        s0 = smlad(word[1], xb, smlad(word[0], xa, s0));
        u0 = smlad(unpack(word[1]), xb, smlad(unpack(word[0]), xa, u0));
        s1 = smlad(word[3], xb, smlad(word[2], xa, s1));
        u1 = smlad(unpack(word[3]), xb, smlad(unpack(word[2]), xa, u1));
    }
    [u0, s0, u1, s1]
}

/// `acc[r] + Σ x·w[r]` over rows of `x.len()` values, 4 per step (a last partial group
/// zero-filled).
#[inline(always)]
fn dot<const R: usize>(mut acc: [i32; R], x: &[i8], w: [&[i8]; R]) -> [i32; R] {
    let groups = x.len() / 4;
    assert!(w.iter().all(|r| r.len() == x.len()));
    let mut xp = x.as_ptr();
    let mut wp = w.map(|r| r.as_ptr());
    for _ in 0..groups {
        // SAFETY: `groups` whole groups of 4 from each start (rows as long as `x`, asserted).
        let (xa, xb) = widen(unsafe { ldr_inc(&mut xp) });
        for (a, p) in acc.iter_mut().zip(wp.iter_mut()) {
            // SAFETY: as above.
            let (wa, wb) = widen(unsafe { ldr_inc(p) });
            *a = smlad(wb, xb, smlad(wa, xa, *a));
        }
    }
    tail(acc, x, w, 4 * groups)
}

/// [`dot`] of 4 consecutive rows (`rows`: 4·`x.len()` values). On Arm with DSP the loop is
/// written out ([`dot4_words`]): it needs more registers than the compiler has (r7 holds the
/// frame), which left to itself spilled differently per caller, 27 to 30 instructions a step.
#[inline(never)]
fn dot4(acc: [i32; 4], x: &[i8], rows: &[i8]) -> [i32; 4] {
    let k = x.len();
    assert!(rows.len() == 4 * k);
    let w: [&[i8]; 4] = core::array::from_fn(|r| &rows[r * k..][..k]);
    #[cfg(octet_arm_dsp)]
    {
        let groups = k / 4;
        let mut acc = acc;
        if groups > 0 {
            // SAFETY: `groups` whole words from the start of `x` and of each row (`rows`
            // holds 4 rows of k, asserted).
            unsafe { dot4_words(&mut acc, x.as_ptr(), rows.as_ptr(), k, groups) };
        }
        tail(acc, x, w, 4 * groups)
    }
    #[cfg(not(octet_arm_dsp))]
    dot(acc, x, w)
}

/// One group of 4 values of rows 1, 0, 3, 2 into `a1`, `a0`, `a3`, `a2`, against the input's
/// widened words `xa`, `xb`: each row's word loaded (`LDR`; rows 1 and 3 a register offset `k`
/// from the pointers `w0`, `w2` of rows 0 and 2, which advance), widened (`SXTB16`, twice) and
/// multiplied in (`SMLAD`, twice). The asm text [`dot4_words`] and [`dot4_widened_pairs`] share.
#[cfg(octet_arm_dsp)]
macro_rules! rows4 {
    () => {
        concat!(
            "ldr {t}, [{w0}, {k}]\n",
            "sxtb16 {t2}, {t}\n",
            "smlad {a1}, {t2}, {xa}, {a1}\n",
            "sxtb16 {t}, {t}, ror #8\n",
            "smlad {a1}, {t}, {xb}, {a1}\n",
            "ldr {t}, [{w0}], #4\n",
            "sxtb16 {t2}, {t}\n",
            "smlad {a0}, {t2}, {xa}, {a0}\n",
            "sxtb16 {t}, {t}, ror #8\n",
            "smlad {a0}, {t}, {xb}, {a0}\n",
            "ldr {t}, [{w2}, {k}]\n",
            "sxtb16 {t2}, {t}\n",
            "smlad {a3}, {t2}, {xa}, {a3}\n",
            "sxtb16 {t}, {t}, ror #8\n",
            "smlad {a3}, {t}, {xb}, {a3}\n",
            "ldr {t}, [{w2}], #4\n",
            "sxtb16 {t2}, {t}\n",
            "smlad {a2}, {t2}, {xa}, {a2}\n",
            "sxtb16 {t}, {t}, ror #8\n",
            "smlad {a2}, {t}, {xb}, {a2}\n",
        )
    };
}

/// The loop [`dot4_words`] and [`dot4_widened_pairs`] share: `$body` (asm text, each line
/// followed by a comma) until `x` reaches `$end`, kept on the stack; the accumulators of
/// `$acc` in `a0`..`a3`, rows 0 and 2 through the post-incremented `w0`, `w2` (rows 1 and 3 `k`
/// bytes further), `t`, `t2`, `xa`, `xb` free: 12 registers, all `asm!` may take. The stack word
/// pushed is popped before the end. Use inside `unsafe`, the pointers valid for the body's
/// reads.
#[cfg(octet_arm_dsp)]
macro_rules! rows4_loop {
    ($acc:expr, $x:expr, $w:expr, $k:expr, $end:expr; $($body:tt)+) => {{
        let [mut a0, mut a1, mut a2, mut a3] = *$acc;
        core::arch::asm!(
            "str {t}, [sp, #-8]!",
            "2:",
            $($body)+
            "ldr {t}, [sp]",
            "cmp {x}, {t}",
            "bne 2b",
            "add sp, sp, #8",
            x = inout(reg) $x => _,
            w0 = inout(reg) $w => _,
            w2 = inout(reg) $w.wrapping_add(2 * $k) => _,
            k = in(reg) $k,
            t = inout(reg) $end => _,
            t2 = out(reg) _,
            xa = out(reg) _,
            xb = out(reg) _,
            a0 = inout(reg) a0,
            a1 = inout(reg) a1,
            a2 = inout(reg) a2,
            a3 = inout(reg) a3,
        );
        *$acc = [a0, a1, a2, a3];
    }};
}

/// `acc[r] += Σ x·w[r]` over the first `groups` words of `x` and of rows r = 0..4 of `k`
/// values from `w` (`SMLAD`, as [`dot`]): 26 instructions a word. Registers: rows 0 and 2
/// through post-incremented pointers, rows 1 and 3 one row (`k`) further (`LDR` with a register
/// offset), the end of `x` kept on the stack: 12, all the operands `asm!` may take.
///
/// # Safety
/// `groups ≥ 1`; `x` valid for reads of `4·groups` bytes, `w` of `3·k + 4·groups`.
#[cfg(octet_arm_dsp)]
#[inline(always)]
unsafe fn dot4_words(acc: &mut [i32; 4], x: *const i8, w: *const i8, k: usize, groups: usize) {
    let end = x.wrapping_add(4 * groups);
    // SAFETY: the caller's guarantee.
    unsafe {
        rows4_loop!(acc, x, w, k, end;
            "ldr {t}, [{x}], #4",
            "sxtb16 {xa}, {t}",
            "sxtb16 {xb}, {t}, ror #8",
            rows4!(),
        )
    };
}

/// [`dot4`] with the input's whole groups widened already (`xw`: two words a group): an odd
/// group first, then [`dot4_widened_pairs`] two groups a pass, then the last partial group.
#[inline(never)]
fn dot4_widened(mut acc: [i32; 4], xw: &[u32], x: &[i8], rows: &[i8]) -> [i32; 4] {
    let (k, groups) = (x.len(), xw.len() / 2);
    assert!(rows.len() == 4 * k && groups == k / 4 && groups > 0);
    let odd = groups % 2;
    if odd == 1 {
        for (r, a) in acc.iter_mut().enumerate() {
            let (wa, wb) = widen(word(&rows[r * k..]));
            *a = smlad(wb, xw[1], smlad(wa, xw[0], *a));
        }
    }
    if groups > odd {
        // SAFETY: groups − odd (even, ≥ 2) more groups of `xw` and of each row (`rows` holds 4
        // rows of k, asserted).
        unsafe {
            dot4_widened_pairs(
                &mut acc,
                xw.as_ptr().add(2 * odd),
                rows.as_ptr().add(4 * odd),
                k,
                (groups - odd) / 2,
            )
        };
    }
    if k % 4 == 0 {
        return acc;
    }
    let w: [&[i8]; 4] = core::array::from_fn(|r| &rows[r * k..][..k]);
    tail(acc, x, w, 4 * groups)
}

/// `acc[r] += Σ x·w[r]` over `pairs` pairs of groups: the input's widened words from `xw`
/// (`LDRD`), row r's words from `w + r·k`. On Arm with DSP written out as [`dot4_words`]
/// (the same 12 registers), 45 instructions a pair of groups; elsewhere the same sums in Rust.
///
/// # Safety
/// `pairs ≥ 1`; `xw` (4-aligned) valid for reads of `16·pairs` bytes, `w` of
/// `3·k + 8·pairs`.
#[inline(always)]
unsafe fn dot4_widened_pairs(
    acc: &mut [i32; 4],
    xw: *const u32,
    w: *const i8,
    k: usize,
    pairs: usize,
) {
    #[cfg(octet_arm_dsp)]
    {
        let end = xw.wrapping_add(4 * pairs);
        // SAFETY: the caller's guarantee. Two groups a pass, each the input's two widened words,
        // then the four rows.
        unsafe {
            rows4_loop!(acc, xw, w, k, end;
                "ldrd {xa}, {xb}, [{x}], #8",
                rows4!(),
                "ldrd {xa}, {xb}, [{x}], #8",
                rows4!(),
            )
        };
    }
    #[cfg(not(octet_arm_dsp))]
    for g in 0..2 * pairs {
        // SAFETY: the caller's guarantee.
        let (xa, xb) = unsafe { (*xw.add(2 * g), *xw.add(2 * g + 1)) };
        for (r, a) in acc.iter_mut().enumerate() {
            // SAFETY: the caller's guarantee: group g of row r.
            let (wa, wb) = widen(unsafe { super::load(w.add(r * k + 4 * g)) });
            *a = smlad(wb, xb, smlad(wa, xa, *a));
        }
    }
}

/// The last `x.len() − at` (< 4) values of `x` and of each row into `acc`, zero-filled to a
/// group.
#[inline(always)]
fn tail<const R: usize>(mut acc: [i32; R], x: &[i8], w: [&[i8]; R], at: usize) -> [i32; R] {
    if at < x.len() {
        let (xa, xb) = widen(tail_word(&x[at..]));
        for (a, row) in acc.iter_mut().zip(w) {
            let (wa, wb) = widen(tail_word(&row[at..]));
            *a = smlad(wb, xb, smlad(wa, xa, *a));
        }
    }
    acc
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::test_util::{
        fc_extremes, fc_suite, full_range, i32_bytes, FcData, LayerData, FC_SHAPES,
    };
    use crate::kernels::{cortex_m_fc_packing, pack, PackOp};

    /// With the scratch the set states (the input widened once), with none, and with the
    /// weights packed ([`CortexMFc`], in a word-aligned buffer as prepare gives: `LDRD`).
    fn run(p: &FcParams, x: &[i8], y: &mut [i8]) {
        let mut scratch = vec![0xA5u8; cortex_m_fc_scratch_bytes(p.k)];
        let mut without = y.to_vec();
        fully_connected(p, x, &mut without, &mut []);
        let mut unpacked = y.to_vec();
        fully_connected(p, x, &mut unpacked, &mut scratch);
        assert_eq!(without, unpacked, "without scratch");
        let mut words = vec![0x5A5A_5A5Au32; CortexMFc { k: p.k, n: p.n }.bytes() / 4];
        // SAFETY: any bytes are valid u8s; the words outlive the borrow.
        let bytes = unsafe { words.align_to_mut::<u8>().1 };
        let mut q = *p;
        if let Some((layout, n)) = cortex_m_fc_packing(p) {
            q.packed = pack(layout, PackOp::Fc(p), &mut bytes[..n]);
            assert!(q.packed.of(Layout::CortexMFc).is_some());
        }
        fully_connected(&q, x, y, &mut scratch);
        assert_eq!(unpacked, y, "packed");
    }

    fc_suite!(if true, run);

    /// Per-tensor layers (one multiplier and shift, decoded once) of the suite's shapes, and
    /// of shapes whose packed groups are whole passes of 16 (the per-tensor loop on Arm with
    /// DSP: K a multiple of 64 up to 448, rows past the quads or not) or need two chunks.
    #[test]
    fn per_tensor() {
        let passes = [(64, 12), (128, 128), (448, 9), (256, 6), (512, 8), (640, 4)];
        for (k, n) in FC_SHAPES.into_iter().chain(passes) {
            let mut d = FcData::random(k, n, k as u64 + 3);
            let (m, s) = (d.layer.mult[..4].to_vec(), d.layer.shift[..4].to_vec());
            d.layer.mult = m.repeat(n);
            d.layer.shift = s.repeat(n);
            assert!(d.params().per_tensor);
            d.check(&mut run);
        }
    }

    #[test]
    fn extremes() {
        fc_extremes(&mut run);
    }

    /// Packed quads near the chunks' bound: every input and weight −128 (each chunk's second
    /// row sum at 4·112·2^14, under 2^23), over several chunks and a partial group, and
    /// the same with a third of the weights 127; outputs scaled by 2^−18 into int8's range.
    #[test]
    fn packed_chunks_at_the_bound() {
        let (k, n) = (3 * 4 * CortexMFc::CHUNK_GROUPS + 7, 6);
        for alternate in [false, true] {
            let weights = (0..n * k)
                .map(|i| if alternate && i % 3 == 0 { 127 } else { -128 })
                .collect();
            FcData {
                x: vec![-128i8; k],
                layer: LayerData {
                    weights,
                    bias: i32_bytes(&[0, 1, -1, 5, -7, 3]),
                    mult: i32_bytes(&[1 << 30; 6]),
                    shift: i32_bytes(&[-17; 6]),
                    out: full_range(3),
                },
            }
            .check(&mut run);
        }
    }
}
