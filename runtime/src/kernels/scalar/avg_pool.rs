//! avg_pool, scalar reference.

use crate::kernels::PoolParams;

/// `acc = Σ (q − z_in)` over each window (no padding: validation refuses it);
/// `out = clamp(requant(acc) + z_out)` with the multiplier representing s_in / (s_out·kh·kw).
pub fn avg_pool(p: &PoolParams, input: &[i8], output: &mut [i8]) {
    let (c, w) = (p.input.c, p.input.w);
    let (ho, wo) = (p.output.h, p.output.w);
    let g = &p.window;
    for oy in 0..ho {
        for ox in 0..wo {
            let out = &mut output[(oy * wo + ox) * c..][..c];
            for (ci, o) in out.iter_mut().enumerate() {
                let mut acc = 0i32;
                for ky in 0..g.kernel_h {
                    for kx in 0..g.kernel_w {
                        let iy = oy * g.stride_h + ky;
                        let ix = ox * g.stride_w + kx;
                        acc += input[(iy * w + ix) * c + ci] as i32 - p.input_zero_point;
                    }
                }
                *o = p.out.requantize(acc, p.multiplier, p.shift);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::test_util::{full_range, PoolCase};

    #[test]
    fn mean_of_four() {
        // 1 channel 2×2, z_in = 1, values 1,3,5,8 → Σ(q−1) = 13; m = 1/4 (M0 2^30, shift −1)
        // → 13/4 = 3.25 → 3; z_out = −2 → 1.
        let input = [1i8, 3, 5, 8];
        let p = PoolParams {
            input_zero_point: 1,
            multiplier: 1 << 30,
            shift: -1,
            out: full_range(-2),
            ..PoolCase::square(1, 2, 2, 2).params()
        };
        let mut out = [0i8; 1];
        avg_pool(&p, &input, &mut out);
        assert_eq!(out, [1]);
    }
}
