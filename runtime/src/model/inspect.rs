//! Inspection: the file's tensor and op records decoded into [`TensorInfo`] and [`OpInfo`]
//! (what tools, the GPU path and the checks read), with the op's constant arrays borrowed from
//! the data section.

use core::ops::Range;

use super::Model;
use crate::format::{self, Window, DATA_ALIGN, I32_ALIGN, NO_TENSOR};
use crate::kernels::{I32Array, OpGeometry, Shape};
use crate::{as_i8, Result, RuntimeError};

/// Op kinds of format version 3 (FORMAT.md, "Ops").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OpKind {
    /// 2-D convolution (code 1).
    Conv2d,
    /// Fully connected (code 2).
    FullyConnected,
    /// Max pooling (code 3).
    MaxPool,
    /// octet's requantizing average pooling (code 4).
    AvgPool,
    /// octet's requantizing residual add (code 5).
    Add,
    /// Depthwise 2-D convolution (code 6).
    DepthwiseConv2d,
    /// TensorFlow Lite's AVERAGE_POOL_2D (code 7).
    TfliteAvgPool,
    /// TensorFlow Lite's integer softmax (code 8).
    Softmax,
    /// The same bytes under another shape (code 9).
    Reshape,
    /// Padding with a constant (code 10).
    Pad,
    /// TensorFlow Lite's ADD (code 11).
    TfliteAdd,
}

impl OpKind {
    /// Every kind, by code.
    pub const ALL: [OpKind; 11] = [
        OpKind::Conv2d,
        OpKind::FullyConnected,
        OpKind::MaxPool,
        OpKind::AvgPool,
        OpKind::Add,
        OpKind::DepthwiseConv2d,
        OpKind::TfliteAvgPool,
        OpKind::Softmax,
        OpKind::Reshape,
        OpKind::Pad,
        OpKind::TfliteAdd,
    ];

    /// The kind for a code.
    pub const fn from_code(code: u8) -> Option<Self> {
        Some(match code {
            format::OP_CONV2D => OpKind::Conv2d,
            format::OP_FULLY_CONNECTED => OpKind::FullyConnected,
            format::OP_MAX_POOL => OpKind::MaxPool,
            format::OP_AVG_POOL => OpKind::AvgPool,
            format::OP_ADD => OpKind::Add,
            format::OP_DEPTHWISE_CONV2D => OpKind::DepthwiseConv2d,
            format::OP_TFLITE_AVG_POOL => OpKind::TfliteAvgPool,
            format::OP_SOFTMAX => OpKind::Softmax,
            format::OP_RESHAPE => OpKind::Reshape,
            format::OP_PAD => OpKind::Pad,
            format::OP_TFLITE_ADD => OpKind::TfliteAdd,
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
            OpKind::DepthwiseConv2d => format::OP_DEPTHWISE_CONV2D,
            OpKind::TfliteAvgPool => format::OP_TFLITE_AVG_POOL,
            OpKind::Softmax => format::OP_SOFTMAX,
            OpKind::Reshape => format::OP_RESHAPE,
            OpKind::Pad => format::OP_PAD,
            OpKind::TfliteAdd => format::OP_TFLITE_ADD,
        }
    }
    /// Lower-case name (`conv2d`, `fully_connected`, `max_pool`, `avg_pool`, `add`,
    /// `depthwise_conv2d`, `tflite_avg_pool`, `softmax`, `reshape`, `pad`, `tflite_add`).
    pub const fn name(self) -> &'static str {
        match self {
            OpKind::Conv2d => "conv2d",
            OpKind::FullyConnected => "fully_connected",
            OpKind::MaxPool => "max_pool",
            OpKind::AvgPool => "avg_pool",
            OpKind::Add => "add",
            OpKind::DepthwiseConv2d => "depthwise_conv2d",
            OpKind::TfliteAvgPool => "tflite_avg_pool",
            OpKind::Softmax => "softmax",
            OpKind::Reshape => "reshape",
            OpKind::Pad => "pad",
            OpKind::TfliteAdd => "tflite_add",
        }
    }
    /// Whether the op reads two tensors (add, tflite_add).
    pub const fn binary(self) -> bool {
        matches!(self, OpKind::Add | OpKind::TfliteAdd)
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
    /// Kernel, stride, padding and dilation (convs, pools; pad: its padding).
    pub window: Window,
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
    /// The kind's parameter (softmax: diff_min; pad: the pad value; tflite_add: the left
    /// shift; 0 otherwise).
    pub param: i32,
}

impl OpInfo<'_> {
    /// The op's geometry for the scratch rules ([`crate::Kernels::scratch_bytes`]), given its
    /// input and output tensors.
    pub fn geometry(&self, input: &TensorInfo, output: &TensorInfo) -> OpGeometry {
        let p = crate::kernels::Placement::from(&self.window);
        OpGeometry::new(self.kind.code(), &p, input.shape(), output.shape())
    }
}

/// An op record decoded, with its input 0 and output tensors: what validation and preparation
/// start from.
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

    /// Multiply-adds of op `o` per image: conv2d and fully_connected K per output (their
    /// weights per output channel), depthwise conv kh·kw per output; 0 for the other kinds.
    pub fn op_macs(&self, o: &OpInfo) -> u64 {
        let Some(t) = self.tensor(o.output) else {
            return 0;
        };
        let per_output = match o.kind {
            OpKind::Conv2d | OpKind::FullyConnected => o.weights.len() / (t.c as usize).max(1),
            OpKind::DepthwiseConv2d => o.window.kernel_h as usize * o.window.kernel_w as usize,
            _ => 0,
        };
        (t.len() * per_output) as u64
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
        if !rec.reserved_zero() {
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
                window: rec.window(),
                act_min,
                act_max,
                weights: as_i8(weights),
                bias: I32Array::new(bias),
                multipliers: I32Array::new(multipliers),
                shifts: I32Array::new(shifts),
                pad_values: as_i8(pad_values),
                param: rec.param(),
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
