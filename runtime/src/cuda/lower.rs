//! Lowering: what the GPU runs for each op, decided once on the host before anything reaches
//! the device (TensorFlow Lite Micro's Prepare). Every op becomes one [`Step`] with its
//! geometry as the kernels' int32 arguments, its activation regions (offsets from `plan.rs`)
//! and its constants repacked for the kernels: conv/fc weights as int32 words of four int8
//! (input channels padded to a multiple of 4 with zero weights), per output channel
//! `{bias, M0, n, 0}`, a pad byte per input channel. A fully_connected op is a 1×1 conv over a
//! 1×1×K input. An add right after a conv is marked fusable into that conv's epilogue where the
//! memory plan allows it; whether it is fused is decided at launch (the tile, the switch).
//! How the steps run is `launch.rs`'s business.

use std::ops::Range;

use crate::kernels::{ConvParams, FcParams, Shape};
use crate::requant::{AddRequant, ChannelRequant, OutputQuant};
use crate::{Model, OpInfo, OpKind, TensorInfo};

use super::error::invalid;
use super::plan::Layout;
use super::Result;

/// Per-image geometry of a conv, fc or pool, as the kernels take it (int32).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Geom {
    /// Input height, width, channels.
    pub h: i32,
    pub w: i32,
    pub cin: i32,
    /// Output height, width, channels.
    pub ho: i32,
    pub wo: i32,
    pub cout: i32,
    /// Window height and width.
    pub kh: i32,
    pub kw: i32,
    pub stride: i32,
    pub pad: i32,
}

impl Geom {
    fn new(
        input: Shape,
        output: Shape,
        (kh, kw): (usize, usize),
        stride: usize,
        pad: usize,
    ) -> Result<Geom> {
        Ok(Geom {
            h: to_i32(input.h)?,
            w: to_i32(input.w)?,
            cin: to_i32(input.c)?,
            ho: to_i32(output.h)?,
            wo: to_i32(output.w)?,
            cout: to_i32(output.c)?,
            kh: to_i32(kh)?,
            kw: to_i32(kw)?,
            stride: to_i32(stride)?,
            pad: to_i32(pad)?,
        })
    }
}

fn to_i32(v: usize) -> Result<i32> {
    i32::try_from(v).map_err(|_| invalid())
}

/// A conv2d or fully_connected op.
pub(super) struct Dense<C> {
    /// A fully_connected op (run by the warp kernel at small batches).
    pub fc: bool,
    /// Offsets of the input and output regions in the activation buffer.
    pub x: usize,
    pub y: usize,
    pub g: Geom,
    /// Int32 words per tap of the packed weights: C_in rounded up to 4, over 4.
    pub cin_words: i32,
    pub q: OutputQuant,
    /// The repacked constants: [`DenseConsts`] after lowering, device buffers after upload.
    pub consts: C,
}

/// A conv's constants as the kernels read them.
pub(super) struct DenseConsts {
    /// `[C_out][kh·kw·cin_words]` int32 words of 4 int8.
    pub w: Vec<i32>,
    /// `{bias, M0, n, 0}` per output channel.
    pub rq: Vec<i32>,
    /// Pad value per input channel (the input zero point where the model has none).
    pub padv: Vec<i8>,
}

/// A max_pool or avg_pool op.
pub(super) struct Pool {
    pub avg: bool,
    pub x: usize,
    pub y: usize,
    /// `cin` is the channel count (`cout` the same), `pad` 0.
    pub g: Geom,
    /// avg_pool's input zero point, M0 and n = 31 − shift (max_pool: 0, 0, 1).
    pub zin: i32,
    pub m0: i32,
    pub n: i32,
    pub q: OutputQuant,
}

/// A requantizing add.
pub(super) struct Add {
    /// Set when the add can run in the epilogue of the conv right before it.
    pub fusable: Option<Residual>,
    /// Offsets of inputs `a`, `b` and the output.
    pub a: usize,
    pub b: usize,
    pub y: usize,
    /// Bytes per image.
    pub len: usize,
    /// The op's requantization, `n` clamped to [1, 62].
    pub rq: AddRequant,
}

/// The add's operands as a conv epilogue sees them: the conv's own result is one input, the
/// residual (the other input) is read from memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Residual {
    /// Offset of the residual input.
    pub at: usize,
    /// The residual's zero point and multiplier.
    pub z: i32,
    pub m: i32,
    /// The conv side's zero point and multiplier.
    pub conv_z: i32,
    pub conv_m: i32,
}

/// One op as the GPU runs it; `C` holds a conv's constants (see [`Dense::consts`]).
pub(super) enum Step<C> {
    Dense(Dense<C>),
    Pool(Pool),
    Add(Add),
}

/// The conv/fc constants' row `{bias, M0, n, 0}`: n = 31 − shift as requant.rs clamps it.
pub(super) fn rq_words(bias: i32, m0: i32, shift: i32) -> [i32; 4] {
    let c = ChannelRequant::new(bias, m0, shift);
    [c.bias, c.m0 as i32, c.n as i32, 0]
}

/// Packs `[rows][taps][cin]` int8 weights as `[rows][taps][cin_words]` int32 words
/// (little-endian groups of 4, zero-padded channels).
pub(super) fn pack_weights(w: &[i8], rows: usize, taps: usize, cin: usize) -> (Vec<i32>, usize) {
    let cin_words = cin.div_ceil(4);
    let mut out = vec![0i32; (rows * taps * cin_words).max(1)];
    for r in 0..rows {
        for t in 0..taps {
            let src = &w[(r * taps + t) * cin..][..cin];
            let dst = &mut out[(r * taps + t) * cin_words..][..cin_words];
            for (word, chunk) in dst.iter_mut().zip(src.chunks(4)) {
                let mut b = [0u8; 4];
                for (d, &s) in b.iter_mut().zip(chunk) {
                    *d = s as u8;
                }
                *word = i32::from_le_bytes(b);
            }
        }
    }
    (out, cin_words)
}

/// The steps of `model` over the activation layout `layout` (planned for `max_batch`
/// images), constants on the host.
pub(super) fn lower(
    model: &Model,
    layout: &Layout,
    max_batch: usize,
) -> Result<Vec<Step<DenseConsts>>> {
    let ctx = Lowering::new(model, layout, max_batch);
    // (output, input) of the previous op when it is a conv/fc.
    let mut prev_dense: Option<(u16, u16)> = None;
    let mut steps = Vec::with_capacity(model.num_ops());
    for o in model.ops() {
        let tin = ctx.tensor(o.input0)?;
        let tout = ctx.tensor(o.output)?;
        let (x, y) = (ctx.offset(o.input0)?, ctx.offset(o.output)?);
        let step = match o.kind {
            OpKind::Conv2d => Step::Dense(dense(&Model::conv_params(&o, &tin, &tout), x, y)?),
            OpKind::FullyConnected => {
                let p = fc_as_conv(&Model::fc_params(&o, &tin, &tout), tin.zero_point);
                Step::Dense(Dense {
                    fc: true,
                    ..dense(&p, x, y)?
                })
            }
            OpKind::MaxPool | OpKind::AvgPool => Step::Pool(pool(&o, &tin, &tout, x, y)?),
            OpKind::Add => Step::Add(ctx.add(&o, &tin, &tout, prev_dense)?),
        };
        prev_dense = match step {
            Step::Dense(_) => Some((o.output, o.input0)),
            _ => None,
        };
        steps.push(step);
    }
    Ok(steps)
}

/// A fully_connected op as the 1×1 conv over a 1×1×K input that the GPU runs.
fn fc_as_conv<'o>(p: &FcParams<'o>, input_zero_point: i32) -> ConvParams<'o> {
    let vector = |c| Shape { c, h: 1, w: 1 };
    ConvParams {
        input: vector(p.k),
        output: vector(p.n),
        kernel_h: 1,
        kernel_w: 1,
        stride: 1,
        pad: 0,
        weights: p.weights,
        bias: p.bias,
        multiplier: p.multiplier,
        shift: p.shift,
        pad_values: &[],
        input_zero_point,
        out: p.out,
    }
}

/// A conv (`fc` false) with its constants repacked.
fn dense(p: &ConvParams, x: usize, y: usize) -> Result<Dense<DenseConsts>> {
    let (cin, cout) = (p.input.c, p.output.c);
    let (w, cin_words) = pack_weights(p.weights, cout, p.kernel_h * p.kernel_w, cin);
    let rq = (0..cout)
        .flat_map(|c| rq_words(p.bias.get(c), p.multiplier.get(c), p.shift.get(c)))
        .collect();
    let zin = p.input_zero_point.clamp(-128, 127) as i8;
    let padv = (0..cin.max(1))
        .map(|c| p.pad_values.get(c).copied().unwrap_or(zin))
        .collect();
    let kernel = (p.kernel_h, p.kernel_w);
    Ok(Dense {
        fc: false,
        x,
        y,
        g: Geom::new(p.input, p.output, kernel, p.stride, p.pad)?,
        cin_words: to_i32(cin_words)?,
        q: p.out,
        consts: DenseConsts { w, rq, padv },
    })
}

fn pool(o: &OpInfo, tin: &TensorInfo, tout: &TensorInfo, x: usize, y: usize) -> Result<Pool> {
    let avg = o.kind == OpKind::AvgPool;
    let (m0, n) = if avg {
        let r = rq_words(0, o.multipliers.get(0), o.shifts.get(0));
        (r[1], r[2])
    } else {
        (0, 1)
    };
    let kernel = (o.kernel_h as usize, o.kernel_w as usize);
    Ok(Pool {
        avg,
        x,
        y,
        g: Geom::new(tin.shape(), tout.shape(), kernel, o.stride as usize, 0)?,
        zin: tin.zero_point,
        m0,
        n,
        q: OutputQuant {
            zero_point: tout.zero_point,
            act_min: o.act_min,
            act_max: o.act_max,
        },
    })
}

/// What lowering looks up across ops: tensors, their regions, their readers.
struct Lowering<'m, 'a> {
    model: &'m Model<'a>,
    layout: &'m Layout,
    max_batch: usize,
    /// Readers per tensor (the model output counts one): an add can be fused into the conv
    /// before it only if the conv's output has no other reader.
    readers: Vec<usize>,
}

impl<'m, 'a> Lowering<'m, 'a> {
    fn new(model: &'m Model<'a>, layout: &'m Layout, max_batch: usize) -> Self {
        let mut readers = vec![0usize; model.num_tensors()];
        for o in model.ops() {
            for t in [Some(o.input0), o.input1].into_iter().flatten() {
                if let Some(r) = readers.get_mut(t as usize) {
                    *r += 1;
                }
            }
        }
        if let Some(r) = readers.get_mut(model.output_tensor() as usize) {
            *r += 1;
        }
        Lowering {
            model,
            layout,
            max_batch,
            readers,
        }
    }

    fn tensor(&self, t: u16) -> Result<TensorInfo> {
        self.model.tensor(t).ok_or_else(invalid)
    }

    fn offset(&self, t: u16) -> Result<usize> {
        let off = self.layout.offsets.get(t as usize).copied().flatten();
        off.ok_or_else(invalid)
    }

    /// Tensor `t`'s bytes in the activation buffer (`max_batch` images).
    fn region(&self, t: u16) -> Result<Range<usize>> {
        let o = self.offset(t)?;
        Ok(o..o + self.tensor(t)?.len() * self.max_batch)
    }

    /// Add op `o` (input `tin`, output `tout`); `prev_dense` is (output, input) of the op
    /// before it when that is a conv/fc.
    fn add(
        &self,
        o: &OpInfo,
        tin: &TensorInfo,
        tout: &TensorInfo,
        prev_dense: Option<(u16, u16)>,
    ) -> Result<Add> {
        let t1 = o.input1.ok_or_else(invalid)?;
        let tin1 = self.tensor(t1)?;
        let rq = Model::add_params(o, tin, &tin1, tout);
        let rq = AddRequant {
            n: rq.n.clamp(1, 62),
            ..rq
        };
        let (a, b) = (self.offset(o.input0)?, self.offset(t1)?);
        let mut fusable = None;
        if let Some((d_out, d_in)) = prev_dense {
            if self.fusable(o, t1, d_out, d_in)? {
                let inputs = [(a, rq.z0, rq.m0), (b, rq.z1, rq.m1)];
                let (conv, res) = if o.input0 == d_out {
                    (inputs[0], inputs[1])
                } else {
                    (inputs[1], inputs[0])
                };
                fusable = Some(Residual {
                    at: res.0,
                    z: res.1,
                    m: res.2,
                    conv_z: conv.1,
                    conv_m: conv.2,
                });
            }
        }
        Ok(Add {
            fusable,
            a,
            b,
            y: self.offset(o.output)?,
            len: tout.len(),
            rq,
        })
    }

    /// Whether add `o` (inputs `o.input0`, `t1`) can run in the epilogue of the conv before it
    /// (output `d_out`, input `d_in`): the conv writes one of the add's inputs that nothing else
    /// reads, and the add's output shares memory with neither the conv's input nor the other
    /// input (plan.rs keeps the conv's input alive until the add).
    fn fusable(&self, o: &OpInfo, t1: u16, d_out: u16, d_in: u16) -> Result<bool> {
        if !(o.input0 == d_out || t1 == d_out) || self.readers[d_out as usize] != 1 {
            return Ok(false);
        }
        let res = if o.input0 == d_out { t1 } else { o.input0 };
        let disjoint = |a: &Range<usize>, b: &Range<usize>| a.end <= b.start || b.end <= a.start;
        let y = self.region(o.output)?;
        Ok(disjoint(&y, &self.region(d_in)?) && disjoint(&y, &self.region(res)?))
    }
}
