//! The `.o8` writer: the model's values checked to fit their fields, laid out and encoded by
//! the runtime's `format` module (runtime/FORMAT.md), which reads them back.

use octet_runtime::format::{
    self, HeaderFields, OpFields, TensorFields, DATA_ALIGN, HEADER_LEN, I32_ALIGN, NO_TENSOR,
    OP_LEN, TENSOR_LEN,
};

use crate::plan::ArenaPlan;
use crate::qmodel::{QModel, QOp, QTensor};
use crate::{ExportError, Result};

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

fn chw_of(what: &str, t: &QTensor) -> Result<(u16, u16, u16)> {
    Ok((
        u16_of(&format!("{what}channels"), t.shape.c)?,
        u16_of(&format!("{what}height"), t.shape.h)?,
        u16_of(&format!("{what}width"), t.shape.w)?,
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

fn tensor_fields(t: &QTensor, offset: usize) -> Result<TensorFields> {
    Ok(TensorFields {
        chw: chw_of("", t)?,
        scale: t.qparams.scale,
        zero_point: t.qparams.zero_point,
        offset: u32_of("arena offset", offset)?,
        bytes: u32_of("tensor bytes", t.shape.len())?,
    })
}

/// `op`'s record; its constant arrays are appended to `data`.
fn op_fields(model: &QModel, op: &QOp, scratch: usize, data: &mut Data) -> Result<OpFields> {
    let input0 = u16_of("tensor id", op.inputs[0])?;
    let input1 = match op.inputs.get(1) {
        Some(&t) => u16_of("tensor id", t)?,
        None => NO_TENSOR,
    };
    let (kh, kw, stride, pad) = op.kind.window();
    Ok(OpFields {
        kind: op.kind.code(),
        input0,
        input1,
        output: u16_of("tensor id", op.output)?,
        window: (
            u8_of("kernel height", kh)?,
            u8_of("kernel width", kw)?,
            u8_of("stride", stride)?,
            u8_of("padding", pad)?,
        ),
        act: (op.act_min, op.act_max),
        weights: data.i8s(&runtime_weights(model, op))?,
        bias: data.i32s(&op.bias)?,
        multiplier: data.i32s(&op.multipliers)?,
        shift: data.i32s(&op.shifts)?,
        pad_values: data.i8s(&op.pad_values)?,
        scratch: u32_of("scratch offset", scratch)?,
    })
}

/// Serialises `model` with its arena `plan` into `.o8` bytes: header, tensor table, op table,
/// then the data section at the next 16-byte boundary.
pub fn write(model: &QModel, plan: &ArenaPlan) -> Result<Vec<u8>> {
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
        .zip(&plan.scratch_offsets)
        .map(|(op, &scratch)| op_fields(model, op, scratch, &mut data))
        .collect::<Result<Vec<_>>>()?;
    let op_table = HEADER_LEN + tensors.len() * TENSOR_LEN;
    let data_offset = (op_table + ops.len() * OP_LEN).next_multiple_of(DATA_ALIGN);
    let file_len = data_offset + data.bytes.len();
    let output = &model.tensors[model.output];
    let header = HeaderFields {
        file_len: u32_of("file length", file_len)?,
        arena_bytes: u32_of("arena bytes", plan.arena_bytes)?,
        input_chw: chw_of("input ", &model.tensors[model.input])?,
        input_tensor: u16_of("tensor id", model.input)?,
        output_tensor: u16_of("tensor id", model.output)?,
        n_tensors: n_tensors as u32,
        tensor_table: HEADER_LEN as u32,
        n_ops: u32_of("op count", ops.len())?,
        op_table: u32_of("op table offset", op_table)?,
        data_offset: u32_of("data offset", data_offset)?,
        data_len: u32_of("data length", data.bytes.len())?,
        output_scale: output.qparams.scale,
        output_zero_point: output.qparams.zero_point,
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

/// An op's int8 weights in the runtime's layout: conv `[C_out][kh][kw][C_in]`, fc `[N][K]`.
pub(crate) fn runtime_weights(model: &QModel, op: &QOp) -> Vec<i8> {
    match (&op.weights, op.kind) {
        (Some(w), crate::graph::OpKind::Conv2d { kh, kw, .. }) => conv_weights_ohwi(
            &w.q,
            w.scales.len(),
            model.tensors[op.inputs[0]].shape.c,
            kh,
            kw,
        ),
        (Some(w), _) => w.q.clone(),
        (None, _) => Vec::new(),
    }
}
