//! The one launcher of the batch-norm kernels. Each op runs its layout's kernel
//! (`kernels/nchw.cu`: `bn_*` on f32 `(n, c, h, w)`; `kernels/channels_last.cu`: `cl_*` on
//! bf16 `(n, h, w, c)`), cut as that layout's geometry says ([`Split`] or [`RowSplit`]); both
//! layouts' partial reductions write the layout `bn_stats_final` and `bn_bwd_final` finish.

use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::{
    CudaSlice, CudaView, LaunchArgs, LaunchConfig, PushKernelArg,
};
use candle_core::cuda_backend::CudaDevice;
use candle_core::{bail, CudaStorage, DType, Layout, Result, Tensor};
use half::bf16;

use super::params::{Apply, BwdDx, BwdReduce, Geom, RunningUpdate};
use super::BnLayout;
use crate::custom_op::CudaArgs;
use crate::kernels::{self, KernelModule, CHANNELS_LAST, NCHW};
use crate::launch::{self, RowSplit, Split};
use crate::Activation;

fn i32_of(v: usize) -> Result<i32> {
    launch::i32_arg(v, "batch norm")
}

/// Runs `f` with a view of an f32 CUDA tensor held by an op (statistics, gamma).
fn with_held<R>(t: &Tensor, f: impl FnOnce(CudaView<'_, f32>) -> Result<R>) -> Result<R> {
    kernels::with_held(t, "batch norm: held tensor", f)
}

fn view_f32<'a>(s: &'a CudaStorage, l: &Layout) -> Result<CudaView<'a, f32>> {
    kernels::view(s, l, "batch norm: parameter")
}

/// An activation operand: f32 for NCHW, bf16 channels-last.
enum Act<'a> {
    F32(CudaView<'a, f32>),
    Bf16(CudaView<'a, bf16>),
}

impl<'a> Act<'a> {
    fn of(s: &'a CudaStorage, l: &Layout, layout: BnLayout) -> Result<Self> {
        match layout {
            BnLayout::Nchw => Ok(Act::F32(kernels::view(s, l, "batch norm: input")?)),
            BnLayout::ChannelsLast => {
                if s.dtype() != DType::BF16 {
                    bail!(
                        "batch norm (channels last): the CUDA kernels take bf16 activations, got {:?}",
                        s.dtype()
                    )
                }
                Ok(Act::Bf16(kernels::view(s, l, "batch norm: input")?))
            }
        }
    }

    fn push<'b>(&'b self, b: &mut LaunchArgs<'b>) {
        match self {
            Act::F32(v) => b.arg(v),
            Act::Bf16(v) => b.arg(v),
        };
    }
}

/// A new activation-sized output of the layout's dtype.
enum ActOut {
    F32(CudaSlice<f32>),
    Bf16(CudaSlice<bf16>),
}

impl ActOut {
    /// # Safety
    /// The kernel it is passed to must write every element.
    unsafe fn alloc(dev: &CudaDevice, layout: BnLayout, total: usize) -> Result<Self> {
        Ok(match layout {
            BnLayout::Nchw => ActOut::F32(dev.alloc::<f32>(total)?),
            BnLayout::ChannelsLast => ActOut::Bf16(dev.alloc::<bf16>(total.max(1))?),
        })
    }

    fn push<'b>(&'b mut self, b: &mut LaunchArgs<'b>) {
        match self {
            ActOut::F32(v) => b.arg(v),
            ActOut::Bf16(v) => b.arg(v),
        };
    }

    fn storage(self, dev: &CudaDevice) -> CudaStorage {
        match self {
            ActOut::F32(v) => CudaStorage::wrap_cuda_slice(v, dev.clone()),
            ActOut::Bf16(v) => CudaStorage::wrap_cuda_slice(v, dev.clone()),
        }
    }
}

/// One call's launch geometry and the kernels' size arguments, for either layout.
struct Plan {
    layout: BnLayout,
    c: i32,
    /// NCHW: values (float4s when vectorised) a plane; unused channels-last.
    hw: i32,
    /// Items a channel the reductions walk: NCHW `n · hw`, channels-last rows.
    m: i32,
    /// Items of the element-wise kernels (vectors when vectorised).
    items: usize,
    /// The element-wise kernels' item count as the layout's kernels take it.
    items_i32: i32,
    items_i64: i64,
    chunk: i32,
    splits: i32,
    partial: LaunchConfig,
    /// The fused rectifier's flag ([`Activation::code`]).
    act: i32,
    vec: i32,
}

impl Plan {
    /// The geometry of `g` with every operand of `layouts` allowing vector loads or not.
    fn new(g: &Geom, layouts: &[&Layout], act: Option<Activation>) -> Result<Self> {
        let total = g.m * g.c;
        let (vec, hw, m, items, split, partial) = match g.layout {
            BnLayout::Nchw => {
                // The index math in the NCHW kernels is 32-bit.
                if total == 0 || total > i32::MAX as usize {
                    bail!(
                        "batch norm: {total} elements (supported: 1 to {})",
                        i32::MAX
                    )
                }
                // Whole float4s per plane, every operand on a 16-byte boundary.
                let vec = g.hw.is_multiple_of(4)
                    && layouts.iter().all(|l| l.start_offset().is_multiple_of(4));
                let w = if vec { 4 } else { 1 };
                let (hwv, n) = (g.hw / w, g.m / g.hw.max(1));
                let split = Split::new(g.c, n * hwv);
                let partial = split.partial_launch(g.c);
                (
                    vec,
                    hwv,
                    n * hwv,
                    total / w,
                    (split.splits, split.chunk),
                    partial,
                )
            }
            BnLayout::ChannelsLast => {
                // Whole 8-value (16-byte) vectors a row, every operand on a whole vector.
                let vec = g.c.is_multiple_of(8)
                    && layouts.iter().all(|l| l.start_offset().is_multiple_of(8));
                let w = if vec { 8 } else { 1 };
                let split = RowSplit::new(g.c / w, g.m);
                (
                    vec,
                    0,
                    g.m,
                    total / w,
                    (split.splits, split.chunk),
                    split.launch(),
                )
            }
        };
        Ok(Self {
            layout: g.layout,
            c: i32_of(g.c)?,
            hw: i32_of(hw)?,
            m: i32_of(m)?,
            items,
            items_i32: if g.layout == BnLayout::Nchw {
                i32_of(items)?
            } else {
                0
            },
            items_i64: items as i64,
            chunk: i32_of(split.1)?,
            splits: i32_of(split.0)?,
            partial,
            act: Activation::code(act),
            vec: vec as i32,
        })
    }

    fn splits(&self) -> usize {
        self.splits as usize
    }

    fn channels(&self) -> usize {
        self.c as usize
    }

    /// The layout's kernel `name` (`bn_name` NCHW, `cl_name` channels-last).
    fn func(
        &self,
        dev: &CudaDevice,
        name: &str,
    ) -> Result<(
        std::sync::Arc<candle_core::cuda_backend::cudarc::driver::CudaStream>,
        candle_core::cuda_backend::cudarc::driver::CudaFunction,
    )> {
        let (module, prefix): (&KernelModule, &str) = match self.layout {
            BnLayout::Nchw => (&NCHW, "bn"),
            BnLayout::ChannelsLast => (&CHANNELS_LAST, "cl"),
        };
        module.func(dev, &format!("{prefix}_{name}"))
    }

    /// A partial reduction's sizes: NCHW `c, hw, m, chunk, splits`; channels-last
    /// `c, m, chunk, splits`.
    fn push_reduce<'b>(&'b self, b: &mut LaunchArgs<'b>) {
        b.arg(&self.c);
        if self.layout == BnLayout::Nchw {
            b.arg(&self.hw);
        }
        b.arg(&self.m).arg(&self.chunk).arg(&self.splits);
    }

    /// An element-wise kernel's sizes: NCHW `c, hw, total` (i32); channels-last
    /// `c, items` (i64).
    fn push_elementwise<'b>(&'b self, b: &mut LaunchArgs<'b>) {
        b.arg(&self.c);
        match self.layout {
            BnLayout::Nchw => b.arg(&self.hw).arg(&self.items_i32),
            BnLayout::ChannelsLast => b.arg(&self.items_i64),
        };
    }

    /// The trailing flags: NCHW `vec`; channels-last `act, vec` (`with_act`: kernels that
    /// take one).
    fn push_flags<'b>(&'b self, b: &mut LaunchArgs<'b>, with_act: bool) {
        if with_act && self.layout == BnLayout::ChannelsLast {
            b.arg(&self.act);
        }
        b.arg(&self.vec);
    }
}

fn check_same(l1: &Layout, l2: &Layout) -> Result<()> {
    if l1.dims() != l2.dims() {
        bail!(
            "batch norm backward: gradient {:?} for input {:?}",
            l2.dims(),
            l1.dims()
        )
    }
    Ok(())
}

/// One of the two per-channel reductions into `(2, c)` floats: the layout's partial kernel
/// writes `floats` floats per block, the NCHW module's `last` combines a channel's blocks in
/// a fixed order.
struct Reduction {
    partial: &'static str,
    last: &'static str,
    floats: usize,
}

/// Statistics: `[mean; biased variance]`.
const STATS: Reduction = Reduction {
    partial: "stats_partial",
    last: "bn_stats_final",
    floats: 3,
};

/// Backward sums: `[Σ g·x̂; Σ g]`.
const BWD_SUMS: Reduction = Reduction {
    partial: "bwd_partial",
    last: "bn_bwd_final",
    floats: 2,
};

/// Runs `r` over `inputs` (then the statistics, for the backward sums, which also take
/// `eps`).
fn reduce(
    dev: &CudaDevice,
    plan: &Plan,
    r: &Reduction,
    inputs: &[&Act],
    stats: Option<&CudaView<'_, f32>>,
    eps: Option<&f32>,
) -> Result<CudaSlice<f32>> {
    let c = plan.channels();
    // SAFETY: every partial block writes its floats a channel.
    let mut part = unsafe { dev.alloc::<f32>(r.floats * c * plan.splits())? };
    // SAFETY: the final kernel writes all 2c outputs.
    let mut out = unsafe { dev.alloc::<f32>(2 * c)? };
    let (stream, f) = plan.func(dev, r.partial)?;
    let mut b = stream.launch_builder(&f);
    for x in inputs {
        x.push(&mut b);
    }
    if let Some(st) = stats {
        b.arg(st);
    }
    b.arg(&mut part);
    plan.push_reduce(&mut b);
    plan.push_flags(&mut b, stats.is_some());
    // SAFETY: argument types and counts match bn_stats_partial (x, part, c, hw, m, chunk,
    // splits, vec), cl_stats_partial (x, part, c, m, chunk, splits, vec), bn_bwd_partial
    // (x, dy, stats, part, c, hw, m, chunk, splits, vec) and cl_bwd_partial (x, dy, y,
    // stats, part, c, m, chunk, splits, act, vec).
    unsafe { b.launch(plan.partial)? };
    drop(b);
    let (stream, f) = NCHW.func(dev, r.last)?;
    let mut b = stream.launch_builder(&f);
    b.arg(&part);
    if let Some(st) = stats {
        b.arg(st);
    }
    b.arg(&mut out).arg(&plan.c).arg(&plan.splits);
    if let Some(eps) = eps {
        b.arg(eps);
    }
    // SAFETY: argument types and counts match bn_stats_final (part, stats, c, splits) and
    // bn_bwd_final (part, stats, sums, c, splits, eps).
    unsafe { b.launch(launch::per_channel(c))? };
    drop(b);
    Ok(out)
}

pub(super) fn stats(s: &CudaStorage, l: &Layout, g: &Geom) -> Result<CudaStorage> {
    let dev = &s.device;
    let plan = Plan::new(g, &[l], None)?;
    let x = Act::of(s, l, g.layout)?;
    let out = reduce(dev, &plan, &STATS, &[&x], None, None)?;
    Ok(CudaStorage::wrap_cuda_slice(out, dev.clone()))
}

pub(super) fn running(
    s1: &mut CudaStorage,
    l1: &Layout,
    s2: &CudaStorage,
    l2: &Layout,
    op: &RunningUpdate,
) -> Result<()> {
    let dev = s1.device.clone();
    let c = l1.shape().elem_count();
    let stats = kernels::view::<f32>(s2, l2, "batch norm: input")?;
    if stats.len() != 2 * c {
        bail!("batch norm: {} statistics for {c} channels", stats.len())
    }
    let Some((a, b_)) = l1.contiguous_offsets() else {
        bail!("batch norm: running statistics are not contiguous")
    };
    let mut run = s1.as_cuda_slice_mut::<f32>()?.slice_mut(a..b_);
    let (ci, row) = (i32_of(c)?, i32_of(op.row)?);
    let (stream, f) = NCHW.func(&dev, "bn_running")?;
    let mut b = stream.launch_builder(&f);
    b.arg(&mut run)
        .arg(&stats)
        .arg(&ci)
        .arg(&row)
        .arg(&op.keep)
        .arg(&op.take);
    // SAFETY: argument types and counts match bn_running.
    unsafe { b.launch(launch::elementwise(c))? };
    Ok(())
}

/// `(x, gamma, beta) → y`.
pub(super) fn apply(
    [(s1, l1), (s2, l2), (s3, l3)]: CudaArgs<3>,
    op: &Apply,
) -> Result<CudaStorage> {
    let dev = &s1.device;
    let g = Geom::of(l1, op.layout)?;
    let plan = Plan::new(&g, &[l1], op.act)?;
    let (x, gamma, beta) = (
        Act::of(s1, l1, op.layout)?,
        view_f32(s2, l2)?,
        view_f32(s3, l3)?,
    );
    // SAFETY: the kernel writes every element.
    let mut y = unsafe { ActOut::alloc(dev, op.layout, l1.shape().elem_count())? };
    with_held(&op.stats, |st| {
        let (stream, f) = plan.func(dev, "apply")?;
        let mut b = stream.launch_builder(&f);
        x.push(&mut b);
        b.arg(&st).arg(&gamma).arg(&beta);
        y.push(&mut b);
        plan.push_elementwise(&mut b);
        b.arg(&op.eps);
        plan.push_flags(&mut b, true);
        // SAFETY: argument types and counts match bn_apply (x, stats, gamma, beta, y, c, hw,
        // total, eps, vec) and cl_apply (x, stats, gamma, beta, y, c, items, eps, act, vec).
        unsafe { b.launch(launch::elementwise(plan.items))? };
        Ok(())
    })?;
    Ok(y.storage(dev))
}

/// `(x, dy, y) → (2, c)` sums.
pub(super) fn bwd_reduce([x, dy, y]: CudaArgs<3>, op: &BwdReduce) -> Result<CudaStorage> {
    let b = BackwardIn::new([x, dy], Some(y), op.layout, op.act)?;
    let out = with_held(&op.stats, |st| {
        reduce(
            b.dev,
            &b.plan,
            &BWD_SUMS,
            &b.inputs(),
            Some(&st),
            Some(&op.eps),
        )
    })?;
    Ok(CudaStorage::wrap_cuda_slice(out, b.dev.clone()))
}

/// `(x, dy, sums) → dx`, the op's held output `y` for the channels-last rectifier's mask.
pub(super) fn bwd_dx([x, dy, (s3, l3)]: CudaArgs<3>, op: &BwdDx) -> Result<CudaStorage> {
    let held = (op.layout == BnLayout::ChannelsLast).then(|| op.y.storage_and_layout());
    let y = match &held {
        Some((ys, yl)) => {
            let candle_core::Storage::Cuda(ys) = &**ys else {
                bail!("batch norm: held output is not on a CUDA device")
            };
            Some((ys, *yl))
        }
        None => None,
    };
    let b = BackwardIn::new([x, dy], y, op.layout, op.act)?;
    let sums = view_f32(s3, l3)?;
    // SAFETY: the kernel writes every element.
    let mut dx = unsafe { ActOut::alloc(b.dev, op.layout, x.1.shape().elem_count())? };
    let m = b.geom.m as f32;
    with_held(&op.stats, |st| {
        with_held(&op.gamma, |gamma| {
            let (stream, f) = b.plan.func(b.dev, "bwd_dx")?;
            let mut l = stream.launch_builder(&f);
            for a in b.inputs() {
                a.push(&mut l);
            }
            l.arg(&st).arg(&gamma).arg(&sums);
            dx.push(&mut l);
            b.plan.push_elementwise(&mut l);
            l.arg(&m).arg(&op.eps);
            b.plan.push_flags(&mut l, true);
            // SAFETY: argument types and counts match bn_bwd_dx (x, dy, stats, gamma, sums,
            // dx, c, hw, total, m, eps, vec) and cl_bwd_dx (x, dy, y, stats, gamma, sums, dx,
            // c, items, m, eps, act, vec).
            unsafe { l.launch(launch::elementwise(b.plan.items))? };
            Ok(())
        })
    })?;
    Ok(dx.storage(b.dev))
}

/// What both backward kernels read: `x`, `dy` and, channels-last, the output `y` for the
/// fused rectifier's mask (the NCHW kernels fuse none), checked to be of one shape, and the
/// launch plan over them.
struct BackwardIn<'a> {
    dev: &'a CudaDevice,
    geom: Geom,
    plan: Plan,
    x: Act<'a>,
    dy: Act<'a>,
    y: Option<Act<'a>>,
}

impl<'a> BackwardIn<'a> {
    fn new(
        [(xs, xl), (ds, dl)]: CudaArgs<'a, 2>,
        y: Option<(&'a CudaStorage, &'a Layout)>,
        layout: BnLayout,
        act: Option<Activation>,
    ) -> Result<Self> {
        let geom = Geom::of(xl, layout)?;
        check_same(xl, dl)?;
        let y = y.filter(|_| layout == BnLayout::ChannelsLast);
        let mut layouts = vec![xl, dl];
        if let Some((_, yl)) = y {
            check_same(xl, yl)?;
            layouts.push(yl);
        }
        let plan = Plan::new(&geom, &layouts, act)?;
        Ok(Self {
            dev: &xs.device,
            geom,
            plan,
            x: Act::of(xs, xl, layout)?,
            dy: Act::of(ds, dl, layout)?,
            y: y.map(|(s, l)| Act::of(s, l, layout)).transpose()?,
        })
    }

    /// The activation operands in the kernels' order: `x`, `dy`, then `y` if read.
    fn inputs(&self) -> Vec<&Act<'a>> {
        [&self.x, &self.dy].into_iter().chain(&self.y).collect()
    }
}
