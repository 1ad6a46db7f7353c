//! Crafted `.o8` files: seeded, field-aware mutations of valid models (the header, tensor and
//! op fields FORMAT.md defines, the arena size, the file length, the constant data), the
//! file_len and CRC made valid again so that the mutation reaches validation. Shared by the
//! runtime's in-process test (`crafted.rs`) and the command line's (`tests/crafted_inputs.rs`).
#![allow(dead_code)]

use octet_runtime::format::{header, op, tensor, HEADER_LEN, OP_LEN, TENSOR_LEN};

/// The header through its file_len field: what a mutant keeps at least.
const FILE_LEN_END: usize = header::FILE_LEN + 4;

use crate::common::{
    embedded_net, fix_crc, hand_model, lenet, small_late_resnet, small_resnet, Rng,
};

/// Header fields: (offset, width in bytes, name), at the offsets `format` defines.
const HEADER: &[(usize, usize, &str)] = &[
    (header::VERSION, 2, "version"),
    (header::HEADER_LEN, 2, "header length"),
    (header::FILE_LEN, 4, "file_len"),
    (header::ARENA_BYTES, 4, "arena_bytes"),
    (header::INPUT_CHW, 2, "input c"),
    (header::INPUT_CHW + 2, 2, "input h"),
    (header::INPUT_CHW + 4, 2, "input w"),
    (header::INPUT_TENSOR, 2, "input tensor"),
    (header::OUTPUT_TENSOR, 2, "output tensor"),
    (header::INPUT_ENCODING, 1, "input encoding"),
    (header::ROUNDING, 1, "rounding"),
    (header::N_TENSORS, 4, "n_tensors"),
    (header::TENSOR_TABLE, 4, "tensor table offset"),
    (header::N_OPS, 4, "n_ops"),
    (header::OP_TABLE, 4, "op table offset"),
    (header::DATA_OFFSET, 4, "data offset"),
    (header::DATA_LEN, 4, "data length"),
    (header::OUTPUT_SCALE, 4, "output scale"),
    (header::OUTPUT_ZERO_POINT, 4, "output zero point"),
    (header::INPUT_SCALE, 4, "input scale"),
    (header::INPUT_ZERO_POINT, 4, "input zero point"),
    (header::RESERVED, 4, "reserved"),
];

/// Tensor record fields.
const TENSOR: &[(usize, usize, &str)] = &[
    (tensor::CHW, 2, "c"),
    (tensor::CHW + 2, 2, "h"),
    (tensor::CHW + 4, 2, "w"),
    (tensor::RESERVED0, 2, "reserved"),
    (tensor::SCALE, 4, "scale"),
    (tensor::ZERO_POINT, 4, "zero point"),
    (tensor::OFFSET, 4, "arena offset"),
    (tensor::BYTES, 4, "bytes"),
    (tensor::RESERVED1, 4, "reserved"),
];

/// Op record fields; each array is an (offset, length) pair of u32.
const OP: &[(usize, usize, &str)] = &[
    (op::KIND, 1, "kind"),
    (op::RESERVED, 1, "reserved"),
    (op::INPUT0, 2, "input 0"),
    (op::INPUT1, 2, "input 1"),
    (op::OUTPUT, 2, "output"),
    (op::WINDOW, 1, "kernel h"),
    (op::WINDOW + 1, 1, "kernel w"),
    (op::WINDOW + 2, 1, "stride h"),
    (op::WINDOW + 3, 1, "stride w"),
    (op::WINDOW + 4, 1, "pad top"),
    (op::WINDOW + 5, 1, "pad left"),
    (op::WINDOW + 6, 1, "pad bottom"),
    (op::WINDOW + 7, 1, "pad right"),
    (op::WINDOW + 8, 1, "dilation h"),
    (op::WINDOW + 9, 1, "dilation w"),
    (op::RESERVED1, 2, "reserved"),
    (op::ACT_MIN, 4, "act_min"),
    (op::ACT_MAX, 4, "act_max"),
    (op::WEIGHTS, 4, "weights offset"),
    (op::WEIGHTS + 4, 4, "weights length"),
    (op::BIAS, 4, "bias offset"),
    (op::BIAS + 4, 4, "bias length"),
    (op::MULTIPLIER, 4, "multiplier offset"),
    (op::MULTIPLIER + 4, 4, "multiplier length"),
    (op::SHIFT, 4, "shift offset"),
    (op::SHIFT + 4, 4, "shift length"),
    (op::PAD_VALUES, 4, "pad values offset"),
    (op::PAD_VALUES + 4, 4, "pad values length"),
    (op::PARAM, 4, "parameter"),
    (op::RESERVED2, 4, "reserved"),
];

/// The valid models mutants start from: (name, bytes): octet's own (raw u8 pixels in) and the
/// embedded op set on an int8 input in both roundings.
pub fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("hand", hand_model().encode()),
        ("lenet", lenet(21).encode()),
        ("small_resnet", small_resnet(22).encode()),
        ("small_late_resnet", small_late_resnet(23).encode()),
        ("embedded_single", embedded_net(1, 24).encode()),
        ("embedded_double", embedded_net(2, 25).encode()),
    ]
}

fn get(f: &[u8], at: usize, width: usize) -> u64 {
    let mut v = 0u64;
    for i in (0..width).rev() {
        v = v << 8 | *f.get(at + i).unwrap_or(&0) as u64;
    }
    v
}

fn put(f: &mut [u8], at: usize, width: usize, v: u64) {
    for i in 0..width {
        if let Some(b) = f.get_mut(at + i) {
            *b = (v >> (8 * i)) as u8;
        }
    }
}

/// A hostile value for a field of `width` bytes that now holds `old`.
fn value(rng: &mut Rng, width: usize, old: u64, is_f32: bool) -> u64 {
    let max = if width == 8 {
        u64::MAX
    } else {
        (1u64 << (8 * width)) - 1
    };
    if is_f32 && rng.next().is_multiple_of(2) {
        let v = [
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            0.0,
            -0.0,
            -1.0,
            f32::MIN_POSITIVE / 2.0,
            f32::MAX,
            1e-30,
        ][rng.next() as usize % 9];
        return v.to_bits() as u64;
    }
    let v = match rng.next() % 12 {
        0 => 0,
        1 => 1,
        2 => max,
        3 => max - 1,
        4 => 1 << (8 * width - 1),
        5 => old.wrapping_add(1),
        6 => old.wrapping_sub(1),
        7 => old.wrapping_mul(2),
        8 => old.wrapping_add(16),
        9 => old.wrapping_sub(16),
        10 => old ^ (1 << (rng.next() % (8 * width as u64))),
        _ => rng.next(),
    };
    v & max
}

/// One mutation of `f` (in place); what it did.
fn mutate_once(f: &mut Vec<u8>, rng: &mut Rng) -> String {
    let n_t = get(f, header::N_TENSORS, 4).min(4096) as usize;
    let n_o = get(f, header::N_OPS, 4).min(4096) as usize;
    let op_table = get(f, header::OP_TABLE, 4) as usize;
    let data = get(f, header::DATA_OFFSET, 4) as usize;
    let arena = get(f, header::ARENA_BYTES, 4);
    match rng.next() % 16 {
        // The arena size, the field of the issue: huge, off by a little, or exact but reached
        // through a tensor moved far away.
        0 => {
            let v = [
                u32::MAX as u64,
                arena + 1,
                arena + 16,
                arena.saturating_sub(1),
                arena * 2,
                arena * 8,
                0x8000_0000,
            ][rng.next() as usize % 7];
            put(f, header::ARENA_BYTES, 4, v);
            format!("arena_bytes {arena} -> {v}")
        }
        1 => {
            let t = rng.next() as usize % n_t.max(1);
            let at = HEADER_LEN + TENSOR_LEN * t;
            let bytes = get(f, at + tensor::BYTES, 4);
            let far = [0x1000_0000u64, 0xF000_0000, arena + 4096, arena][rng.next() as usize % 4];
            put(f, at + tensor::OFFSET, 4, far);
            put(
                f,
                header::ARENA_BYTES,
                4,
                (far + bytes).min(u32::MAX as u64),
            );
            format!("tensor {t} moved to {far}, arena_bytes to its end")
        }
        2..=3 => {
            let (at, w, name) = HEADER[rng.next() as usize % HEADER.len()];
            let v = value(rng, w, get(f, at, w), at == header::OUTPUT_SCALE);
            put(f, at, w, v);
            format!("header {name} = {v:#x}")
        }
        4..=7 => {
            let t = rng.next() as usize % n_t.max(1);
            let (off, w, name) = TENSOR[rng.next() as usize % TENSOR.len()];
            let at = HEADER_LEN + TENSOR_LEN * t + off;
            let v = value(rng, w, get(f, at, w), off == tensor::SCALE);
            put(f, at, w, v);
            format!("tensor {t} {name} = {v:#x}")
        }
        8..=11 => {
            let j = rng.next() as usize % n_o.max(1);
            let (off, w, name) = OP[rng.next() as usize % OP.len()];
            let at = op_table + OP_LEN * j + off;
            let v = value(rng, w, get(f, at, w), false);
            put(f, at, w, v);
            format!("op {j} {name} = {v:#x}")
        }
        12 => {
            // Two records of a table swapped.
            let (base, len, n, what) = if rng.next().is_multiple_of(2) {
                (HEADER_LEN, TENSOR_LEN, n_t, "tensors")
            } else {
                (op_table, OP_LEN, n_o, "ops")
            };
            let (a, b) = (
                rng.next() as usize % n.max(1),
                rng.next() as usize % n.max(1),
            );
            if base + len * (a.max(b) + 1) <= f.len() {
                for i in 0..len {
                    f.swap(base + len * a + i, base + len * b + i);
                }
            }
            format!("{what} {a} and {b} swapped")
        }
        13 => {
            // Truncated or extended (file_len follows: the CRC and length checks pass).
            let len = f.len();
            let new = match rng.next() % 4 {
                0 => rng.next() as usize % len,
                1 => len - 1 - rng.next() as usize % 16.min(len - 1),
                2 => len + 1 + rng.next() as usize % 64,
                _ => data.min(len),
            };
            f.resize(new.max(FILE_LEN_END), 0);
            format!("length {len} -> {}", f.len())
        }
        14 => {
            // Constant data: weights, biases, multipliers, shifts.
            let len = f.len();
            let at = data + rng.next() as usize % len.saturating_sub(data).max(1);
            let at = at.min(len.saturating_sub(4)) & !3;
            let v = [
                0x80u64,
                0x8080_8080,
                0x7FFF_FFFF,
                0x8000_0000,
                0,
                63,
                0xFFFF_FFFF,
            ][rng.next() as usize % 7];
            put(f, at, 4, v);
            format!("data @{at} = {v:#x}")
        }
        _ => {
            let at = rng.next() as usize
                % f.len()
                    .min(HEADER_LEN + TENSOR_LEN * n_t + OP_LEN * n_o)
                    .max(1);
            let bit = rng.next() % 8;
            if let Some(b) = f.get_mut(at) {
                *b ^= 1 << bit;
            }
            format!("bit {bit} of byte {at}")
        }
    }
}

/// A mutant of `base`: one to four mutations, then file_len (usually) and the CRC repaired.
pub fn mutate(base: &[u8], rng: &mut Rng) -> (Vec<u8>, String) {
    let mut f = base.to_vec();
    let n = 1 + (rng.next() % 8).saturating_sub(4) as usize;
    let mut what = Vec::new();
    for _ in 0..n {
        what.push(mutate_once(&mut f, rng));
    }
    if f.len() >= FILE_LEN_END && !rng.next().is_multiple_of(8) {
        let len = f.len() as u64;
        put(&mut f, header::FILE_LEN, 4, len);
    }
    fix_crc(&mut f);
    (f, what.join("; "))
}
