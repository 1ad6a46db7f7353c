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
    use crate::kernels::{I32Array, OutputQuant};

    #[test]
    fn hand_computed() {
        let x = [1i8, -2, 3];
        let w = [1i8, 1, 1, 2, 0, -1];
        let bias: Vec<u8> = [5i32, -1].iter().flat_map(|v| v.to_le_bytes()).collect();
        let m0: Vec<u8> = [1i32 << 30; 2]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let sh: Vec<u8> = [1i32, 0].iter().flat_map(|v| v.to_le_bytes()).collect();
        let p = FcParams {
            k: 3,
            n: 2,
            weights: &w,
            bias: I32Array::new(&bias),
            multiplier: I32Array::new(&m0),
            shift: I32Array::new(&sh),
            out: OutputQuant {
                zero_point: -1,
                act_min: -128,
                act_max: 127,
            },
        };
        let mut out = [0i8; 2];
        fully_connected(&p, &x, &mut out);
        // n0: 5 + 2 = 7, m = 1 → 7 − 1 = 6; n1: −1 + 2 − 3 = −2, m = 0.5 → −1 − 1 = −2.
        assert_eq!(out, [6, -2]);
    }
}
