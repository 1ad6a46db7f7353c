//! fully_connected, scalar reference.

use crate::kernels::FcParams;

/// `out[n] = clamp(requant(bias[n] + Σ_k x[k]·w[n][k]) + z_out)`, wrapping i32 accumulator.
pub fn fully_connected(p: &FcParams, input: &[i8], output: &mut [i8]) {
    let x = &input[..p.k];
    for (n, o) in output[..p.n].iter_mut().enumerate() {
        let wrow = &p.weights[n * p.k..][..p.k];
        let mut acc = p.bias.get(n);
        for (&xv, &wv) in x.iter().zip(wrow) {
            acc = acc.wrapping_add(xv as i32 * wv as i32);
        }
        *o = p.out.requantize(acc, p.multiplier.get(n), p.shift.get(n));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::test_util::{full_range, i32_bytes, FcData, LayerData};

    #[test]
    fn hand_computed() {
        let layer = LayerData {
            weights: vec![1, 1, 1, 2, 0, -1],
            bias: i32_bytes(&[5, -1]),
            mult: i32_bytes(&[1 << 30; 2]),
            shift: i32_bytes(&[1, 0]),
            out: full_range(-1),
        };
        let d = FcData {
            x: vec![1, -2, 3],
            layer,
        };
        let mut out = [0i8; 2];
        fully_connected(&d.params(), &d.x, &mut out);
        // n0: 5 + 2 = 7, m = 1 → 7 − 1 = 6; n1: −1 + 2 − 3 = −2, m = 0.5 → −1 − 1 = −2.
        assert_eq!(out, [6, -2]);
    }
}
