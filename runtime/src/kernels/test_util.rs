//! Backend-neutral test helpers: every SIMD backend's conv (AVX2, VNNI, NEON) is checked
//! against the scalar reference by the same shape-generic case generator.

use crate::kernels::{ConvParams, I32Array, OutputQuant, Shape};

/// A fast conv kernel under test: (params, input, output, scratch).
pub type ConvKernel<'f> = dyn FnMut(&ConvParams, &[i8], &mut [i8], &mut [u8]) + 'f;

/// xorshift64* stream for test data.
pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next() % ((hi - lo + 1) as u64)) as i64
    }
    pub fn i8s(&mut self, n: usize, lo: i64, hi: i64) -> Vec<i8> {
        (0..n).map(|_| self.range(lo, hi) as i8).collect()
    }
    pub fn i32s(&mut self, n: usize, lo: i64, hi: i64) -> Vec<u8> {
        (0..n)
            .flat_map(|_| (self.range(lo, hi) as i32).to_le_bytes())
            .collect()
    }
}

/// A convolution of the given shape with values drawn from `seed` (weights, biases,
/// multipliers, pad values, zero points, clamp), run by the scalar reference and by `fast`:
/// the bytes must be equal. Shapes the kernel cannot cover are skipped.
#[allow(clippy::too_many_arguments)]
pub fn conv_matches_scalar(
    cin: usize,
    cout: usize,
    h: usize,
    w: usize,
    kh: usize,
    kw: usize,
    stride: usize,
    pad: usize,
    seed: u64,
    fast: &mut ConvKernel,
) {
    if h + 2 * pad < kh || w + 2 * pad < kw {
        return;
    }
    let mut rng = Rng(seed | 1);
    let ho = (h + 2 * pad - kh) / stride + 1;
    let wo = (w + 2 * pad - kw) / stride + 1;
    let k = kh * kw * cin;
    let input = rng.i8s(cin * h * w, -128, 127);
    let weights = rng.i8s(cout * k, -127, 127);
    let bias = rng.i32s(cout, -(1 << 20), 1 << 20);
    let mult = rng.i32s(cout, 1 << 30, i32::MAX as i64);
    // Mostly typical shifts (n in [33, 49]); every fourth case the whole valid range.
    let shift = if rng.next().is_multiple_of(4) {
        rng.i32s(cout, -31, 30)
    } else {
        rng.i32s(cout, -18, -2)
    };
    let pads = if rng.next().is_multiple_of(2) {
        rng.i8s(cin, -128, 127)
    } else {
        Vec::new()
    };
    let zo = rng.range(-128, 127) as i32;
    let (lo, hi) = if rng.next().is_multiple_of(2) {
        (zo.max(-128), 127)
    } else {
        (-128, 127)
    };
    let p = ConvParams {
        input: Shape { c: cin, h, w },
        output: Shape {
            c: cout,
            h: ho,
            w: wo,
        },
        kernel_h: kh,
        kernel_w: kw,
        stride,
        pad,
        weights: &weights,
        bias: I32Array::new(&bias),
        multiplier: I32Array::new(&mult),
        shift: I32Array::new(&shift),
        pad_values: &pads,
        input_zero_point: rng.range(-128, 127) as i32,
        out: OutputQuant {
            zero_point: zo,
            act_min: lo,
            act_max: hi,
        },
    };
    let mut want = vec![0i8; cout * ho * wo];
    let mut got = vec![0x55i8; cout * ho * wo];
    crate::kernels::scalar::conv2d(&p, &input, &mut want);
    let mut scratch = vec![0xAAu8; crate::scratch_bytes(1, &p.geometry())];
    fast(&p, &input, &mut got, &mut scratch);
    assert_eq!(want, got);
}
