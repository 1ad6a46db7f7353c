//! Prepare (TensorFlow Lite Micro's split of an op into Prepare and Eval): each op's kernel
//! parameters and arena places, built from the validated records once, so that the
//! interpreter (Eval, `crate::interpreter`) only dispatches.
//!
//! The table is the caller's ([`Model::prepare`]), not inside [`Model`]: a prepared op holds a
//! conv's whole parameter set (152 bytes on a Cortex-M, 288 on a 64-bit CPU), so a table
//! inside the model sized for the largest supported model would make every `Model` kilobytes
//! large (the C API stores one in 256 bytes; firmware keeps one in RAM), and one sized for
//! small models would reject larger ones. With the table outside, each caller sizes it to its
//! model (`num_ops()` entries) and keeps it where it likes (static, stack); the model grows by
//! one slice (72 → 80 bytes on a Cortex-M, 120 → 136 on x86-64). An unprepared model still
//! runs: each op is prepared just before it runs (once per op and group of images, on the
//! stack), as before the table existed; prepared, a LeNet on a Cortex-M4 runs about 300
//! instructions per op fewer.

use core::ops::Range;

use super::inspect::Decoded;
use super::{Model, OpInfo, OpKind, TensorInfo};
use crate::format::NO_TENSOR;
use crate::kernels::{self, Kernels, Layout, PackOp, Resolved};
use crate::kernels::{
    AddRequant, ConvParams, DepthwiseParams, FcParams, OutputQuant, Packed, PadParams, Placement,
    PoolParams, Shape, SoftmaxParams, TfliteAddParams,
};
use crate::requant::Rounding;
use crate::{Result, RuntimeError};

/// One op ready to run: its kernel's parameters and where its tensors lie in the working arena
/// (its scratch, if the kernel set states one, follows the activations: `Model::working_bytes`).
/// Built by [`Model::prepare`]; [`PreparedOp::EMPTY`] (or `Default`) fills a table before that.
#[derive(Clone, Copy, Debug)]
pub struct PreparedOp<'a> {
    /// Index in the op table (for errors).
    pub(crate) index: u32,
    pub(crate) params: OpParams<'a>,
    pub(crate) input: Place,
    /// Input 1 (add), else [`Place::NONE`].
    pub(crate) input1: Place,
    pub(crate) output: Place,
}

/// An op's kernel parameters, by kind.
#[derive(Clone, Copy, Debug)]
pub(crate) enum OpParams<'a> {
    Conv2d(ConvParams<'a>),
    FullyConnected(FcParams<'a>),
    MaxPool(PoolParams),
    AvgPool(PoolParams),
    /// The add's requantization and its output shape (threads sharing the add, with `std`,
    /// cut it by rows or channels).
    Add(
        AddRequant,
        #[cfg_attr(not(feature = "std"), allow(dead_code))] Shape,
    ),
    DepthwiseConv2d(DepthwiseParams<'a>),
    TfliteAvgPool(PoolParams),
    Softmax(SoftmaxParams),
    Reshape,
    Pad(PadParams),
    /// TFLite's add and its output shape (split as octet's add is).
    /// TFLite's add, its output shape (split as octet's add is) and its tables where the
    /// kernel set packs them.
    TfliteAdd(
        TfliteAddParams,
        #[cfg_attr(not(feature = "std"), allow(dead_code))] Shape,
        Packed<'a>,
    ),
}

/// A tensor's id and byte range in the working arena.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Place {
    pub(crate) id: u16,
    pub(crate) start: usize,
    pub(crate) end: usize,
}

impl Place {
    /// No tensor.
    pub(crate) const NONE: Place = Place {
        id: NO_TENSOR,
        start: 0,
        end: 0,
    };

    fn of(t: &TensorInfo) -> Place {
        let r = t.range();
        Place {
            id: t.id,
            start: r.start,
            end: r.end,
        }
    }

    /// `start..end`.
    pub(crate) const fn range(&self) -> Range<usize> {
        self.start..self.end
    }
}

impl<'a> PreparedOp<'a> {
    /// A placeholder to fill a table with before [`Model::prepare`] (a pooling op over
    /// nothing; never run: the model uses only the entries it prepared).
    pub const EMPTY: PreparedOp<'a> = {
        let none = Shape { c: 0, h: 0, w: 0 };
        PreparedOp {
            index: 0,
            params: OpParams::MaxPool(PoolParams {
                input: none,
                output: none,
                window: Placement::square(0, 0, 0),
                input_zero_point: 0,
                multiplier: 0,
                shift: 0,
                out: OutputQuant {
                    zero_point: 0,
                    act_min: 0,
                    act_max: 0,
                    rounding: Rounding::Single,
                },
            }),
            input: Place::NONE,
            input1: Place::NONE,
            output: Place::NONE,
        }
    };

    /// The error of an arena that does not hold this op's tensors (never for a working area
    /// of `working_bytes()`: validation checked every range).
    pub(crate) const fn layout_error(&self) -> RuntimeError {
        RuntimeError::BadParam {
            op: self.index,
            what: "arena layout",
        }
    }
}

impl Default for PreparedOp<'_> {
    fn default() -> Self {
        PreparedOp::EMPTY
    }
}

impl<'a> Model<'a> {
    /// Prepares every op once into `table` (at least [`Model::num_ops`] entries, e.g.
    /// `[PreparedOp::EMPTY; N]`) and returns the model running from it: every run path
    /// ([`Model::run`], `run_timed`, `parallel`) then only dispatches, instead of rebuilding
    /// each op's parameters per op and image. No allocation; the model grows by one slice
    /// (the table is the caller's: see the module doc of `model::prepare` for why). Fails
    /// with `OutOfBounds` when `table` is shorter than the op count.
    pub fn prepare(mut self, table: &'a mut [PreparedOp<'a>]) -> Result<Model<'a>> {
        self.prepared = self.fill(table)?;
        Ok(self)
    }

    /// Every op prepared into the first `num_ops()` entries of `table`, those returned.
    pub(super) fn fill(&self, table: &'a mut [PreparedOp<'a>]) -> Result<&'a mut [PreparedOp<'a>]> {
        let n = self.n_ops as usize;
        if table.len() < n {
            return Err(RuntimeError::OutOfBounds {
                what: "op (prepared table too short)",
                index: table.len() as u32,
            });
        }
        let table = &mut table[..n];
        for (j, slot) in table.iter_mut().enumerate() {
            *slot = self.prepare_op(j as u32)?;
        }
        Ok(table)
    }

    /// The bytes [`Model::prepare_packed`] needs for `kernels` (resolved against this CPU): the
    /// weights that set lays out once for its own loops, each op's aligned to
    /// [`kernels::PACKED_ALIGN`] (0 where it packs none: then `prepare_packed` is `prepare`).
    pub fn packed_bytes(&self, kernels: Kernels) -> Result<usize> {
        let k = kernels.resolve()?;
        let mut total = 0usize;
        for j in 0..self.n_ops {
            total = total.saturating_add(packed_size(k, &self.prepare_op(j)?.params));
        }
        Ok(total)
    }

    /// [`Model::prepare`], and the weights `kernels` reads in its own order packed once into
    /// `packed` (at least [`Model::packed_bytes`] bytes; TensorFlow Lite Micro's persistent
    /// buffers): a run with that set then reads them instead of reordering the weights on
    /// every call (the AVX-512 VNNI fully connected layers and pointwise convs, the x86
    /// depthwise convs; the x86 and NEON tflite_adds' tables; the Cortex-M fully connected
    /// layers, which firmware rather reads from flash: [`Model::prepare_packed_image`]). Every
    /// other set runs as if unpacked; the bytes out are the same. Fails with `OutOfBounds` when `table` or
    /// `packed` is too short, and as [`Kernels::resolve`] does.
    pub fn prepare_packed(
        mut self,
        table: &'a mut [PreparedOp<'a>],
        packed: &'a mut [u8],
        kernels: Kernels,
    ) -> Result<Model<'a>> {
        let k = kernels.resolve()?;
        let table = self.fill(table)?;
        // `packed_bytes` from the ops just prepared (not preparing them again).
        let needed = table.iter().fold(0usize, |t, slot| {
            t.saturating_add(packed_size(k, &slot.params))
        });
        if packed.len() < needed {
            return Err(RuntimeError::OutOfBounds {
                what: "packed weights (buffer shorter than Model::packed_bytes)",
                index: packed.len() as u32,
            });
        }
        let mut rest = packed;
        for slot in table.iter_mut() {
            let Some((layout, n)) = packing(k, &slot.params) else {
                continue;
            };
            let rest_all = core::mem::take(&mut rest);
            let skip = rest_all.as_ptr().align_offset(kernels::PACKED_ALIGN);
            let (mine, tail) = rest_all[skip..].split_at_mut(n);
            rest = tail;
            match &mut slot.params {
                OpParams::FullyConnected(f) => {
                    f.packed = kernels::pack(layout, PackOp::Fc(f), mine);
                }
                OpParams::DepthwiseConv2d(d) => {
                    d.packed = kernels::pack(layout, PackOp::Depthwise(d), mine);
                }
                OpParams::Conv2d(c) => {
                    c.packed = kernels::pack(layout, PackOp::Conv(c), mine);
                }
                OpParams::TfliteAdd(a, _, packed) => {
                    *packed = kernels::pack(layout, PackOp::Add(a), mine);
                }
                _ => {}
            }
        }
        self.prepared = table;
        Ok(self)
    }

    /// Whether the model runs from a prepared table ([`Model::prepare`]).
    pub fn is_prepared(&self) -> bool {
        !self.prepared.is_empty()
    }

    /// `f` of op `j` prepared: the table's entry, or, for an unprepared model, the op
    /// prepared now.
    #[inline]
    pub(crate) fn with_op<R>(
        &self,
        j: u32,
        f: impl FnOnce(&PreparedOp<'a>) -> Result<R>,
    ) -> Result<R> {
        match self.prepared.get(j as usize) {
            Some(p) => f(p),
            // By reference into the result: no copy of the prepared op.
            None => match &self.prepare_op(j) {
                Ok(p) => f(p),
                Err(e) => Err(*e),
            },
        }
    }

    /// Op `j`'s kernel parameters and places (a validated op).
    pub(super) fn prepare_op(&self, j: u32) -> Result<PreparedOp<'a>> {
        let decoded = self.decode(j);
        let Decoded {
            op: o,
            input: tin,
            output: tout,
        } = match &decoded {
            Ok(d) => d,
            Err(e) => return Err(*e),
        };
        let input1 = match o.input1 {
            Some(t) => Some(self.tensor_id(t)?),
            None => None,
        };
        let r = self.rounding;
        // Built in place (see `Model::decode`).
        Ok(PreparedOp {
            index: j,
            params: match o.kind {
                OpKind::Conv2d => OpParams::Conv2d(Self::conv_params(o, tin, tout, r)),
                OpKind::FullyConnected => {
                    OpParams::FullyConnected(Self::fc_params(o, tin, tout, r))
                }
                OpKind::MaxPool => OpParams::MaxPool(pool_params(o, tin, tout, r)),
                OpKind::AvgPool => OpParams::AvgPool(pool_params(o, tin, tout, r)),
                OpKind::TfliteAvgPool => OpParams::TfliteAvgPool(pool_params(o, tin, tout, r)),
                OpKind::Add | OpKind::TfliteAdd => {
                    let t1 = input1.as_ref().ok_or(RuntimeError::BadParam {
                        op: j,
                        what: "input 1",
                    })?;
                    if o.kind == OpKind::Add {
                        OpParams::Add(Self::add_params(o, tin, t1, tout), tout.shape())
                    } else {
                        let p = tflite_add_params(o, tin, t1, tout, r);
                        OpParams::TfliteAdd(p, tout.shape(), Packed::NONE)
                    }
                }
                OpKind::DepthwiseConv2d => {
                    OpParams::DepthwiseConv2d(Self::depthwise_params(o, tin, tout, r))
                }
                OpKind::Softmax => OpParams::Softmax(SoftmaxParams {
                    depth: tin.c as usize,
                    input_multiplier: o.multipliers.get(0),
                    input_left_shift: o.shifts.get(0),
                    diff_min: o.param,
                    rounding: r,
                }),
                OpKind::Reshape => OpParams::Reshape,
                OpKind::Pad => OpParams::Pad(PadParams {
                    input: tin.shape(),
                    output: tout.shape(),
                    pad_top: o.window.pad_top as usize,
                    pad_left: o.window.pad_left as usize,
                    value: o.param.clamp(-128, 127) as i8,
                }),
            },
            input: Place::of(tin),
            input1: input1.as_ref().map_or(Place::NONE, Place::of),
            output: Place::of(tout),
        })
    }

    /// The conv parameters of op `o` (input `tin`, output `tout`, the model's rounding `r`):
    /// what its kernel takes, for the interpreter and for tools that run one op's kernel alone.
    pub fn conv_params<'o>(
        o: &OpInfo<'o>,
        tin: &TensorInfo,
        tout: &TensorInfo,
        r: Rounding,
    ) -> ConvParams<'o> {
        let g = placement(o);
        ConvParams {
            input: tin.shape(),
            output: tout.shape(),
            window: g,
            weights: o.weights,
            bias: o.bias,
            multiplier: o.multipliers,
            shift: o.shifts,
            pad_values: o.pad_values,
            input_zero_point: tin.zero_point,
            out: output_quant(o, tout, r),
            packed: Packed::NONE,
        }
    }

    /// The depthwise conv parameters of op `o` (see [`Model::conv_params`]).
    pub fn depthwise_params<'o>(
        o: &OpInfo<'o>,
        tin: &TensorInfo,
        tout: &TensorInfo,
        r: Rounding,
    ) -> DepthwiseParams<'o> {
        DepthwiseParams {
            input: tin.shape(),
            output: tout.shape(),
            window: placement(o),
            depth_multiplier: (tout.c / tin.c.max(1)) as usize,
            weights: o.weights,
            bias: o.bias,
            multiplier: o.multipliers,
            shift: o.shifts,
            input_zero_point: tin.zero_point,
            out: output_quant(o, tout, r),
            packed: Packed::NONE,
        }
    }

    /// The fully_connected parameters of op `o` (see [`Model::conv_params`]).
    pub fn fc_params<'o>(
        o: &OpInfo<'o>,
        tin: &TensorInfo,
        tout: &TensorInfo,
        r: Rounding,
    ) -> FcParams<'o> {
        FcParams {
            k: tin.len(),
            n: tout.len(),
            weights: o.weights,
            bias: o.bias,
            multiplier: o.multipliers,
            shift: o.shifts,
            per_tensor: FcParams::per_tensor_of(&o.multipliers, &o.shifts),
            out: output_quant(o, tout, r),
            packed: Packed::NONE,
        }
    }

    /// The add parameters of op `o` over inputs `t0`, `t1` (see [`Model::conv_params`]): octet's
    /// add has its own arithmetic, whatever the model's rounding.
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
            out: output_quant(o, tout, Rounding::Single),
        }
    }
}

/// Op `o`'s window in kernel units.
fn placement(o: &OpInfo) -> Placement {
    Placement::from(&o.window)
}

/// The pooling parameters of op `o`: its window, input and output stage with the pool's
/// multiplier and shift (max pool and TFLite's average pool ignore them).
fn pool_params(o: &OpInfo, tin: &TensorInfo, tout: &TensorInfo, r: Rounding) -> PoolParams {
    PoolParams {
        input: tin.shape(),
        output: tout.shape(),
        window: placement(o),
        input_zero_point: tin.zero_point,
        multiplier: o.multipliers.get(0),
        shift: o.shifts.get(0),
        out: output_quant(o, tout, r),
    }
}

/// The tflite_add parameters of op `o` over inputs `t0`, `t1`.
fn tflite_add_params(
    o: &OpInfo,
    t0: &TensorInfo,
    t1: &TensorInfo,
    tout: &TensorInfo,
    r: Rounding,
) -> TfliteAddParams {
    let pair = |i| (o.multipliers.get(i), o.shifts.get(i));
    TfliteAddParams {
        zero_points: [t0.zero_point, t1.zero_point],
        left_shift: o.param,
        multipliers: [pair(0), pair(1), pair(2)],
        out: output_quant(o, tout, r),
    }
}

/// Op `o`'s output zero point, clamp and rounding.
fn output_quant(o: &OpInfo, tout: &TensorInfo, rounding: Rounding) -> OutputQuant {
    OutputQuant {
        zero_point: tout.zero_point,
        act_min: o.act_min,
        act_max: o.act_max,
        rounding,
    }
}

/// What op `params` adds to `Model::packed_bytes` with kernel set `k`: its packed bytes and
/// their alignment, or 0.
fn packed_size(k: Resolved, params: &OpParams) -> usize {
    packing(k, params).map_or(0, |(_, n)| n + kernels::PACKED_ALIGN)
}

/// The layout and bytes kernel set `k` packs op `params` in, if any.
fn packing(k: Resolved, params: &OpParams) -> Option<(Layout, usize)> {
    match params {
        OpParams::FullyConnected(f) => kernels::fc_packing(k, f),
        OpParams::DepthwiseConv2d(d) => kernels::depthwise_packing(k, d),
        OpParams::Conv2d(c) => kernels::conv_packing(k, c),
        OpParams::TfliteAdd(a, ..) => kernels::add_packing(k, a),
        _ => None,
    }
}
