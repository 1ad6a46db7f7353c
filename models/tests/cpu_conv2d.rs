//! candle's CPU convolution (the vendored `conv2d_tiled`, which octet patched to build its
//! im2col tiles straight from the strided input: vendor/candle-core/PATCH.md) against a plain
//! f64 loop, over kernel sizes, strides, padding, dilation and non-contiguous inputs.

use candle_core::{Device, Tensor};
use proptest::prelude::*;

struct Case {
    n: usize,
    c_in: usize,
    c_out: usize,
    h: usize,
    w: usize,
    k: usize,
    stride: usize,
    padding: usize,
    dilation: usize,
    /// The input is a transposed view (strides not NCHW-contiguous).
    strided: bool,
}

/// out[n][o][y][x] = Σ_c,i,j in[n][c][y·s − p + i·d][x·s − p + j·d] · w[o][c][i][j], in f64.
fn reference(c: &Case, input: &[f32], weight: &[f32]) -> (Vec<f64>, usize, usize) {
    let span = c.dilation * (c.k - 1) + 1;
    let oh = (c.h + 2 * c.padding - span) / c.stride + 1;
    let ow = (c.w + 2 * c.padding - span) / c.stride + 1;
    let mut out = vec![0f64; c.n * c.c_out * oh * ow];
    for n in 0..c.n {
        for o in 0..c.c_out {
            for y in 0..oh {
                for x in 0..ow {
                    let mut acc = 0f64;
                    for ci in 0..c.c_in {
                        for i in 0..c.k {
                            for j in 0..c.k {
                                let iy =
                                    (y * c.stride + i * c.dilation) as isize - c.padding as isize;
                                let ix =
                                    (x * c.stride + j * c.dilation) as isize - c.padding as isize;
                                if iy < 0 || ix < 0 || iy >= c.h as isize || ix >= c.w as isize {
                                    continue;
                                }
                                let v = input
                                    [((n * c.c_in + ci) * c.h + iy as usize) * c.w + ix as usize];
                                let wv = weight[((o * c.c_in + ci) * c.k + i) * c.k + j];
                                acc += v as f64 * wv as f64;
                            }
                        }
                    }
                    out[((n * c.c_out + o) * oh + y) * ow + x] = acc;
                }
            }
        }
    }
    (out, oh, ow)
}

fn values(len: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

fn check(c: &Case, seed: u64) -> Result<(), TestCaseError> {
    let input = values(c.n * c.c_in * c.h * c.w, seed);
    let weight = values(c.c_out * c.c_in * c.k * c.k, seed + 1);
    let (want, oh, ow) = reference(c, &input, &weight);
    let dev = Device::Cpu;
    let x = if c.strided {
        // The same NCHW values held as NHWC and viewed back: a non-contiguous layout.
        let nhwc: Vec<f32> = (0..c.n * c.h * c.w * c.c_in)
            .map(|i| {
                let (ch, rest) = (i % c.c_in, i / c.c_in);
                let (xx, rest) = (rest % c.w, rest / c.w);
                let (yy, n) = (rest % c.h, rest / c.h);
                input[((n * c.c_in + ch) * c.h + yy) * c.w + xx]
            })
            .collect();
        Tensor::from_vec(nhwc, (c.n, c.h, c.w, c.c_in), &dev)
            .unwrap()
            .permute((0, 3, 1, 2))
            .unwrap()
    } else {
        Tensor::from_vec(input, (c.n, c.c_in, c.h, c.w), &dev).unwrap()
    };
    // One input channel or one pixel: the view is contiguous anyway (candle ignores the
    // strides of size-1 dimensions).
    prop_assert_eq!(
        x.is_contiguous(),
        !c.strided || c.c_in == 1 || c.h * c.w == 1
    );
    let w = Tensor::from_vec(weight, (c.c_out, c.c_in, c.k, c.k), &dev).unwrap();
    let y = x.conv2d(&w, c.padding, c.stride, c.dilation, 1).unwrap();
    prop_assert_eq!(y.dims(), &[c.n, c.c_out, oh, ow]);
    let got = y.flatten_all().unwrap().to_vec1::<f32>().unwrap();
    let bound = (c.c_in * c.k * c.k) as f64 * 1e-6;
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        prop_assert!(
            (*g as f64 - w).abs() <= bound,
            "output {i}: candle {g}, reference {w}"
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]
    #[test]
    fn cpu_conv2d_matches_a_plain_loop(
        n in 1usize..3, c_in in 1usize..6, c_out in 1usize..6, h in 1usize..12, w in 1usize..12,
        k in 2usize..6, stride in 1usize..4, padding in 0usize..3, dilation in 1usize..3,
        strided: bool, seed: u64,
    ) {
        let c = Case { n, c_in, c_out, h, w, k, stride, padding, dilation, strided };
        let span = dilation * (k - 1) + 1;
        prop_assume!(h + 2 * padding >= span && w + 2 * padding >= span);
        check(&c, seed)?;
    }
}

/// The shapes the networks use: ResNet-18's 3×3 convolutions (stride 1 and 2, padding 1) and
/// LeNet's 5×5, with more channels than the property explores.
#[test]
fn cpu_conv2d_network_shapes() {
    for (c_in, c_out, hw, k, stride, padding) in [
        (3, 64, 32, 3, 1, 1),
        (64, 128, 16, 3, 2, 1),
        (1, 6, 28, 5, 1, 2),
        (6, 16, 14, 5, 1, 0),
    ] {
        for strided in [false, true] {
            let c = Case {
                n: 2,
                c_in,
                c_out,
                h: hw,
                w: hw,
                k,
                stride,
                padding,
                dilation: 1,
                strided,
            };
            check(&c, 7).unwrap();
        }
    }
}
