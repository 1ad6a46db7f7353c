//! fully_connected, NEON: 4 output rows per pass sharing each loaded input vector, their 4
//! sums requantized in one vector.

use core::arch::aarch64::*;

use super::{dot_tile, Double4, Epilogue, Requant4, Single4, Tail};
use crate::kernels::{scalar, FcParams, Rounding};

/// Same bytes as [`scalar::fully_connected`], plain NEON (no `dotprod`).
///
/// # Safety
/// The CPU must support NEON.
#[target_feature(enable = "neon")]
pub unsafe fn fully_connected(p: &FcParams, input: &[i8], output: &mut [i8]) {
    // SAFETY: NEON is enabled here; DOT = false needs nothing more.
    unsafe { fc::<false>(p, input, output) }
}

/// [`fully_connected`] with `SDOT`.
///
/// # Safety
/// The CPU must support NEON and `dotprod`.
#[target_feature(enable = "neon,dotprod")]
pub unsafe fn fully_connected_dot(p: &FcParams, input: &[i8], output: &mut [i8]) {
    // SAFETY: NEON and dotprod are enabled here.
    unsafe { fc::<true>(p, input, output) }
}

#[inline(always)]
unsafe fn fc<const DOT: bool>(p: &FcParams, input: &[i8], output: &mut [i8]) {
    // SAFETY (both): the caller's target features (NEON, dotprod when DOT).
    match p.out.rounding {
        Rounding::Single => unsafe { fc_q::<DOT, Single4>(p, input, output) },
        Rounding::Double => unsafe { fc_q::<DOT, Double4>(p, input, output) },
    }
}

/// The layer with the epilogue `Q` (the op's rounding).
///
/// # Safety
/// NEON, and `dotprod` when `DOT`.
#[inline(always)]
unsafe fn fc_q<const DOT: bool, Q: Requant4>(p: &FcParams, input: &[i8], output: &mut [i8]) {
    let (k, n) = (p.k, p.n);
    if input.len() < k || output.len() < n || p.weights.len() < n * k {
        return scalar::fully_connected(p, input, output);
    }
    let x = &input[..k];
    let e = Epilogue::new(&p.out);
    let tail = Tail::new(k);
    let mut j = 0;
    while j < n {
        let nc = (n - j).min(4);
        // SAFETY: the caller's target features (NEON, dotprod when DOT).
        unsafe {
            match nc {
                4 => rows::<DOT, 4, Q>(p, x, j, &e, &tail, output),
                3 => rows::<DOT, 3, Q>(p, x, j, &e, &tail, output),
                2 => rows::<DOT, 2, Q>(p, x, j, &e, &tail, output),
                _ => rows::<DOT, 1, Q>(p, x, j, &e, &tail, output),
            }
        }
        j += nc;
    }
}

/// Outputs `j..j + NC`.
#[inline(always)]
unsafe fn rows<const DOT: bool, const NC: usize, Q: Requant4>(
    p: &FcParams,
    x: &[i8],
    j: usize,
    e: &Epilogue,
    tail: &Tail,
    output: &mut [i8],
) {
    let k = p.k;
    let w: [&[i8]; NC] = core::array::from_fn(|c| &p.weights[(j + c) * k..][..k]);
    let wtail: [int8x16_t; NC] = core::array::from_fn(|c| tail.load(w[c]));
    // SAFETY: the caller's target features; `x` holds exactly k values (its tail goes
    // through `tail`).
    let [s] = unsafe { dot_tile::<DOT, 1, NC>([x], w, &wtail, tail, k) };
    let q = Q::new(&(p.bias, p.multiplier, p.shift), j, NC, e);
    let b = q.apply(s, e);
    output[j..j + NC].copy_from_slice(&b[..NC]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::test_util::{fc_extremes, fc_matches_scalar, fc_suite, FcKernel};
    use crate::kernels::Kernels;

    /// Both inner products against the scalar reference: plain NEON always, SDOT when the CPU
    /// has it.
    fn both(test: &dyn Fn(&mut FcKernel)) {
        assert!(Kernels::neon_available());
        // SAFETY: NEON checked above.
        test(&mut |p, x, y| unsafe { fully_connected(p, x, y) });
        if Kernels::dotprod_available() {
            // SAFETY: dotprod checked.
            test(&mut |p, x, y| unsafe { fully_connected_dot(p, x, y) });
        }
    }

    fn check(k: usize, n: usize, seed: u64) {
        both(&|f| fc_matches_scalar(k, n, seed, f));
    }

    fc_suite!(check);

    #[test]
    fn extremes() {
        both(&|f| fc_extremes(f));
    }
}
