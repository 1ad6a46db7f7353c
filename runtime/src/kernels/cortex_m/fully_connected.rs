//! fully_connected: [`ROWS`] output rows per pass share each widened word of the input; each
//! row's word is widened and multiplied in with two `SMLAD`s (CMSIS-NN's
//! `arm_nn_vec_mat_mult_t_s8` scheme). The op has no scratch, so the input is widened again
//! for every pass.

use super::{ldr_inc, smlad, tail_word, widen, Double, Epilogue, Requant, Round, Single};
use crate::kernels::{scalar, FcParams, Rounding};

/// Output rows per pass: the input's widening is shared by this many rows, and their
/// accumulators and row pointers still fit in the core's registers ([`dot4`]).
const ROWS: usize = 4;

/// Same bytes as [`scalar::fully_connected`].
pub fn fully_connected(p: &FcParams, input: &[i8], output: &mut [i8]) {
    match p.out.rounding {
        Rounding::Single => fc::<Single>(p, input, output),
        Rounding::Double => fc::<Double>(p, input, output),
    }
}

/// The layer with the epilogue of rounding `R` (the op's).
fn fc<R: Round>(p: &FcParams, input: &[i8], output: &mut [i8]) {
    let (k, n) = (p.k, p.n);
    if input.len() < k || output.len() < n || p.weights.len() < n * k {
        return scalar::fully_connected(p, input, output);
    }
    let x = &input[..k];
    let e = Epilogue::new(&p.out);
    let mut j = 0;
    while j + ROWS <= n {
        let rows = &p.weights[j * k..][..ROWS * k];
        let acc = dot4(core::array::from_fn(|r| p.bias.get(j + r)), x, rows);
        for (r, &a) in acc.iter().enumerate() {
            let q = Requant::<R>::new(p.multiplier.get(j + r), p.shift.get(j + r));
            output[j + r] = q.apply(a, &e);
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
    let [mut a0, mut a1, mut a2, mut a3] = *acc;
    let end = x.wrapping_add(4 * groups);
    // SAFETY: the caller's guarantee; the stack word pushed is popped before the end.
    unsafe {
        core::arch::asm!(
            "str {t}, [sp, #-8]!",
            "2:",
            "ldr {t}, [{x}], #4",
            "sxtb16 {xa}, {t}",
            "sxtb16 {xb}, {t}, ror #8",
            "ldr {t}, [{w0}, {k}]",
            "sxtb16 {t2}, {t}",
            "smlad {a1}, {t2}, {xa}, {a1}",
            "sxtb16 {t}, {t}, ror #8",
            "smlad {a1}, {t}, {xb}, {a1}",
            "ldr {t}, [{w0}], #4",
            "sxtb16 {t2}, {t}",
            "smlad {a0}, {t2}, {xa}, {a0}",
            "sxtb16 {t}, {t}, ror #8",
            "smlad {a0}, {t}, {xb}, {a0}",
            "ldr {t}, [{w2}, {k}]",
            "sxtb16 {t2}, {t}",
            "smlad {a3}, {t2}, {xa}, {a3}",
            "sxtb16 {t}, {t}, ror #8",
            "smlad {a3}, {t}, {xb}, {a3}",
            "ldr {t}, [{w2}], #4",
            "sxtb16 {t2}, {t}",
            "smlad {a2}, {t2}, {xa}, {a2}",
            "sxtb16 {t}, {t}, ror #8",
            "smlad {a2}, {t}, {xb}, {a2}",
            "ldr {t}, [sp]",
            "cmp {x}, {t}",
            "bne 2b",
            "add sp, sp, #8",
            x = inout(reg) x => _,
            w0 = inout(reg) w => _,
            w2 = inout(reg) w.wrapping_add(2 * k) => _,
            k = in(reg) k,
            t = inout(reg) end => _,
            t2 = out(reg) _,
            xa = out(reg) _,
            xb = out(reg) _,
            a0 = inout(reg) a0,
            a1 = inout(reg) a1,
            a2 = inout(reg) a2,
            a3 = inout(reg) a3,
        );
    }
    *acc = [a0, a1, a2, a3];
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
    use crate::kernels::test_util::{fc_extremes, fc_suite};

    fc_suite!(if true, |p, x, y| fully_connected(p, x, y));

    #[test]
    fn extremes() {
        fc_extremes(&mut |p, x, y| fully_connected(p, x, y));
    }
}
