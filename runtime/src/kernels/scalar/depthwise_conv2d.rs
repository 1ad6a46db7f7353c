//! depthwise_conv2d, scalar reference.

use crate::kernels::DepthwiseParams;

/// `out[oy][ox][oc] = clamp(requant(bias[oc] + Σ x[ic]·w[ky][kx][oc]) + z_out)` with
/// ic = oc / depth_multiplier, over the window's taps (placed as in `conv2d`); padded taps read
/// the input zero point. Wrapping i32 accumulator (validation bounds it).
pub fn depthwise_conv2d(p: &DepthwiseParams, input: &[i8], output: &mut [i8]) {
    let (cin, h, w) = (p.input.c, p.input.h as isize, p.input.w as isize);
    let (cout, ho, wo) = (p.output.c, p.output.h, p.output.w);
    let g = &p.window;
    let dm = p.depth_multiplier.max(1);
    let pad = p.input_zero_point.clamp(-128, 127);
    for oy in 0..ho {
        for ox in 0..wo {
            let out = &mut output[(oy * wo + ox) * cout..][..cout];
            for (oc, o) in out.iter_mut().enumerate() {
                let ic = oc / dm;
                let mut acc = p.bias.get(oc);
                for ky in 0..g.kernel_h {
                    let iy = (oy * g.stride_h + ky * g.dilation_h) as isize - g.pad_top as isize;
                    for kx in 0..g.kernel_w {
                        let ix =
                            (ox * g.stride_w + kx * g.dilation_w) as isize - g.pad_left as isize;
                        let x = if iy >= 0 && iy < h && ix >= 0 && ix < w {
                            input[(iy * w + ix) as usize * cin + ic] as i32
                        } else {
                            pad
                        };
                        let wv = p.weights[(ky * g.kernel_w + kx) * cout + oc] as i32;
                        acc = acc.wrapping_add(x * wv);
                    }
                }
                *o = p.out.requantize(acc, p.multiplier.get(oc), p.shift.get(oc));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::test_util::{full_range, i32_bytes};
    use crate::kernels::{I32Array, Placement, Shape};

    /// Two input channels, depth multiplier 2, a 3×3 window with SAME padding on a 2×2 input:
    /// every output sums its channel's four inputs and five pad taps, weighted per channel.
    #[test]
    fn hand_computed_depth_multiplier_2() {
        let input = [1i8, 10, 2, 20, 3, 30, 4, 40]; // HWC, channels (1..4, 10..40)
        let mut weights = [0i8; 9 * 4];
        for (t, w) in weights.chunks_exact_mut(4).enumerate() {
            w.copy_from_slice(&[1, 2, if t == 4 { 1 } else { 0 }, -1]);
        }
        let (bias, m, s) = (
            i32_bytes(&[0, 0, 5, 0]),
            i32_bytes(&[1 << 30; 4]),
            i32_bytes(&[1; 4]),
        );
        let p = DepthwiseParams {
            input: Shape { c: 2, h: 2, w: 2 },
            output: Shape { c: 4, h: 2, w: 2 },
            window: Placement::square(3, 1, 1),
            depth_multiplier: 2,
            weights: &weights,
            bias: I32Array::new(&bias),
            multiplier: I32Array::new(&m),
            shift: I32Array::new(&s),
            input_zero_point: -1,
            out: full_range(0),
            packed: crate::kernels::Packed::NONE,
        };
        let mut out = [0i8; 16];
        depthwise_conv2d(&p, &input, &mut out);
        // Channel 0 (ic 0, w 1): 1+2+3+4 + 5 pad taps of −1 = 5; channel 1 (ic 0, w 2): 10;
        // channel 2 (ic 1, centre tap only, +5 bias): x + 5; channel 3 (ic 1, w −1): −100 + 5.
        for (px, o) in out.chunks_exact(4).enumerate() {
            assert_eq!(o, [5, 10, [10, 20, 30, 40][px] + 5, -95], "pixel {px}");
        }
    }
}
