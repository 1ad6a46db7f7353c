//! `Model::parse`'s up-front validation, after the header: every tensor record, every op
//! (shapes, windows, constants, the accumulator bound), the data flow and aliasing of the
//! arena, and the arena size, so that running a parsed model cannot fail on its contents.

use core::ops::Range;

use super::inspect::Decoded;
use super::{Model, OpInfo, OpKind, TensorInfo};
use crate::format::{Header, MAX_ACCUMULATION};
use crate::kernels::Shape;
use crate::requant::{valid_multiplier, valid_right_shift, M0_MIN};
use crate::{Result, RuntimeError};

fn overlaps(a: &Range<usize>, b: &Range<usize>) -> bool {
    !a.is_empty() && !b.is_empty() && a.start < b.end && b.start < a.end
}

impl<'a> Model<'a> {
    /// The checks after the header's (see the module doc), and the multiply-adds per image.
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
        if input.zero_point != -128 {
            return Err(RuntimeError::BadTensor {
                index: input.id as u32,
                what: "input zero point",
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
        for j in 0..self.n_ops {
            self.validate_op(&self.decode(j)?)?;
        }
        let last = self.decode(self.n_ops - 1)?.op;
        if last.output != self.output_tensor {
            return Err(RuntimeError::BadHeader {
                what: "output tensor (not the last op's output)",
            });
        }
        self.check_data_flow()?;
        self.check_arena_exact()?;
        self.macs = self
            .ops()
            .filter(|o| matches!(o.kind, OpKind::Conv2d | OpKind::FullyConnected))
            .filter_map(|o| {
                let t = self.tensor(o.output)?;
                Some((t.len() * o.weights.len() / (t.c as usize).max(1)) as u64)
            })
            .sum();
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

    /// Op `d.op`'s tensors, window, activation range, constants (per kind) and scratch.
    fn validate_op(&self, d: &Decoded<'a>) -> Result<()> {
        let (o, tin, tout) = (&d.op, &d.input, &d.output);
        let op = o.index;
        let param = |what| Err(RuntimeError::BadParam { op, what });
        let tin1 = match (o.kind, o.input1) {
            (OpKind::Add, Some(t)) => Some(self.tensor_id(t)?),
            (OpKind::Add, None) => return param("input 1"),
            (_, Some(_)) => return param("input 1"),
            (_, None) => None,
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
        match o.kind {
            OpKind::Conv2d => self.validate_conv(o, tin.shape(), tout.shape())?,
            OpKind::FullyConnected => self.validate_fc(o, tin.shape(), tout.shape())?,
            OpKind::MaxPool | OpKind::AvgPool => validate_pool(o, tin, tout)?,
            OpKind::Add => validate_add(o, tin.shape(), tin1.map(|t| t.shape()), tout.shape())?,
        }
        if o.scratch_bytes == 0 {
            if o.scratch_offset != 0 {
                return param("scratch offset");
            }
        } else if o.scratch_offset as u64 + o.scratch_bytes as u64 > self.arena_bytes as u64 {
            return Err(RuntimeError::OutOfBounds {
                what: "scratch",
                index: op,
            });
        }
        Ok(())
    }

    /// A conv: its window fits the padded input and gives the output's size; its constants
    /// and pad values ([`Model::check_dense`]).
    fn validate_conv(&self, o: &OpInfo<'a>, si: Shape, so: Shape) -> Result<()> {
        let op = o.index;
        let (kh, kw, s, pad) = window(o);
        if kh == 0 || kw == 0 || s == 0 {
            return Err(RuntimeError::BadParam { op, what: "window" });
        }
        if si.h + 2 * pad < kh || si.w + 2 * pad < kw {
            return Err(RuntimeError::BadShape { op });
        }
        if so.h != (si.h + 2 * pad - kh) / s + 1 || so.w != (si.w + 2 * pad - kw) / s + 1 {
            return Err(RuntimeError::BadShape { op });
        }
        self.check_dense(o, so.c, kh * kw * si.c, si.c)
    }

    /// A fully connected op: no window, a 1×1 output; its constants, K = the whole input, and
    /// no pad values ([`Model::check_dense`]).
    fn validate_fc(&self, o: &OpInfo<'a>, si: Shape, so: Shape) -> Result<()> {
        let op = o.index;
        if !no_window(o) {
            return Err(RuntimeError::BadParam { op, what: "window" });
        }
        if so.h != 1 || so.w != 1 {
            return Err(RuntimeError::BadShape { op });
        }
        self.check_dense(o, so.c, si.len(), 0)
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

    /// Scratch range of op `j` (validated ops only).
    fn regions(&self, j: u32) -> Result<(u16, Range<usize>, Range<usize>)> {
        let d = self.decode(j)?;
        Ok((d.op.output, d.output.range(), d.op.scratch_range()))
    }

    /// Data flow and memory: every op reads tensors already written (the input or an earlier
    /// op's output), each tensor is written at most once (never the input), and no op's output
    /// or scratch overlaps a tensor that is live across it (its own inputs included).
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
            let Some(def) = def else {
                continue;
            };
            let tr = self.tensor(t16).map(|i| i.range()).unwrap_or(0..0);
            // An op's scratch never overlaps its own output, even one nothing reads.
            if def > 0 {
                let (_, _, scratch) = self.regions(def - 1)?;
                if overlaps(&scratch, &tr) {
                    return Err(RuntimeError::Aliasing {
                        op: def - 1,
                        tensor: t,
                    });
                }
            }
            let Some(last) = last else {
                continue;
            };
            for j in def..=last {
                let (out_id, out, scratch) = self.regions(j)?;
                if (out_id != t16 && overlaps(&out, &tr)) || overlaps(&scratch, &tr) {
                    return Err(RuntimeError::Aliasing { op: j, tensor: t });
                }
            }
        }
        Ok(())
    }

    /// The header's arena_bytes is exact (FORMAT.md, Arena): the end of the highest tensor or
    /// scratch region, and no more than all those regions side by side, each rounded up to 16
    /// bytes (what the planner can produce: no unused gap beyond alignment). So a file cannot
    /// ask its reader for more memory than its own tensors and scratch describe.
    fn check_arena_exact(&self) -> Result<()> {
        let (mut end, mut packed) = (0u64, 0u64);
        let mut region = |r: Range<usize>| {
            if !r.is_empty() {
                end = end.max(r.end as u64);
                packed += (r.len() as u64).next_multiple_of(16);
            }
        };
        for t in self.tensors() {
            region(t.range());
        }
        for o in self.ops() {
            region(o.scratch_range());
        }
        let arena = self.arena_bytes as u64;
        if arena != end {
            return Err(RuntimeError::BadHeader {
                what: "arena_bytes (must equal the end of the highest tensor or scratch region)",
            });
        }
        if arena > packed {
            return Err(RuntimeError::BadHeader {
                what: "arena_bytes (larger than all tensors and scratch side by side: unused gaps)",
            });
        }
        Ok(())
    }
}

/// The window of op `o` as `usize`s: (kernel_h, kernel_w, stride, pad).
fn window(o: &OpInfo) -> (usize, usize, usize, usize) {
    (
        o.kernel_h as usize,
        o.kernel_w as usize,
        o.stride as usize,
        o.pad as usize,
    )
}

/// Whether op `o` has no window (fully connected, add: all four fields 0).
fn no_window(o: &OpInfo) -> bool {
    o.kernel_h == 0 && o.kernel_w == 0 && o.stride == 0 && o.pad == 0
}

/// A pooling op: its window (no padding) gives the output's size, channels kept, no weights;
/// max pool keeps the input's quantization, avg pool has one valid multiplier and shift.
fn validate_pool(o: &OpInfo, tin: &TensorInfo, tout: &TensorInfo) -> Result<()> {
    let op = o.index;
    let param = |what| Err(RuntimeError::BadParam { op, what });
    let (si, so) = (tin.shape(), tout.shape());
    let (kh, kw, s, pad) = window(o);
    if kh == 0 || kw == 0 || s == 0 || pad != 0 {
        return param("window");
    }
    if si.c != so.c || si.h < kh || si.w < kw {
        return Err(RuntimeError::BadShape { op });
    }
    if so.h != (si.h - kh) / s + 1 || so.w != (si.w - kw) / s + 1 {
        return Err(RuntimeError::BadShape { op });
    }
    if !o.weights.is_empty() || !o.bias.is_empty() || !o.pad_values.is_empty() {
        return param("constants");
    }
    if o.kind == OpKind::MaxPool {
        if !o.multipliers.is_empty() || !o.shifts.is_empty() {
            return param("constants");
        }
        if tin.scale.to_bits() != tout.scale.to_bits() || tin.zero_point != tout.zero_point {
            return param("output quantization (must equal the input's)");
        }
    } else {
        if o.multipliers.len() != 1 || o.shifts.len() != 1 {
            return param("multiplier/shift length");
        }
        if !valid_multiplier(o.multipliers.get(0), o.shifts.get(0)) {
            return param("multiplier/shift range");
        }
    }
    Ok(())
}

/// An add: no window, both inputs of the output's shape, no weights, two multipliers (at least
/// one normalized) and a valid right shift.
fn validate_add(o: &OpInfo, si: Shape, si1: Option<Shape>, so: Shape) -> Result<()> {
    let op = o.index;
    let param = |what| Err(RuntimeError::BadParam { op, what });
    if !no_window(o) {
        return param("window");
    }
    if si != so || si1 != Some(so) {
        return Err(RuntimeError::BadShape { op });
    }
    if !o.weights.is_empty() || !o.bias.is_empty() || !o.pad_values.is_empty() {
        return param("constants");
    }
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
