//! A plain scalar interpreter of the int8 model in the exporter's own terms (QModel + arena
//! plan), following FORMAT.md op by op. It is the exporter's check of its own arithmetic and
//! plan, and the oracle the runtime's kernels can be compared with byte for byte.

use octet_runtime::kernels::{scalar, TfliteAddParams};
use octet_runtime::requant::{AddRequant, OutputQuant, Rounding};

use crate::graph::OpKind;
use crate::plan::ArenaPlan;
use crate::qmodel::QModel;
use crate::{ExportError, Result};

/// Runs `n` images of u8 pixels (NCHW) through the arena; returns the int8 logits, n × classes.
pub fn run_int8(model: &QModel, plan: &ArenaPlan, pixels: &[u8], n: usize) -> Result<Vec<i8>> {
    let ins = model.tensors[model.input].shape;
    if pixels.len() != n * ins.len() {
        return Err(ExportError::BadInput(format!(
            "{} pixel bytes for {n} images of {ins}",
            pixels.len()
        )));
    }
    let weights: Vec<Vec<i8>> = model
        .ops
        .iter()
        .map(|op| crate::write::runtime_weights(model, op))
        .collect();
    let mut arena = vec![0i8; plan.arena_bytes];
    let slice =
        |t: usize| plan.tensor_offsets[t]..plan.tensor_offsets[t] + model.tensors[t].shape.len();
    let out_len = model.tensors[model.output].shape.len();
    let mut logits = Vec::with_capacity(n * out_len);
    for img in pixels.chunks(ins.len()) {
        // Planar u8 → HWC i8, q = pixel − 128.
        let dst = &mut arena[slice(model.input)];
        let hw = ins.h * ins.w;
        for c in 0..ins.c {
            for p in 0..hw {
                dst[p * ins.c + c] = (img[c * hw + p] as i16 - 128) as i8;
            }
        }
        for (op, w) in model.ops.iter().zip(&weights) {
            let x: Vec<i8> = arena[slice(op.inputs[0])].to_vec();
            let x1: Option<Vec<i8>> = op.inputs.get(1).map(|&t| arena[slice(t)].to_vec());
            let y = run_op(model, op, w, &x, x1.as_deref());
            arena[slice(op.output)].copy_from_slice(&y);
        }
        logits.extend_from_slice(&arena[slice(model.output)]);
    }
    Ok(logits)
}

fn clamp(v: i64, lo: i32, hi: i32) -> i8 {
    v.clamp(lo as i64, hi as i64) as i8
}

/// The input pixel (row-major) that tap (ky, kx) of output pixel (oy, ox) reads; `None` in the
/// padding.
fn tap(
    si: crate::graph::Shape3,
    (oy, ox): (usize, usize),
    (ky, kx): (usize, usize),
    stride: usize,
    pad: usize,
) -> Option<usize> {
    let iy = (oy * stride + ky).checked_sub(pad)?;
    let ix = (ox * stride + kx).checked_sub(pad)?;
    (iy < si.h && ix < si.w).then_some(iy * si.w + ix)
}

/// A depthwise conv: weights `[kh][kw][C_out]`, output channel o reads input channel o / D.
fn depthwise(model: &QModel, op: &crate::qmodel::QOp, w: &[i8], x: &[i8], y: &mut [i8]) {
    let si = model.tensors[op.inputs[0]].shape;
    let so = model.tensors[op.output].shape;
    let zi = model.tensors[op.inputs[0]].qparams.zero_point;
    let zo = model.tensors[op.output].qparams.zero_point as i64;
    let (kh, kw, stride, pad) = op.kind.window();
    let d = so.c / si.c;
    for oy in 0..so.h {
        for ox in 0..so.w {
            for o in 0..so.c {
                let mut acc = op.bias[o];
                for ky in 0..kh {
                    for kx in 0..kw {
                        let q = match tap(si, (oy, ox), (ky, kx), stride, pad) {
                            Some(p) => x[p * si.c + o / d] as i32,
                            None => zi,
                        };
                        acc += q * w[(ky * kw + kx) * so.c + o] as i32;
                    }
                }
                let v = model
                    .rounding
                    .requantize(acc, op.multipliers[o], op.shifts[o])
                    as i64
                    + zo;
                y[(oy * so.w + ox) * so.c + o] = clamp(v, op.act_min, op.act_max);
            }
        }
    }
}

fn run_op(
    model: &QModel,
    op: &crate::qmodel::QOp,
    w: &[i8],
    x: &[i8],
    x1: Option<&[i8]>,
) -> Vec<i8> {
    let si = model.tensors[op.inputs[0]].shape;
    let so = model.tensors[op.output].shape;
    let zi = model.tensors[op.inputs[0]].qparams.zero_point;
    let zo = model.tensors[op.output].qparams.zero_point as i64;
    let r = model.rounding;
    let mut y = vec![0i8; so.len()];
    match op.kind {
        OpKind::Conv2d {
            kh,
            kw,
            stride,
            pad,
        } => {
            let cin = si.c;
            let pad_row: Vec<i8> = if op.pad_values.is_empty() {
                vec![zi as i8; cin]
            } else {
                op.pad_values.clone()
            };
            for oy in 0..so.h {
                for ox in 0..so.w {
                    for o in 0..so.c {
                        let mut acc = op.bias[o];
                        for ky in 0..kh {
                            for kx in 0..kw {
                                let row = match tap(si, (oy, ox), (ky, kx), stride, pad) {
                                    Some(p) => &x[p * cin..(p + 1) * cin],
                                    None => &pad_row[..],
                                };
                                let wr = &w[((o * kh + ky) * kw + kx) * cin..][..cin];
                                acc += row
                                    .iter()
                                    .zip(wr)
                                    .map(|(&a, &b)| a as i32 * b as i32)
                                    .sum::<i32>();
                            }
                        }
                        let v = r.requantize(acc, op.multipliers[o], op.shifts[o]) as i64 + zo;
                        y[(oy * so.w + ox) * so.c + o] = clamp(v, op.act_min, op.act_max);
                    }
                }
            }
        }
        OpKind::DepthwiseConv2d { .. } => depthwise(model, op, w, x, &mut y),
        OpKind::FullyConnected => {
            let k = x.len();
            for o in 0..so.c {
                let acc = op.bias[o]
                    + x.iter()
                        .zip(&w[o * k..(o + 1) * k])
                        .map(|(&a, &b)| a as i32 * b as i32)
                        .sum::<i32>();
                let v = r.requantize(acc, op.multipliers[o], op.shifts[o]) as i64 + zo;
                y[o] = clamp(v, op.act_min, op.act_max);
            }
        }
        OpKind::MaxPool { k, stride } | OpKind::AvgPool { k, stride } => {
            let max = matches!(op.kind, OpKind::MaxPool { .. });
            for oy in 0..so.h {
                for ox in 0..so.w {
                    for c in 0..so.c {
                        let (mut m, mut acc) = (i8::MIN, 0i32);
                        for ky in 0..k {
                            for kx in 0..k {
                                let q =
                                    x[((oy * stride + ky) * si.w + ox * stride + kx) * si.c + c];
                                m = m.max(q);
                                acc += q as i32 - zi;
                            }
                        }
                        y[(oy * so.w + ox) * so.c + c] = if max {
                            clamp(m as i64, op.act_min, op.act_max)
                        } else {
                            clamp(
                                r.requantize(acc, op.multipliers[0], op.shifts[0]) as i64 + zo,
                                op.act_min,
                                op.act_max,
                            )
                        };
                    }
                }
            }
        }
        OpKind::Add => {
            let z1 = model.tensors[op.inputs[1]].qparams.zero_point;
            let out = OutputQuant {
                zero_point: zo as i32,
                act_min: op.act_min,
                act_max: op.act_max,
                rounding: r,
            };
            add(op, (zi, z1), out, x, x1.unwrap_or(x), &mut y);
        }
    }
    y
}

/// The residual add as the model's rounding writes it (qmodel): octet's add (two multipliers,
/// one shift) for the single rounding, TFLite's (three pairs) for the double.
fn add(
    op: &crate::qmodel::QOp,
    (z0, z1): (i32, i32),
    out: OutputQuant,
    x: &[i8],
    x1: &[i8],
    y: &mut [i8],
) {
    match out.rounding {
        Rounding::Single => {
            let add = AddRequant {
                z0,
                m0: op.multipliers[0],
                z1,
                m1: op.multipliers[1],
                n: op.shifts[0],
                out,
            };
            for (y, (&a, &b)) in y.iter_mut().zip(x.iter().zip(x1)) {
                *y = add.apply(a, b);
            }
        }
        Rounding::Double => {
            let pair = |i: usize| (op.multipliers[i], op.shifts[i]);
            let add = TfliteAddParams {
                zero_points: [z0, z1],
                left_shift: crate::quantize::TFLITE_ADD_LEFT_SHIFT,
                multipliers: [pair(0), pair(1), pair(2)],
                out,
            };
            scalar::tflite_add(&add, x, x1, y);
        }
    }
}
