//! `Model::parse`'s up-front validation, after the header: every tensor record, every op
//! (shapes, windows, constants, the accumulator bound), the data flow and aliasing of the
//! arena, and the arena size, so that running a parsed model cannot fail on its contents.

use core::ops::Range;

use super::inspect::Decoded;
use super::{Model, OpInfo, OpKind, TensorInfo, SETS};
use crate::format::{Header, InputEncoding, Window, MAX_ACCUMULATION};
use crate::kernels::{Kernels, Shape};
use crate::requant::{valid_multiplier, valid_right_shift, M0_MIN};
use crate::{Result, RuntimeError};

/// Largest softmax row: its sum of exponentials (each at most 2^19 in Q12.19) stays in i32.
pub const SOFTMAX_MAX_DEPTH: usize = 4095;

/// Largest tflite_add left shift: (q − z)·2^shift stays in i32 for |q − z| ≤ 255.
pub const TFLITE_ADD_MAX_SHIFT: i32 = 23;

fn overlaps(a: &Range<usize>, b: &Range<usize>) -> bool {
    !a.is_empty() && !b.is_empty() && a.start < b.end && b.start < a.end
}

impl<'a> Model<'a> {
    /// The checks after the header's (see the module doc), the multiply-adds per input and the
    /// scratch each kernel set needs.
    pub(super) fn validate(mut self, h: &Header) -> Result<Model<'a>> {
        for id in 0..self.n_tensors {
            self.validate_tensor(id as u16)?;
        }
        let input = self.tensor_or(self.input_tensor, "input tensor")?;
        if input.shape() != self.input {
            return Err(RuntimeError::BadTensor {
                index: input.id as u32,
                what: "input shape",
            });
        }
        // octet's raw pixels are real = pixel/255: q = pixel − 128 at zero point −128. (A u8
        // H×W×C input is q = u − 128 at any zero point: its uint8 zero point is this + 128.)
        if self.input_encoding == InputEncoding::PixelsU8Chw && input.zero_point != -128 {
            return Err(RuntimeError::BadTensor {
                index: input.id as u32,
                what: "input zero point (−128 for raw pixels)",
            });
        }
        if input.scale.to_bits() != h.input_scale().to_bits()
            || input.zero_point != h.input_zero_point()
        {
            return Err(RuntimeError::BadHeader {
                what: "input scale or zero point",
            });
        }
        let output = self.tensor_or(self.output_tensor, "output tensor")?;
        if output.scale.to_bits() != h.output_scale().to_bits() {
            return Err(RuntimeError::BadHeader {
                what: "output scale",
            });
        }
        if output.zero_point != h.output_zero_point() {
            return Err(RuntimeError::BadHeader {
                what: "output zero point",
            });
        }
        self.out_len = output.len();
        let mut scratch = [0u32; SETS];
        for j in 0..self.n_ops {
            let d = self.decode(j)?;
            self.validate_op(&d)?;
            let g = d.op.geometry(&d.input, &d.output);
            for (s, k) in scratch.iter_mut().zip(Kernels::ALL) {
                let need =
                    u32::try_from(k.scratch_bytes(&g)).map_err(|_| RuntimeError::OutOfBounds {
                        what: "scratch (over 4 GiB)",
                        index: j,
                    })?;
                *s = (*s).max(need);
            }
        }
        self.scratch = scratch;
        let last = self.decode(self.n_ops - 1)?.op;
        if last.output != self.output_tensor {
            return Err(RuntimeError::BadHeader {
                what: "output tensor (not the last op's output)",
            });
        }
        self.check_data_flow()?;
        self.check_arena_exact()?;
        self.macs = self.ops().map(|o| self.op_macs(&o)).sum();
        Ok(self)
    }

    fn validate_tensor(&self, id: u16) -> Result<()> {
        let index = id as u32;
        let rec = self.tensor_record(id).ok_or(RuntimeError::OutOfBounds {
            what: "tensor",
            index,
        })?;
        let bad = |what| Err(RuntimeError::BadTensor { index, what });
        if !rec.reserved_zero() {
            return bad("reserved");
        }
        let (c, h, w) = rec.chw();
        if c == 0 || h == 0 || w == 0 {
            return bad("shape");
        }
        let n = c as u64 * h as u64 * w as u64;
        if rec.bytes() as u64 != n {
            return bad("bytes");
        }
        if rec.offset() as u64 + n > self.arena_bytes as u64 {
            return Err(RuntimeError::OutOfBounds {
                what: "tensor in arena",
                index,
            });
        }
        let s = rec.scale();
        if !(s.is_finite() && s > 0.0) {
            return bad("scale");
        }
        if !(-128..=127).contains(&rec.zero_point()) {
            return bad("zero point");
        }
        Ok(())
    }

    /// Op `d.op`'s tensors, window, activation range and constants (per kind).
    fn validate_op(&self, d: &Decoded<'a>) -> Result<()> {
        let (o, tin, tout) = (&d.op, &d.input, &d.output);
        let op = o.index;
        let param = |what| Err(RuntimeError::BadParam { op, what });
        let tin1 = match (o.kind.binary(), o.input1) {
            (true, Some(t)) => Some(self.tensor_id(t)?),
            (true, None) => return param("input 1"),
            (false, Some(_)) => return param("input 1"),
            (false, None) => None,
        };
        if o.output == o.input0 || Some(o.output) == o.input1 {
            return Err(RuntimeError::Aliasing {
                op,
                tensor: o.output as u32,
            });
        }
        if !(-128 <= o.act_min && o.act_min <= o.act_max && o.act_max <= 127) {
            return param("activation range");
        }
        if o.param != 0 && !matches!(o.kind, OpKind::Softmax | OpKind::Pad | OpKind::TfliteAdd) {
            return param("parameter (0 for this kind)");
        }
        let (si, so) = (tin.shape(), tout.shape());
        match o.kind {
            OpKind::Conv2d => {
                check_window(o, si, so, WindowUse::Conv)?;
                let k = o.window.kernel_h as usize * o.window.kernel_w as usize * si.c;
                self.check_dense(o, so.c, k, si.c)
            }
            OpKind::DepthwiseConv2d => self.validate_depthwise(o, si, so),
            OpKind::FullyConnected => {
                if !o.window.is_none() {
                    return param("window");
                }
                if so.h != 1 || so.w != 1 {
                    return Err(RuntimeError::BadShape { op });
                }
                self.check_dense(o, so.c, si.len(), 0)
            }
            OpKind::MaxPool | OpKind::AvgPool | OpKind::TfliteAvgPool => {
                validate_pool(o, tin, tout)
            }
            OpKind::Add => validate_add(o, si, tin1.map(|t| t.shape()), so),
            OpKind::TfliteAdd => validate_tflite_add(o, si, tin1.map(|t| t.shape()), so),
            OpKind::Softmax => validate_softmax(o, tin, tout),
            OpKind::Reshape => validate_reshape(o, tin, tout),
            OpKind::Pad => validate_pad(o, tin, tout),
        }
    }

    /// A depthwise conv: its window, C_out a multiple of C_in, and per output channel its
    /// constants and the accumulator bound over its kh·kw taps.
    fn validate_depthwise(&self, o: &OpInfo<'a>, si: Shape, so: Shape) -> Result<()> {
        let op = o.index;
        let param = |what| Err(RuntimeError::BadParam { op, what });
        check_window(o, si, so, WindowUse::Conv)?;
        if so.c == 0 || !so.c.is_multiple_of(si.c) {
            return Err(RuntimeError::BadShape { op });
        }
        let taps = o.window.kernel_h as usize * o.window.kernel_w as usize;
        if o.weights.len() != taps * so.c {
            return param("weights length");
        }
        if o.bias.len() != so.c {
            return param("bias length");
        }
        if o.multipliers.len() != so.c || o.shifts.len() != so.c {
            return param("multiplier/shift length");
        }
        if !o.pad_values.is_empty() {
            return param("pad values (a depthwise conv pads with its input zero point)");
        }
        for c in 0..so.c {
            if !valid_multiplier(o.multipliers.get(c), o.shifts.get(c)) {
                return param("multiplier/shift range");
            }
            let mut sum_abs = 0u64;
            for t in 0..taps {
                let w = o.weights[t * so.c + c];
                if w == i8::MIN {
                    return param("weight -128");
                }
                sum_abs += w.unsigned_abs() as u64;
            }
            if (o.bias.get(c) as i64).unsigned_abs() + 128 * sum_abs > i32::MAX as u64 {
                return Err(RuntimeError::AccumulatorOverflow { op, k: taps as u32 });
            }
        }
        Ok(())
    }

    /// conv / fc constants (`n` outputs of `k` multiply-adds): K within the accumulation
    /// bound, lengths, M0/shift ranges, weights in [−127, 127], the exact accumulator bound
    /// |bias| + 128·Σ|w| < 2^31 per output channel, then the pad values (none, or one per
    /// input channel: `pad_channels`, 0 where the op has no padding).
    fn check_dense(&self, o: &OpInfo<'a>, n: usize, k: usize, pad_channels: usize) -> Result<()> {
        let op = o.index;
        if k > MAX_ACCUMULATION as usize {
            return Err(RuntimeError::AccumulatorOverflow { op, k: k as u32 });
        }
        let param = |what| Err(RuntimeError::BadParam { op, what });
        if o.weights.len() != n * k {
            return param("weights length");
        }
        if o.bias.len() != n {
            return param("bias length");
        }
        if o.multipliers.len() != n || o.shifts.len() != n {
            return param("multiplier/shift length");
        }
        for c in 0..n {
            if !valid_multiplier(o.multipliers.get(c), o.shifts.get(c)) {
                return param("multiplier/shift range");
            }
            let mut sum_abs = 0u64;
            for &w in &o.weights[c * k..(c + 1) * k] {
                if w == i8::MIN {
                    return param("weight -128");
                }
                sum_abs += w.unsigned_abs() as u64;
            }
            if (o.bias.get(c) as i64).unsigned_abs() + 128 * sum_abs > i32::MAX as u64 {
                return Err(RuntimeError::AccumulatorOverflow { op, k: k as u32 });
            }
        }
        if !(o.pad_values.is_empty() || o.pad_values.len() == pad_channels) {
            return param("pad values length");
        }
        Ok(())
    }

    /// Data flow and memory: every op reads tensors already written (the input or an earlier
    /// op's output), each tensor is written at most once (never the input), and no op's output
    /// overlaps a tensor that is live across it (its own inputs included). Scratch is not in
    /// the file: it follows the activations (`Model::working_bytes`).
    fn check_data_flow(&self) -> Result<()> {
        for t in 0..self.n_tensors {
            let t16 = t as u16;
            let mut def: Option<u32> = None; // op index + 1; 0 = the model input
            if t16 == self.input_tensor {
                def = Some(0);
            }
            let mut last: Option<u32> = None;
            for j in 0..self.n_ops {
                let rec = self.op_record(j).ok_or(RuntimeError::OutOfBounds {
                    what: "op",
                    index: j,
                })?;
                if rec.input0() == t16 || rec.input1() == t16 {
                    if def.is_none() {
                        return Err(RuntimeError::Aliasing { op: j, tensor: t });
                    }
                    last = Some(j);
                }
                if rec.output() == t16 {
                    if def.is_some() {
                        return Err(RuntimeError::Aliasing { op: j, tensor: t });
                    }
                    def = Some(j + 1);
                }
            }
            if t16 == self.output_tensor {
                last = Some(self.n_ops - 1);
            }
            let (Some(def), Some(last)) = (def, last) else {
                continue;
            };
            let tr = self.tensor(t16).map(|i| i.range()).unwrap_or(0..0);
            for j in def..=last {
                let d = self.decode(j)?;
                if d.op.output != t16 && overlaps(&d.output.range(), &tr) {
                    return Err(RuntimeError::Aliasing { op: j, tensor: t });
                }
            }
        }
        Ok(())
    }

    /// The header's arena_bytes is exact (FORMAT.md, Arena): the end of the highest tensor,
    /// and no more than all tensors side by side, each rounded up to 16 bytes (what the
    /// planner can produce: no unused gap beyond alignment). So a file cannot ask its reader
    /// for more memory than its own tensors describe.
    fn check_arena_exact(&self) -> Result<()> {
        let (mut end, mut packed) = (0u64, 0u64);
        for t in self.tensors() {
            let r = t.range();
            end = end.max(r.end as u64);
            packed += (r.len() as u64).next_multiple_of(16);
        }
        let arena = self.arena_bytes as u64;
        if arena != end {
            return Err(RuntimeError::BadHeader {
                what: "arena_bytes (must equal the end of the highest tensor)",
            });
        }
        if arena > packed {
            return Err(RuntimeError::BadHeader {
                what: "arena_bytes (larger than all tensors side by side: unused gaps)",
            });
        }
        Ok(())
    }
}

/// What an op's window is for: which of its fields may be set.
#[derive(Clone, Copy, PartialEq, Eq)]
enum WindowUse {
    /// Convolutions: any padding and dilation.
    Conv,
    /// Pools: no dilation, and every window keeps at least one tap inside the input.
    Pool,
}

/// The window of a conv or pool: kernel, strides and dilations ≥ 1, and the output size the
/// formula gives, `(in + pad_before + pad_after − ((k − 1)·dilation + 1)) / stride + 1` on
/// both axes (FORMAT.md, "Windows"); for pools no dilation and no window wholly in padding.
fn check_window(o: &OpInfo, si: Shape, so: Shape, use_: WindowUse) -> Result<()> {
    let op = o.index;
    let w: &Window = &o.window;
    let bad = || Err(RuntimeError::BadParam { op, what: "window" });
    if w.kernel_h == 0 || w.kernel_w == 0 || w.stride_h == 0 || w.stride_w == 0 {
        return bad();
    }
    if w.dilation_h == 0 || w.dilation_w == 0 {
        return bad();
    }
    if use_ == WindowUse::Pool && (w.dilation_h != 1 || w.dilation_w != 1) {
        return bad();
    }
    let axis = |len: usize, out: usize, k: u8, s: u8, d: u8, before: u8, after: u8| {
        let eff = (k as usize - 1) * d as usize + 1;
        let padded = len + before as usize + after as usize;
        if padded < eff || out != (padded - eff) / s as usize + 1 {
            return false;
        }
        // A pool's windows each keep a tap inside: the first starts before the input's end
        // and the last starts before it too.
        use_ == WindowUse::Conv
            || ((before as usize) < eff && (out - 1) * (s as usize) < len + before as usize)
    };
    let h = axis(
        si.h,
        so.h,
        w.kernel_h,
        w.stride_h,
        w.dilation_h,
        w.pad_top,
        w.pad_bottom,
    );
    let wd = axis(
        si.w,
        so.w,
        w.kernel_w,
        w.stride_w,
        w.dilation_w,
        w.pad_left,
        w.pad_right,
    );
    if !(h && wd) {
        return Err(RuntimeError::BadShape { op });
    }
    Ok(())
}

/// Whether the two tensors share one quantization (scale bits and zero point).
fn same_quant(a: &TensorInfo, b: &TensorInfo) -> bool {
    a.scale.to_bits() == b.scale.to_bits() && a.zero_point == b.zero_point
}

/// Whether op `o` has no constant arrays.
fn no_constants(o: &OpInfo) -> bool {
    o.weights.is_empty()
        && o.bias.is_empty()
        && o.multipliers.is_empty()
        && o.shifts.is_empty()
        && o.pad_values.is_empty()
}

/// A pooling op: its window gives the output's size, channels kept, no weights; max pool and
/// TFLite's average pool keep the input's quantization and have no constants; octet's avg
/// pool has no padding and one valid multiplier and shift.
fn validate_pool(o: &OpInfo, tin: &TensorInfo, tout: &TensorInfo) -> Result<()> {
    let op = o.index;
    let param = |what| Err(RuntimeError::BadParam { op, what });
    let (si, so) = (tin.shape(), tout.shape());
    check_window(o, si, so, WindowUse::Pool)?;
    if si.c != so.c {
        return Err(RuntimeError::BadShape { op });
    }
    if !o.weights.is_empty() || !o.bias.is_empty() || !o.pad_values.is_empty() {
        return param("constants");
    }
    if o.kind == OpKind::AvgPool {
        let w = &o.window;
        if w.pad_top != 0 || w.pad_left != 0 || w.pad_bottom != 0 || w.pad_right != 0 {
            return param("window (avg_pool has no padding)");
        }
        if o.multipliers.len() != 1 || o.shifts.len() != 1 {
            return param("multiplier/shift length");
        }
        if !valid_multiplier(o.multipliers.get(0), o.shifts.get(0)) {
            return param("multiplier/shift range");
        }
        return Ok(());
    }
    if !no_constants(o) {
        return param("constants");
    }
    if !same_quant(tin, tout) {
        return param("output quantization (must equal the input's)");
    }
    Ok(())
}

/// What both adds require: no window, both inputs of the output's shape, no weights, biases
/// or pad values.
fn check_elementwise(o: &OpInfo, si: Shape, si1: Option<Shape>, so: Shape) -> Result<()> {
    let op = o.index;
    let param = |what| Err(RuntimeError::BadParam { op, what });
    if !o.window.is_none() {
        return param("window");
    }
    if si != so || si1 != Some(so) {
        return Err(RuntimeError::BadShape { op });
    }
    if !o.weights.is_empty() || !o.bias.is_empty() || !o.pad_values.is_empty() {
        return param("constants");
    }
    Ok(())
}

/// octet's add ([`check_elementwise`]): two multipliers (at least one normalized) and a valid
/// right shift.
fn validate_add(o: &OpInfo, si: Shape, si1: Option<Shape>, so: Shape) -> Result<()> {
    let op = o.index;
    let param = |what| Err(RuntimeError::BadParam { op, what });
    check_elementwise(o, si, si1, so)?;
    if o.multipliers.len() != 2 || o.shifts.len() != 1 {
        return param("multiplier/shift length");
    }
    let (m0, m1) = (o.multipliers.get(0), o.multipliers.get(1));
    if m0 < 0 || m1 < 0 || m0.max(m1) < M0_MIN {
        return param("multiplier range");
    }
    if !valid_right_shift(o.shifts.get(0)) {
        return param("shift range");
    }
    Ok(())
}

/// TFLite's add ([`check_elementwise`]): three valid (M0, shift) pairs and a left shift in
/// [0, 23].
fn validate_tflite_add(o: &OpInfo, si: Shape, si1: Option<Shape>, so: Shape) -> Result<()> {
    let op = o.index;
    let param = |what| Err(RuntimeError::BadParam { op, what });
    check_elementwise(o, si, si1, so)?;
    if o.multipliers.len() != 3 || o.shifts.len() != 3 {
        return param("multiplier/shift length");
    }
    if (0..3).any(|i| !valid_multiplier(o.multipliers.get(i), o.shifts.get(i))) {
        return param("multiplier/shift range");
    }
    if !(0..=TFLITE_ADD_MAX_SHIFT).contains(&o.param) {
        return param("left shift");
    }
    Ok(())
}

/// softmax: no window, the input's shape, output scale 1/256 and zero point −128, no clamp,
/// rows of at most [`SOFTMAX_MAX_DEPTH`] channels, one normalized multiplier with a left shift
/// in [0, 30], diff_min ≤ 0.
fn validate_softmax(o: &OpInfo, tin: &TensorInfo, tout: &TensorInfo) -> Result<()> {
    let op = o.index;
    let param = |what| Err(RuntimeError::BadParam { op, what });
    if !o.window.is_none() {
        return param("window");
    }
    if tin.shape() != tout.shape() || tin.c as usize > SOFTMAX_MAX_DEPTH {
        return Err(RuntimeError::BadShape { op });
    }
    if tout.scale.to_bits() != (1.0f32 / 256.0).to_bits() || tout.zero_point != -128 {
        return param("output quantization (softmax writes scale 1/256, zero point -128)");
    }
    if (o.act_min, o.act_max) != (-128, 127) {
        return param("activation range (softmax has no clamp)");
    }
    if !o.weights.is_empty() || !o.bias.is_empty() || !o.pad_values.is_empty() {
        return param("constants");
    }
    if o.multipliers.len() != 1 || o.shifts.len() != 1 {
        return param("multiplier/shift length");
    }
    if o.multipliers.get(0) < M0_MIN || !(0..=30).contains(&o.shifts.get(0)) {
        return param("multiplier/shift range");
    }
    if o.param > 0 {
        return param("diff_min");
    }
    Ok(())
}

/// reshape: no window or constants, the input's bytes and quantization, no clamp.
fn validate_reshape(o: &OpInfo, tin: &TensorInfo, tout: &TensorInfo) -> Result<()> {
    let op = o.index;
    let param = |what| Err(RuntimeError::BadParam { op, what });
    if !o.window.is_none() || !no_constants(o) {
        return param("window or constants");
    }
    if tin.len() != tout.len() {
        return Err(RuntimeError::BadShape { op });
    }
    if !same_quant(tin, tout) {
        return param("output quantization (must equal the input's)");
    }
    if (o.act_min, o.act_max) != (-128, 127) {
        return param("activation range (reshape has no clamp)");
    }
    Ok(())
}

/// pad: only the padding fields of the window, the output the input plus its padding (same
/// channels), the input's quantization, a pad value in int8, no constants, no clamp.
fn validate_pad(o: &OpInfo, tin: &TensorInfo, tout: &TensorInfo) -> Result<()> {
    let op = o.index;
    let param = |what| Err(RuntimeError::BadParam { op, what });
    let w = &o.window;
    let unused = w.kernel_h | w.kernel_w | w.stride_h | w.stride_w | w.dilation_h | w.dilation_w;
    if unused != 0 || !no_constants(o) {
        return param("window or constants");
    }
    let (si, so) = (tin.shape(), tout.shape());
    if so.c != si.c
        || so.h != si.h + w.pad_top as usize + w.pad_bottom as usize
        || so.w != si.w + w.pad_left as usize + w.pad_right as usize
    {
        return Err(RuntimeError::BadShape { op });
    }
    if !same_quant(tin, tout) {
        return param("output quantization (must equal the input's)");
    }
    if !(-128..=127).contains(&o.param) {
        return param("pad value");
    }
    if (o.act_min, o.act_max) != (-128, 127) {
        return param("activation range (pad has no clamp)");
    }
    Ok(())
}
