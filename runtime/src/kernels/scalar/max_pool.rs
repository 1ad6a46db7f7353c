//! max_pool, scalar reference.

use crate::kernels::PoolParams;

/// Maximum over each kh×kw window's taps inside the input (padding is skipped, as TFLite's
/// MAX_POOL_2D does), then the clamp.
pub fn max_pool(p: &PoolParams, input: &[i8], output: &mut [i8]) {
    let (c, h, w) = (p.input.c, p.input.h, p.input.w);
    let (ho, wo) = (p.output.h, p.output.w);
    let g = &p.window;
    for oy in 0..ho {
        let rows = PoolParams::taps(oy, g.stride_h, g.pad_top, g.kernel_h, h);
        for ox in 0..wo {
            let cols = PoolParams::taps(ox, g.stride_w, g.pad_left, g.kernel_w, w);
            let out = &mut output[(oy * wo + ox) * c..][..c];
            out.fill(i8::MIN);
            for iy in rows.clone() {
                for ix in cols.clone() {
                    let xi = &input[(iy * w + ix) * c..][..c];
                    for (o, &x) in out.iter_mut().zip(xi) {
                        *o = (*o).max(x);
                    }
                }
            }
            for o in out.iter_mut() {
                *o = p.out.clamp64(*o as i64);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::test_util::{full_range, PoolCase};
    use crate::kernels::{Placement, Shape};

    #[test]
    fn two_by_two() {
        // 2 channels, 2×2 → 1×1.
        let input = [1i8, -5, 7, -6, -3, -7, 2, -8];
        let mut out = [0i8; 2];
        max_pool(&PoolCase::square(2, 2, 2, 2).params(), &input, &mut out);
        assert_eq!(out, [7, -5]);
    }

    /// SAME padding: the windows at the edges take the maximum of their taps inside the input.
    #[test]
    fn padded_windows_skip_the_padding() {
        // 1 channel 3×3, values −9..−1, 2×2 windows, stride 2, pad bottom/right 1: out 2×2.
        let input: Vec<i8> = (-9..0).collect();
        let p = PoolParams {
            input: Shape { c: 1, h: 3, w: 3 },
            output: Shape { c: 1, h: 2, w: 2 },
            window: Placement::square(2, 2, 0),
            input_zero_point: 0,
            multiplier: 0,
            shift: 0,
            out: full_range(0),
        };
        let mut out = [0i8; 4];
        max_pool(&p, &input, &mut out);
        assert_eq!(out, [-5, -4, -2, -1]);
    }
}
