//! The kernels' parameters: shapes, the file's i32 arrays, and one struct per op kind, built
//! once per op by `Model::prepare`.

use core::ops::Range;

use super::{OpGeometry, OutputQuant, Packed, Rounding};
use crate::requant::FusedRequant;

/// Activation shape (HWC in memory).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    /// Channels.
    pub c: usize,
    /// Height.
    pub h: usize,
    /// Width.
    pub w: usize,
}

impl Shape {
    /// c·h·w.
    pub const fn len(&self) -> usize {
        self.c * self.h * self.w
    }
    /// Whether c·h·w = 0.
    pub const fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A little-endian i32 array inside the file (read in place; any alignment).
#[derive(Clone, Copy, Debug, Default)]
pub struct I32Array<'a> {
    bytes: &'a [u8],
}

impl<'a> I32Array<'a> {
    /// Whether every value equals the first (true when empty).
    pub fn all_equal(&self) -> bool {
        // Word compares (a slice compare calls memcmp per value on Cortex-M).
        let mut v = self.iter();
        v.next().is_none_or(|first| v.all(|x| x == first))
    }

    /// Values `start..end` (clamped to the array).
    pub fn slice(&self, start: usize, end: usize) -> Self {
        let n = self.len();
        let (a, b) = (start.min(n), end.clamp(start.min(n), n));
        I32Array {
            bytes: &self.bytes[4 * a..4 * b],
        }
    }

    /// View of `bytes` (its length should be a multiple of 4).
    pub const fn new(bytes: &'a [u8]) -> Self {
        I32Array { bytes }
    }
    /// Number of values.
    pub const fn len(&self) -> usize {
        self.bytes.len() / 4
    }
    /// Whether empty.
    pub const fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Value `i` (0 when out of range).
    #[inline(always)]
    pub fn get(&self, i: usize) -> i32 {
        crate::format::le_i32(self.bytes, i.wrapping_mul(4))
    }
    /// The values' little-endian bytes.
    #[inline(always)]
    pub const fn bytes(&self) -> &'a [u8] {
        self.bytes
    }
    /// All values.
    pub fn iter(&self) -> impl Iterator<Item = i32> + 'a {
        let b = self.bytes;
        b.chunks_exact(4)
            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
    }
}

/// A piece of a conv patch ([`ConvParams::patch_pieces`]).
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy, Debug)]
pub(crate) enum PatchPiece {
    /// `n` values read from `input[start..start + n]` (whole taps; a whole kernel row where it
    /// lies inside the input).
    Input { start: usize, n: usize },
    /// One padded tap: C_in pad values.
    Pad,
}

/// A window's placement over its input, in kernel units (FORMAT.md, "Windows"): output pixel
/// (oy, ox) reads input rows `oy·stride_h − pad_top + ky·dilation_h` and columns likewise;
/// taps outside the input are padding (the bottom and right padding are what the output
/// shape implies).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    /// Kernel height.
    pub kernel_h: usize,
    /// Kernel width.
    pub kernel_w: usize,
    /// Vertical stride.
    pub stride_h: usize,
    /// Horizontal stride.
    pub stride_w: usize,
    /// Rows of padding above.
    pub pad_top: usize,
    /// Columns of padding on the left.
    pub pad_left: usize,
    /// Vertical dilation.
    pub dilation_h: usize,
    /// Horizontal dilation.
    pub dilation_w: usize,
}

impl From<&crate::format::Window> for Placement {
    /// The file's window in kernel units (pad_bottom and pad_right only size the output).
    fn from(w: &crate::format::Window) -> Placement {
        Placement {
            kernel_h: w.kernel_h.into(),
            kernel_w: w.kernel_w.into(),
            stride_h: w.stride_h.into(),
            stride_w: w.stride_w.into(),
            pad_top: w.pad_top.into(),
            pad_left: w.pad_left.into(),
            dilation_h: w.dilation_h.into(),
            dilation_w: w.dilation_w.into(),
        }
    }
}

impl Placement {
    /// A k×k window, one stride, the same padding on every side, no dilation.
    pub const fn square(k: usize, stride: usize, pad: usize) -> Placement {
        Placement {
            kernel_h: k,
            kernel_w: k,
            stride_h: stride,
            stride_w: stride,
            pad_top: pad,
            pad_left: pad,
            dilation_h: 1,
            dilation_w: 1,
        }
    }

    /// Whether this window over `input` giving `output` is octet's classic one (one stride,
    /// no dilation, the same padding on every side and the output size that padding gives):
    /// what the SIMD convs and pools cover; others run the scalar reference.
    pub const fn is_uniform(&self, input: Shape, output: Shape) -> bool {
        let (s, p) = (self.stride_h, self.pad_top);
        s == self.stride_w
            && s > 0
            && p == self.pad_left
            && self.dilation_h == 1
            && self.dilation_w == 1
            && input.h + 2 * p >= self.kernel_h
            && input.w + 2 * p >= self.kernel_w
            && output.h == (input.h + 2 * p - self.kernel_h) / s + 1
            && output.w == (input.w + 2 * p - self.kernel_w) / s + 1
    }
}

/// conv2d parameters (weights OHWI, per-output-channel bias/multiplier/shift).
#[derive(Clone, Copy, Debug)]
pub struct ConvParams<'a> {
    /// Input shape.
    pub input: Shape,
    /// Output shape.
    pub output: Shape,
    /// Kernel, stride, padding and dilation.
    pub window: Placement,
    /// `[C_out][kh][kw][C_in]`.
    pub weights: &'a [i8],
    /// Bias per output channel.
    pub bias: I32Array<'a>,
    /// M0 per output channel.
    pub multiplier: I32Array<'a>,
    /// Shift per output channel.
    pub shift: I32Array<'a>,
    /// Pad value per input channel; empty: the input zero point.
    pub pad_values: &'a [i8],
    /// Input zero point.
    pub input_zero_point: i32,
    /// Output zero point and clamp.
    pub out: OutputQuant,
    /// The weights packed at prepare for one kernel set ([`crate::Model::prepare_packed`]), or
    /// none.
    pub packed: Packed<'a>,
}

impl<'a> ConvParams<'a> {
    /// The conv restricted to output channels `c0..c1` (written as an HWC tensor of `c1 − c0`
    /// channels): the same bytes for those channels, so threads can share one conv.
    pub fn channels(&self, c0: usize, c1: usize) -> ConvParams<'a> {
        let k = self.k();
        ConvParams {
            output: Shape {
                c: c1 - c0,
                ..self.output
            },
            weights: &self.weights[c0 * k..c1 * k],
            bias: self.bias.slice(c0, c1),
            multiplier: self.multiplier.slice(c0, c1),
            shift: self.shift.slice(c0, c1),
            packed: super::packed::conv_outputs(self, c0, c1),
            ..*self
        }
    }

    /// The conv's weights as the fully connected layer of N = C_out rows of K = kh·kw·C_in
    /// (OHWI rows are patch-ordered): a pixel's outputs are that layer applied to its patch.
    pub fn as_fc(&self) -> FcParams<'a> {
        FcParams {
            k: self.k(),
            n: self.output.c,
            weights: self.weights,
            bias: self.bias,
            multiplier: self.multiplier,
            shift: self.shift,
            per_tensor: FcParams::per_tensor_of(&self.multiplier, &self.shift),
            out: self.out,
            packed: self.packed,
        }
    }

    /// A 1×1 conv of stride 1 without padding, whose patches are its input pixels, as its
    /// fully connected layer ([`ConvParams::as_fc`]), else `None`.
    pub fn pointwise_fc(&self) -> Option<FcParams<'a>> {
        let w = &self.window;
        let pointwise = w.kernel_h == 1
            && w.kernel_w == 1
            && w.stride_h == 1
            && w.stride_w == 1
            && w.pad_top == 0
            && w.pad_left == 0
            && self.input.h == self.output.h
            && self.input.w == self.output.w;
        pointwise.then(|| self.as_fc())
    }

    /// Whether the window is octet's classic one ([`Placement::is_uniform`]): the convs other
    /// than the scalar reference cover only these.
    pub const fn is_uniform(&self) -> bool {
        self.window.is_uniform(self.input, self.output)
    }

    /// The one stride of a uniform conv ([`ConvParams::is_uniform`]).
    #[inline(always)]
    pub const fn stride(&self) -> usize {
        self.window.stride_h
    }

    /// The one padding of a uniform conv ([`ConvParams::is_uniform`]).
    #[inline(always)]
    pub const fn pad(&self) -> usize {
        self.window.pad_top
    }

    /// The op's geometry, for the scratch rules ([`crate::Kernels::scratch_bytes`]).
    pub const fn geometry(&self) -> OpGeometry {
        OpGeometry::new(
            crate::format::OP_CONV2D,
            &self.window,
            self.input,
            self.output,
        )
    }

    /// Output pixel `pi`'s patch (its K values in the weights' OHWI order), piece by piece at
    /// its patch offset: the walk the x86 patch-packing conv kernels share (NEON keeps its own,
    /// see `neon::conv2d`). Uniform convs only.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    pub(crate) fn patch_pieces(&self, pi: usize, mut piece: impl FnMut(usize, PatchPiece)) {
        let (cin, h, w) = (self.input.c, self.input.h as isize, self.input.w as isize);
        let (kh, kw, s) = (self.window.kernel_h, self.window.kernel_w, self.stride());
        let (oy, ox) = (pi / self.output.w, pi % self.output.w);
        let row = kw * cin;
        let ix0 = (ox * s) as isize - self.pad() as isize;
        for ky in 0..kh {
            let at = ky * row;
            let iy = (oy * s + ky) as isize - self.pad() as isize;
            if iy < 0 || iy >= h {
                (0..kw).for_each(|kx| piece(at + kx * cin, PatchPiece::Pad));
                continue;
            }
            let base = iy as usize * w as usize;
            if ix0 >= 0 && ix0 + kw as isize <= w {
                let start = (base + ix0 as usize) * cin;
                piece(at, PatchPiece::Input { start, n: row });
                continue;
            }
            for kx in 0..kw {
                let ix = ix0 + kx as isize;
                if ix >= 0 && ix < w {
                    let start = (base + ix as usize) * cin;
                    piece(at + kx * cin, PatchPiece::Input { start, n: cin });
                } else {
                    piece(at + kx * cin, PatchPiece::Pad);
                }
            }
        }
    }

    /// Output channel `c`'s requantization in [`FusedRequant`]'s form (the vector epilogues').
    pub fn epilogue_requant(&self, c: usize) -> FusedRequant {
        FusedRequant::new(self.multiplier.get(c), self.shift.get(c), self.out.rounding)
    }

    /// kh·kw·C_in.
    pub const fn k(&self) -> usize {
        self.window.kernel_h * self.window.kernel_w * self.input.c
    }
    /// The value a padded tap of input channel `c` reads.
    #[inline(always)]
    pub fn pad_value(&self, c: usize) -> i8 {
        match self.pad_values.get(c) {
            Some(&v) => v,
            None => self.input_zero_point.clamp(-128, 127) as i8,
        }
    }
}

/// One image's buffers for an op: what every conv kernel that may decline takes, and the
/// batched fully connected (which leaves the scratch alone).
pub struct ConvImage<'a> {
    /// The input tensor (HWC).
    pub input: &'a [i8],
    /// The output tensor (HWC; a band's rows for the band entry points).
    pub output: &'a mut [i8],
    /// The op's scratch in this image's working area.
    pub scratch: &'a mut [u8],
}

impl<'a> ConvImage<'a> {
    /// The buffers of one image.
    pub fn new(input: &'a [i8], output: &'a mut [i8], scratch: &'a mut [u8]) -> Self {
        ConvImage {
            input,
            output,
            scratch,
        }
    }
}

/// fully_connected parameters.
#[derive(Clone, Copy, Debug)]
pub struct FcParams<'a> {
    /// Inputs per output (K).
    pub k: usize,
    /// Outputs (N).
    pub n: usize,
    /// `[N][K]`.
    pub weights: &'a [i8],
    /// Bias per output.
    pub bias: I32Array<'a>,
    /// M0 per output.
    pub multiplier: I32Array<'a>,
    /// Shift per output.
    pub shift: I32Array<'a>,
    /// Whether every output has the same multiplier and shift (TFLite's per-tensor fully
    /// connected): found once at prepare ([`FcParams::per_tensor_of`]), so kernels may decode
    /// the requantization once.
    pub per_tensor: bool,
    /// Output zero point and clamp.
    pub out: OutputQuant,
    /// The weights packed at prepare for one kernel set ([`crate::Model::prepare_packed`]), or
    /// none.
    pub packed: Packed<'a>,
}

impl<'a> FcParams<'a> {
    /// [`FcParams::per_tensor`] of these multipliers and shifts.
    pub fn per_tensor_of(multiplier: &I32Array, shift: &I32Array) -> bool {
        multiplier.all_equal() && shift.all_equal()
    }

    /// Outputs `n0..n1` only (the same bytes for those outputs).
    pub fn outputs(&self, n0: usize, n1: usize) -> FcParams<'a> {
        FcParams {
            n: n1 - n0,
            weights: &self.weights[n0 * self.k..n1 * self.k],
            bias: self.bias.slice(n0, n1),
            multiplier: self.multiplier.slice(n0, n1),
            shift: self.shift.slice(n0, n1),
            packed: super::packed::fc_outputs(&self.packed, self.k, n0, n1),
            ..*self
        }
    }
}

/// max_pool / avg_pool / tflite_avg_pool parameters.
#[derive(Clone, Copy, Debug)]
pub struct PoolParams {
    /// Input shape.
    pub input: Shape,
    /// Output shape.
    pub output: Shape,
    /// The window (no dilation); taps in the padding are skipped.
    pub window: Placement,
    /// Input zero point (avg_pool).
    pub input_zero_point: i32,
    /// M0 (avg_pool).
    pub multiplier: i32,
    /// Shift (avg_pool).
    pub shift: i32,
    /// Output zero point and clamp (max_pool and tflite_avg_pool use only the clamp).
    pub out: OutputQuant,
}

impl PoolParams {
    /// Whether the window is uniform with no padding: what the SIMD pools cover.
    pub const fn is_unpadded_uniform(&self) -> bool {
        self.window.pad_top == 0 && self.window.is_uniform(self.input, self.output)
    }

    /// Output pixel `i`'s window (pixels in row-major order): the input rows and columns it
    /// reads, clipped to the input, and their count (at least 1: validation keeps every
    /// window's count ≥ 1).
    #[inline(always)]
    pub fn window_of(&self, i: usize) -> (Range<usize>, Range<usize>, i32) {
        let (g, wo) = (&self.window, self.output.w.max(1));
        let rows = Self::taps(i / wo, g.stride_h, g.pad_top, g.kernel_h, self.input.h);
        let cols = Self::taps(i % wo, g.stride_w, g.pad_left, g.kernel_w, self.input.w);
        let count = ((rows.len() * cols.len()) as i32).max(1);
        (rows, cols, count)
    }

    /// The input rows (or columns) output row (or column) `o` reads along an axis of `len`
    /// values: `kernel` taps from `o·stride − pad`, clipped to the input.
    #[inline(always)]
    pub fn taps(o: usize, stride: usize, pad: usize, kernel: usize, len: usize) -> Range<usize> {
        let start = (o * stride) as isize - pad as isize;
        let end = (start + kernel as isize).min(len as isize);
        start.max(0) as usize..end.max(0) as usize
    }
}

/// depthwise_conv2d parameters: weights `[kh][kw][C_out]` (TFLite's layout without its leading
/// 1), output channel `oc` reading input channel `oc / depth_multiplier`; bias, multiplier and
/// shift per output channel. Padded taps read the input zero point (the bias already holds
/// −z_in·Σw).
#[derive(Clone, Copy, Debug)]
pub struct DepthwiseParams<'a> {
    /// Input shape.
    pub input: Shape,
    /// Output shape (C_out = C_in · depth_multiplier).
    pub output: Shape,
    /// The window.
    pub window: Placement,
    /// Output channels per input channel.
    pub depth_multiplier: usize,
    /// `[kh][kw][C_out]`.
    pub weights: &'a [i8],
    /// Bias per output channel.
    pub bias: I32Array<'a>,
    /// M0 per output channel.
    pub multiplier: I32Array<'a>,
    /// Shift per output channel.
    pub shift: I32Array<'a>,
    /// Input zero point (the value of padded taps).
    pub input_zero_point: i32,
    /// Output zero point, clamp and rounding.
    pub out: OutputQuant,
    /// The weights packed at prepare for one kernel set ([`crate::Model::prepare_packed`]), or
    /// none.
    pub packed: Packed<'a>,
}

impl DepthwiseParams<'_> {
    /// The op's geometry, for the scratch rules ([`crate::Kernels::scratch_bytes`]).
    pub const fn geometry(&self) -> OpGeometry {
        let kind = crate::format::OP_DEPTHWISE_CONV2D;
        OpGeometry::new(kind, &self.window, self.input, self.output)
    }
}

/// softmax parameters (TFLite's integer softmax over the channels of each pixel; the output
/// scale is 1/256 and its zero point −128).
#[derive(Clone, Copy, Debug)]
pub struct SoftmaxParams {
    /// Values per row (the channels).
    pub depth: usize,
    /// The input scale times β in Q5.26 after the left shift: M0 ([`crate::requant`]'s form).
    pub input_multiplier: i32,
    /// Its left shift, ≥ 0.
    pub input_left_shift: i32,
    /// Differences from the row's maximum below this give 0 (TFLite's `diff_min`, ≤ 0).
    pub diff_min: i32,
    /// The rounding of the input rescaling (TFLite's `MultiplyByQuantizedMultiplierGreaterThanOne`).
    pub rounding: Rounding,
}

/// pad parameters: the input placed at (`pad_top`, `pad_left`) of the output, every other byte
/// `value`.
#[derive(Clone, Copy, Debug)]
pub struct PadParams {
    /// Input shape.
    pub input: Shape,
    /// Output shape (the same channels).
    pub output: Shape,
    /// Rows above the input.
    pub pad_top: usize,
    /// Columns left of the input.
    pub pad_left: usize,
    /// The value of the padding.
    pub value: i8,
}

/// tflite_add parameters: TensorFlow Lite's int8 ADD. Each input, less its zero point and
/// shifted left by `left_shift`, is requantized by its own pair, the sum by the output pair,
/// all rounded as `out.rounding` says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TfliteAddParams {
    /// Input zero points.
    pub zero_points: [i32; 2],
    /// The left shift of both inputs (TFLite: 20 for int8).
    pub left_shift: i32,
    /// (M0, shift) of input 0, input 1 and the output.
    pub multipliers: [(i32, i32); 3],
    /// Output zero point, clamp and rounding.
    pub out: OutputQuant,
}
