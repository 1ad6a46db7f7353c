//! Training-mode batch norm over (N, H, W) per channel with PyTorch's semantics: the batch's
//! biased variance normalises, the unbiased one enters the running estimate
//! (`running = (1 - momentum) * running + momentum * batch`).
//!
//! The fused version is four kernels forward (statistics, two running-stat updates, apply)
//! and two backward (per-channel sums, input gradient) instead of some twenty candle ops.

use candle_core::{bail, CpuStorage, CustomOp1, CustomOp2, CustomOp3, DType, InplaceOp2};
use candle_core::{Layout, Result, Shape, Storage, Tensor, Var};

use super::cpu;

/// Training-mode batch norm of `x` `(n, c, h, w)`, updating `running_mean` and
/// `running_var` `(c)`. Fused kernels for f32 tensors on a CUDA device, candle's ops
/// ([`batch_norm_train_reference`]) everywhere else.
pub fn batch_norm_train(
    x: &Tensor,
    gamma: &Tensor,
    beta: &Tensor,
    running_mean: &Var,
    running_var: &Var,
    momentum: f64,
    eps: f64,
) -> Result<Tensor> {
    let fused = cfg!(feature = "cuda")
        && super::fast_ops()
        && x.device().is_cuda()
        && x.rank() == 4
        && [x.dtype(), gamma.dtype(), beta.dtype()] == [DType::F32; 3]
        && [running_mean.dtype(), running_var.dtype()] == [DType::F32; 2];
    if fused {
        batch_norm_train_fused(x, gamma, beta, running_mean, running_var, momentum, eps)
    } else {
        batch_norm_train_reference(x, gamma, beta, running_mean, running_var, momentum, eps)
    }
}

/// [`batch_norm_train`] with candle's ops, exactly as octet computed it before the fused
/// ops (CPU results depend on it bit for bit).
pub fn batch_norm_train_reference(
    x: &Tensor,
    gamma: &Tensor,
    beta: &Tensor,
    running_mean: &Var,
    running_var: &Var,
    momentum: f64,
    eps: f64,
) -> Result<Tensor> {
    train_over(
        x,
        gamma,
        beta,
        running_mean,
        running_var,
        momentum,
        eps,
        false,
    )
}

/// The reduction axes of per-channel statistics: (0, 2, 3) for NCHW, (0, 1, 2) for NHWC.
fn stat_axes(channels_last: bool) -> [usize; 3] {
    if channels_last {
        [0, 1, 2]
    } else {
        [0, 2, 3]
    }
}

/// The dtype statistics are computed in: f32 for 16-bit activations, else their own (f32,
/// or f64 in the reference tests).
fn compute_dtype(dtype: DType) -> DType {
    match dtype {
        DType::BF16 | DType::F16 => DType::F32,
        d => d,
    }
}

/// The shape a `(c)` tensor takes to broadcast over the activations.
pub(crate) fn channel_shape(c: usize, channels_last: bool) -> (usize, usize, usize, usize) {
    if channels_last {
        (1, 1, 1, c)
    } else {
        (1, c, 1, 1)
    }
}

/// The reference batch norm over either layout. 16-bit input is computed in f32 and returned
/// in its dtype; f32 and f64 are computed as they are (the NCHW f32 result is what octet
/// always computed).
#[allow(clippy::too_many_arguments)]
pub(crate) fn train_over(
    x: &Tensor,
    gamma: &Tensor,
    beta: &Tensor,
    running_mean: &Var,
    running_var: &Var,
    momentum: f64,
    eps: f64,
    channels_last: bool,
) -> Result<Tensor> {
    let dtype = x.dtype();
    let x = x.to_dtype(compute_dtype(dtype))?;
    let axes = stat_axes(channels_last);
    let c = gamma.elem_count();
    let mean = x.mean_keepdim(axes)?;
    let centred = x.broadcast_sub(&mean)?;
    let var = centred.sqr()?.mean_keepdim(axes)?;
    let n = (x.elem_count() / c) as f64;
    let unbiased = if n > 1.0 { n / (n - 1.0) } else { 1.0 };
    let m = mean.detach().flatten_all()?;
    let v = var.detach().flatten_all()?;
    let rm = ((running_mean.as_tensor() * (1.0 - momentum))? + (m * momentum)?)?;
    let rv = ((running_var.as_tensor() * (1.0 - momentum))? + (v * (momentum * unbiased))?)?;
    running_mean.set(&rm)?;
    running_var.set(&rv)?;
    normalize(&x, mean, var, gamma, beta, eps)?.to_dtype(dtype)
}

/// Training-mode batch norm with statistics over every rank of a data-parallel job
/// (SyncBatchNorm): per-channel sums, sums of squares and counts are summed by `sync`, whose
/// gradient flows back to every rank. Candle's ops on any device.
#[allow(clippy::too_many_arguments)]
pub fn batch_norm_train_synced(
    x: &Tensor,
    gamma: &Tensor,
    beta: &Tensor,
    running_mean: &Var,
    running_var: &Var,
    momentum: f64,
    eps: f64,
    sync: &dyn crate::StatsSync,
) -> Result<Tensor> {
    batch_norm_train_synced_over(
        x,
        gamma,
        beta,
        running_mean,
        running_var,
        momentum,
        eps,
        sync,
        false,
    )
}

/// [`batch_norm_train_synced`] for NCHW or, with `channels_last`, NHWC activations; 16-bit
/// input is computed in f32 and returned in its dtype, so bf16 training can use it.
#[allow(clippy::too_many_arguments)]
pub fn batch_norm_train_synced_over(
    x: &Tensor,
    gamma: &Tensor,
    beta: &Tensor,
    running_mean: &Var,
    running_var: &Var,
    momentum: f64,
    eps: f64,
    sync: &dyn crate::StatsSync,
    channels_last: bool,
) -> Result<Tensor> {
    let dtype = x.dtype();
    let x = &x.to_dtype(compute_dtype(dtype))?;
    let axes = stat_axes(channels_last);
    let bshape = channel_shape(gamma.elem_count(), channels_last);
    let c = gamma.elem_count();
    let local = (x.elem_count() / c.max(1)) as f64;
    // Two passes (mean, then centred squares), as precise as the one-rank path; one
    // sum of E[x²] − E[x]² loses digits to cancellation.
    let s1 = x.sum_keepdim(axes)?.flatten_all()?;
    let count = Tensor::new(&[local as f32], x.device())?.to_dtype(x.dtype())?;
    let all = sync.sum(&Tensor::cat(&[&s1, &count], 0)?)?;
    let n = all.narrow(0, c, 1)?;
    let mean = all.narrow(0, 0, c)?.broadcast_div(&n)?;
    let centred = x.broadcast_sub(&mean.reshape(bshape)?)?;
    let s2 = centred.sqr()?.sum_keepdim(axes)?.flatten_all()?;
    let var = sync.sum(&s2)?.broadcast_div(&n)?;
    // The running estimate takes the unbiased variance of the whole global batch.
    let unbiased = var.broadcast_mul(&n.broadcast_div(&(&n - 1.0)?.maximum(1.0)?)?)?;
    let rm = ((running_mean.as_tensor() * (1.0 - momentum))? + (mean.detach() * momentum)?)?;
    let rv = ((running_var.as_tensor() * (1.0 - momentum))? + (unbiased.detach() * momentum)?)?;
    running_mean.set(&rm)?;
    running_var.set(&rv)?;
    normalize(
        x,
        mean.reshape(bshape)?,
        var.reshape(bshape)?,
        gamma,
        beta,
        eps,
    )?
    .to_dtype(dtype)
}

/// `(x - mean) / sqrt(var + eps) * gamma + beta` with candle's ops, `mean` and `var` shaped
/// to broadcast over `x` (`(1, c, 1, 1)`, or `(1, 1, 1, c)` channels-last); also the inference
/// path of [`crate::BatchNorm2d`].
pub(crate) fn normalize(
    x: &Tensor,
    mean: Tensor,
    var: Tensor,
    gamma: &Tensor,
    beta: &Tensor,
    eps: f64,
) -> Result<Tensor> {
    let bshape = mean.shape().clone();
    let inv_std = (var + eps)?.sqrt()?.recip()?;
    let scale = gamma.reshape(&bshape)?.broadcast_mul(&inv_std)?;
    let shift = beta
        .reshape(&bshape)?
        .broadcast_sub(&mean.broadcast_mul(&scale)?)?;
    // Statistics in the parameters' precision, applied in the input's (bf16 inference).
    x.broadcast_mul(&scale.to_dtype(x.dtype())?)?
        .broadcast_add(&shift.to_dtype(x.dtype())?)
}

/// [`batch_norm_train`] through the fused custom ops on any device (plain loops on the
/// CPU, which is how the ops' arithmetic is tested without a GPU). f32 only.
pub fn batch_norm_train_fused(
    x: &Tensor,
    gamma: &Tensor,
    beta: &Tensor,
    running_mean: &Var,
    running_var: &Var,
    momentum: f64,
    eps: f64,
) -> Result<Tensor> {
    let (n, c, h, w) = x.dims4()?;
    check_channels(c, x, gamma, beta, running_mean, running_var)?;
    let x = x.contiguous()?;
    let stats = x.apply_op1_no_bwd(&BnStats)?;
    update_running(running_mean, running_var, &stats, n * h * w, momentum)?;
    x.apply_op3(
        &gamma.contiguous()?,
        &beta.contiguous()?,
        BnApply {
            stats,
            eps: eps as f32,
        },
    )
}

/// gamma, beta and the running statistics each `(c)` for an input of `c` channels.
pub(super) fn check_channels(
    c: usize,
    x: &Tensor,
    gamma: &Tensor,
    beta: &Tensor,
    running_mean: &Var,
    running_var: &Var,
) -> Result<()> {
    for (t, what) in [
        (gamma, "gamma"),
        (beta, "beta"),
        (running_mean.as_tensor(), "running mean"),
        (running_var.as_tensor(), "running var"),
    ] {
        if t.dims() != [c] {
            bail!(
                "batch norm: {what} has shape {:?}, expected [{c}] (input {:?})",
                t.dims(),
                x.dims()
            )
        }
    }
    Ok(())
}

/// `running = (1 - momentum) * running + momentum * batch` from the `(2, c)` statistics of
/// `m` values a channel, in place; the variance enters unbiased.
pub(super) fn update_running(
    running_mean: &Var,
    running_var: &Var,
    stats: &Tensor,
    m: usize,
    momentum: f64,
) -> Result<()> {
    let m = m as f64;
    let unbiased = if m > 1.0 { m / (m - 1.0) } else { 1.0 };
    let keep = (1.0 - momentum) as f32;
    for (running, row, take) in [
        (running_mean, 0, momentum),
        (running_var, 1, momentum * unbiased),
    ] {
        running.as_tensor().inplace_op2(
            stats,
            &BnRunningUpdate {
                row,
                keep,
                take: take as f32,
            },
        )?;
    }
    Ok(())
}

/// Dimensions `(n, c, h·w)` of a 4-d layout.
fn nchw(l: &Layout) -> Result<(usize, usize, usize)> {
    match l.dims() {
        &[n, c, h, w] => Ok((n, c, h * w)),
        d => bail!("batch norm: expected a 4-d tensor, got {d:?}"),
    }
}

/// Per-channel `[mean; biased variance]`, shape `(2, c)`; no gradient (the apply op's
/// backward accounts for the statistics' dependence on x).
struct BnStats;

/// `running = keep * running + take * stats[row]`, in place (the channels-last ops'
/// statistics have the same `(2, c)` layout).
struct BnRunningUpdate {
    row: usize,
    keep: f32,
    take: f32,
}

/// The normalisation itself, a custom op on `(x, gamma, beta)` using `stats`.
struct BnApply {
    stats: Tensor,
    eps: f32,
}

/// `(2, c)`: `[Σ dy·x̂; Σ dy]` per channel, i.e. the gradients of gamma and beta; on `(x, dy)`.
struct BnBwdReduce {
    stats: Tensor,
    eps: f32,
}

/// The input gradient, on `(x, dy, sums)`.
struct BnBwdDx {
    stats: Tensor,
    gamma: Tensor,
    eps: f32,
}

/// The elements of a CPU tensor held by an op (statistics, gamma, a bf16 output) as f32.
pub(super) fn held_cpu(t: &Tensor) -> Result<Vec<f32>> {
    let (s, l) = t.storage_and_layout();
    match &*s {
        Storage::Cpu(c) => cpu::to_f32(c, l),
        _ => bail!("batch norm: held tensor is not on the CPU"),
    }
}

pub(super) fn inv_std(var: f32, eps: f32) -> f32 {
    1.0 / (var + eps).sqrt()
}

impl CustomOp1 for BnStats {
    fn name(&self) -> &'static str {
        "octet-bn-stats"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        let (n, c, hw) = nchw(l)?;
        let x = cpu::slice::<f32>(s, l)?;
        let m = (n * hw) as f32;
        let mut out = vec![0f32; 2 * c];
        for ch in 0..c {
            let plane = |b: usize| &x[(b * c + ch) * hw..(b * c + ch + 1) * hw];
            let mean = (0..n).flat_map(plane).sum::<f32>() / m;
            let var = (0..n)
                .flat_map(plane)
                .map(|v| (v - mean) * (v - mean))
                .sum::<f32>()
                / m;
            out[ch] = mean;
            out[c + ch] = var;
        }
        Ok((CpuStorage::F32(out), Shape::from((2, c))))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s: &candle_core::CudaStorage,
        l: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        let (n, c, hw) = nchw(l)?;
        let out = cuda::stats(s, l, n, c, hw)?;
        Ok((out, Shape::from((2, c))))
    }
}

impl InplaceOp2 for BnRunningUpdate {
    fn name(&self) -> &'static str {
        "octet-bn-running-update"
    }

    fn cpu_fwd(
        &self,
        s1: &mut CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<()> {
        let c = l1.shape().elem_count();
        let stats = cpu::slice::<f32>(s2, l2)?;
        let Some((a, b)) = l1.contiguous_offsets() else {
            bail!("batch norm: running statistics are not contiguous")
        };
        let CpuStorage::F32(run) = s1 else {
            bail!("batch norm: running statistics are not f32")
        };
        if stats.len() != 2 * c {
            bail!("batch norm: {} statistics for {c} channels", stats.len())
        }
        for (r, s) in run[a..b].iter_mut().zip(&stats[self.row * c..]) {
            *r = *r * self.keep + *s * self.take;
        }
        Ok(())
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s1: &mut candle_core::CudaStorage,
        l1: &Layout,
        s2: &candle_core::CudaStorage,
        l2: &Layout,
    ) -> Result<()> {
        cuda::running(s1, l1, s2, l2, self)
    }
}

impl CustomOp3 for BnApply {
    fn name(&self) -> &'static str {
        "octet-bn-apply"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (_, c, hw) = nchw(l1)?;
        let x = cpu::slice::<f32>(s1, l1)?;
        let (gamma, beta) = (cpu::slice::<f32>(s2, l2)?, cpu::slice::<f32>(s3, l3)?);
        let stats = held_cpu(&self.stats)?;
        let y = x
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                let ch = (i / hw) % c;
                let inv = inv_std(stats[c + ch], self.eps);
                (v - stats[ch]) * (gamma[ch] * inv) + beta[ch]
            })
            .collect();
        Ok((CpuStorage::F32(y), l1.shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s1: &candle_core::CudaStorage,
        l1: &Layout,
        s2: &candle_core::CudaStorage,
        l2: &Layout,
        s3: &candle_core::CudaStorage,
        l3: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        let y = cuda::apply(s1, l1, s2, l2, s3, l3, &self.stats, self.eps)?;
        Ok((y, l1.shape().clone()))
    }

    fn bwd(
        &self,
        x: &Tensor,
        gamma: &Tensor,
        _beta: &Tensor,
        _y: &Tensor,
        dy: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let dy = dy.contiguous()?;
        let sums = x.apply_op2_no_bwd(
            &dy,
            &BnBwdReduce {
                stats: self.stats.clone(),
                eps: self.eps,
            },
        )?;
        let dx = x.apply_op3_no_bwd(
            &dy,
            &sums,
            &BnBwdDx {
                stats: self.stats.clone(),
                gamma: gamma.contiguous()?,
                eps: self.eps,
            },
        )?;
        Ok((Some(dx), Some(sums.get(0)?), Some(sums.get(1)?)))
    }
}

impl CustomOp2 for BnBwdReduce {
    fn name(&self) -> &'static str {
        "octet-bn-bwd-reduce"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (n, c, hw) = nchw(l1)?;
        let (x, dy) = (cpu::slice::<f32>(s1, l1)?, cpu::slice::<f32>(s2, l2)?);
        let stats = held_cpu(&self.stats)?;
        let mut out = vec![0f32; 2 * c];
        for ch in 0..c {
            let (mut sdy, mut sdyx) = (0f32, 0f32);
            for b in 0..n {
                let o = (b * c + ch) * hw;
                for (&g, &v) in dy[o..o + hw].iter().zip(&x[o..o + hw]) {
                    sdy += g;
                    sdyx += g * (v - stats[ch]);
                }
            }
            out[ch] = sdyx * inv_std(stats[c + ch], self.eps);
            out[c + ch] = sdy;
        }
        Ok((CpuStorage::F32(out), Shape::from((2, c))))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s1: &candle_core::CudaStorage,
        l1: &Layout,
        s2: &candle_core::CudaStorage,
        l2: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        let (_, c, _) = nchw(l1)?;
        let out = cuda::bwd_reduce(s1, l1, s2, l2, &self.stats, self.eps)?;
        Ok((out, Shape::from((2, c))))
    }
}

impl CustomOp3 for BnBwdDx {
    fn name(&self) -> &'static str {
        "octet-bn-bwd-dx"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (n, c, hw) = nchw(l1)?;
        let (x, dy) = (cpu::slice::<f32>(s1, l1)?, cpu::slice::<f32>(s2, l2)?);
        let sums = cpu::slice::<f32>(s3, l3)?;
        let (stats, gamma) = (held_cpu(&self.stats)?, held_cpu(&self.gamma)?);
        let m = (n * hw) as f32;
        let dx = x
            .iter()
            .zip(dy)
            .enumerate()
            .map(|(i, (&v, &g))| {
                let ch = (i / hw) % c;
                let inv = inv_std(stats[c + ch], self.eps);
                let xhat = (v - stats[ch]) * inv;
                gamma[ch] * inv * (g - sums[c + ch] / m - xhat * (sums[ch] / m))
            })
            .collect();
        Ok((CpuStorage::F32(dx), l1.shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s1: &candle_core::CudaStorage,
        l1: &Layout,
        s2: &candle_core::CudaStorage,
        l2: &Layout,
        s3: &candle_core::CudaStorage,
        l3: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        let dx = cuda::bwd_dx(s1, l1, s2, l2, s3, l3, &self.stats, &self.gamma, self.eps)?;
        Ok((dx, l1.shape().clone()))
    }
}

#[cfg(feature = "cuda")]
mod cuda {
    use candle_core::cuda_backend::cudarc::driver::{CudaView, PushKernelArg};
    use candle_core::{bail, CudaStorage, Layout, Result, Tensor};

    use super::super::kernels;
    use super::{nchw, BnRunningUpdate};

    fn view<'a>(s: &'a CudaStorage, l: &Layout) -> Result<CudaView<'a, f32>> {
        kernels::view(s, l, "batch norm: input")
    }

    /// Runs `f` with a view of an f32 CUDA tensor held by an op (statistics, gamma).
    fn with_held<R>(t: &Tensor, f: impl FnOnce(CudaView<'_, f32>) -> Result<R>) -> Result<R> {
        kernels::with_held(t, "batch norm: held tensor", f)
    }

    fn i32_of(v: usize) -> Result<i32> {
        kernels::i32_arg(v, "batch norm")
    }

    /// Whether the kernels may load float4s: whole float4s per plane, and every operand
    /// starting on a 16-byte boundary (allocations are; offsets must be whole float4s).
    fn vectorised(hw: usize, layouts: &[&Layout]) -> bool {
        hw.is_multiple_of(4) && layouts.iter().all(|l| l.start_offset().is_multiple_of(4))
    }

    /// `(items per plane, vec flag)` for the kernels: hw in float4s when vectorised.
    fn items(hw: usize, vec: bool) -> (usize, i32) {
        if vec {
            (hw / 4, 1)
        } else {
            (hw, 0)
        }
    }

    /// The index math in the kernels is 32-bit.
    fn check_size(total: usize) -> Result<()> {
        if total == 0 || total > i32::MAX as usize {
            bail!(
                "batch norm: {total} elements (supported: 1 to {})",
                i32::MAX
            )
        }
        Ok(())
    }

    pub(super) fn stats(
        s: &CudaStorage,
        l: &Layout,
        n: usize,
        c: usize,
        hw: usize,
    ) -> Result<CudaStorage> {
        let dev = &s.device;
        check_size(n * c * hw)?;
        let x = view(s, l)?;
        let vec = vectorised(hw, &[l]);
        let (hwv, vflag) = items(hw, vec);
        let split = kernels::Split::new(c, n * hwv);
        // SAFETY: every partial block writes its 3 floats.
        let mut part = unsafe { dev.alloc::<f32>(3 * c * split.splits)? };
        // SAFETY: the final kernel writes all 2c outputs.
        let mut out = unsafe { dev.alloc::<f32>(2 * c)? };
        let (ci, hwi, mi) = (i32_of(c)?, i32_of(hwv)?, i32_of(n * hwv)?);
        let (chunk, splits) = (i32_of(split.chunk)?, i32_of(split.splits)?);
        let (stream, f) = kernels::func(dev, "bn_stats_partial")?;
        let mut b = stream.launch_builder(&f);
        b.arg(&x).arg(&mut part).arg(&ci).arg(&hwi).arg(&mi);
        b.arg(&chunk).arg(&splits).arg(&vflag);
        // SAFETY: argument types and counts match bn_stats_partial.
        unsafe { b.launch(split.partial_launch(c))? };
        drop(b);
        let (stream, f) = kernels::func(dev, "bn_stats_final")?;
        let mut b = stream.launch_builder(&f);
        b.arg(&part).arg(&mut out).arg(&ci).arg(&splits);
        // SAFETY: argument types and counts match bn_stats_final.
        unsafe { b.launch(kernels::per_channel(c))? };
        drop(b);
        Ok(CudaStorage::wrap_cuda_slice(out, dev.clone()))
    }

    pub(super) fn running(
        s1: &mut CudaStorage,
        l1: &Layout,
        s2: &CudaStorage,
        l2: &Layout,
        op: &BnRunningUpdate,
    ) -> Result<()> {
        let dev = s1.device.clone();
        let c = l1.shape().elem_count();
        let stats = view(s2, l2)?;
        if stats.len() != 2 * c {
            bail!("batch norm: {} statistics for {c} channels", stats.len())
        }
        let Some((a, b_)) = l1.contiguous_offsets() else {
            bail!("batch norm: running statistics are not contiguous")
        };
        let mut run = s1.as_cuda_slice_mut::<f32>()?.slice_mut(a..b_);
        let (ci, row) = (i32_of(c)?, i32_of(op.row)?);
        let (stream, f) = kernels::func(&dev, "bn_running")?;
        let mut b = stream.launch_builder(&f);
        b.arg(&mut run)
            .arg(&stats)
            .arg(&ci)
            .arg(&row)
            .arg(&op.keep)
            .arg(&op.take);
        // SAFETY: argument types and counts match bn_running.
        unsafe { b.launch(kernels::elementwise(c))? };
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn apply(
        s1: &CudaStorage,
        l1: &Layout,
        s2: &CudaStorage,
        l2: &Layout,
        s3: &CudaStorage,
        l3: &Layout,
        stats: &Tensor,
        eps: f32,
    ) -> Result<CudaStorage> {
        let dev = &s1.device;
        let (_, c, hw) = nchw(l1)?;
        let total = l1.shape().elem_count();
        check_size(total)?;
        let (x, gamma, beta) = (view(s1, l1)?, view(s2, l2)?, view(s3, l3)?);
        let vec = vectorised(hw, &[l1]);
        let (hwv, vflag) = items(hw, vec);
        let items = if vec { total / 4 } else { total };
        // SAFETY: the kernel writes every element.
        let mut y = unsafe { dev.alloc::<f32>(total)? };
        with_held(stats, |st| {
            let (ci, hwi, tot) = (i32_of(c)?, i32_of(hwv)?, i32_of(items)?);
            let (stream, f) = kernels::func(dev, "bn_apply")?;
            let mut b = stream.launch_builder(&f);
            b.arg(&x).arg(&st).arg(&gamma).arg(&beta).arg(&mut y);
            b.arg(&ci).arg(&hwi).arg(&tot).arg(&eps).arg(&vflag);
            // SAFETY: argument types and counts match bn_apply.
            unsafe { b.launch(kernels::elementwise(items))? };
            Ok(())
        })?;
        Ok(CudaStorage::wrap_cuda_slice(y, dev.clone()))
    }

    pub(super) fn bwd_reduce(
        s1: &CudaStorage,
        l1: &Layout,
        s2: &CudaStorage,
        l2: &Layout,
        stats: &Tensor,
        eps: f32,
    ) -> Result<CudaStorage> {
        let dev = &s1.device;
        let (n, c, hw) = nchw(l1)?;
        if l2.dims() != l1.dims() {
            bail!(
                "batch norm backward: gradient {:?} for input {:?}",
                l2.dims(),
                l1.dims()
            )
        }
        check_size(n * c * hw)?;
        let (x, dy) = (view(s1, l1)?, view(s2, l2)?);
        let vec = vectorised(hw, &[l1, l2]);
        let (hwv, vflag) = items(hw, vec);
        let split = kernels::Split::new(c, n * hwv);
        // SAFETY: every partial block writes its 2 floats.
        let mut part = unsafe { dev.alloc::<f32>(2 * c * split.splits)? };
        // SAFETY: the final kernel writes all 2c outputs.
        let mut out = unsafe { dev.alloc::<f32>(2 * c)? };
        with_held(stats, |st| {
            let (ci, hwi, mi) = (i32_of(c)?, i32_of(hwv)?, i32_of(n * hwv)?);
            let (chunk, splits) = (i32_of(split.chunk)?, i32_of(split.splits)?);
            let (stream, f) = kernels::func(dev, "bn_bwd_partial")?;
            let mut b = stream.launch_builder(&f);
            b.arg(&x).arg(&dy).arg(&st).arg(&mut part);
            b.arg(&ci)
                .arg(&hwi)
                .arg(&mi)
                .arg(&chunk)
                .arg(&splits)
                .arg(&vflag);
            // SAFETY: argument types and counts match bn_bwd_partial.
            unsafe { b.launch(split.partial_launch(c))? };
            drop(b);
            let (stream, f) = kernels::func(dev, "bn_bwd_final")?;
            let mut b = stream.launch_builder(&f);
            b.arg(&part)
                .arg(&st)
                .arg(&mut out)
                .arg(&ci)
                .arg(&splits)
                .arg(&eps);
            // SAFETY: argument types and counts match bn_bwd_final.
            unsafe { b.launch(kernels::per_channel(c))? };
            Ok(())
        })?;
        Ok(CudaStorage::wrap_cuda_slice(out, dev.clone()))
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn bwd_dx(
        s1: &CudaStorage,
        l1: &Layout,
        s2: &CudaStorage,
        l2: &Layout,
        s3: &CudaStorage,
        l3: &Layout,
        stats: &Tensor,
        gamma: &Tensor,
        eps: f32,
    ) -> Result<CudaStorage> {
        let dev = &s1.device;
        let (n, c, hw) = nchw(l1)?;
        if l2.dims() != l1.dims() {
            bail!(
                "batch norm backward: gradient {:?} for input {:?}",
                l2.dims(),
                l1.dims()
            )
        }
        let total = l1.shape().elem_count();
        check_size(total)?;
        let (x, dy, sums) = (view(s1, l1)?, view(s2, l2)?, view(s3, l3)?);
        let vec = vectorised(hw, &[l1, l2]);
        let (hwv, vflag) = items(hw, vec);
        let items = if vec { total / 4 } else { total };
        // SAFETY: the kernel writes every element.
        let mut dx = unsafe { dev.alloc::<f32>(total)? };
        with_held(stats, |st| {
            with_held(gamma, |g| {
                let (ci, hwi, tot, m) = (i32_of(c)?, i32_of(hwv)?, i32_of(items)?, (n * hw) as f32);
                let (stream, f) = kernels::func(dev, "bn_bwd_dx")?;
                let mut b = stream.launch_builder(&f);
                b.arg(&x).arg(&dy).arg(&st).arg(&g).arg(&sums).arg(&mut dx);
                b.arg(&ci).arg(&hwi).arg(&tot).arg(&m).arg(&eps).arg(&vflag);
                // SAFETY: argument types and counts match bn_bwd_dx.
                unsafe { b.launch(kernels::elementwise(items))? };
                Ok(())
            })
        })?;
        Ok(CudaStorage::wrap_cuda_slice(dx, dev.clone()))
    }
}
