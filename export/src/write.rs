//! The `.o8` writer (runtime/FORMAT.md, version 1).

use crate::graph::OpKind;
use crate::plan::ArenaPlan;
use crate::qmodel::QModel;
use crate::{ExportError, Result};

pub const MAGIC: &[u8; 8] = b"OCTET8\r\n";
pub const VERSION: u16 = 2;
pub const HEADER_LEN: usize = 80;
pub const TENSOR_RECORD: usize = 32;
pub const OP_RECORD: usize = 64;
/// Input-1 id of ops with one input.
pub const NO_TENSOR: u16 = 0xFFFF;

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

    /// (offset, length in bytes); an empty array is (0, 0).
    fn i8s(&mut self, v: &[i8]) -> (usize, usize) {
        if v.is_empty() {
            return (0, 0);
        }
        self.align(16);
        let at = self.bytes.len();
        self.bytes.extend(v.iter().map(|&x| x as u8));
        (at, v.len())
    }

    fn i32s(&mut self, v: &[i32]) -> (usize, usize) {
        if v.is_empty() {
            return (0, 0);
        }
        self.align(4);
        let at = self.bytes.len();
        for x in v {
            self.bytes.extend_from_slice(&x.to_le_bytes());
        }
        (at, v.len() * 4)
    }
}

fn put(buf: &mut [u8], at: usize, bytes: &[u8]) {
    buf[at..at + bytes.len()].copy_from_slice(bytes);
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

/// Serialises `model` with its arena `plan` into `.o8` bytes.
pub fn write(model: &QModel, plan: &ArenaPlan) -> Result<Vec<u8>> {
    let nt = model.tensors.len();
    let no = model.ops.len();
    u16_of("tensor count", nt)?;
    let mut data = Data::default();
    let mut tensor_table = vec![0u8; nt * TENSOR_RECORD];
    for (i, t) in model.tensors.iter().enumerate() {
        let r = &mut tensor_table[i * TENSOR_RECORD..(i + 1) * TENSOR_RECORD];
        put(r, 0, &u16_of("channels", t.shape.c)?.to_le_bytes());
        put(r, 2, &u16_of("height", t.shape.h)?.to_le_bytes());
        put(r, 4, &u16_of("width", t.shape.w)?.to_le_bytes());
        put(r, 8, &t.qparams.scale.to_le_bytes());
        put(r, 12, &t.qparams.zero_point.to_le_bytes());
        put(
            r,
            16,
            &u32_of("arena offset", plan.tensor_offsets[i])?.to_le_bytes(),
        );
        put(r, 20, &u32_of("tensor bytes", t.shape.len())?.to_le_bytes());
    }
    let mut op_table = vec![0u8; no * OP_RECORD];
    for (i, op) in model.ops.iter().enumerate() {
        let r = &mut op_table[i * OP_RECORD..(i + 1) * OP_RECORD];
        r[0] = op.kind.code();
        put(r, 2, &u16_of("tensor id", op.inputs[0])?.to_le_bytes());
        let in1 = match op.inputs.get(1) {
            Some(&t) => u16_of("tensor id", t)?,
            None => NO_TENSOR,
        };
        put(r, 4, &in1.to_le_bytes());
        put(r, 6, &u16_of("tensor id", op.output)?.to_le_bytes());
        let (kh, kw, stride, pad) = match op.kind {
            OpKind::Conv2d {
                kh,
                kw,
                stride,
                pad,
            } => (kh, kw, stride, pad),
            OpKind::MaxPool { k, stride } | OpKind::AvgPool { k, stride } => (k, k, stride, 0),
            _ => (0, 0, 0, 0),
        };
        r[8] = u8_of("kernel height", kh)?;
        r[9] = u8_of("kernel width", kw)?;
        r[10] = u8_of("stride", stride)?;
        r[11] = u8_of("padding", pad)?;
        put(r, 12, &op.act_min.to_le_bytes());
        put(r, 16, &op.act_max.to_le_bytes());
        let weights = runtime_weights(model, op);
        let arrays = [
            data.i8s(&weights),
            data.i32s(&op.bias),
            data.i32s(&op.multipliers),
            data.i32s(&op.shifts),
            data.i8s(&op.pad_values),
        ];
        for (j, (off, len)) in arrays.into_iter().enumerate() {
            put(r, 20 + 8 * j, &u32_of("data offset", off)?.to_le_bytes());
            put(r, 24 + 8 * j, &u32_of("data length", len)?.to_le_bytes());
        }
        put(
            r,
            60,
            &u32_of("scratch offset", plan.scratch_offsets[i])?.to_le_bytes(),
        );
    }
    let op_off = HEADER_LEN + tensor_table.len();
    let data_off = (op_off + op_table.len()).div_ceil(16) * 16;
    let file_len = data_off + data.bytes.len();
    let mut out = vec![0u8; file_len];
    let input = &model.tensors[model.input];
    let output = &model.tensors[model.output];
    put(&mut out, 0, MAGIC);
    put(&mut out, 8, &VERSION.to_le_bytes());
    put(&mut out, 10, &(HEADER_LEN as u16).to_le_bytes());
    put(
        &mut out,
        16,
        &u32_of("file length", file_len)?.to_le_bytes(),
    );
    put(
        &mut out,
        20,
        &u32_of("arena bytes", plan.arena_bytes)?.to_le_bytes(),
    );
    put(
        &mut out,
        24,
        &u16_of("input channels", input.shape.c)?.to_le_bytes(),
    );
    put(
        &mut out,
        26,
        &u16_of("input height", input.shape.h)?.to_le_bytes(),
    );
    put(
        &mut out,
        28,
        &u16_of("input width", input.shape.w)?.to_le_bytes(),
    );
    put(
        &mut out,
        30,
        &u16_of("tensor id", model.input)?.to_le_bytes(),
    );
    put(
        &mut out,
        32,
        &u16_of("tensor id", model.output)?.to_le_bytes(),
    );
    put(&mut out, 36, &(nt as u32).to_le_bytes());
    put(&mut out, 40, &(HEADER_LEN as u32).to_le_bytes());
    put(&mut out, 44, &u32_of("op count", no)?.to_le_bytes());
    put(
        &mut out,
        48,
        &u32_of("op table offset", op_off)?.to_le_bytes(),
    );
    put(
        &mut out,
        52,
        &u32_of("data offset", data_off)?.to_le_bytes(),
    );
    put(
        &mut out,
        56,
        &u32_of("data length", data.bytes.len())?.to_le_bytes(),
    );
    put(&mut out, 60, &output.qparams.scale.to_le_bytes());
    put(&mut out, 64, &output.qparams.zero_point.to_le_bytes());
    put(&mut out, HEADER_LEN, &tensor_table);
    put(&mut out, op_off, &op_table);
    put(&mut out, data_off, &data.bytes);
    // The format's one CRC definition (the runtime checks it with the same function).
    let crc = octet_runtime::format::crc32(&out[octet_runtime::format::CRC_START..]);
    put(&mut out, 12, &crc.to_le_bytes());
    Ok(out)
}

/// An op's int8 weights in the runtime's layout: conv `[C_out][kh][kw][C_in]`, fc `[N][K]`.
pub(crate) fn runtime_weights(model: &QModel, op: &crate::QOp) -> Vec<i8> {
    match (&op.weights, op.kind) {
        (Some(w), OpKind::Conv2d { kh, kw, .. }) => conv_weights_ohwi(
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
