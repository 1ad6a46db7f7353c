//! fully_connected, NEON: 4 output rows per pass sharing each loaded input vector, their 4
//! sums requantized in one vector.

use core::arch::aarch64::*;

use super::{dot_tile, Epilogue, Requant4, Tail};
use crate::kernels::{scalar, FcParams};

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
                4 => rows::<DOT, 4>(p, x, j, &e, &tail, output),
                3 => rows::<DOT, 3>(p, x, j, &e, &tail, output),
                2 => rows::<DOT, 2>(p, x, j, &e, &tail, output),
                _ => rows::<DOT, 1>(p, x, j, &e, &tail, output),
            }
        }
        j += nc;
    }
}

/// Outputs `j..j + NC`.
#[inline(always)]
unsafe fn rows<const DOT: bool, const NC: usize>(
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
    let q = Requant4::new(&p.bias, &p.multiplier, &p.shift, j, NC);
    let b = q.apply(s, e);
    output[j..j + NC].copy_from_slice(&b[..NC]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::test_util::{fc_matches_scalar, Rng, FC_SHAPES};
    use crate::kernels::{I32Array, Kernels, OutputQuant};
    use proptest::prelude::*;

    /// Both inner products against the scalar reference: plain NEON always, SDOT when the CPU
    /// has it.
    fn check(k: usize, n: usize, seed: u64) {
        assert!(Kernels::neon_available());
        let mut rng = Rng(seed | 1);
        let x = rng.i8s(k, -128, 127);
        let weights = rng.i8s(n * k, -127, 127);
        let bias = rng.i32s(n, -(1 << 20), 1 << 20);
        let mult = rng.i32s(n, 1 << 30, i32::MAX as i64);
        let shift = if rng.next().is_multiple_of(4) {
            rng.i32s(n, -31, 30)
        } else {
            rng.i32s(n, -18, -2)
        };
        let zo = rng.range(-128, 127) as i32;
        let (lo, hi) = if rng.next().is_multiple_of(2) {
            (zo.max(-128), 127)
        } else {
            (rng.range(-128, 0) as i32, rng.range(0, 127) as i32)
        };
        let p = FcParams {
            k,
            n,
            weights: &weights,
            bias: I32Array::new(&bias),
            multiplier: I32Array::new(&mult),
            shift: I32Array::new(&shift),
            out: OutputQuant {
                zero_point: zo,
                act_min: lo,
                act_max: hi,
            },
        };
        let mut want = vec![0i8; n];
        scalar::fully_connected(&p, &x, &mut want);
        let mut got = vec![0x55i8; n];
        unsafe { fully_connected(&p, &x, &mut got) };
        assert_eq!(want, got, "neon k {k} n {n}");
        if Kernels::dotprod_available() {
            let mut got = vec![0x55i8; n];
            unsafe { fully_connected_dot(&p, &x, &mut got) };
            assert_eq!(want, got, "dotprod k {k} n {n}");
        }
    }

    #[test]
    fn fixed_shapes() {
        for &(k, n) in &[
            (400, 120),
            (120, 84),
            (84, 10),
            (512, 10),
            (1, 1),
            (17, 5),
            (65_536, 3),
        ] {
            check(k, n, k as u64);
        }
    }

    /// The shared fc suite's shapes, both inner products.
    #[test]
    fn shared_shapes() {
        assert!(Kernels::neon_available());
        for (k, n) in FC_SHAPES {
            // SAFETY: NEON checked above.
            fc_matches_scalar(k, n, 7 + k as u64, &mut |p, x, y| unsafe {
                fully_connected(p, x, y)
            });
            if Kernels::dotprod_available() {
                // SAFETY: dotprod checked.
                fc_matches_scalar(k, n, 9 + k as u64, &mut |p, x, y| unsafe {
                    fully_connected_dot(p, x, y)
                });
            }
        }
    }

    /// Extreme accumulators: every product at its largest (−128·−127, and −128·−128 which
    /// validated models never hold), K = 65 536 (the exporter's limit), so the sums sit near
    /// 2^30 (wrapping with the bias) and the i16 products at their bound.
    #[test]
    fn extreme_products() {
        let k = 65_536;
        let x = vec![-128i8; k];
        let mut weights = vec![-127i8; k];
        weights.resize(2 * k, -128);
        let bias: Vec<u8> = [i32::MAX, -5]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let mult: Vec<u8> = [i32::MAX, 1 << 30]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let shift: Vec<u8> = [-31i32, 30].iter().flat_map(|v| v.to_le_bytes()).collect();
        let p = FcParams {
            k,
            n: 2,
            weights: &weights,
            bias: I32Array::new(&bias),
            multiplier: I32Array::new(&mult),
            shift: I32Array::new(&shift),
            out: OutputQuant {
                zero_point: 3,
                act_min: -128,
                act_max: 127,
            },
        };
        let mut want = [0i8; 2];
        scalar::fully_connected(&p, &x, &mut want);
        let mut got = [0i8; 2];
        unsafe { fully_connected(&p, &x, &mut got) };
        assert_eq!(want, got);
        if Kernels::dotprod_available() {
            unsafe { fully_connected_dot(&p, &x, &mut got) };
            assert_eq!(want, got);
        }
    }

    proptest! {
        #[test]
        fn neon_equals_scalar(k in 1usize..300, n in 1usize..20, seed in any::<u64>()) {
            check(k, n, seed);
        }
    }
}
