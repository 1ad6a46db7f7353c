//! fully_connected: [`ROWS`] output rows per pass share each widened word of the input; each
//! row's word is widened and multiplied in with two `SMLAD`s (CMSIS-NN's
//! `arm_nn_vec_mat_mult_t_s8` scheme). The op has no scratch, so the input is widened again
//! for every pass.

use super::{ldr_inc, smlad, tail_word, widen, Epilogue, Requant};
use crate::kernels::{scalar, FcParams};

/// Output rows per pass: the input's widening is shared by this many rows, and their
/// accumulators and row pointers still fit in the core's registers.
const ROWS: usize = 4;

/// Same bytes as [`scalar::fully_connected`].
pub fn fully_connected(p: &FcParams, input: &[i8], output: &mut [i8]) {
    let (k, n) = (p.k, p.n);
    // The epilogue is the single rounding's.
    if input.len() < k
        || output.len() < n
        || p.weights.len() < n * k
        || p.out.rounding != crate::requant::Rounding::Single
    {
        return scalar::fully_connected(p, input, output);
    }
    let x = &input[..k];
    let e = Epilogue::new(&p.out);
    let mut j = 0;
    while j + ROWS <= n {
        let w: [&[i8]; ROWS] = core::array::from_fn(|r| &p.weights[(j + r) * k..][..k]);
        let acc = dot(core::array::from_fn(|r| p.bias.get(j + r)), x, w);
        for (r, &a) in acc.iter().enumerate() {
            let q = Requant::new(p.multiplier.get(j + r), p.shift.get(j + r));
            output[j + r] = q.apply(a, &e);
        }
        j += ROWS;
    }
    while j < n {
        let [a] = dot([p.bias.get(j)], x, [&p.weights[j * k..][..k]]);
        output[j] = Requant::new(p.multiplier.get(j), p.shift.get(j)).apply(a, &e);
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
    let tail = 4 * groups;
    if tail < x.len() {
        let (xa, xb) = widen(tail_word(&x[tail..]));
        for (a, row) in acc.iter_mut().zip(w) {
            let (wa, wb) = widen(tail_word(&row[tail..]));
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
