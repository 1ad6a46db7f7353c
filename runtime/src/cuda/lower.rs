//! Lowering: what the GPU runs for each op, decided once on the host before anything reaches
//! the device (TensorFlow Lite Micro's Prepare). Every op becomes one [`Step`] with its
//! geometry as the kernels' int32 arguments, its activation regions (offsets from `plan.rs`)
//! and its constants repacked for the kernels: conv/fc weights as int32 words of four int8
//! (input channels padded to a multiple of 4 with zero weights), per output channel
//! `{bias, M0, n, 0}`, a pad byte per input channel. The parameters are the ones the CPU
//! interpreter runs (the model's prepared op, `OpParams`), rounding included; the rounding
//! itself is compiled into the kernels (`kernels.rs`). A fully_connected op is a 1×1 conv over
//! a 1×1×K input. An add right after a conv is marked fusable into that conv's epilogue where
//! the memory plan allows it; whether it is fused is decided at launch (the tile, the switch).
//! How the steps run is `launch.rs`'s business.

use std::ops::Range;

use crate::kernels::{
    ConvParams, DepthwiseParams, FcParams, Placement, PoolParams, Shape, SoftmaxParams,
    TfliteAddParams,
};
use crate::model::OpParams;
use crate::requant::{AddRequant, ChannelRequant, OutputQuant};
use crate::{Model, OpInfo, TensorInfo};

use super::error::invalid;
use super::plan::Layout;
use super::Result;

/// Per-image geometry of a conv, depthwise conv, fc or pool, as the kernels take it (int32).
/// The window is FORMAT.md's: output pixel (oy, ox) reads input row `oy·sh − pt + ky·dh` and
/// column `ox·sw − pl + kx·dw`.
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
    /// Strides, top and left padding, dilations.
    pub sh: i32,
    pub sw: i32,
    pub pt: i32,
    pub pl: i32,
    pub dh: i32,
    pub dw: i32,
}

impl Geom {
    fn new(input: Shape, output: Shape, p: &Placement) -> Result<Geom> {
        Ok(Geom {
            h: to_i32(input.h)?,
            w: to_i32(input.w)?,
            cin: to_i32(input.c)?,
            ho: to_i32(output.h)?,
            wo: to_i32(output.w)?,
            cout: to_i32(output.c)?,
            kh: to_i32(p.kernel_h)?,
            kw: to_i32(p.kernel_w)?,
            sh: to_i32(p.stride_h)?,
            sw: to_i32(p.stride_w)?,
            pt: to_i32(p.pad_top)?,
            pl: to_i32(p.pad_left)?,
            dh: to_i32(p.dilation_h)?,
            dw: to_i32(p.dilation_w)?,
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
    /// `[C_out][kh·kw·cin_words]` int32 words of 4 int8 (a depthwise conv:
    /// `[kh·kw][C_out words]`).
    pub w: Vec<i32>,
    /// `{bias, M0, n, 0}` per output channel.
    pub rq: Vec<i32>,
    /// Pad value per input channel (the input zero point where the model has none).
    pub padv: Vec<i8>,
}

/// A depthwise_conv2d op: one thread per output value.
pub(super) struct Depthwise<C> {
    pub x: usize,
    pub y: usize,
    pub g: Geom,
    /// Output channels per input channel.
    pub dm: i32,
    /// Bytes per tap of the packed weights (C_out rounded up to 4).
    pub ld: i32,
    pub q: OutputQuant,
    /// Weights, `{bias, M0, n, 0}` rows and the input zero point per input channel.
    pub consts: C,
}

/// Which pooling kernel a [`Pool`] runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum PoolKind {
    Max,
    /// octet's requantizing mean.
    Avg,
    /// TensorFlow Lite's AVERAGE_POOL_2D.
    TfliteAvg,
}

impl PoolKind {
    /// The op's name (and its kernel's).
    pub fn name(self) -> &'static str {
        match self {
            PoolKind::Max => "max_pool",
            PoolKind::Avg => "avg_pool",
            PoolKind::TfliteAvg => "tflite_avg_pool",
        }
    }
}

/// A max_pool, avg_pool or tflite_avg_pool op.
pub(super) struct Pool {
    pub kind: PoolKind,
    pub x: usize,
    pub y: usize,
    /// `cin` is the channel count (`cout` the same).
    pub g: Geom,
    /// avg_pool's input zero point, M0 and n = 31 − shift (the other pools: 0, 0, 1).
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

/// TensorFlow Lite's add: three requantizations per byte.
pub(super) struct TfliteAdd {
    pub a: usize,
    pub b: usize,
    pub y: usize,
    /// Bytes per image.
    pub len: usize,
    /// Input zero points.
    pub z: [i32; 2],
    /// The inputs' left shift, clamped to [0, 30] as the CPU kernel clamps it.
    pub ls: i32,
    /// (M0, n = 31 − shift) of input 0, input 1 and the output.
    pub rq: [(i32, i32); 3],
    pub q: OutputQuant,
}

/// TensorFlow Lite's softmax over the channels of each pixel.
pub(super) struct Softmax {
    pub x: usize,
    pub y: usize,
    /// Rows (pixels) per image and values per row.
    pub rows: usize,
    pub depth: i32,
    /// The input rescaling's M0 and n = 31 − left shift.
    pub m0: i32,
    pub n: i32,
    pub diff_min: i32,
}

/// A pad op: the input placed at (pt, pl) of the output, `value` elsewhere.
pub(super) struct Pad {
    pub x: usize,
    pub y: usize,
    /// Input and output shapes, the input's place (`pt`, `pl`); no window.
    pub g: Geom,
    pub value: i32,
}

/// A reshape: the bytes copied as they are.
pub(super) struct Reshape {
    pub x: usize,
    pub y: usize,
    /// Bytes per image.
    pub len: usize,
}

/// One op as the GPU runs it; `C` holds a conv's constants (see [`Dense::consts`]).
pub(super) enum Step<C> {
    Dense(Dense<C>),
    Depthwise(Depthwise<C>),
    Pool(Pool),
    Add(Add),
    TfliteAdd(TfliteAdd),
    Softmax(Softmax),
    Pad(Pad),
    Reshape(Reshape),
}

/// The conv/fc constants' row `{bias, M0, n, 0}`: n = 31 − shift as requant.rs clamps it.
pub(super) fn rq_words(bias: i32, m0: i32, shift: i32) -> [i32; 4] {
    let c = ChannelRequant::new(bias, m0, shift);
    [c.bias, c.m0 as i32, c.n as i32, 0]
}

/// (M0, n = 31 − shift) of one multiplier, n as requant.rs clamps it.
fn m_n((m0, shift): (i32, i32)) -> (i32, i32) {
    let r = rq_words(0, m0, shift);
    (r[1], r[2])
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
        let step = ctx.step(&o, prev_dense)?;
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
    let one = Placement::square(1, 1, 0);
    ConvParams {
        input: vector(p.k),
        output: vector(p.n),
        window: one,
        weights: p.weights,
        bias: p.bias,
        multiplier: p.multiplier,
        shift: p.shift,
        pad_values: &[],
        input_zero_point,
        out: p.out,
        packed: crate::kernels::Packed::NONE,
    }
}

/// A conv (`fc` false) with its constants repacked.
fn dense(p: &ConvParams, x: usize, y: usize) -> Result<Dense<DenseConsts>> {
    let (cin, cout) = (p.input.c, p.output.c);
    let (w, cin_words) = pack_weights(p.weights, cout, p.window.kernel_h * p.window.kernel_w, cin);
    let rq = (0..cout)
        .flat_map(|c| rq_words(p.bias.get(c), p.multiplier.get(c), p.shift.get(c)))
        .collect();
    let padv = (0..cin.max(1)).map(|c| p.pad_value(c)).collect();
    Ok(Dense {
        fc: false,
        x,
        y,
        g: Geom::new(p.input, p.output, &p.window)?,
        cin_words: to_i32(cin_words)?,
        q: p.out,
        consts: DenseConsts { w, rq, padv },
    })
}

/// A depthwise conv with its weights packed as `[kh·kw][C_out rounded up to 4]` bytes.
fn depthwise(p: &DepthwiseParams, x: usize, y: usize) -> Result<Depthwise<DenseConsts>> {
    let (cin, cout) = (p.input.c, p.output.c);
    let taps = p.window.kernel_h * p.window.kernel_w;
    let (w, words) = pack_weights(p.weights, taps, 1, cout);
    let rq = (0..cout)
        .flat_map(|c| rq_words(p.bias.get(c), p.multiplier.get(c), p.shift.get(c)))
        .collect();
    let zin = p.input_zero_point.clamp(-128, 127) as i8;
    Ok(Depthwise {
        x,
        y,
        g: Geom::new(p.input, p.output, &p.window)?,
        dm: to_i32(p.depth_multiplier.max(1))?,
        ld: to_i32(4 * words)?,
        q: p.out,
        consts: DenseConsts {
            w,
            rq,
            padv: vec![zin; cin.max(1)],
        },
    })
}

fn pool(kind: PoolKind, p: &PoolParams, x: usize, y: usize) -> Result<Pool> {
    let (m0, n) = match kind {
        PoolKind::Avg => m_n((p.multiplier, p.shift)),
        PoolKind::Max | PoolKind::TfliteAvg => (0, 1),
    };
    Ok(Pool {
        kind,
        x,
        y,
        g: Geom::new(p.input, p.output, &p.window)?,
        zin: p.input_zero_point,
        m0,
        n,
        q: p.out,
    })
}

fn softmax(p: &SoftmaxParams, tin: &TensorInfo, x: usize, y: usize) -> Result<Softmax> {
    let (m0, n) = m_n((p.input_multiplier, p.input_left_shift));
    let depth = p.depth.max(1);
    Ok(Softmax {
        x,
        y,
        rows: tin.len() / depth,
        depth: to_i32(depth)?,
        m0,
        n,
        diff_min: p.diff_min,
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

    /// Op `o` as a step: its kernel parameters as the CPU interpreter prepares them.
    fn step(&self, o: &OpInfo, prev_dense: Option<(u16, u16)>) -> Result<Step<DenseConsts>> {
        let params = self
            .model
            .with_op(o.index, |p| Ok(p.params))
            .map_err(|_| invalid())?;
        let tin = self.tensor(o.input0)?;
        let (x, y) = (self.offset(o.input0)?, self.offset(o.output)?);
        let len = self.tensor(o.output)?.len();
        Ok(match params {
            OpParams::Conv2d(p) => Step::Dense(dense(&p, x, y)?),
            OpParams::FullyConnected(p) => Step::Dense(Dense {
                fc: true,
                ..dense(&fc_as_conv(&p, tin.zero_point), x, y)?
            }),
            OpParams::DepthwiseConv2d(p) => Step::Depthwise(depthwise(&p, x, y)?),
            OpParams::MaxPool(p) => Step::Pool(pool(PoolKind::Max, &p, x, y)?),
            OpParams::AvgPool(p) => Step::Pool(pool(PoolKind::Avg, &p, x, y)?),
            OpParams::TfliteAvgPool(p) => Step::Pool(pool(PoolKind::TfliteAvg, &p, x, y)?),
            OpParams::Add(rq, _) => Step::Add(self.add(o, rq, prev_dense)?),
            OpParams::TfliteAdd(p, ..) => Step::TfliteAdd(self.tflite_add(o, &p, len)?),
            OpParams::Softmax(p) => Step::Softmax(softmax(&p, &tin, x, y)?),
            OpParams::Pad(p) => {
                let at = Placement {
                    pad_top: p.pad_top,
                    pad_left: p.pad_left,
                    ..Placement::square(1, 1, 0)
                };
                Step::Pad(Pad {
                    x,
                    y,
                    g: Geom::new(p.input, p.output, &at)?,
                    value: p.value as i32,
                })
            }
            OpParams::Reshape => Step::Reshape(Reshape { x, y, len }),
        })
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

    fn tflite_add(&self, o: &OpInfo, p: &TfliteAddParams, len: usize) -> Result<TfliteAdd> {
        let t1 = o.input1.ok_or_else(invalid)?;
        let [a, b, out] = p.multipliers.map(m_n);
        Ok(TfliteAdd {
            a: self.offset(o.input0)?,
            b: self.offset(t1)?,
            y: self.offset(o.output)?,
            len,
            z: p.zero_points,
            ls: p.left_shift.clamp(0, 30),
            rq: [a, b, out],
            q: p.out,
        })
    }

    /// Add op `o` (requantization `rq`); `prev_dense` is (output, input) of the op before it
    /// when that is a conv/fc.
    fn add(&self, o: &OpInfo, rq: AddRequant, prev_dense: Option<(u16, u16)>) -> Result<Add> {
        let t1 = o.input1.ok_or_else(invalid)?;
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
            len: self.tensor(o.output)?.len(),
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
