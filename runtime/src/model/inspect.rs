//! Inspection: the file's tensor and op records decoded into [`TensorInfo`] and [`OpInfo`]
//! (what tools, the GPU path and the checks read), with the op's constant arrays borrowed from
//! the data section.

use core::ops::Range;

use super::Model;
use crate::format::{self, OpRecord, DATA_ALIGN, I32_ALIGN, NO_TENSOR};
use crate::kernels::{self, I32Array, OpGeometry, Shape};
use crate::{as_i8, Result, RuntimeError};

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

/// An op record decoded, with its input 0 and output tensors (which its decoding reads for the
/// scratch size): what validation and preparation start from.
#[derive(Clone, Copy, Debug)]
pub(super) struct Decoded<'a> {
    pub(super) op: OpInfo<'a>,
    pub(super) input: TensorInfo,
    pub(super) output: TensorInfo,
}

impl<'a> Model<'a> {
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
        self.decode(index).ok().map(|d| d.op)
    }

    /// All ops in execution order.
    pub fn ops(&self) -> impl Iterator<Item = OpInfo<'a>> + '_ {
        (0..self.n_ops).filter_map(|i| self.op(i))
    }

    /// Op `index`, decoded, with the records of its input 0 and output tensors. Inlined: an
    /// unprepared model decodes each op per image, and inlined the decoded value stays in
    /// registers (on a Cortex-M4 about 100 instructions less per op than a call).
    #[inline(always)]
    pub(super) fn decode(&self, index: u32) -> Result<Decoded<'a>> {
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
        let input = self.tensor_id(input0)?;
        let output = self.tensor_id(rec.output())?;
        // Built in place (no moves of the large value: this runs per op and image on a
        // microcontroller when the model is not prepared).
        Ok(Decoded {
            op: OpInfo {
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
                    &geometry(&rec, &input, &output),
                ),
            },
            input,
            output,
        })
    }

    /// Tensor `id`, or `OutOfBounds` naming it as a tensor id.
    pub(super) fn tensor_id(&self, id: u16) -> Result<TensorInfo> {
        self.tensor_or(id, "tensor id")
    }

    /// Tensor `id`, or `OutOfBounds` naming it as `what`.
    pub(super) fn tensor_or(&self, id: u16, what: &'static str) -> Result<TensorInfo> {
        self.tensor(id).ok_or(RuntimeError::OutOfBounds {
            what,
            index: id as u32,
        })
    }
}

/// The geometry [`crate::scratch_bytes`] takes: op `rec`'s window from `input` to `output`
/// (lossless widenings).
fn geometry(rec: &OpRecord, input: &TensorInfo, output: &TensorInfo) -> OpGeometry {
    let (kh, kw, stride, pad) = rec.window();
    OpGeometry {
        kernel_h: kh.into(),
        kernel_w: kw.into(),
        stride: stride.into(),
        pad: pad.into(),
        c_in: input.c.into(),
        h_in: input.h.into(),
        w_in: input.w.into(),
        c_out: output.c.into(),
    }
}
