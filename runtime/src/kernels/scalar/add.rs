//! Requantizing residual add, scalar reference.

use crate::kernels::AddRequant;

/// `out[i] = p.apply(a[i], b[i])` (see [`AddRequant::apply`]).
pub fn add(p: &AddRequant, a: &[i8], b: &[i8], output: &mut [i8]) {
    for ((o, &x), &y) in output.iter_mut().zip(a).zip(b) {
        *o = p.apply(x, y);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::OutputQuant;

    #[test]
    fn halves_and_sums() {
        // m0 = m1 = 2^30, n = 31: each input scaled by 1/2.
        let p = AddRequant {
            z0: 0,
            m0: 1 << 30,
            z1: 2,
            m1: 1 << 30,
            n: 31,
            out: OutputQuant {
                zero_point: 1,
                act_min: 0,
                act_max: 127,
                rounding: crate::requant::Rounding::Single,
            },
        };
        let mut out = [0i8; 3];
        add(&p, &[4, -10, 127], &[6, 2, 127], &mut out);
        // (4 + 4)/2 + 1 = 5; (−10 + 0)/2 + 1 = −4 → clamp 0; (127 + 125)/2 + 1 = 127.
        assert_eq!(out, [5, 0, 127]);
    }
}
