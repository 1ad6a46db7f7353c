//! The `.o8` writer: a model in the file's own terms ([`O8Model`]: tensors, ops in the
//! runtime's layouts, input encoding, rounding), its values checked to fit their fields, laid out
//! and encoded by the runtime's `format` module (runtime/FORMAT.md), which reads them back. The
//! exporter fills it from its quantized model ([`o8_model`]), the TFLite importer from a
//! `.tflite`.

use octet_runtime::format::{
    self, HeaderFields, InputEncoding, OpFields, TensorFields, Window, DATA_ALIGN, HEADER_LEN,
    I32_ALIGN, NO_TENSOR, OP_LEN, TENSOR_LEN,
};
use octet_runtime::{OpKind as O8Kind, Rounding};

use crate::graph::{OpKind, Shape3};
use crate::plan::{plan_tensors, ArenaPlan};
use crate::qmodel::{QModel, QOp};
use crate::{ExportError, Result};

/// An int8 activation tensor of the file.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct O8Tensor {
    /// (c, h, w), HWC in memory.
    pub shape: Shape3,
    pub scale: f32,
    pub zero_point: i32,
}

/// An op of the file, its constants in the runtime's layouts (FORMAT.md, "Ops").
#[derive(Debug, Clone, PartialEq)]
pub struct O8Op {
    pub kind: O8Kind,
    /// One tensor id, two for the adds.
    pub inputs: Vec<usize>,
    pub output: usize,
    pub window: Window,
    pub act: (i32, i32),
    pub weights: Vec<i8>,
    pub bias: Vec<i32>,
    pub multipliers: Vec<i32>,
    pub shifts: Vec<i32>,
    pub pad_values: Vec<i8>,
    pub param: i32,
}

impl O8Op {
    /// An op of `kind` from `inputs` to `output` with no window, clamp, constants or parameter.
    pub fn new(kind: O8Kind, inputs: Vec<usize>, output: usize) -> Self {
        O8Op {
            kind,
            inputs,
            output,
            window: Window::default(),
            act: (-128, 127),
            weights: Vec::new(),
            bias: Vec::new(),
            multipliers: Vec::new(),
            shifts: Vec::new(),
            pad_values: Vec::new(),
            param: 0,
        }
    }
}

/// A whole `.o8` model before layout.
#[derive(Debug, Clone, PartialEq)]
pub struct O8Model {
    pub tensors: Vec<O8Tensor>,
    pub ops: Vec<O8Op>,
    pub input: usize,
    pub output: usize,
    pub input_encoding: InputEncoding,
    pub rounding: Rounding,
}

impl O8Model {
    /// The arena plan of its tensors ([`plan_tensors`]).
    pub fn plan(&self) -> ArenaPlan {
        let sizes: Vec<usize> = self.tensors.iter().map(|t| t.shape.len()).collect();
        let ops: Vec<(Vec<usize>, usize)> = self
            .ops
            .iter()
            .map(|op| (op.inputs.clone(), op.output))
            .collect();
        plan_tensors(&sizes, &ops, self.input, self.output)
    }

    /// Planned and encoded: the file's bytes.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        encode(self, &self.plan())
    }
}

fn fit<T: TryFrom<usize>>(what: &str, v: usize, max: u64) -> Result<T> {
    T::try_from(v).map_err(|_| ExportError::TooLarge {
        what: what.into(),
        value: v as u64,
        max,
    })
}

fn u16_of(what: &str, v: usize) -> Result<u16> {
    // 0xFFFF is reserved for "no tensor" in tensor ids; shapes stop one short too, harmlessly.
    if v >= u16::MAX as usize {
        return Err(ExportError::TooLarge {
            what: what.into(),
            value: v as u64,
            max: u16::MAX as u64 - 1,
        });
    }
    Ok(v as u16)
}

fn u32_of(what: &str, v: usize) -> Result<u32> {
    fit(what, v, u32::MAX as u64)
}

fn u8_of(what: &str, v: usize) -> Result<u8> {
    fit(what, v, u8::MAX as u64)
}

fn chw_of(what: &str, s: Shape3) -> Result<(u16, u16, u16)> {
    Ok((
        u16_of(&format!("{what}channels"), s.c)?,
        u16_of(&format!("{what}height"), s.h)?,
        u16_of(&format!("{what}width"), s.w)?,
    ))
}

/// The constant data section, each array aligned as FORMAT.md asks.
#[derive(Default)]
struct Data {
    bytes: Vec<u8>,
}

impl Data {
    fn align(&mut self, a: usize) {
        let len = self.bytes.len().next_multiple_of(a);
        self.bytes.resize(len, 0);
    }

    /// Appends `v`'s bytes aligned to `align`: (offset, length in bytes) as the op record
    /// stores them; an empty array is (0, 0).
    fn push<const N: usize, T: Copy>(
        &mut self,
        v: &[T],
        align: usize,
        le_bytes: impl Fn(T) -> [u8; N],
    ) -> Result<(u32, u32)> {
        if v.is_empty() {
            return Ok((0, 0));
        }
        self.align(align);
        let at = self.bytes.len();
        self.bytes.extend(v.iter().flat_map(|&x| le_bytes(x)));
        Ok((
            u32_of("data offset", at)?,
            u32_of("data length", v.len() * N)?,
        ))
    }

    fn i8s(&mut self, v: &[i8]) -> Result<(u32, u32)> {
        self.push(v, DATA_ALIGN, i8::to_le_bytes)
    }

    fn i32s(&mut self, v: &[i32]) -> Result<(u32, u32)> {
        self.push(v, I32_ALIGN, i32::to_le_bytes)
    }
}

/// `[C_out][C_in][kh][kw]` → the runtime's `[C_out][kh][kw][C_in]`.
pub fn conv_weights_ohwi(w: &[i8], cout: usize, cin: usize, kh: usize, kw: usize) -> Vec<i8> {
    let mut t = vec![0i8; w.len()];
    for o in 0..cout {
        for c in 0..cin {
            for y in 0..kh {
                for x in 0..kw {
                    t[((o * kh + y) * kw + x) * cin + c] = w[((o * cin + c) * kh + y) * kw + x];
                }
            }
        }
    }
    t
}

fn tensor_fields(t: &O8Tensor, offset: usize) -> Result<TensorFields> {
    Ok(TensorFields {
        chw: chw_of("", t.shape)?,
        scale: t.scale,
        zero_point: t.zero_point,
        offset: u32_of("arena offset", offset)?,
        bytes: u32_of("tensor bytes", t.shape.len())?,
    })
}

/// `op`'s record; its constant arrays are appended to `data`.
fn op_fields(op: &O8Op, data: &mut Data) -> Result<OpFields> {
    let input0 = u16_of("tensor id", op.inputs[0])?;
    let input1 = match op.inputs.get(1) {
        Some(&t) => u16_of("tensor id", t)?,
        None => NO_TENSOR,
    };
    Ok(OpFields {
        kind: op.kind.code(),
        input0,
        input1,
        output: u16_of("tensor id", op.output)?,
        window: op.window,
        act: op.act,
        weights: data.i8s(&op.weights)?,
        bias: data.i32s(&op.bias)?,
        multiplier: data.i32s(&op.multipliers)?,
        shift: data.i32s(&op.shifts)?,
        pad_values: data.i8s(&op.pad_values)?,
        param: op.param,
    })
}

/// Serialises `model` with its arena `plan` into `.o8` bytes: header, tensor table, op table,
/// then the data section at the next 16-byte boundary.
pub fn encode(model: &O8Model, plan: &ArenaPlan) -> Result<Vec<u8>> {
    let n_tensors = u16_of("tensor count", model.tensors.len())?;
    let tensors = model
        .tensors
        .iter()
        .zip(&plan.tensor_offsets)
        .map(|(t, &offset)| tensor_fields(t, offset))
        .collect::<Result<Vec<_>>>()?;
    let mut data = Data::default();
    let ops = model
        .ops
        .iter()
        .map(|op| op_fields(op, &mut data))
        .collect::<Result<Vec<_>>>()?;
    let op_table = HEADER_LEN + tensors.len() * TENSOR_LEN;
    let data_offset = (op_table + ops.len() * OP_LEN).next_multiple_of(DATA_ALIGN);
    let file_len = data_offset + data.bytes.len();
    let (input, output) = (&model.tensors[model.input], &model.tensors[model.output]);
    let header = HeaderFields {
        file_len: u32_of("file length", file_len)?,
        arena_bytes: u32_of("arena bytes", plan.arena_bytes)?,
        input_chw: chw_of("input ", input.shape)?,
        input_tensor: u16_of("tensor id", model.input)?,
        output_tensor: u16_of("tensor id", model.output)?,
        input_encoding: model.input_encoding.code(),
        rounding: model.rounding.code(),
        n_tensors: n_tensors as u32,
        tensor_table: HEADER_LEN as u32,
        n_ops: u32_of("op count", ops.len())?,
        op_table: u32_of("op table offset", op_table)?,
        data_offset: u32_of("data offset", data_offset)?,
        data_len: u32_of("data length", data.bytes.len())?,
        output_scale: output.scale,
        output_zero_point: output.zero_point,
        input_scale: input.scale,
        input_zero_point: input.zero_point,
    };
    let mut out = vec![0u8; file_len];
    header.write_to(&mut out);
    for (t, rec) in tensors.iter().zip(out[HEADER_LEN..].chunks_mut(TENSOR_LEN)) {
        t.write_to(rec);
    }
    for (op, rec) in ops.iter().zip(out[op_table..].chunks_mut(OP_LEN)) {
        op.write_to(rec);
    }
    out[data_offset..].copy_from_slice(&data.bytes);
    // The format's one CRC definition (the runtime checks it with the same function).
    format::seal(&mut out);
    Ok(out)
}

/// The exporter's quantized model in the file's terms: raw u8 pixels in, conv weights in the
/// runtime's OHWI layout, each layer's window, and the residual add as the model's rounding
/// asks (octet's add for the single rounding, TFLite's for the double).
pub fn o8_model(model: &QModel) -> Result<O8Model> {
    let tensors = model
        .tensors
        .iter()
        .map(|t| O8Tensor {
            shape: t.shape,
            scale: t.qparams.scale,
            zero_point: t.qparams.zero_point,
        })
        .collect();
    let ops = model
        .ops
        .iter()
        .map(|op| o8_op(model, op))
        .collect::<Result<Vec<_>>>()?;
    Ok(O8Model {
        tensors,
        ops,
        input: model.input,
        output: model.output,
        input_encoding: InputEncoding::PixelsU8Chw,
        rounding: model.rounding,
    })
}

/// One op of [`o8_model`].
fn o8_op(model: &QModel, op: &QOp) -> Result<O8Op> {
    let square = |k: usize, stride: usize, pad: usize| -> Result<Window> {
        Ok(Window::square(
            u8_of("kernel size", k)?,
            u8_of("stride", stride)?,
            u8_of("padding", pad)?,
        ))
    };
    let (kind, window, param) = match op.kind {
        OpKind::Conv2d { .. } | OpKind::DepthwiseConv2d { .. } => {
            let (kh, kw, stride, pad) = op.kind.window();
            let mut w = square(kh, stride, pad)?;
            w.kernel_w = u8_of("kernel width", kw)?;
            let kind = if let OpKind::Conv2d { .. } = op.kind {
                O8Kind::Conv2d
            } else {
                O8Kind::DepthwiseConv2d
            };
            (kind, w, 0)
        }
        OpKind::FullyConnected => (O8Kind::FullyConnected, Window::default(), 0),
        OpKind::MaxPool { k, stride } => (O8Kind::MaxPool, square(k, stride, 0)?, 0),
        OpKind::AvgPool { k, stride } => (O8Kind::AvgPool, square(k, stride, 0)?, 0),
        OpKind::Add => match model.rounding {
            Rounding::Single => (O8Kind::Add, Window::default(), 0),
            Rounding::Double => (
                O8Kind::TfliteAdd,
                Window::default(),
                crate::quantize::TFLITE_ADD_LEFT_SHIFT,
            ),
        },
    };
    Ok(O8Op {
        kind,
        inputs: op.inputs.clone(),
        output: op.output,
        window,
        act: (op.act_min, op.act_max),
        weights: runtime_weights(model, op),
        bias: op.bias.clone(),
        multipliers: op.multipliers.clone(),
        shifts: op.shifts.clone(),
        pad_values: op.pad_values.clone(),
        param,
    })
}

/// Serialises the exporter's `model` with its arena `plan` ([`o8_model`], then [`encode`]).
pub fn write(model: &QModel, plan: &ArenaPlan) -> Result<Vec<u8>> {
    encode(&o8_model(model)?, plan)
}

/// An op's int8 weights in the runtime's layout: conv `[C_out][kh][kw][C_in]`, fc `[N][K]`.
pub(crate) fn runtime_weights(model: &QModel, op: &QOp) -> Vec<i8> {
    match (&op.weights, op.kind) {
        (Some(w), OpKind::Conv2d { kh, kw, .. }) => conv_weights_ohwi(
            &w.q,
            w.scales.len(),
            model.tensors[op.inputs[0]].shape.c,
            kh,
            kw,
        ),
        (Some(w), OpKind::DepthwiseConv2d { kh, kw, .. }) => {
            // [C_out][kh][kw] → [kh][kw][C_out] (TFLite's layout).
            let cout = w.scales.len();
            let mut out = vec![0i8; w.q.len()];
            for o in 0..cout {
                for t in 0..kh * kw {
                    out[t * cout + o] = w.q[o * kh * kw + t];
                }
            }
            out
        }
        (Some(w), _) => w.q.clone(),
        (None, _) => Vec::new(),
    }
}
