//! fully_connected: [`ROWS`] output rows per pass share each widened word of the input; each
//! row's word is widened and multiplied in with two `SMLAD`s (CMSIS-NN's
//! `arm_nn_vec_mat_mult_t_s8` scheme). With the scratch the set states
//! ([`cortex_m_fc_scratch_bytes`]: the input widened once per call, in `SXTB16`'s order) a
//! step loads the input's two widened words with one `LDRD`, two steps a pass; with less, the
//! input is widened again for every pass. Output pairs share the two-lane epilogue.

use super::{
    instance, ldr_inc, smlad, tail_word, widen, word, Bounds, Clamp, Double, Epilogue, Full,
    Requant, Requant2, Round, Single,
};
use crate::kernels::{cortex_m_fc_scratch_bytes, scalar, FcParams, Rounding};

/// Output rows per pass: the input's widening is shared by this many rows, and their
/// accumulators and row pointers still fit in the core's registers ([`dot4`]).
const ROWS: usize = 4;

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
    // The input's whole groups of 4 widened: `SXTB16` (values 0, 2), `SXTB16 ROR #8` (1, 3).
    let widened = match scratch.len() >= cortex_m_fc_scratch_bytes(k) && groups > 0 {
        true => {
            // SAFETY: every bit pattern is a valid u32; the stated bytes count the 3 aligning
            // skips.
            let (_, words, _) = unsafe { scratch.align_to_mut::<u32>() };
            let xw = &mut words[..2 * groups];
            for (d, g) in xw.chunks_exact_mut(2).zip(x.chunks_exact(4)) {
                (d[0], d[1]) = widen(word(g));
            }
            Some(&*xw)
        }
        false => None,
    };
    let e = Epilogue::new(&p.out);
    // A per-tensor layer (TFLite's fully connected) has one requantization: decoded once.
    let q1 = Requant::<R>::new(p.multiplier.get(0), p.shift.get(0));
    let one = match p.per_tensor {
        true => Requant2::<R, C>::new([q1, q1], &e),
        false => None,
    };
    let mut j = 0;
    while j + ROWS <= n {
        let rows = &p.weights[j * k..][..ROWS * k];
        let bias = core::array::from_fn(|r| p.bias.get(j + r));
        let acc = match widened {
            Some(xw) => dot4_widened(bias, xw, x, rows),
            None => dot4(bias, x, rows),
        };
        if let Some(q2) = &one {
            output[j..j + 2].copy_from_slice(&q2.apply(acc[0], acc[1]));
            output[j + 2..j + 4].copy_from_slice(&q2.apply(acc[2], acc[3]));
            j += ROWS;
            continue;
        }
        for (i, (a, o)) in acc
            .chunks_exact(2)
            .zip(output[j..].chunks_exact_mut(2))
            .enumerate()
        {
            let c = j + 2 * i;
            let q = [c, c + 1].map(|c| Requant::<R>::new(p.multiplier.get(c), p.shift.get(c)));
            match Requant2::<R, C>::new(q, &e) {
                Some(q2) => o.copy_from_slice(&q2.apply(a[0], a[1])),
                None => {
                    o[0] = q[0].apply(a[0], &e);
                    o[1] = q[1].apply(a[1], &e);
                }
            }
        }
        j += ROWS;
    }
    while j < n {
        let [a] = dot([p.bias.get(j)], x, [&p.weights[j * k..][..k]]);
        output[j] = Requant::<R>::new(p.multiplier.get(j), p.shift.get(j)).apply(a, &e);
        j += 1;
    }
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
    use crate::kernels::test_util::{fc_extremes, fc_suite, FcData, FC_SHAPES};

    /// With the scratch the set states (the input widened once), and with none.
    fn run(p: &FcParams, x: &[i8], y: &mut [i8]) {
        let mut scratch = vec![0xA5u8; cortex_m_fc_scratch_bytes(p.k)];
        let mut without = y.to_vec();
        fully_connected(p, x, &mut without, &mut []);
        fully_connected(p, x, y, &mut scratch);
        assert_eq!(without, y, "without scratch");
    }

    fc_suite!(if true, run);

    /// Per-tensor layers (one multiplier and shift, decoded once) of the suite's shapes.
    #[test]
    fn per_tensor() {
        for (k, n) in FC_SHAPES {
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
}
