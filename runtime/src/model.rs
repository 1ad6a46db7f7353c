//! The validated model: parsing (all checks of FORMAT.md), inspection and the interpreter.

use core::ops::Range;

use crate::format::{
    self, Header, OpRecord, TensorRecord, CRC_START, DATA_ALIGN, HEADER_LEN, I32_ALIGN, MAGIC,
    MAX_ACCUMULATION, NO_TENSOR, OP_LEN, TENSOR_LEN, VERSION,
};
use crate::kernels::{
    self, scalar, AddRequant, ConvParams, FcParams, I32Array, Kernels, OutputQuant, PoolParams,
    Resolved, Shape, GROUP_IMAGES,
};
use crate::requant::{valid_multiplier, valid_right_shift, M0_MIN};
use crate::{align16, as_i8, as_i8_mut, Result, RuntimeError};

/// Op kinds of format version 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OpKind {
    /// 2-D convolution (code 1).
    Conv2d,
    /// Fully connected (code 2).
    FullyConnected,
    /// Max pooling (code 3).
    MaxPool,
    /// Average pooling (code 4).
    AvgPool,
    /// Requantizing residual add (code 5).
    Add,
}

impl OpKind {
    /// The kind for a code.
    pub const fn from_code(code: u8) -> Option<Self> {
        Some(match code {
            format::OP_CONV2D => OpKind::Conv2d,
            format::OP_FULLY_CONNECTED => OpKind::FullyConnected,
            format::OP_MAX_POOL => OpKind::MaxPool,
            format::OP_AVG_POOL => OpKind::AvgPool,
            format::OP_ADD => OpKind::Add,
            _ => return None,
        })
    }
    /// The code in the file.
    pub const fn code(self) -> u8 {
        match self {
            OpKind::Conv2d => format::OP_CONV2D,
            OpKind::FullyConnected => format::OP_FULLY_CONNECTED,
            OpKind::MaxPool => format::OP_MAX_POOL,
            OpKind::AvgPool => format::OP_AVG_POOL,
            OpKind::Add => format::OP_ADD,
        }
    }
    /// Lower-case name (`conv2d`, `fully_connected`, `max_pool`, `avg_pool`, `add`).
    pub const fn name(self) -> &'static str {
        match self {
            OpKind::Conv2d => "conv2d",
            OpKind::FullyConnected => "fully_connected",
            OpKind::MaxPool => "max_pool",
            OpKind::AvgPool => "avg_pool",
            OpKind::Add => "add",
        }
    }
}

/// A tensor record, decoded.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TensorInfo {
    /// Tensor id.
    pub id: u16,
    /// Channels.
    pub c: u16,
    /// Height.
    pub h: u16,
    /// Width.
    pub w: u16,
    /// Scale.
    pub scale: f32,
    /// Zero point.
    pub zero_point: i32,
    /// Arena offset.
    pub offset: u32,
    /// Bytes (c·h·w).
    pub bytes: u32,
}

impl TensorInfo {
    /// Shape as `usize`s.
    pub const fn shape(&self) -> Shape {
        Shape {
            c: self.c as usize,
            h: self.h as usize,
            w: self.w as usize,
        }
    }
    /// c·h·w.
    pub const fn len(&self) -> usize {
        self.shape().len()
    }
    /// Whether c·h·w = 0 (never for a valid model).
    pub const fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// `[offset, offset + bytes)` in the working arena.
    pub const fn range(&self) -> Range<usize> {
        self.offset as usize..self.offset as usize + self.bytes as usize
    }
}

/// An op record, decoded, with its constant arrays (borrowed from the file).
#[derive(Clone, Copy, Debug)]
pub struct OpInfo<'a> {
    /// Index in the op table.
    pub index: u32,
    /// Kind.
    pub kind: OpKind,
    /// Input 0 tensor id.
    pub input0: u16,
    /// Input 1 tensor id (add only).
    pub input1: Option<u16>,
    /// Output tensor id.
    pub output: u16,
    /// Kernel height (conv, pools).
    pub kernel_h: u8,
    /// Kernel width.
    pub kernel_w: u8,
    /// Stride.
    pub stride: u8,
    /// Padding (conv).
    pub pad: u8,
    /// Output clamp, lower.
    pub act_min: i32,
    /// Output clamp, upper.
    pub act_max: i32,
    /// Weights (conv `[C_out][kh][kw][C_in]`, fc `[N][K]`).
    pub weights: &'a [i8],
    /// Bias per output channel.
    pub bias: I32Array<'a>,
    /// M0 values (add: m0, m1).
    pub multipliers: I32Array<'a>,
    /// Shift values (add: the right shift n).
    pub shifts: I32Array<'a>,
    /// Pad value per input channel (conv; empty: the input zero point).
    pub pad_values: &'a [i8],
    /// Scratch arena offset.
    pub scratch_offset: u32,
    /// Scratch bytes the op uses ([`crate::scratch_bytes`]).
    pub scratch_bytes: usize,
}

impl OpInfo<'_> {
    /// `[scratch_offset, scratch_offset + scratch_bytes)`, empty when none.
    pub const fn scratch_range(&self) -> Range<usize> {
        if self.scratch_bytes == 0 {
            0..0
        } else {
            self.scratch_offset as usize..self.scratch_offset as usize + self.scratch_bytes
        }
    }
}

/// A parsed and validated `.o8` model, borrowing the file's bytes.
#[derive(Clone, Copy, Debug)]
pub struct Model<'a> {
    tensors: &'a [u8],
    ops: &'a [u8],
    data: &'a [u8],
    n_tensors: u32,
    n_ops: u32,
    arena_bytes: usize,
    input: Shape,
    input_tensor: u16,
    output_tensor: u16,
    out_len: usize,
    output_scale: f32,
    output_zero_point: i32,
    /// Multiply-adds per image, counted once by `parse`.
    macs: u64,
}

fn overlaps(a: &Range<usize>, b: &Range<usize>) -> bool {
    !a.is_empty() && !b.is_empty() && a.start < b.end && b.start < a.end
}

impl<'a> Model<'a> {
    /// Parses and validates a model (every check listed in FORMAT.md, before any run).
    pub fn parse(bytes: &'a [u8]) -> Result<Model<'a>> {
        let len = bytes.len();
        let h = Header::new(bytes).ok_or(RuntimeError::Truncated {
            needed: HEADER_LEN as u64,
            len: len as u64,
        })?;
        if h.magic() != MAGIC {
            return Err(RuntimeError::BadMagic);
        }
        if h.version() != VERSION {
            return Err(RuntimeError::UnsupportedVersion(h.version()));
        }
        if h.header_len() as usize != HEADER_LEN {
            return Err(RuntimeError::BadHeader {
                what: "header length",
            });
        }
        let file_len = h.file_len() as usize;
        if file_len > len {
            return Err(RuntimeError::Truncated {
                needed: file_len as u64,
                len: len as u64,
            });
        }
        if file_len < len {
            return Err(RuntimeError::BadHeader { what: "file_len" });
        }
        let computed = format::crc32(&bytes[CRC_START..]);
        if computed != h.crc() {
            return Err(RuntimeError::CrcMismatch {
                stored: h.crc(),
                computed,
            });
        }
        if !h.reserved_zero() {
            return Err(RuntimeError::BadHeader { what: "reserved" });
        }

        // Tables and data section.
        let n_tensors = h.n_tensors();
        if n_tensors == 0 || n_tensors >= NO_TENSOR as u32 {
            return Err(RuntimeError::BadHeader { what: "n_tensors" });
        }
        if h.tensor_table() as usize != HEADER_LEN {
            return Err(RuntimeError::BadHeader {
                what: "tensor table offset",
            });
        }
        let t_end = HEADER_LEN as u64 + n_tensors as u64 * TENSOR_LEN as u64;
        if t_end > len as u64 {
            return Err(RuntimeError::Truncated {
                needed: t_end,
                len: len as u64,
            });
        }
        let n_ops = h.n_ops();
        // Each op writes a distinct tensor other than the input: n_ops < n_tensors.
        if n_ops == 0 || n_ops >= n_tensors {
            return Err(RuntimeError::BadHeader { what: "n_ops" });
        }
        let o_off = h.op_table() as u64;
        if o_off < t_end {
            return Err(RuntimeError::BadHeader {
                what: "op table offset",
            });
        }
        let o_end = o_off + n_ops as u64 * OP_LEN as u64;
        if o_end > len as u64 {
            return Err(RuntimeError::Truncated {
                needed: o_end,
                len: len as u64,
            });
        }
        let d_off = h.data_offset() as u64;
        if !d_off.is_multiple_of(DATA_ALIGN as u64) || d_off < o_end {
            return Err(RuntimeError::BadHeader {
                what: "data offset",
            });
        }
        let d_end = d_off + h.data_len() as u64;
        if d_end > len as u64 {
            return Err(RuntimeError::Truncated {
                needed: d_end,
                len: len as u64,
            });
        }

        let (c, hh, w) = h.input_chw();
        if c == 0 || hh == 0 || w == 0 {
            return Err(RuntimeError::BadHeader {
                what: "input shape",
            });
        }
        let model = Model {
            tensors: &bytes[HEADER_LEN..t_end as usize],
            ops: &bytes[o_off as usize..o_end as usize],
            data: &bytes[d_off as usize..d_end as usize],
            n_tensors,
            n_ops,
            arena_bytes: h.arena_bytes() as usize,
            input: Shape {
                c: c as usize,
                h: hh as usize,
                w: w as usize,
            },
            input_tensor: h.input_tensor(),
            output_tensor: h.output_tensor(),
            out_len: 0,
            output_scale: h.output_scale(),
            output_zero_point: h.output_zero_point(),
            macs: 0,
        };
        model.validate(&h)
    }

    fn validate(mut self, h: &Header) -> Result<Model<'a>> {
        for id in 0..self.n_tensors {
            self.validate_tensor(id as u16)?;
        }
        let input = self
            .tensor(self.input_tensor)
            .ok_or(RuntimeError::OutOfBounds {
                what: "input tensor",
                index: self.input_tensor as u32,
            })?;
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
        let output = self
            .tensor(self.output_tensor)
            .ok_or(RuntimeError::OutOfBounds {
                what: "output tensor",
                index: self.output_tensor as u32,
            })?;
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
            let op = self.decode_op(j)?;
            self.validate_op(&op)?;
        }
        let last = self.decode_op(self.n_ops - 1)?;
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

    fn tensor_record(&self, id: u16) -> Option<TensorRecord<'a>> {
        if id as u32 >= self.n_tensors {
            return None;
        }
        let at = id as usize * TENSOR_LEN;
        TensorRecord::new(self.tensors.get(at..at + TENSOR_LEN)?)
    }

    fn op_record(&self, index: u32) -> Option<OpRecord<'a>> {
        if index >= self.n_ops {
            return None;
        }
        let at = index as usize * OP_LEN;
        OpRecord::new(self.ops.get(at..at + OP_LEN)?)
    }

    /// Tensor `id`, decoded.
    pub fn tensor(&self, id: u16) -> Option<TensorInfo> {
        let r = self.tensor_record(id)?;
        let (c, h, w) = r.chw();
        Some(TensorInfo {
            id,
            c,
            h,
            w,
            scale: r.scale(),
            zero_point: r.zero_point(),
            offset: r.offset(),
            bytes: r.bytes(),
        })
    }

    /// All tensors in id order.
    pub fn tensors(&self) -> impl Iterator<Item = TensorInfo> + '_ {
        (0..self.n_tensors).filter_map(|i| self.tensor(i as u16))
    }

    /// Op `index`, decoded.
    pub fn op(&self, index: u32) -> Option<OpInfo<'a>> {
        self.decode_op(index).ok()
    }

    /// All ops in execution order.
    pub fn ops(&self) -> impl Iterator<Item = OpInfo<'a>> + '_ {
        (0..self.n_ops).filter_map(|i| self.op(i))
    }

    fn decode_op(&self, index: u32) -> Result<OpInfo<'a>> {
        let op = index;
        let rec = self
            .op_record(index)
            .ok_or(RuntimeError::OutOfBounds { what: "op", index })?;
        let kind =
            OpKind::from_code(rec.kind()).ok_or(RuntimeError::BadParam { op, what: "kind" })?;
        if rec.reserved() != 0 {
            return Err(RuntimeError::BadParam {
                op,
                what: "reserved",
            });
        }
        let data = self.data;
        let array = |(off, len): (u32, u32),
                     align: usize,
                     elem: usize,
                     what: &'static str|
         -> Result<&'a [u8]> {
            if len == 0 {
                return Ok(&[]);
            }
            if !(off as usize).is_multiple_of(align) || !(len as usize).is_multiple_of(elem) {
                return Err(RuntimeError::BadParam { op, what });
            }
            let start = off as usize;
            data.get(start..start + len as usize)
                .ok_or(RuntimeError::OutOfBounds { what, index: op })
        };
        let weights = array(rec.weights(), DATA_ALIGN, 1, "weights")?;
        let bias = array(rec.bias(), I32_ALIGN, 4, "bias")?;
        let multipliers = array(rec.multiplier(), I32_ALIGN, 4, "multiplier")?;
        let shifts = array(rec.shift(), I32_ALIGN, 4, "shift")?;
        let pad_values = array(rec.pad_values(), DATA_ALIGN, 1, "pad values")?;
        let (kernel_h, kernel_w, stride, pad) = rec.window();
        let (act_min, act_max) = rec.act();
        let input0 = rec.input0();
        let in1 = rec.input1();
        let (c_in, h_in, w_in) = self
            .tensor_record(input0)
            .ok_or(RuntimeError::OutOfBounds {
                what: "tensor id",
                index: input0 as u32,
            })?
            .chw();
        let c_out = self
            .tensor_record(rec.output())
            .ok_or(RuntimeError::OutOfBounds {
                what: "tensor id",
                index: rec.output() as u32,
            })?
            .chw()
            .0;
        Ok(OpInfo {
            index,
            kind,
            input0,
            input1: (in1 != NO_TENSOR).then_some(in1),
            output: rec.output(),
            kernel_h,
            kernel_w,
            stride,
            pad,
            act_min,
            act_max,
            weights: as_i8(weights),
            bias: I32Array::new(bias),
            multipliers: I32Array::new(multipliers),
            shifts: I32Array::new(shifts),
            pad_values: as_i8(pad_values),
            scratch_offset: rec.scratch(),
            scratch_bytes: kernels::scratch_bytes(
                kind.code(),
                &kernels::OpGeometry {
                    kernel_h: kernel_h as u32,
                    kernel_w: kernel_w as u32,
                    stride: stride as u32,
                    pad: pad as u32,
                    c_in: c_in as u32,
                    h_in: h_in as u32,
                    w_in: w_in as u32,
                    c_out: c_out as u32,
                },
            ),
        })
    }

    fn validate_op(&self, o: &OpInfo<'a>) -> Result<()> {
        let op = o.index;
        let param = |what| Err(RuntimeError::BadParam { op, what });
        let shape = Err(RuntimeError::BadShape { op });
        let id = |t: u16| {
            self.tensor(t).ok_or(RuntimeError::OutOfBounds {
                what: "tensor id",
                index: t as u32,
            })
        };
        let tin = id(o.input0)?;
        let tout = id(o.output)?;
        let tin1 = match (o.kind, o.input1) {
            (OpKind::Add, Some(t)) => Some(id(t)?),
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
        let (si, so) = (tin.shape(), tout.shape());
        let (kh, kw, s, pad) = (
            o.kernel_h as usize,
            o.kernel_w as usize,
            o.stride as usize,
            o.pad as usize,
        );
        let no_window = o.kernel_h == 0 && o.kernel_w == 0 && o.stride == 0 && o.pad == 0;
        match o.kind {
            OpKind::Conv2d => {
                if kh == 0 || kw == 0 || s == 0 {
                    return param("window");
                }
                if si.h + 2 * pad < kh || si.w + 2 * pad < kw {
                    return shape;
                }
                if so.h != (si.h + 2 * pad - kh) / s + 1 || so.w != (si.w + 2 * pad - kw) / s + 1 {
                    return shape;
                }
                let k = kh * kw * si.c;
                if k > MAX_ACCUMULATION as usize {
                    return Err(RuntimeError::AccumulatorOverflow { op, k: k as u32 });
                }
                self.check_dense(o, so.c, k)?;
                if !(o.pad_values.is_empty() || o.pad_values.len() == si.c) {
                    return param("pad values length");
                }
            }
            OpKind::FullyConnected => {
                if !no_window {
                    return param("window");
                }
                if so.h != 1 || so.w != 1 {
                    return shape;
                }
                let k = si.len();
                if k > MAX_ACCUMULATION as usize {
                    return Err(RuntimeError::AccumulatorOverflow { op, k: k as u32 });
                }
                self.check_dense(o, so.c, k)?;
                if !o.pad_values.is_empty() {
                    return param("pad values length");
                }
            }
            OpKind::MaxPool | OpKind::AvgPool => {
                if kh == 0 || kw == 0 || s == 0 || pad != 0 {
                    return param("window");
                }
                if si.c != so.c || si.h < kh || si.w < kw {
                    return shape;
                }
                if so.h != (si.h - kh) / s + 1 || so.w != (si.w - kw) / s + 1 {
                    return shape;
                }
                if !o.weights.is_empty() || !o.bias.is_empty() || !o.pad_values.is_empty() {
                    return param("constants");
                }
                if o.kind == OpKind::MaxPool {
                    if !o.multipliers.is_empty() || !o.shifts.is_empty() {
                        return param("constants");
                    }
                    if tin.scale.to_bits() != tout.scale.to_bits()
                        || tin.zero_point != tout.zero_point
                    {
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
            }
            OpKind::Add => {
                if !no_window {
                    return param("window");
                }
                let si1 = tin1.map(|t| t.shape());
                if si != so || si1 != Some(so) {
                    return shape;
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
            }
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

    /// conv / fc constants: lengths, M0/shift ranges, weights in [−127, 127], and the exact
    /// accumulator bound |bias| + 128·Σ|w| < 2^31 per output channel.
    fn check_dense(&self, o: &OpInfo<'a>, n: usize, k: usize) -> Result<()> {
        let op = o.index;
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
        Ok(())
    }

    /// Scratch range of op `j` (validated ops only).
    fn regions(&self, j: u32) -> Result<(u16, Range<usize>, Range<usize>)> {
        let o = self.decode_op(j)?;
        let out = self.tensor(o.output).ok_or(RuntimeError::OutOfBounds {
            what: "tensor id",
            index: o.output as u32,
        })?;
        Ok((o.output, out.range(), o.scratch_range()))
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

    /// Multiply-adds per image (conv2d and fully_connected).
    pub fn macs_per_image(&self) -> u64 {
        self.macs
    }

    #[cfg(feature = "std")]
    /// The logits of the working area `work` (after every op ran).
    pub(crate) fn output_of<'w>(&self, work: &'w [u8]) -> Result<&'w [u8]> {
        let layout = RuntimeError::BadParam {
            op: u32::MAX,
            what: "arena layout",
        };
        let tout = self.tensor(self.output_tensor).ok_or(layout)?;
        work.get(tout.range()).ok_or(layout)
    }

    /// Working arena for one image (header `arena_bytes`, scratch included).
    pub fn working_bytes(&self) -> usize {
        self.arena_bytes
    }

    /// Arena `run` needs for one image: `align16(out_len) + working bytes`.
    pub fn arena_bytes(&self) -> usize {
        self.arena_bytes_for(1)
    }

    /// Arena `run` needs for `batch` images: `align16(batch·out_len) + working bytes`
    /// (saturating).
    pub fn arena_bytes_for(&self, batch: usize) -> usize {
        align16(batch.saturating_mul(self.out_len).min(usize::MAX - 16))
            .saturating_add(self.arena_bytes)
    }

    /// Input (c, h, w) of the raw pixels.
    pub fn input_shape(&self) -> (usize, usize, usize) {
        (self.input.c, self.input.h, self.input.w)
    }

    /// Bytes per image: c·h·w.
    pub fn input_len(&self) -> usize {
        self.input.len()
    }

    /// Logits per image.
    pub fn output_len(&self) -> usize {
        self.out_len
    }

    /// Output scale (real = scale · (q − zero point)).
    pub fn output_scale(&self) -> f32 {
        self.output_scale
    }

    /// Output zero point.
    pub fn output_zero_point(&self) -> i32 {
        self.output_zero_point
    }

    /// Number of ops.
    pub fn num_ops(&self) -> usize {
        self.n_ops as usize
    }

    /// Number of tensors.
    pub fn num_tensors(&self) -> usize {
        self.n_tensors as usize
    }

    /// Input tensor id.
    pub fn input_tensor(&self) -> u16 {
        self.input_tensor
    }

    /// Output tensor id.
    pub fn output_tensor(&self) -> u16 {
        self.output_tensor
    }

    /// Images in `pixels`, or `InputLength`.
    pub fn batch_of(&self, pixels: usize) -> Result<usize> {
        let n = self.input_len();
        if pixels == 0 || !pixels.is_multiple_of(n) {
            return Err(RuntimeError::InputLength {
                expected: n,
                got: pixels,
            });
        }
        Ok(pixels / n)
    }

    /// Runs the model on `pixels` (a batch of u8 images, planar C×H×W each) with the fastest
    /// kernels; returns `batch · output_len()` logits at the start of `arena`, which must hold
    /// at least `arena_bytes_for(batch)` bytes; room for more working areas (up to
    /// `GROUP_IMAGES`) runs the images in groups, op by op (faster, the same bytes). No
    /// allocation.
    pub fn run<'b>(&self, pixels: &[u8], arena: &'b mut [u8]) -> Result<&'b [i8]> {
        self.run_with(Kernels::Auto, pixels, arena)
    }

    /// [`Model::run`] with the chosen kernels (`Scalar` is the reference).
    pub fn run_with<'b>(
        &self,
        kernels: Kernels,
        pixels: &[u8],
        arena: &'b mut [u8],
    ) -> Result<&'b [i8]> {
        let k = kernels.resolve()?;
        let batch = self.batch_of(pixels.len())?;
        let needed = self.arena_bytes_for(batch);
        if arena.len() < needed {
            return Err(RuntimeError::ArenaTooSmall {
                needed,
                len: arena.len(),
            });
        }
        let n_out = batch * self.out_len;
        let (outs, work) = arena.split_at_mut(align16(n_out));
        let areas = self.working_areas(work.len(), batch);
        self.run_images(
            k,
            pixels,
            &mut work[..areas * self.arena_bytes],
            &mut outs[..n_out],
        )?;
        let outs: &'b [u8] = outs;
        Ok(as_i8(&outs[..n_out]))
    }

    /// Working areas that fit `len` bytes, at least 1 and at most `min(batch, GROUP_IMAGES)`.
    pub(crate) fn working_areas(&self, len: usize, batch: usize) -> usize {
        let fit = len.checked_div(self.arena_bytes).unwrap_or(usize::MAX);
        fit.min(batch).clamp(1, GROUP_IMAGES)
    }

    /// Runs every image of `pixels` through `work` (a whole number of working areas), writing
    /// each image's logits to consecutive `output_len()` chunks of `outs`. With several working
    /// areas the images run in groups, op by op, so that a conv sees the whole group at once.
    pub(crate) fn run_images(
        &self,
        k: Resolved,
        pixels: &[u8],
        work: &mut [u8],
        outs: &mut [u8],
    ) -> Result<()> {
        let (n_in, n_out, wb) = (self.input_len(), self.out_len, self.arena_bytes);
        let areas = work
            .len()
            .checked_div(wb)
            .unwrap_or(1)
            .clamp(1, GROUP_IMAGES);
        // Groups pay off only through the batched conv; otherwise image by image (hot caches).
        if areas == 1 || !self.groups_help(k) {
            for (img, out) in pixels.chunks_exact(n_in).zip(outs.chunks_exact_mut(n_out)) {
                self.run_one(k, img, &mut work[..wb], out)?;
            }
            return Ok(());
        }
        for (imgs, out) in pixels
            .chunks(areas * n_in)
            .zip(outs.chunks_mut(areas * n_out))
        {
            self.run_group(k, imgs, work, out)?;
        }
        Ok(())
    }

    /// Runs the images of `imgs` (at most one per working area of `work`) op by op.
    fn run_group(&self, k: Resolved, imgs: &[u8], work: &mut [u8], outs: &mut [u8]) -> Result<()> {
        let layout = RuntimeError::BadParam {
            op: u32::MAX,
            what: "arena layout",
        };
        let (n_in, wb) = (self.input_len(), self.arena_bytes);
        let n = imgs.len() / n_in;
        let work = &mut work[..n * wb];
        for (img, w) in imgs.chunks_exact(n_in).zip(work.chunks_exact_mut(wb)) {
            self.load_input(img, w)?;
        }
        for j in 0..self.n_ops {
            // Every other op walks the images backwards: it starts with the image the op before
            // finished with, still in cache.
            let back = j % 2 == 1;
            if !self.exec_group(k, j, work, back)? {
                if back {
                    for w in work.chunks_exact_mut(wb).rev() {
                        self.exec(k, j, w)?;
                    }
                } else {
                    for w in work.chunks_exact_mut(wb) {
                        self.exec(k, j, w)?;
                    }
                }
            }
        }
        let tout = self.tensor(self.output_tensor).ok_or(layout)?;
        for (w, out) in work
            .chunks_exact(wb)
            .zip(outs.chunks_exact_mut(self.out_len))
        {
            out.copy_from_slice(w.get(tout.range()).ok_or(layout)?);
        }
        Ok(())
    }

    /// Whether running images in groups helps: some conv runs the batched VNNI kernel.
    fn groups_help(&self, k: Resolved) -> bool {
        #[cfg(target_arch = "x86_64")]
        if k == Resolved::Vnni {
            return self.ops().any(|o| {
                let (Some(x), Some(y)) = (self.tensor(o.input0), self.tensor(o.output)) else {
                    return false;
                };
                o.kind == OpKind::Conv2d
                    && kernels::lanes_supported(&Self::conv_params(&o, &x, &y).geometry())
            });
        }
        let _ = k;
        false
    }

    /// Op `j` over every working area of `work` at once, when a batched kernel covers it
    /// (the VNNI conv); `false` when the caller must run it image by image.
    fn exec_group(&self, k: Resolved, j: u32, work: &mut [u8], back: bool) -> Result<bool> {
        #[cfg(target_arch = "x86_64")]
        if k == Resolved::Vnni {
            let layout = RuntimeError::BadParam {
                op: j,
                what: "arena layout",
            };
            let o = self.decode_op(j)?;
            if o.kind != OpKind::Conv2d {
                return Ok(false);
            }
            let tin = self.tensor(o.input0).ok_or(layout)?;
            let tout = self.tensor(o.output).ok_or(layout)?;
            let p = Self::conv_params(&o, &tin, &tout);
            // A conv the few-channel kernel covers runs image by image (it needs no group).
            if !kernels::lanes_supported(&p.geometry()) || kernels::vnni::narrow_preferred(&p) {
                return Ok(false);
            }
            let mut imgs: [kernels::vnni::ConvImage; GROUP_IMAGES] =
                core::array::from_fn(|_| kernels::vnni::ConvImage {
                    input: &[],
                    output: &mut [],
                    scratch: &mut [],
                });
            let mut n = 0;
            for (slot, w) in imgs.iter_mut().zip(work.chunks_exact_mut(self.arena_bytes)) {
                let carved = Carved::new(w, tout.range(), o.scratch_range()).ok_or(layout)?;
                let input = as_i8(carved.input(tin.range()).ok_or(layout)?);
                let Carved { out, scratch, .. } = carved;
                *slot = kernels::vnni::ConvImage {
                    input,
                    output: as_i8_mut(out),
                    scratch,
                };
                n += 1;
            }
            if back {
                imgs[..n].reverse();
            }
            // SAFETY: Resolved::Vnni is only produced when AVX2 and AVX-512 VNNI/BW/VL are
            // available.
            return Ok(unsafe { kernels::vnni::conv2d_lanes_batch(&p, &mut imgs[..n]) });
        }
        let _ = (k, j, work, back);
        Ok(false)
    }

    /// The conv parameters of op `o` (input `tin`, output `tout`): what its kernel takes, for
    /// the interpreter and for tools that run one op's kernel alone.
    pub fn conv_params<'o>(o: &OpInfo<'o>, tin: &TensorInfo, tout: &TensorInfo) -> ConvParams<'o> {
        ConvParams {
            input: tin.shape(),
            output: tout.shape(),
            kernel_h: o.kernel_h as usize,
            kernel_w: o.kernel_w as usize,
            stride: o.stride as usize,
            pad: o.pad as usize,
            weights: o.weights,
            bias: o.bias,
            multiplier: o.multipliers,
            shift: o.shifts,
            pad_values: o.pad_values,
            input_zero_point: tin.zero_point,
            out: Self::output_quant(o, tout),
        }
    }

    /// The fully_connected parameters of op `o` (see [`Model::conv_params`]).
    pub fn fc_params<'o>(o: &OpInfo<'o>, tin: &TensorInfo, tout: &TensorInfo) -> FcParams<'o> {
        FcParams {
            k: tin.len(),
            n: tout.len(),
            weights: o.weights,
            bias: o.bias,
            multiplier: o.multipliers,
            shift: o.shifts,
            out: Self::output_quant(o, tout),
        }
    }

    /// The add parameters of op `o` over inputs `t0`, `t1` (see [`Model::conv_params`]).
    pub fn add_params(
        o: &OpInfo,
        t0: &TensorInfo,
        t1: &TensorInfo,
        tout: &TensorInfo,
    ) -> AddRequant {
        AddRequant {
            z0: t0.zero_point,
            m0: o.multipliers.get(0),
            z1: t1.zero_point,
            m1: o.multipliers.get(1),
            n: o.shifts.get(0),
            out: Self::output_quant(o, tout),
        }
    }

    fn output_quant(o: &OpInfo, tout: &TensorInfo) -> OutputQuant {
        OutputQuant {
            zero_point: tout.zero_point,
            act_min: o.act_min,
            act_max: o.act_max,
        }
    }

    /// Converts one image's planar u8 pixels into the input tensor (HWC, q = pixel − 128).
    pub(crate) fn load_input(&self, img: &[u8], work: &mut [u8]) -> Result<()> {
        let layout = RuntimeError::BadParam {
            op: u32::MAX,
            what: "arena layout",
        };
        let tin = self.tensor(self.input_tensor).ok_or(layout)?;
        let dst = work.get_mut(tin.range()).ok_or(layout)?;
        let (c, hw) = (self.input.c, self.input.h * self.input.w);
        if c == 1 {
            for (d, &p) in dst.iter_mut().zip(img) {
                *d = p ^ 0x80;
            }
        } else if c == 3 {
            // RGB: one pixel's three bytes at a time (the general loop's strided stores are
            // several times slower).
            let (r, rest) = img.split_at(hw);
            let (g, b) = rest.split_at(hw);
            for (((d, &r), &g), &b) in dst.chunks_exact_mut(3).zip(r).zip(g).zip(b) {
                d.copy_from_slice(&[r ^ 0x80, g ^ 0x80, b ^ 0x80]);
            }
        } else {
            for (ch, plane) in img.chunks_exact(hw).enumerate() {
                for (i, &p) in plane.iter().enumerate() {
                    dst[i * c + ch] = p ^ 0x80;
                }
            }
        }
        Ok(())
    }

    fn run_one(&self, k: Resolved, img: &[u8], work: &mut [u8], out: &mut [u8]) -> Result<()> {
        let layout = RuntimeError::BadParam {
            op: u32::MAX,
            what: "arena layout",
        };
        self.load_input(img, work)?;
        for j in 0..self.n_ops {
            self.exec(k, j, work)?;
        }
        let tout = self.tensor(self.output_tensor).ok_or(layout)?;
        out.copy_from_slice(work.get(tout.range()).ok_or(layout)?);
        Ok(())
    }

    /// Profiling aid: runs `pixels` like [`Model::run_with`] (in groups when `arena` has room
    /// for several working areas), adding each op's time in seconds by `clock` to `times[j]`.
    #[doc(hidden)]
    pub fn run_timed(
        &self,
        kernels: Kernels,
        pixels: &[u8],
        arena: &mut [u8],
        times: &mut [f64],
        clock: fn() -> f64,
    ) -> Result<()> {
        let k = kernels.resolve()?;
        let batch = self.batch_of(pixels.len())?;
        let needed = self.arena_bytes_for(batch);
        if arena.len() < needed {
            return Err(RuntimeError::ArenaTooSmall {
                needed,
                len: arena.len(),
            });
        }
        let work = &mut arena[align16(batch * self.out_len)..];
        let wb = self.arena_bytes;
        let areas = self.working_areas(work.len(), batch);
        let work = &mut work[..areas * wb];
        for imgs in pixels.chunks(areas * self.input_len()) {
            let n = imgs.len() / self.input_len();
            let work = &mut work[..n * wb];
            for (img, w) in imgs
                .chunks_exact(self.input_len())
                .zip(work.chunks_exact_mut(wb))
            {
                self.load_input(img, w)?;
            }
            for j in 0..self.n_ops {
                let t = clock();
                let back = j % 2 == 1;
                if !self.exec_group(k, j, work, back)? {
                    if back {
                        for w in work.chunks_exact_mut(wb).rev() {
                            self.exec(k, j, w)?;
                        }
                    } else {
                        for w in work.chunks_exact_mut(wb) {
                            self.exec(k, j, w)?;
                        }
                    }
                }
                if let Some(s) = times.get_mut(j as usize) {
                    *s += clock() - t;
                }
            }
        }
        Ok(())
    }

    #[cfg(feature = "std")]
    /// Part `part` of `parts` of op `j` over the one working area at `shared` (`len` bytes),
    /// for threads sharing an image: a conv's band of output rows or output channels
    /// ([`Model::conv_split`]; channels in groups of 8, computed into `own`, this thread's
    /// working area, then copied into place), a fully connected op's outputs or an add's
    /// elements (or, for an add right after its conv, `after_conv`: that conv's split, from
    /// [`Model::add_after_conv`]); pooling runs whole in part 0.
    ///
    /// # Safety
    /// `shared..shared + len` is valid; while op `j` runs, it is accessed only by the calls
    /// for this op with distinct `part`s, whose writes are disjoint (their parts of the output
    /// tensor, which overlaps no input of op `j`: `check_data_flow`).
    pub(crate) unsafe fn exec_part(
        &self,
        k: Resolved,
        j: u32,
        (shared, len): (*mut u8, usize),
        own: &mut [u8],
        (part, parts): (usize, usize),
        after_conv: Option<ConvSplit>,
    ) -> Result<()> {
        let layout = RuntimeError::BadParam {
            op: j,
            what: "arena layout",
        };
        let o = self.decode_op(j)?;
        let tin = self.tensor(o.input0).ok_or(layout)?;
        let tout = self.tensor(o.output).ok_or(layout)?;
        let (ri, ro) = (tin.range(), tout.range());
        if ri.end > len || ro.end > len {
            return Err(layout);
        }
        // SAFETY: in bounds (checked); no part writes the input tensors of a conv or a fully
        // connected op (a fused add's input is viewed piece by piece instead).
        let input = || as_i8(core::slice::from_raw_parts(shared.add(ri.start), ri.len()));
        let y = shared.add(ro.start) as *mut i8;
        let share = |n: usize, align: usize| {
            let per = n.div_ceil(parts).next_multiple_of(align);
            (n.min(part * per), n.min((part + 1) * per))
        };
        match o.kind {
            OpKind::Conv2d => match self.conv_split(k, &o, &tin, &tout, parts) {
                (ConvSplit::Rows, p) => {
                    let x = input();
                    let (r0, r1) = share(p.output.h, 1);
                    let row = p.output.w * p.output.c;
                    let carved = Carved::new(own, ro.clone(), o.scratch_range()).ok_or(layout)?;
                    // SAFETY: rows r0..r1 of the output are this part's.
                    let out = as_i8_mut(core::slice::from_raw_parts_mut(
                        y.add(r0 * row) as *mut u8,
                        (r1 - r0) * row,
                    ));
                    if r0 < r1 && !kernels::conv2d_rows(k, &p, x, out, carved.scratch, r0..r1) {
                        return Err(layout);
                    }
                }
                (ConvSplit::Channels, p) => {
                    let x = input();
                    let (c0, c1) = share(p.output.c, 8);
                    if c0 == c1 {
                        return Ok(());
                    }
                    let sub = p.channels(c0, c1);
                    let npix = p.output.h * p.output.w;
                    let carved = Carved::new(own, ro.clone(), o.scratch_range()).ok_or(layout)?;
                    let Carved { out, scratch, .. } = carved;
                    let tmp = as_i8_mut(&mut out[..npix * (c1 - c0)]);
                    kernels::conv2d(k, &sub, x, tmp, scratch);
                    scatter_channels(tmp, y.add(c0), c1 - c0, p.output.c);
                }
                // SAFETY: the other parts of this op touch nothing.
                (ConvSplit::Whole, _) if part == 0 => {
                    self.exec(k, j, core::slice::from_raw_parts_mut(shared, len))?
                }
                (ConvSplit::Whole, _) => {}
            },
            OpKind::FullyConnected => {
                let (p, x) = (Self::fc_params(&o, &tin, &tout), input());
                let (n0, n1) = share(p.n, 4);
                if n0 < n1 {
                    // SAFETY: outputs n0..n1 are this part's.
                    let out = core::slice::from_raw_parts_mut(y.add(n0), n1 - n0);
                    kernels::fully_connected(k, &p.outputs(n0, n1), x, out);
                }
            }
            OpKind::Add => {
                let t1 = self.tensor(o.input1.ok_or(layout)?).ok_or(layout)?;
                let r1 = t1.range();
                if r1.end > len {
                    return Err(layout);
                }
                let (x0, x1) = (
                    shared.add(ri.start) as *const i8,
                    shared.add(r1.start) as *const i8,
                );
                let p = Self::add_params(&o, &tin, &t1, &tout);
                // SAFETY (each `add`): elements e0..e1 (in bounds) of the output are this
                // part's, and of the inputs either no part writes them or this part just did
                // (a conv's output, `add_after_conv`): only those are viewed.
                let add = |e0: usize, e1: usize| {
                    let n = e1 - e0;
                    let out = core::slice::from_raw_parts_mut(y.add(e0), n);
                    let (a, b) = (x0.add(e0), x1.add(e0));
                    let (a, b) = (
                        core::slice::from_raw_parts(a, n),
                        core::slice::from_raw_parts(b, n),
                    );
                    scalar::add(&p, a, b, out);
                };
                let (c, row) = (tout.c as usize, tout.w as usize * tout.c as usize);
                // Right after the conv before it: this part's rows or channels of that conv.
                match after_conv {
                    Some(ConvSplit::Rows) => {
                        let (r0, r1) = share(tout.h as usize, 1);
                        if r0 < r1 {
                            add(r0 * row, r1 * row);
                        }
                    }
                    Some(ConvSplit::Channels) => {
                        let (c0, c1) = share(c, 8);
                        if c0 < c1 {
                            (0..ro.len() / c).for_each(|px| add(px * c + c0, px * c + c1));
                        }
                    }
                    _ => {
                        let (e0, e1) = share(ro.len(), 64);
                        if e0 < e1 {
                            add(e0, e1);
                        }
                    }
                }
            }
            _ if part == 0 => {
                // SAFETY: the other parts of this op touch nothing.
                self.exec(k, j, core::slice::from_raw_parts_mut(shared, len))?;
            }
            _ => {}
        }
        Ok(())
    }

    /// How threads sharing an image split conv `o`, and its parameters: by bands of output rows
    /// (each builds only the input copy its rows read and writes its rows in place) where the
    /// kernels have a band kernel and there are many pixels (at least
    /// [`crate::parallel::SPLIT_ROWS_MIN_PIXELS`], and a row per part); else by output channels
    /// (groups of 8, one per part at least); else not at all.
    #[cfg(feature = "std")]
    fn conv_split<'o>(
        &self,
        k: Resolved,
        o: &OpInfo<'o>,
        tin: &TensorInfo,
        tout: &TensorInfo,
        parts: usize,
    ) -> (ConvSplit, ConvParams<'o>) {
        let p = Self::conv_params(o, tin, tout);
        let (h, w) = (p.output.h, p.output.w);
        let split = if h * w >= crate::parallel::SPLIT_ROWS_MIN_PIXELS
            && h >= parts
            && kernels::conv2d_rows_covered(k, &p, o.scratch_range().len())
        {
            ConvSplit::Rows
        } else if p.output.c >= 8 * parts {
            ConvSplit::Channels
        } else {
            ConvSplit::Whole
        };
        (split, p)
    }

    /// For threads sharing an image: when op `j` is a residual add of the output of the conv
    /// just before it, split between the threads by rows or channels, that split, so that each
    /// thread adds its own part right after computing it, with no barrier between the two ops
    /// (`parallel::run_split_with`). Requires that the add writes nothing the conv reads and
    /// the conv writes nothing the add reads besides its own output.
    #[cfg(feature = "std")]
    pub(crate) fn add_after_conv(
        &self,
        k: Resolved,
        j: u32,
        parts: usize,
    ) -> Result<Option<ConvSplit>> {
        if j == 0 || j >= self.n_ops {
            return Ok(None);
        }
        let layout = RuntimeError::BadParam {
            op: j,
            what: "arena layout",
        };
        let (add, conv) = (self.decode_op(j)?, self.decode_op(j - 1)?);
        let (Some(in1), OpKind::Add, OpKind::Conv2d) = (add.input1, add.kind, conv.kind) else {
            return Ok(None);
        };
        let other = if add.input0 == conv.output {
            in1
        } else if in1 == conv.output {
            add.input0
        } else {
            return Ok(None);
        };
        let t = |id: u16| self.tensor(id).ok_or(layout);
        let (cin, cout, sum, skip) = (t(conv.input0)?, t(conv.output)?, t(add.output)?, t(other)?);
        let apart = |a: Range<usize>, b: Range<usize>| a.end <= b.start || b.end <= a.start;
        if !apart(sum.range(), cin.range()) || !apart(cout.range(), skip.range()) {
            return Ok(None);
        }
        Ok(match self.conv_split(k, &conv, &cin, &cout, parts).0 {
            ConvSplit::Whole => None,
            split => Some(split),
        })
    }

    fn exec(&self, k: Resolved, j: u32, work: &mut [u8]) -> Result<()> {
        let layout = RuntimeError::BadParam {
            op: j,
            what: "arena layout",
        };
        let o = self.decode_op(j)?;
        let tin = self.tensor(o.input0).ok_or(layout)?;
        let tout = self.tensor(o.output).ok_or(layout)?;
        let carved = Carved::new(work, tout.range(), o.scratch_range()).ok_or(layout)?;
        let x = as_i8(carved.input(tin.range()).ok_or(layout)?);
        let in1 = match o.input1 {
            Some(t) => {
                let t1 = self.tensor(t).ok_or(layout)?;
                Some((t1, as_i8(carved.input(t1.range()).ok_or(layout)?)))
            }
            None => None,
        };
        let Carved {
            out: y, scratch, ..
        } = carved;
        let y = as_i8_mut(y);
        let out = Self::output_quant(&o, &tout);
        match o.kind {
            OpKind::Conv2d => {
                let p = Self::conv_params(&o, &tin, &tout);
                kernels::conv2d(k, &p, x, y, scratch);
            }
            OpKind::FullyConnected => {
                kernels::fully_connected(k, &Self::fc_params(&o, &tin, &tout), x, y);
            }
            OpKind::MaxPool | OpKind::AvgPool => {
                let p = PoolParams {
                    input: tin.shape(),
                    output: tout.shape(),
                    kernel_h: o.kernel_h as usize,
                    kernel_w: o.kernel_w as usize,
                    stride: o.stride as usize,
                    input_zero_point: tin.zero_point,
                    multiplier: o.multipliers.get(0),
                    shift: o.shifts.get(0),
                    out,
                };
                if o.kind == OpKind::MaxPool {
                    kernels::max_pool(k, &p, x, y);
                } else {
                    scalar::avg_pool(&p, x, y);
                }
            }
            OpKind::Add => {
                let (t1, x1) = in1.ok_or(layout)?;
                scalar::add(&Self::add_params(&o, &tin, &t1, &tout), x, x1, y);
            }
        }
        Ok(())
    }
}

#[cfg(feature = "std")]
/// Copies the HWC tensor `src` of `n` channels into channels `0..n` of the HWC tensor of
/// `cout` channels at `dst` (a thread's share of a conv's channels), 16 bytes at a time when
/// `n` allows (a call to `memcpy` per pixel would cost more than the copy).
///
/// # Safety
/// `dst` is valid for writes at `px·cout .. px·cout + n` for every pixel of `src`.
unsafe fn scatter_channels(src: &[i8], dst: *mut i8, n: usize, cout: usize) {
    if n.is_multiple_of(16) {
        for (px, row) in src.chunks_exact(n).enumerate() {
            let d = dst.add(px * cout);
            for i in (0..n).step_by(16) {
                let v = (row.as_ptr().add(i) as *const [u8; 16]).read_unaligned();
                (d.add(i) as *mut [u8; 16]).write_unaligned(v);
            }
        }
    } else {
        for (px, row) in src.chunks_exact(n).enumerate() {
            core::ptr::copy_nonoverlapping(row.as_ptr(), dst.add(px * cout), n);
        }
    }
}

/// The working arena split into an op's output, its scratch, and the read-only rest.
/// How threads sharing an image split a conv ([`Model::exec_part`]).
#[cfg(feature = "std")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ConvSplit {
    /// Bands of output rows, each written in place.
    Rows,
    /// Output channels in groups of 8, each computed apart and copied into place.
    Channels,
    /// Not split: part 0 runs it whole.
    Whole,
}

struct Carved<'x> {
    pieces: [(usize, &'x [u8]); 3],
    out: &'x mut [u8],
    scratch: &'x mut [u8],
}

impl<'x> Carved<'x> {
    fn new(work: &'x mut [u8], out: Range<usize>, scratch: Range<usize>) -> Option<Self> {
        let scratch = if scratch.is_empty() {
            out.end..out.end
        } else {
            scratch
        };
        let out_first = out.start <= scratch.start;
        let (a, b) = if out_first {
            (out, scratch)
        } else {
            (scratch, out)
        };
        if a.start > a.end || a.end > b.start || b.start > b.end || b.end > work.len() {
            return None;
        }
        let (p0, rest) = work.split_at_mut(a.start);
        let (ma, rest) = rest.split_at_mut(a.end - a.start);
        let (p1, rest) = rest.split_at_mut(b.start - a.end);
        let (mb, p2) = rest.split_at_mut(b.end - b.start);
        let (out, scratch) = if out_first { (ma, mb) } else { (mb, ma) };
        let (p0, p1, p2): (&'x [u8], &'x [u8], &'x [u8]) = (p0, p1, p2);
        Some(Carved {
            pieces: [(0, p0), (a.end, p1), (b.end, p2)],
            out,
            scratch,
        })
    }

    fn input(&self, r: Range<usize>) -> Option<&'x [u8]> {
        self.pieces.iter().find_map(|&(base, piece)| {
            if r.start >= base && r.end <= base + piece.len() {
                piece.get(r.start - base..r.end - base)
            } else {
                None
            }
        })
    }
}
