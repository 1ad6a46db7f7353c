//! conv2d, scalar reference.

use crate::kernels::ConvParams;

/// `out[oy][ox][co] = clamp(requant(bias[co] + Σ x·w) + z_out)` over HWC input and OHWI
/// weights, tap (ky, kx) of output pixel (oy, ox) at input row `oy·stride_h − pad_top +
/// ky·dilation_h` (columns likewise); padded taps read `p.pad_value(ci)`. The accumulator is
/// wrapping i32 (validation guarantees it never wraps). Slices must match the shapes in `p`.
pub fn conv2d(p: &ConvParams, input: &[i8], output: &mut [i8]) {
    let (cin, h, w) = (p.input.c, p.input.h as isize, p.input.w as isize);
    let (cout, ho, wo) = (p.output.c, p.output.h, p.output.w);
    let (kh, kw) = (p.window.kernel_h, p.window.kernel_w);
    let (sh, sw, dh, dw) = (
        p.window.stride_h,
        p.window.stride_w,
        p.window.dilation_h,
        p.window.dilation_w,
    );
    let (pt, pl) = (p.window.pad_top as isize, p.window.pad_left as isize);
    let k = p.k();
    for oy in 0..ho {
        for ox in 0..wo {
            let out = &mut output[(oy * wo + ox) * cout..][..cout];
            for (co, o) in out.iter_mut().enumerate() {
                let wrow = &p.weights[co * k..][..k];
                let mut acc = p.bias.get(co);
                for ky in 0..kh {
                    let iy = (oy * sh + ky * dh) as isize - pt;
                    for kx in 0..kw {
                        let ix = (ox * sw + kx * dw) as isize - pl;
                        let wk = &wrow[(ky * kw + kx) * cin..][..cin];
                        if iy >= 0 && iy < h && ix >= 0 && ix < w {
                            let xi = &input[((iy * w + ix) as usize) * cin..][..cin];
                            for (&x, &wv) in xi.iter().zip(wk) {
                                acc = acc.wrapping_add(x as i32 * wv as i32);
                            }
                        } else {
                            for (ci, &wv) in wk.iter().enumerate() {
                                acc = acc.wrapping_add(p.pad_value(ci) as i32 * wv as i32);
                            }
                        }
                    }
                }
                *o = p.out.requantize(acc, p.multiplier.get(co), p.shift.get(co));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::test_util::{full_range, i32_bytes, ConvCase, ConvData, LayerData};

    #[test]
    fn hand_computed_3x3_pad1() {
        // 1 input channel 2×2, 1 output channel, 3×3 kernel of ones, pad 1 with pad value 1,
        // bias 10, m = 0.5 (M0 = 2^30, shift 0), z_out = 3.
        let mut d = ConvData::typical(&ConvCase::square(1, 1, 2, 3, 1, 1, 0)).unwrap();
        d.input = vec![1, 2, 3, 4];
        d.layer = LayerData {
            weights: vec![1; 9],
            bias: i32_bytes(&[10]),
            mult: i32_bytes(&[1 << 30]),
            shift: i32_bytes(&[0]),
            out: full_range(3),
        };
        (d.pads, d.input_zero_point) = (vec![1], 0);
        let mut out = [0i8; 4];
        conv2d(&d.params(), &d.input, &mut out);
        // Every output sees all 4 inputs (sum 10) and 5 pad taps (value 1): acc = 10 + 10 + 5 = 25,
        // requant(25 · 0.5) = 13 (12.5 rounds half up), + 3 = 16.
        assert_eq!(out, [16; 4]);
    }
}

#[cfg(test)]
mod placement_tests {
    use super::*;
    use crate::kernels::test_util::{full_range, i32_bytes};
    use crate::kernels::{I32Array, Placement, Shape};

    /// Asymmetric padding (TFLite's SAME with an odd total), two strides and a dilation, against
    /// a sum written out by hand.
    #[test]
    fn asymmetric_pad_strides_dilation() {
        // 1 channel 4×5 input 0..20, 2×2 kernel of ones dilated by 2 vertically, strides (2, 3),
        // pad top 1, left 0: output 2×2 (rows −1 and 1 start windows reading rows {−1, 1} and
        // {1, 3}; columns 0 and 3 read {0, 1} and {3, 4}). Pad value 100, bias 0, m = 1.
        let input: Vec<i8> = (0..20).collect();
        let (weights, one) = ([1i8; 4], i32_bytes(&[1 << 30]));
        let (bias, shift) = (i32_bytes(&[0]), i32_bytes(&[1]));
        let p = ConvParams {
            input: Shape { c: 1, h: 4, w: 5 },
            output: Shape { c: 1, h: 2, w: 2 },
            window: Placement {
                kernel_h: 2,
                kernel_w: 2,
                stride_h: 2,
                stride_w: 3,
                pad_top: 1,
                pad_left: 0,
                dilation_h: 2,
                dilation_w: 1,
            },
            weights: &weights,
            bias: I32Array::new(&bias),
            multiplier: I32Array::new(&one),
            shift: I32Array::new(&shift),
            pad_values: &[100],
            input_zero_point: 0,
            out: full_range(0),
            packed: crate::kernels::Packed::NONE,
        };
        assert!(!p.is_uniform());
        let mut out = [0i8; 4];
        conv2d(&p, &input, &mut out);
        let at = |y: usize, x: usize| (y * 5 + x) as i32;
        let want = [
            100 + 100 + at(1, 0) + at(1, 1),
            100 + 100 + at(1, 3) + at(1, 4),
            at(1, 0) + at(1, 1) + at(3, 0) + at(3, 1),
            at(1, 3) + at(1, 4) + at(3, 3) + at(3, 4),
        ];
        assert_eq!(out.map(i32::from), want.map(|v: i32| v.min(127)));
    }
}
