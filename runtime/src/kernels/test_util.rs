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

/// One conv case for [`check_conv`].
#[derive(Clone, Copy, Debug)]
pub struct ConvCase {
    pub cin: usize,
    pub cout: usize,
    pub h: usize,
    pub w: usize,
    pub kh: usize,
    pub kw: usize,
    pub stride: usize,
    pub pad: usize,
    pub seed: u64,
}

/// The convs of the models here: LeNet (1 and 3 channels in), ResNet-18's stem (1 and 3), its
/// 3×3 and 1×1 convs at every width, and odd shapes; every conv kernel's fixed cases.
pub fn model_convs() -> impl Iterator<Item = ConvCase> {
    [
        (1, 6, 32, 5, 1, 0),
        (3, 6, 32, 5, 1, 0),
        (6, 16, 14, 5, 1, 0),
        (1, 64, 32, 3, 1, 1),
        (3, 64, 32, 3, 1, 1),
        (64, 64, 32, 3, 1, 1),
        (64, 128, 32, 3, 2, 1),
        (64, 128, 32, 1, 2, 0),
        (128, 128, 16, 3, 1, 1),
        (256, 512, 8, 3, 2, 1),
        (512, 512, 4, 3, 1, 1),
        (3, 64, 33, 7, 2, 3),
        (17, 5, 7, 3, 2, 2),
        (33, 3, 5, 5, 1, 2),
    ]
    .into_iter()
    .enumerate()
    .map(|(i, (cin, cout, hw, k, stride, pad))| ConvCase {
        cin,
        cout,
        h: hw,
        w: hw,
        kh: k,
        kw: k,
        stride,
        pad,
        seed: 40 + i as u64,
    })
}

/// Random conv cases over what the kernels special-case: channel counts below, at and past
/// their quads, groups and vectors; kernels 1–5 (square or not); strides 1–2; pads 0–3; widths
/// that do and do not fill a vector.
pub fn conv_cases() -> impl proptest::strategy::Strategy<Value = ConvCase> {
    use proptest::prelude::*;
    (
        prop::sample::select(vec![1usize, 2, 3, 4, 5, 6, 7, 8, 12, 16, 17, 20, 33, 64]),
        prop::sample::select(vec![1usize, 2, 3, 5, 6, 8, 13, 16, 17, 24]),
        (1usize..14, 1usize..24),
        (1usize..=5, 1usize..=5),
        (1usize..=2, 0usize..=3),
        any::<u64>(),
    )
        .prop_map(
            |(cin, cout, (h, w), (kh, kw), (stride, pad), seed)| ConvCase {
                cin,
                cout,
                h,
                w,
                kh,
                kw,
                stride,
                pad,
                seed,
            },
        )
}

/// A conv kernel that may decline a conv: `false`, output untouched.
pub type MaybeConv<'f> = dyn FnMut(&ConvParams, &[i8], &mut [i8], &mut [u8]) -> bool + 'f;

/// `kernel` against the scalar reference on `case` (see [`conv_matches_scalar`]); where it
/// declines, `may_decline(params, scratch bytes)` must hold (a kernel that silently covers less
/// than it says fails here).
pub fn check_conv(
    case: &ConvCase,
    kernel: &mut MaybeConv,
    may_decline: &dyn Fn(&ConvParams, usize) -> bool,
) {
    let c = *case;
    conv_matches_scalar(
        c.cin,
        c.cout,
        c.h,
        c.w,
        c.kh,
        c.kw,
        c.stride,
        c.pad,
        c.seed,
        &mut |p, x, y, s| {
            if !kernel(p, x, y, s) {
                assert!(may_decline(p, s.len()), "declined a conv it covers: {c:?}");
                crate::kernels::scalar::conv2d(p, x, y);
            }
        },
    );
}

/// A fully connected kernel under test: (params, input, output).
pub type FcKernel<'f> = dyn FnMut(&crate::kernels::FcParams, &[i8], &mut [i8]) + 'f;

/// A fully connected layer of `k` inputs and `n` outputs with values from `seed` (every valid
/// shift, weights in [−127, 127]), run by the scalar reference and by `fast`: equal bytes.
pub fn fc_matches_scalar(k: usize, n: usize, seed: u64, fast: &mut FcKernel) {
    let mut rng = Rng(seed | 1);
    let x = rng.i8s(k, -128, 127);
    let weights = rng.i8s(n * k, -127, 127);
    let bias = rng.i32s(n, -(1 << 20), 1 << 20);
    let mult = rng.i32s(n, 1 << 30, i32::MAX as i64);
    let shift = rng.i32s(n, -31, 30);
    let p = crate::kernels::FcParams {
        k,
        n,
        weights: &weights,
        bias: I32Array::new(&bias),
        multiplier: I32Array::new(&mult),
        shift: I32Array::new(&shift),
        out: OutputQuant {
            zero_point: rng.range(-128, 127) as i32,
            act_min: -128,
            act_max: 127,
        },
    };
    let mut want = vec![0i8; n];
    let mut got = vec![0x55i8; n];
    crate::kernels::scalar::fully_connected(&p, &x, &mut want);
    fast(&p, &x, &mut got);
    assert_eq!(want, got, "k {k} n {n}");
}

/// The fully connected shapes of the models here, and edge shapes (k 1, 65 536).
pub const FC_SHAPES: [(usize, usize); 7] = [
    (400, 120),
    (120, 84),
    (84, 10),
    (512, 10),
    (1, 1),
    (17, 5),
    (65_536, 3),
];
