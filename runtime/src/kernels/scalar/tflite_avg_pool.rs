//! tflite_avg_pool, scalar reference: TensorFlow Lite's int8 AVERAGE_POOL_2D.

use crate::kernels::PoolParams;

/// For each window, the sum of its taps inside the input (padding is skipped) divided by their
/// count, rounded half away from zero (`(sum ± count/2) / count`, C's truncating division), then
/// the clamp; input and output share one quantization, so no requantization.
pub fn tflite_avg_pool(p: &PoolParams, input: &[i8], output: &mut [i8]) {
    let (c, h, w) = (p.input.c, p.input.h, p.input.w);
    let (ho, wo) = (p.output.h, p.output.w);
    let g = &p.window;
    for oy in 0..ho {
        let rows = PoolParams::taps(oy, g.stride_h, g.pad_top, g.kernel_h, h);
        for ox in 0..wo {
            let cols = PoolParams::taps(ox, g.stride_w, g.pad_left, g.kernel_w, w);
            let count = (rows.len() * cols.len()) as i32;
            let out = &mut output[(oy * wo + ox) * c..][..c];
            for (ci, o) in out.iter_mut().enumerate() {
                let mut sum = 0i32;
                for iy in rows.clone() {
                    for ix in cols.clone() {
                        sum += input[(iy * w + ix) * c + ci] as i32;
                    }
                }
                // Validation keeps every window's count ≥ 1.
                let count = count.max(1);
                let avg = if sum > 0 {
                    (sum + count / 2) / count
                } else {
                    (sum - count / 2) / count
                };
                *o = p.out.clamp64(avg as i64);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::test_util::full_range;
    use crate::kernels::{Placement, Shape};

    #[test]
    fn rounds_half_away_and_counts_only_inside_taps() {
        // 1 channel 2×2 [1, 2, −3, −4], 2×2 windows, stride 1, SAME (pad bottom/right 1):
        // (1+2−3−4)/4 = −1; (2−4)/2 = −1; (−3−4)/2 = −3.5 → −4; −4.
        let input = [1i8, 2, -3, -4];
        let p = PoolParams {
            input: Shape { c: 1, h: 2, w: 2 },
            output: Shape { c: 1, h: 2, w: 2 },
            window: Placement::square(2, 1, 0),
            input_zero_point: 0,
            multiplier: 0,
            shift: 0,
            out: full_range(0),
        };
        let mut out = [0i8; 4];
        tflite_avg_pool(&p, &input, &mut out);
        assert_eq!(out, [-1, -1, -4, -4]);
        // 5/2 = 2.5 → 3.
        let mut one = [0i8; 1];
        let p1 = PoolParams {
            input: Shape { c: 1, h: 1, w: 2 },
            output: Shape { c: 1, h: 1, w: 1 },
            window: Placement {
                kernel_h: 1,
                ..Placement::square(2, 2, 0)
            },
            ..p
        };
        tflite_avg_pool(&p1, &[2, 3], &mut one);
        assert_eq!(one, [3]);
    }
}
