//! The kernels' shared test suite (tract-style): every conv, fully connected, max_pool and
//! tflite_add kernel (AVX2, VNNI, NEON, Cortex-M) is checked byte for byte against the scalar
//! reference on the same cases, through `conv_suite!` / `fc_suite!` / `tflite_add_suite!`
//! instantiated in the kernel's own tests, and the builders of test data (`ConvData`,
//! `FcData`, `LayerData`, `PoolCase`, `tflite_add_params`).

use core::ops::Range;

use crate::kernels::{
    ConvImage, ConvParams, DepthwiseParams, FcParams, I32Array, OpGeometry, OutputQuant, Packed,
    Placement, PoolParams, Rounding, Shape, TfliteAddParams, TfliteAddTables,
};

/// A fast conv kernel under test: (params, input, output, scratch).
pub type ConvKernel<'f> = dyn FnMut(&ConvParams, &[i8], &mut [i8], &mut [u8]) + 'f;

pub use octet_testkit::Rng;

/// A convolution of `case`'s shape with values drawn from its seed ([`ConvData::random`]),
/// run by the scalar reference and by `fast`: the bytes must be equal. Shapes no conv has
/// (a kernel larger than the padded input) are skipped.
pub fn conv_matches_scalar(case: &ConvCase, fast: &mut ConvKernel) {
    conv_matches_scalar_in(case, &crate::kernels::conv_scratch_bytes, fast)
}

/// [`conv_matches_scalar`] with `scratch(geometry)` bytes of scratch (a kernel set's rule; the
/// x86 one above).
pub fn conv_matches_scalar_in(
    case: &ConvCase,
    scratch: &dyn Fn(&OpGeometry) -> usize,
    fast: &mut ConvKernel,
) {
    let Some(d) = ConvData::random(case) else {
        return;
    };
    let p = d.params();
    let mut want = vec![0i8; p.output.len()];
    let mut got = vec![0x55i8; p.output.len()];
    crate::kernels::scalar::conv2d(&p, &d.input, &mut want);
    let mut scratch = vec![0xAAu8; scratch(&p.geometry())];
    fast(&p, &d.input, &mut got, &mut scratch);
    assert_eq!(want, got);
}

/// The weights and requantization of a test layer: `n` outputs of `k` values each.
pub struct LayerData {
    /// `[n][k]`.
    pub weights: Vec<i8>,
    pub bias: Vec<u8>,
    pub mult: Vec<u8>,
    pub shift: Vec<u8>,
    pub out: OutputQuant,
}

impl LayerData {
    /// Values every kernel's fast path covers: weights in [−127, 127], biases, multipliers,
    /// shifts n in [33, 49], a clamp within i8, the single rounding.
    pub fn typical(rng: &mut Rng, n: usize, k: usize) -> Self {
        LayerData {
            weights: rng.i8s(n * k, -127, 127),
            bias: rng.i32s(n, -(1 << 20), 1 << 20),
            mult: rng.i32s(n, 1 << 30, i32::MAX as i64),
            shift: rng.i32s(n, -18, -2),
            out: OutputQuant {
                zero_point: -5,
                act_min: -5,
                act_max: 127,
                rounding: Rounding::Single,
            },
        }
    }

    /// [`LayerData::typical`], then every fourth case every valid shift, every eighth one
    /// channel's shift from −1 up (beside typical ones: the SIMD epilogues' wide paths with
    /// outputs in range), every fourth one multiplier and shift for all channels (per tensor),
    /// every eighth a zero multiplier in the first channel, any output zero
    /// point with the clamp from it (ReLU) or any other, and either rounding.
    pub fn random(rng: &mut Rng, n: usize, k: usize) -> Self {
        let mut l = Self::typical(rng, n, k);
        match rng.next() % 8 {
            0 | 1 => l.shift = rng.i32s(n, -31, 30),
            2 => {
                let c = rng.below(n);
                let s = rng.range(-1, 30) as i32;
                l.shift[4 * c..4 * c + 4].copy_from_slice(&s.to_le_bytes());
            }
            _ => {}
        }
        if rng.next().is_multiple_of(4) {
            // Per tensor: every channel the first's multiplier and shift.
            for c in 1..n {
                l.mult.copy_within(..4, 4 * c);
                l.shift.copy_within(..4, 4 * c);
            }
        }
        if rng.next().is_multiple_of(8) {
            l.mult[..4].fill(0);
        }
        let rounding = if rng.next().is_multiple_of(2) {
            Rounding::Single
        } else {
            Rounding::Double
        };
        let zo = rng.range(-128, 127) as i32;
        // ReLU, none (the i8 range: kernels may leave that clamp to their narrowing), or any.
        let (lo, hi) = match rng.next() % 4 {
            0 | 1 => (zo, 127),
            2 => (-128, 127),
            _ => (rng.range(-128, 0) as i32, rng.range(0, 127) as i32),
        };
        l.out = OutputQuant {
            zero_point: zo,
            act_min: lo,
            act_max: hi,
            rounding,
        };
        l
    }
}

/// The tensors and quantization of a test conv: what [`ConvParams`] borrows.
pub struct ConvData {
    pub case: ConvCase,
    pub input: Vec<i8>,
    pub layer: LayerData,
    pub pads: Vec<i8>,
    pub input_zero_point: i32,
    /// The stream the values came from, for more inputs of the same conv.
    pub rng: Rng,
}

impl ConvData {
    /// Values from the case's seed ([`LayerData::random`]; the case's rounding where it names
    /// one), pad values or none, any input zero point. `None` where the kernel outgrows the
    /// padded input.
    pub fn random(c: &ConvCase) -> Option<Self> {
        Self::new(c, LayerData::random).map(|mut d| {
            if d.rng.next().is_multiple_of(2) {
                d.pads.clear();
            }
            d.input_zero_point = d.rng.range(-128, 127) as i32;
            d
        })
    }

    /// Values every kernel covers ([`LayerData::typical`], in the case's rounding, single where
    /// it names none), pad values per channel, for batch and timing tests that must not be
    /// declined.
    pub fn typical(c: &ConvCase) -> Option<Self> {
        Self::new(c, LayerData::typical)
    }

    fn new(c: &ConvCase, layer: fn(&mut Rng, usize, usize) -> LayerData) -> Option<Self> {
        c.window()?;
        let mut rng = Rng(c.seed | 1);
        let input = rng.i8s(c.cin * c.h * c.w, -128, 127);
        let mut layer = layer(&mut rng, c.cout, c.kh * c.kw * c.cin);
        if let Some(r) = c.rounding {
            layer.out.rounding = r;
        }
        Some(ConvData {
            case: *c,
            input,
            layer,
            pads: rng.i8s(c.cin, -128, 127),
            input_zero_point: 3,
            rng,
        })
    }

    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    /// Another input of the conv's shape.
    pub fn another_input(&mut self) -> Vec<i8> {
        let c = self.case;
        self.rng.i8s(c.cin * c.h * c.w, -128, 127)
    }

    /// The conv these values make.
    pub fn params(&self) -> ConvParams<'_> {
        let (c, l) = (&self.case, &self.layer);
        let (window, ho, wo) = c.window().expect("ConvData::new checked the window");
        ConvParams {
            input: Shape {
                c: c.cin,
                h: c.h,
                w: c.w,
            },
            output: Shape {
                c: c.cout,
                h: ho,
                w: wo,
            },
            window,
            weights: &l.weights,
            bias: I32Array::new(&l.bias),
            multiplier: I32Array::new(&l.mult),
            shift: I32Array::new(&l.shift),
            pad_values: &self.pads,
            input_zero_point: self.input_zero_point,
            out: l.out,
            packed: Packed::NONE,
        }
    }
}

/// The shape of `c` as conv parameters with no values (weights and arrays empty), for tests of
/// scratch plans, which read shapes only; `None` where the kernel outgrows the padded input.
pub fn conv_shape(c: &ConvCase) -> Option<ConvParams<'static>> {
    let (window, ho, wo) = c.window()?;
    Some(ConvParams {
        input: Shape {
            c: c.cin,
            h: c.h,
            w: c.w,
        },
        output: Shape {
            c: c.cout,
            h: ho,
            w: wo,
        },
        window,
        weights: &[],
        bias: I32Array::new(&[]),
        multiplier: I32Array::new(&[]),
        shift: I32Array::new(&[]),
        pad_values: &[],
        input_zero_point: 0,
        out: full_range(0),
        packed: Packed::NONE,
    })
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
    /// TensorFlow's SAME padding instead of `pad`: an output of ⌈h/stride⌉ × ⌈w/stride⌉, the
    /// padding it needs split with the odd row and column at the bottom and right (the
    /// MLPerf Tiny models' stride-2 convs: a window no uniform kernel covers).
    pub same: bool,
    pub seed: u64,
    /// The rounding; `None`: drawn from the seed.
    pub rounding: Option<Rounding>,
}

impl ConvCase {
    /// A square input and kernel.
    pub const fn square(
        cin: usize,
        cout: usize,
        hw: usize,
        k: usize,
        stride: usize,
        pad: usize,
        seed: u64,
    ) -> Self {
        ConvCase {
            cin,
            cout,
            h: hw,
            w: hw,
            kh: k,
            kw: k,
            stride,
            pad,
            same: false,
            seed,
            rounding: None,
        }
    }

    /// This case with TensorFlow's SAME padding ([`ConvCase::same`]).
    pub const fn with_same(self) -> Self {
        ConvCase { same: true, ..self }
    }

    /// The window and the output height and width; `None` where the kernel outgrows the
    /// padded input.
    pub fn window(&self) -> Option<(Placement, usize, usize)> {
        let (s, (kh, kw)) = (self.stride, (self.kh, self.kw));
        if self.same {
            let (ho, wo) = (self.h.div_ceil(s), self.w.div_ceil(s));
            let pad = |o: usize, k: usize, n: usize| ((o - 1) * s + k).saturating_sub(n) / 2;
            let window = Placement {
                kernel_w: kw,
                pad_left: pad(wo, kw, self.w),
                ..Placement::square(kh, s, pad(ho, kh, self.h))
            };
            return Some((window, ho, wo));
        }
        let p = self.pad;
        if self.h + 2 * p < kh || self.w + 2 * p < kw {
            return None;
        }
        let window = Placement {
            kernel_w: kw,
            ..Placement::square(kh, s, p)
        };
        Some((
            window,
            (self.h + 2 * p - kh) / s + 1,
            (self.w + 2 * p - kw) / s + 1,
        ))
    }

    /// This case in rounding `r`.
    pub const fn with_rounding(self, r: Rounding) -> Self {
        ConvCase {
            rounding: Some(r),
            ..self
        }
    }
}

/// The convs of the models here: LeNet (1 and 3 channels in), ResNet-18's stem (1 and 3), its
/// 3×3 and 1×1 convs at every width, odd shapes, and the MLPerf Tiny models' windows no uniform
/// kernel covers (TensorFlow's SAME padding at stride 2: ResNet-8's, DS-CNN's 10×4 first layer
/// on 49×10, MobileNet's stem) and their 1×1 convs, each in both roundings; every conv
/// kernel's fixed cases.
pub fn model_convs() -> impl Iterator<Item = ConvCase> {
    let square = [
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
    .map(|(cin, cout, hw, k, stride, pad)| ConvCase::square(cin, cout, hw, k, stride, pad, 0));
    let mlperf = [
        ConvCase::square(16, 32, 32, 3, 2, 0, 0).with_same(),
        ConvCase::square(32, 64, 16, 3, 2, 0, 0).with_same(),
        ConvCase::square(3, 8, 96, 3, 2, 0, 0).with_same(),
        ConvCase {
            h: 49,
            w: 10,
            kw: 4,
            ..ConvCase::square(1, 64, 0, 10, 2, 0, 0).with_same()
        },
        ConvCase {
            h: 25,
            w: 5,
            ..ConvCase::square(64, 64, 0, 1, 1, 0, 0)
        },
        ConvCase::square(16, 32, 32, 1, 2, 0, 0),
    ];
    square.chain(mlperf).enumerate().flat_map(|(i, c)| {
        let c = ConvCase {
            seed: 40 + i as u64,
            ..c
        };
        Rounding::ALL.map(|r| c.with_rounding(r))
    })
}

/// Random conv cases over what the kernels special-case: channel counts below, at and past
/// their quads, groups and vectors; kernels 1–5 (square or not); strides 1–2; pads 0–3 or
/// TensorFlow's SAME (a quarter of the cases); widths that do and do not fill a vector; either
/// rounding.
pub fn conv_cases() -> impl proptest::strategy::Strategy<Value = ConvCase> {
    use proptest::prelude::*;
    (
        prop::sample::select(vec![1usize, 2, 3, 4, 5, 6, 7, 8, 12, 16, 17, 20, 33, 64]),
        prop::sample::select(vec![1usize, 2, 3, 5, 6, 8, 13, 16, 17, 24]),
        (1usize..14, 1usize..24),
        (1usize..=5, 1usize..=5),
        (1usize..=2, 0usize..=3, prop::bool::weighted(0.25)),
        (any::<u64>(), prop::sample::select(Rounding::ALL.to_vec())),
    )
        .prop_map(
            |(cin, cout, (h, w), (kh, kw), (stride, pad, same), (seed, rounding))| ConvCase {
                cin,
                cout,
                h,
                w,
                kh,
                kw,
                stride,
                pad,
                same,
                seed,
                rounding: Some(rounding),
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
    check_conv_in(
        case,
        &crate::kernels::conv_scratch_bytes,
        kernel,
        may_decline,
    )
}

/// [`check_conv`] with `scratch(geometry)` bytes of scratch (see [`conv_matches_scalar_in`]).
pub fn check_conv_in(
    case: &ConvCase,
    scratch: &dyn Fn(&OpGeometry) -> usize,
    kernel: &mut MaybeConv,
    may_decline: &dyn Fn(&ConvParams, usize) -> bool,
) {
    conv_matches_scalar_in(case, scratch, &mut |p, x, y, s| {
        if !kernel(p, x, y, s) {
            assert!(
                may_decline(p, s.len()),
                "declined a conv it covers: {case:?}"
            );
            crate::kernels::scalar::conv2d(p, x, y);
        }
    });
}

/// `p` in the single rounding: for `may_decline` predicates of kernels that cover both
/// roundings (a conv they decline in the double rounding they must decline in the single).
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub fn as_single<'a>(p: &ConvParams<'a>) -> ConvParams<'a> {
    ConvParams {
        out: OutputQuant {
            rounding: Rounding::Single,
            ..p.out
        },
        ..*p
    }
}

/// A conv entry point over output rows `rows` (the whole conv for `0..output.h`), writing
/// those rows into the image's output.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub type RowsConv<'f> = dyn FnMut(&ConvParams, ConvImage, Range<usize>) -> bool + 'f;

/// [`check_conv`] of a rows entry point: the whole conv, then 2 to 4 bands of rows (from the
/// seed) as threads sharing an image take them, the scratch poisoned before each band (a band
/// may read nothing another band built).
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub fn check_conv_rows(
    case: &ConvCase,
    f: &mut RowsConv,
    may_decline: &dyn Fn(&ConvParams, usize) -> bool,
) {
    check_conv(
        case,
        &mut |p, x, y, s| f(p, ConvImage::new(x, y, s), 0..p.output.h),
        may_decline,
    );
    let bands = 2 + (case.seed % 3) as usize;
    let mut in_bands = |p: &ConvParams, x: &[i8], y: &mut [i8], s: &mut [u8]| {
        let (ho, row) = (p.output.h, p.output.w * p.output.c);
        let per = ho.div_ceil(bands).max(1);
        let mut covered = true;
        for r0 in (0..ho).step_by(per) {
            let r1 = (r0 + per).min(ho);
            s.fill(0xA5);
            covered &= f(p, ConvImage::new(x, &mut y[r0 * row..r1 * row], s), r0..r1);
        }
        covered
    };
    check_conv(case, &mut in_bands, may_decline);
}

/// The conv suite every conv kernel instantiates: the models' convs ([`model_convs`]) and
/// random cases ([`conv_cases`]), each through `$check` (a `fn(&ConvCase)` that runs the
/// kernel against the scalar reference, e.g. with [`check_conv`]).
macro_rules! conv_suite {
    // A kernel that never declines, tested where `$available` holds.
    (if $available:expr, $kernel:expr) => {
        fn check(c: &$crate::kernels::test_util::ConvCase) {
            if $available {
                $crate::kernels::test_util::conv_matches_scalar(c, &mut $kernel);
            }
        }

        $crate::kernels::test_util::conv_suite!(check);
    };
    ($check:path) => {
        #[test]
        fn model_shapes() {
            $crate::kernels::test_util::model_convs().for_each(|c| $check(&c));
        }

        proptest::proptest! {
            #[test]
            fn equals_scalar(c in $crate::kernels::test_util::conv_cases()) {
                $check(&c);
            }
        }
    };
}
pub(crate) use conv_suite;

/// A fast depthwise kernel under test: (params, input, output, scratch).
pub type DepthwiseKernel<'f> = dyn FnMut(&DepthwiseParams, &[i8], &mut [i8], &mut [u8]) + 'f;

/// A depthwise conv of `case`'s shape (C_out = `cout`, a multiple of `cin`: the depth
/// multiplier), values drawn from its seed ([`LayerData::random`]: any multiplier, shift,
/// clamp and rounding; any input zero point), run by the scalar reference and by `fast` with
/// `scratch(geometry)` bytes of scratch: the bytes must be equal.
pub fn depthwise_matches_scalar_in(
    case: &ConvCase,
    scratch: &dyn Fn(&OpGeometry) -> usize,
    fast: &mut DepthwiseKernel,
) {
    let Some((window, ho, wo)) = case.window() else {
        return;
    };
    assert!(case.cout.is_multiple_of(case.cin), "{case:?}");
    let mut rng = Rng(case.seed | 1);
    let input = rng.i8s(case.cin * case.h * case.w, -128, 127);
    let mut l = LayerData::random(&mut rng, case.cout, case.kh * case.kw);
    if let Some(r) = case.rounding {
        l.out.rounding = r;
    }
    let p = DepthwiseParams {
        input: Shape {
            c: case.cin,
            h: case.h,
            w: case.w,
        },
        output: Shape {
            c: case.cout,
            h: ho,
            w: wo,
        },
        window,
        depth_multiplier: case.cout / case.cin,
        weights: &l.weights,
        bias: I32Array::new(&l.bias),
        multiplier: I32Array::new(&l.mult),
        shift: I32Array::new(&l.shift),
        input_zero_point: rng.range(-128, 127) as i32,
        out: l.out,
        packed: Packed::NONE,
    };
    let mut want = vec![0i8; p.output.len()];
    let mut got = vec![0x55i8; p.output.len()];
    crate::kernels::scalar::depthwise_conv2d(&p, &input, &mut want);
    let mut scratch = vec![0xAAu8; scratch(&p.geometry())];
    fast(&p, &input, &mut got, &mut scratch);
    assert_eq!(want, got, "{case:?}");
}

/// The depthwise convs of the models here: the MLPerf Tiny DS-CNN's (3×3 over 25×5×64, SAME)
/// and MobileNet v1's (3×3, SAME, strides 1 and 2, 8 to 256 channels), a depth multiplier of
/// 2, each in both roundings.
pub fn model_depthwise() -> impl Iterator<Item = ConvCase> {
    let dw = |c: usize, h: usize, w: usize, s: usize| ConvCase {
        h,
        w,
        ..ConvCase::square(c, c, 0, 3, s, 0, 0).with_same()
    };
    [
        dw(64, 25, 5, 1),
        dw(8, 48, 48, 1),
        dw(16, 48, 48, 2),
        dw(64, 12, 12, 1),
        dw(256, 3, 3, 1),
        dw(128, 6, 6, 2),
        ConvCase::square(3, 6, 7, 3, 1, 1, 0),
    ]
    .into_iter()
    .enumerate()
    .flat_map(|(i, c)| {
        let c = ConvCase {
            seed: 60 + i as u64,
            ..c
        };
        Rounding::ALL.map(|r| c.with_rounding(r))
    })
}

/// Random depthwise cases: channels below, at and past a word; depth multipliers 1 to 3;
/// kernels 1–5 (square or not); strides 1–3 (per axis alike); pads 0–2 or TensorFlow's SAME
/// (a third of the cases); either rounding.
pub fn depthwise_cases() -> impl proptest::strategy::Strategy<Value = ConvCase> {
    use proptest::prelude::*;
    (
        prop::sample::select(vec![1usize, 2, 3, 4, 5, 8, 16, 17, 64]),
        prop::sample::select(vec![1usize, 1, 1, 2, 3]),
        (1usize..14, 1usize..14),
        // 3×3, the models' window (and the kernels' own paths), two draws in five.
        prop_oneof![2 => Just((3usize, 3usize)), 3 => (1usize..=5, 1usize..=5)],
        (1usize..=3, 0usize..=2, prop::bool::weighted(0.33)),
        (any::<u64>(), prop::sample::select(Rounding::ALL.to_vec())),
    )
        .prop_map(
            |(cin, dm, (h, w), (kh, kw), (stride, pad, same), (seed, rounding))| ConvCase {
                cin,
                cout: cin * dm,
                h,
                w,
                kh,
                kw,
                stride,
                pad,
                same,
                seed,
                rounding: Some(rounding),
            },
        )
}

/// The depthwise suite every depthwise kernel instantiates: the models' depthwise convs
/// ([`model_depthwise`]) and random cases ([`depthwise_cases`]), each through `$check` (a
/// `fn(&ConvCase)`, e.g. with [`depthwise_matches_scalar_in`]).
macro_rules! depthwise_suite {
    ($check:path) => {
        #[test]
        fn model_depthwise_shapes() {
            $crate::kernels::test_util::model_depthwise().for_each(|c| $check(&c));
        }

        proptest::proptest! {
            #[test]
            fn depthwise_equals_scalar(c in $crate::kernels::test_util::depthwise_cases()) {
                $check(&c);
            }
        }
    };
}
pub(crate) use depthwise_suite;

/// The fully connected suite every fc kernel instantiates: [`FC_SHAPES`] and random shapes,
/// each through `$check` (a `fn(k, n, seed)`, e.g. with [`fc_matches_scalar`]).
macro_rules! fc_suite {
    // A kernel tested where `$available` holds.
    (if $available:expr, $kernel:expr) => {
        fn check(k: usize, n: usize, seed: u64) {
            if $available {
                $crate::kernels::test_util::fc_matches_scalar(k, n, seed, &mut $kernel);
            }
        }

        $crate::kernels::test_util::fc_suite!(check);
    };
    ($check:path) => {
        #[test]
        fn fixed_shapes() {
            for (k, n) in $crate::kernels::test_util::FC_SHAPES {
                $check(k, n, k as u64);
            }
        }

        proptest::proptest! {
            #[test]
            fn equals_scalar(k in 1usize..300, n in 1usize..20, seed in proptest::prelude::any::<u64>()) {
                $check(k, n, seed);
            }
        }
    };
}
pub(crate) use fc_suite;

/// A fully connected kernel under test: (params, input, output).
pub type FcKernel<'f> = dyn FnMut(&FcParams, &[i8], &mut [i8]) + 'f;

/// The input and layer of a test fully connected layer: what [`FcParams`] borrows.
pub struct FcData {
    pub x: Vec<i8>,
    pub layer: LayerData,
}

impl FcData {
    /// `k` inputs and `n` outputs with values from `seed` ([`LayerData::random`]).
    pub fn random(k: usize, n: usize, seed: u64) -> Self {
        let mut rng = Rng(seed | 1);
        let x = rng.i8s(k, -128, 127);
        FcData {
            x,
            layer: LayerData::random(&mut rng, n, k),
        }
    }

    /// The layer these values make.
    pub fn params(&self) -> FcParams<'_> {
        let l = &self.layer;
        FcParams {
            k: self.x.len(),
            n: l.bias.len() / 4,
            weights: &l.weights,
            bias: I32Array::new(&l.bias),
            multiplier: I32Array::new(&l.mult),
            shift: I32Array::new(&l.shift),
            per_tensor: FcParams::per_tensor_of(&I32Array::new(&l.mult), &I32Array::new(&l.shift)),
            out: l.out,
            packed: Packed::NONE,
        }
    }

    /// The scalar reference and `fast` on this layer: equal bytes.
    pub fn check(&self, fast: &mut FcKernel) {
        let p = self.params();
        let mut want = vec![0i8; p.n];
        let mut got = vec![0x55i8; p.n];
        crate::kernels::scalar::fully_connected(&p, &self.x, &mut want);
        fast(&p, &self.x, &mut got);
        assert_eq!(want, got, "k {} n {}", p.k, p.n);
    }
}

/// A fully connected layer of `k` inputs and `n` outputs with values from `seed`
/// ([`FcData::random`]), run by the scalar reference and by `fast`: equal bytes.
pub fn fc_matches_scalar(k: usize, n: usize, seed: u64, fast: &mut FcKernel) {
    FcData::random(k, n, seed).check(fast);
}

/// Layer `p` over the images of `data` (each its own input) by `batch`, against the scalar
/// reference image by image: equal bytes (the x86 batched kernels').
#[cfg(target_arch = "x86_64")]
pub fn fc_batch_matches_scalar(
    p: &FcParams,
    data: &[FcData],
    batch: &mut dyn FnMut(&FcParams, &mut [ConvImage]),
) {
    let (m, n) = (data.len(), p.n);
    let mut want = vec![vec![0i8; n]; m];
    let mut got = vec![vec![0x55i8; n]; m];
    for (d, y) in data.iter().zip(want.iter_mut()) {
        crate::kernels::scalar::fully_connected(p, &d.x, y);
    }
    let mut imgs: Vec<ConvImage> = data
        .iter()
        .zip(got.iter_mut())
        .map(|(d, y)| ConvImage::new(&d.x, y, &mut []))
        .collect();
    batch(p, &mut imgs);
    let (k, r) = (p.k, p.out.rounding);
    assert_eq!(want, got, "{m} images, k {k}, n {n}, {r:?}");
}

/// A packed conv's shape for [`packed_groups_match_scalar`]: (C_in, C_out, H = W, kernel,
/// stride, pad, images).
#[cfg(target_arch = "x86_64")]
pub type PackedConvShape = (usize, usize, usize, usize, usize, usize, usize);

/// Each conv of `shapes` over its group of images (values from seeds `seed` + image), its
/// weights packed by `pack` (the packed region it fills, then the layout), run by `kernel`
/// over the whole group at once (it must take it: `true`): each image's bytes as the
/// reference's, in both roundings. The x86 packed convs' (VNNI, AMX) test.
#[cfg(target_arch = "x86_64")]
pub fn packed_groups_match_scalar(
    shapes: &[PackedConvShape],
    seed: usize,
    pack: &dyn Fn(&FcParams) -> (Vec<u8>, crate::kernels::Layout),
    kernel: &mut dyn FnMut(&ConvParams, &mut [ConvImage]) -> bool,
) {
    for &(cin, cout, hw, kk, st, pad, n) in shapes {
        for r in Rounding::ALL {
            let case =
                |i: usize| ConvCase::square(cin, cout, hw, kk, st, pad, (cin * seed + i) as u64);
            let data: Vec<ConvData> = (0..n)
                .filter_map(|i| ConvData::typical(&case(i).with_rounding(r)))
                .collect();
            assert_eq!(
                data.len(),
                n,
                "{cin}→{cout} {hw}×{hw} {kk}×{kk}: no such conv"
            );
            let mut p = data[0].params();
            let (buf, layout) = pack(&p.as_fc());
            p.packed = Packed {
                layout,
                bytes: &buf,
            };
            let mut want = vec![vec![0i8; p.output.len()]; n];
            let mut got = vec![vec![0x55i8; p.output.len()]; n];
            for (d, y) in data.iter().zip(want.iter_mut()) {
                crate::kernels::scalar::conv2d(&p, &d.input, y);
            }
            let mut imgs: Vec<ConvImage> = data
                .iter()
                .zip(got.iter_mut())
                .map(|(d, y)| ConvImage::new(&d.input, y, &mut []))
                .collect();
            assert!(
                kernel(&p, &mut imgs),
                "{cin}→{cout} {hw}×{hw} {kk}×{kk}: declined"
            );
            assert_eq!(
                want, got,
                "{cin}→{cout}, {hw}×{hw}, {kk}×{kk}/{st}, {n} images, {r:?}"
            );
        }
    }
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

/// Extreme fully connected layers, K = 65 536 (the exporter's limit): every product at its
/// largest (−128·−127, and −128·−128 which validated models never hold) with biases at the
/// ends of i32, so the i32 sums wrap; `fast` must give the scalar reference's bytes.
pub fn fc_extremes(fast: &mut FcKernel) {
    let k = 65_536;
    let mut weights = vec![-127i8; k];
    weights.resize(3 * k, -128);
    FcData {
        x: vec![-128i8; k],
        layer: wrapping_layer(weights),
    }
    .check(fast);
}

/// Three outputs whose sums wrap with `weights` at their largest: biases at the ends of i32,
/// the largest and smallest multipliers and shifts.
pub fn wrapping_layer(weights: Vec<i8>) -> LayerData {
    LayerData {
        weights,
        bias: i32_bytes(&[i32::MAX, i32::MIN, -5]),
        mult: i32_bytes(&[i32::MAX, 1 << 30, 3 << 29]),
        shift: i32_bytes(&[-31, 30, -4]),
        out: full_range(3),
    }
}

/// Output zero point `zero_point`, no clamp but i8's, the single rounding.
pub const fn full_range(zero_point: i32) -> OutputQuant {
    OutputQuant {
        zero_point,
        act_min: -128,
        act_max: 127,
        rounding: Rounding::Single,
    }
}

/// i32 values as the file's little-endian bytes.
pub fn i32_bytes(v: &[i32]) -> Vec<u8> {
    v.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// A pool kernel under test: (params, input, output).
pub type PoolKernel<'f> = dyn FnMut(&PoolParams, &[i8], &mut [i8]) + 'f;

/// One max_pool case for [`max_pool_matches_scalar`].
#[derive(Clone, Copy, Debug)]
pub struct PoolCase {
    pub c: usize,
    pub h: usize,
    pub w: usize,
    pub kh: usize,
    pub kw: usize,
    pub stride: usize,
    /// The clamp.
    pub lo: i32,
    pub hi: i32,
    pub seed: u64,
}

impl PoolCase {
    /// `c` channels, a square input of `hw` and window of `k`, no clamp but i8's.
    pub const fn square(c: usize, hw: usize, k: usize, stride: usize) -> Self {
        PoolCase {
            c,
            h: hw,
            w: hw,
            kh: k,
            kw: k,
            stride,
            lo: -128,
            hi: 127,
            seed: 0,
        }
    }

    /// The pool (max_pool's: no input zero point or multiplier).
    pub const fn params(&self) -> PoolParams {
        let PoolCase {
            c,
            h,
            w,
            kh,
            kw,
            stride,
            ..
        } = *self;
        PoolParams {
            input: Shape { c, h, w },
            output: Shape {
                c,
                h: (h - kh) / stride + 1,
                w: (w - kw) / stride + 1,
            },
            window: Placement {
                kernel_h: kh,
                kernel_w: kw,
                ..Placement::square(kh, stride, 0)
            },
            input_zero_point: 0,
            multiplier: 0,
            shift: 0,
            out: OutputQuant {
                zero_point: 0,
                act_min: self.lo,
                act_max: self.hi,
                rounding: Rounding::Single,
            },
        }
    }
}

/// Random max_pool cases: up to 40 channels, inputs up to 11×11, windows up to 3×3 (square
/// where `square`), strides 1–3, clamps from `clamp` (empty ones included).
pub fn pool_cases(
    square: bool,
    clamp: core::ops::RangeInclusive<i32>,
) -> impl proptest::strategy::Strategy<Value = PoolCase> {
    use proptest::prelude::*;
    (
        (1usize..40, 1usize..12, 1usize..12),
        (1usize..4, 1usize..4, 1usize..4),
        (clamp.clone(), clamp),
        any::<u64>(),
    )
        .prop_map(
            move |((c, h, w), (kh, kw, stride), (lo, hi), seed)| PoolCase {
                c,
                h,
                w,
                kh,
                kw: if square { kh } else { kw },
                stride,
                lo,
                hi,
                seed,
            },
        )
}

/// A max_pool of `case`'s shape on random input, run by the scalar reference and by `fast`:
/// equal bytes. Windows larger than the input are skipped.
pub fn max_pool_matches_scalar(case: &PoolCase, fast: &mut PoolKernel) {
    if case.h < case.kh || case.w < case.kw {
        return;
    }
    let input = Rng(case.seed | 1).i8s(case.c * case.h * case.w, -128, 127);
    let p = case.params();
    let mut want = vec![0i8; p.output.len()];
    let mut got = vec![0x55i8; p.output.len()];
    crate::kernels::scalar::max_pool(&p, &input, &mut want);
    fast(&p, &input, &mut got);
    assert_eq!(want, got, "{case:?}");
}

/// A tflite_avg_pool of `case`'s shape with padding `pad` above and left (and the output
/// that SAME-like padding on both sides gives), on random input, run by the scalar reference
/// and by `fast`: equal bytes.
pub fn tflite_avg_pool_matches_scalar(case: &PoolCase, pad: usize, fast: &mut PoolKernel) {
    let mut p = case.params();
    let (kh, kw, s) = (case.kh, case.kw, case.stride);
    let pad = pad.min(kh - 1).min(kw - 1);
    if case.h + 2 * pad < kh || case.w + 2 * pad < kw {
        return;
    }
    p.window.pad_top = pad;
    p.window.pad_left = pad;
    p.output.h = (case.h + 2 * pad - kh) / s + 1;
    p.output.w = (case.w + 2 * pad - kw) / s + 1;
    let input = Rng(case.seed | 1).i8s(case.c * case.h * case.w, -128, 127);
    let mut want = vec![0i8; p.output.len()];
    let mut got = vec![0x55i8; p.output.len()];
    crate::kernels::scalar::tflite_avg_pool(&p, &input, &mut want);
    fast(&p, &input, &mut got);
    assert_eq!(want, got, "{case:?} pad {pad}");
}

/// The tflite_avg_pool suite every kernel instantiates: random pools with padding, and the
/// models' global pools (MLPerf Tiny DS-CNN's 25×5, ResNet-8's 8×8), a 16×16 window (a 16-bit
/// lane sum's last exact one) and one past it; `$kernel` a `FnMut(&PoolParams, &[i8], &mut [i8])`
/// run where `$available` holds.
macro_rules! tflite_avg_pool_suite {
    (if $available:expr, $kernel:expr) => {
        fn check(case: &$crate::kernels::test_util::PoolCase, pad: usize) {
            if $available {
                $crate::kernels::test_util::tflite_avg_pool_matches_scalar(case, pad, &mut $kernel);
            }
        }

        proptest::proptest! {
            #[test]
            fn equals_scalar(
                c in $crate::kernels::test_util::pool_cases(false, -200..=200),
                pad in 0usize..3,
            ) {
                check(&c, pad);
            }
        }

        #[test]
        fn global_pools() {
            use $crate::kernels::test_util::PoolCase;
            for (c, h, w) in [
                (64, 25, 5),
                (64, 8, 8),
                (5, 16, 16),
                (8, 17, 16),
                (20, 16, 16),
            ] {
                let case = PoolCase {
                    h,
                    w,
                    kh: h,
                    kw: w,
                    ..PoolCase::square(c, 0, 0, 1)
                };
                check(&case, 0);
            }
        }
    };
}
pub(crate) use tflite_avg_pool_suite;

/// A tflite_add kernel under test: (parameters, the call's tables, input 0, input 1, output).
#[cfg_attr(
    not(any(target_arch = "x86_64", target_arch = "aarch64")),
    allow(dead_code)
)]
pub type TfliteAddKernel<'f> =
    dyn FnMut(&TfliteAddParams, &TfliteAddTables, &[i8], &[i8], &mut [i8]) + 'f;

/// tflite_add parameters from `rng`: half of them as TFLite derives them from random scales
/// (left shift 20, each input's multiplier s_i / (2·max s), the output's 2·max s / (2^20·s_out)),
/// the other half any valid values (every shift, M0 = 0 at times, left shifts 0 to 23, so that
/// the tables saturate and the sums wrap); either rounding; any zero points and clamp.
pub fn tflite_add_params(rng: &mut Rng) -> TfliteAddParams {
    let rounding = Rounding::ALL[rng.below(2)];
    let multipliers = if rng.next().is_multiple_of(2) {
        let [s0, s1, so] = [0; 3].map(|_| 2f64.powf(-12.0 * rng.unit()));
        let twice = 2.0 * s0.max(s1);
        let pair = |m: f64| crate::requant::quantize_multiplier_tflite(m).unwrap();
        [
            pair(s0 / twice),
            pair(s1 / twice),
            pair(twice / ((1 << 20) as f64 * so)),
        ]
    } else {
        [0; 3].map(|_| match rng.next() % 8 {
            0 => (0, rng.range(-31, 30) as i32),
            // Few significant bits and a small shift: products that land on rounding ties
            // (the AVX2 direct form rounds them half down below zero).
            1 => ((1 << 30) + (1 << rng.below(30)), rng.range(-4, 0) as i32),
            _ => (
                rng.range(1 << 30, i32::MAX as i64) as i32,
                rng.range(-31, 30) as i32,
            ),
        })
    };
    let left_shift = if !rng.next().is_multiple_of(4) {
        20
    } else {
        rng.range(0, 23) as i32
    };
    let zo = rng.range(-128, 127) as i32;
    let (act_min, act_max) = if rng.next().is_multiple_of(2) {
        (zo.max(-128), 127)
    } else {
        (rng.range(-128, 0) as i32, rng.range(0, 127) as i32)
    };
    TfliteAddParams {
        zero_points: [0; 2].map(|_| rng.range(-128, 127) as i32),
        left_shift,
        multipliers,
        out: OutputQuant {
            zero_point: zo,
            act_min,
            act_max,
            rounding,
        },
    }
}

/// A tflite_add of `len` elements with parameters from `seed` ([`tflite_add_params`]), its
/// inputs and output at byte offsets from the seed too, run by the scalar reference and by
/// `fast` on the call's tables: equal bytes, and the output's neighbours untouched.
#[cfg_attr(
    not(any(target_arch = "x86_64", target_arch = "aarch64")),
    allow(dead_code)
)]
pub fn tflite_add_matches_scalar(len: usize, seed: u64, fast: &mut TfliteAddKernel) {
    let mut rng = Rng(seed | 1);
    let p = tflite_add_params(&mut rng);
    let t = TfliteAddTables::new(&p).expect("valid parameters are never declined");
    let at = [0; 3].map(|_| rng.below(4));
    let a = rng.i8s(at[0] + len, -128, 127);
    let b = rng.i8s(at[1] + len, -128, 127);
    let mut want = vec![0x55i8; at[2] + len + 16];
    let mut got = want.clone();
    let span = at[2]..at[2] + len;
    crate::kernels::scalar::tflite_add(&p, &a[at[0]..], &b[at[1]..], &mut want[span.clone()]);
    fast(&p, &t, &a[at[0]..], &b[at[1]..], &mut got[span]);
    assert_eq!(want, got, "{p:?} len {len}");
}

/// The tflite_add suite every tflite_add kernel instantiates: lengths 0 to 300 (every tail of
/// the vector loops) with random parameters in both roundings ([`tflite_add_params`]), and a
/// long add.
macro_rules! tflite_add_suite {
    (if $available:expr, $kernel:expr) => {
        fn check(len: usize, seed: u64) {
            if $available {
                $crate::kernels::test_util::tflite_add_matches_scalar(len, seed, &mut $kernel);
            }
        }

        #[test]
        fn long_adds() {
            for seed in 0..8 {
                check(65_536 + seed as usize, seed);
            }
        }

        proptest::proptest! {
            #[test]
            fn equals_scalar(len in 0usize..300, seed in proptest::prelude::any::<u64>()) {
                check(len, seed);
            }
        }
    };
}
#[cfg_attr(
    not(any(target_arch = "x86_64", target_arch = "aarch64")),
    allow(unused_imports)
)]
pub(crate) use tflite_add_suite;
