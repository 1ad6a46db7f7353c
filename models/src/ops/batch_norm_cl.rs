//! Training-mode batch norm of a channels-last `(n, h, w, c)` tensor, optionally followed by
//! a ReLU, with PyTorch's semantics (see [`super::batch_norm`]). Statistics, the affine
//! parameters and their gradients are f32; the activations keep their dtype (bf16 for
//! `--precision bf16`). On CUDA: two kernels for the statistics, two for the running
//! estimates, one to apply; two backward (per-channel sums, input gradient), the ReLU's
//! mask read from the op's own output.

use candle_core::backend::BackendStorage;
use candle_core::{bail, CpuStorage, CustomOp1, CustomOp3, DType, Layout, Result, Shape};
use candle_core::{Tensor, Var};

use super::batch_norm::{check_channels, held_cpu, inv_std, update_running};
use super::cpu;

/// Training-mode batch norm of channels-last `x`, then `max(·, 0)` when `relu`, updating
/// `running_mean` and `running_var` `(c)`. Fused kernels for bf16 on a CUDA device, candle's
/// ops in f32 ([`batch_norm_train_channels_last_reference`]) everywhere else.
#[allow(clippy::too_many_arguments)]
pub fn batch_norm_train_channels_last(
    x: &Tensor,
    gamma: &Tensor,
    beta: &Tensor,
    running_mean: &Var,
    running_var: &Var,
    momentum: f64,
    eps: f64,
    relu: bool,
) -> Result<Tensor> {
    let fused = cfg!(feature = "cuda")
        && super::fast_ops()
        && x.device().is_cuda()
        && x.rank() == 4
        && x.dtype() == DType::BF16
        && [gamma.dtype(), beta.dtype()] == [DType::F32; 2]
        && [running_mean.dtype(), running_var.dtype()] == [DType::F32; 2];
    if fused {
        batch_norm_train_channels_last_fused(
            x,
            gamma,
            beta,
            running_mean,
            running_var,
            momentum,
            eps,
            relu,
        )
    } else {
        batch_norm_train_channels_last_reference(
            x,
            gamma,
            beta,
            running_mean,
            running_var,
            momentum,
            eps,
            relu,
        )
    }
}

/// The reference: candle's ops over axes (0, 1, 2), computed in f32 and returned in `x`'s
/// dtype, then candle's ReLU when `relu`.
#[allow(clippy::too_many_arguments)]
pub fn batch_norm_train_channels_last_reference(
    x: &Tensor,
    gamma: &Tensor,
    beta: &Tensor,
    running_mean: &Var,
    running_var: &Var,
    momentum: f64,
    eps: f64,
    relu: bool,
) -> Result<Tensor> {
    let y = super::batch_norm::train_over(
        x,
        gamma,
        beta,
        running_mean,
        running_var,
        momentum,
        eps,
        true,
    )?;
    if relu {
        y.relu()
    } else {
        Ok(y)
    }
}

/// [`batch_norm_train_channels_last`] through the fused custom ops on any device (plain
/// loops on the CPU, which test the ops' arithmetic and wiring without a GPU). `x` f32 or
/// bf16 on the CPU, bf16 on CUDA; everything else f32.
#[allow(clippy::too_many_arguments)]
pub fn batch_norm_train_channels_last_fused(
    x: &Tensor,
    gamma: &Tensor,
    beta: &Tensor,
    running_mean: &Var,
    running_var: &Var,
    momentum: f64,
    eps: f64,
    relu: bool,
) -> Result<Tensor> {
    let (n, h, w, c) = x.dims4()?;
    check_channels(c, x, gamma, beta, running_mean, running_var)?;
    let x = x.contiguous()?;
    let stats = x.apply_op1_no_bwd(&ClStats)?;
    update_running(running_mean, running_var, &stats, n * h * w, momentum)?;
    x.apply_op3(
        &gamma.contiguous()?,
        &beta.contiguous()?,
        ClApply {
            stats,
            eps: eps as f32,
            relu,
        },
    )
}

/// Dimensions `(rows, c)` of a channels-last layout.
fn rows_c(l: &Layout) -> Result<(usize, usize)> {
    match l.dims() {
        &[n, h, w, c] => Ok((n * h * w, c)),
        d => bail!("batch norm: expected a 4-d channels-last tensor, got {d:?}"),
    }
}

/// Per-channel `[mean; biased variance]` in f32, shape `(2, c)`; no gradient.
struct ClStats;

/// `(x, gamma, beta) → y` using the held statistics.
struct ClApply {
    stats: Tensor,
    eps: f32,
    relu: bool,
}

/// `(x, dy, y) → (2, c)`: `[Σ g·x̂; Σ g]`, g = dy masked by the ReLU when fused.
struct ClBwdReduce {
    stats: Tensor,
    eps: f32,
    relu: bool,
}

/// `(x, dy, sums) → dx`, `y` held for the ReLU mask.
struct ClBwdDx {
    stats: Tensor,
    gamma: Tensor,
    y: Tensor,
    eps: f32,
    relu: bool,
}

/// The gradient reaching the normalisation (dy, masked where the fused ReLU gave 0).
fn masked(dy: &[f32], y: Option<&[f32]>) -> Vec<f32> {
    match y {
        Some(y) => dy
            .iter()
            .zip(y)
            .map(|(&g, &o)| if o > 0.0 { g } else { 0.0 })
            .collect(),
        None => dy.to_vec(),
    }
}

impl CustomOp1 for ClStats {
    fn name(&self) -> &'static str {
        "octet-bn-cl-stats"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        let (m, c) = rows_c(l)?;
        let x = cpu::to_f32(s, l)?;
        let mut out = vec![0f32; 2 * c];
        for ch in 0..c {
            let col = || (0..m).map(|r| x[r * c + ch]);
            let mean = col().sum::<f32>() / m as f32;
            let var = col().map(|v| (v - mean) * (v - mean)).sum::<f32>() / m as f32;
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
        let (m, c) = rows_c(l)?;
        Ok((cuda::stats(s, l, m, c)?, Shape::from((2, c))))
    }
}

impl CustomOp3 for ClApply {
    fn name(&self) -> &'static str {
        "octet-bn-cl-apply"
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
        let (_, c) = rows_c(l1)?;
        let x = cpu::to_f32(s1, l1)?;
        let (gamma, beta) = (cpu::slice::<f32>(s2, l2)?, cpu::slice::<f32>(s3, l3)?);
        let stats = held_cpu(&self.stats)?;
        let y = x
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                let ch = i % c;
                let inv = inv_std(stats[c + ch], self.eps);
                let r = (v - stats[ch]) * (gamma[ch] * inv) + beta[ch];
                if self.relu {
                    r.max(0.0)
                } else {
                    r
                }
            })
            .collect();
        Ok((cpu::from_f32(s1.dtype(), y)?, l1.shape().clone()))
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
        let y = cuda::apply(s1, l1, s2, l2, s3, l3, self)?;
        Ok((y, l1.shape().clone()))
    }

    fn bwd(
        &self,
        x: &Tensor,
        gamma: &Tensor,
        _beta: &Tensor,
        y: &Tensor,
        dy: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let dy = dy.contiguous()?;
        let sums = x.apply_op3_no_bwd(
            &dy,
            y,
            &ClBwdReduce {
                stats: self.stats.clone(),
                eps: self.eps,
                relu: self.relu,
            },
        )?;
        let dx = x.apply_op3_no_bwd(
            &dy,
            &sums,
            &ClBwdDx {
                stats: self.stats.clone(),
                gamma: gamma.contiguous()?,
                y: y.clone(),
                eps: self.eps,
                relu: self.relu,
            },
        )?;
        Ok((Some(dx), Some(sums.get(0)?), Some(sums.get(1)?)))
    }
}

impl CustomOp3 for ClBwdReduce {
    fn name(&self) -> &'static str {
        "octet-bn-cl-bwd-reduce"
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
        let (m, c) = rows_c(l1)?;
        let (x, dy) = (cpu::to_f32(s1, l1)?, cpu::to_f32(s2, l2)?);
        let y = if self.relu {
            Some(cpu::to_f32(s3, l3)?)
        } else {
            None
        };
        let g = masked(&dy, y.as_deref());
        let stats = held_cpu(&self.stats)?;
        let mut out = vec![0f32; 2 * c];
        for ch in 0..c {
            let (mut sdy, mut sdyx) = (0f32, 0f32);
            for r in 0..m {
                let i = r * c + ch;
                sdy += g[i];
                sdyx += g[i] * (x[i] - stats[ch]);
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
        s3: &candle_core::CudaStorage,
        l3: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        let (_, c) = rows_c(l1)?;
        let out = cuda::bwd_reduce(s1, l1, s2, l2, s3, l3, self)?;
        Ok((out, Shape::from((2, c))))
    }
}

impl CustomOp3 for ClBwdDx {
    fn name(&self) -> &'static str {
        "octet-bn-cl-bwd-dx"
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
        let (m, c) = rows_c(l1)?;
        let (x, dy) = (cpu::to_f32(s1, l1)?, cpu::to_f32(s2, l2)?);
        let sums = cpu::slice::<f32>(s3, l3)?;
        let y = if self.relu {
            Some(held_cpu(&self.y)?)
        } else {
            None
        };
        let g = masked(&dy, y.as_deref());
        let (stats, gamma) = (held_cpu(&self.stats)?, held_cpu(&self.gamma)?);
        let m = m as f32;
        let dx = x
            .iter()
            .zip(&g)
            .enumerate()
            .map(|(i, (&v, &g))| {
                let ch = i % c;
                let inv = inv_std(stats[c + ch], self.eps);
                let xhat = (v - stats[ch]) * inv;
                gamma[ch] * inv * (g - sums[c + ch] / m - xhat * (sums[ch] / m))
            })
            .collect();
        Ok((cpu::from_f32(s1.dtype(), dx)?, l1.shape().clone()))
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
        let dx = cuda::bwd_dx(s1, l1, s2, l2, s3, l3, self)?;
        Ok((dx, l1.shape().clone()))
    }
}

#[cfg(feature = "cuda")]
mod cuda {
    use candle_core::backend::BackendStorage;
    use candle_core::cuda_backend::cudarc::driver::{CudaView, PushKernelArg};
    use candle_core::{bail, CudaStorage, DType, Layout, Result, Storage, Tensor};
    use half::bf16;

    use super::super::kernels;
    use super::super::kernels_cl::{self, RowSplit};
    use super::{rows_c, ClApply, ClBwdDx, ClBwdReduce};

    fn view_bf16<'a>(s: &'a CudaStorage, l: &Layout) -> Result<CudaView<'a, bf16>> {
        if s.dtype() != DType::BF16 {
            bail!(
                "batch norm (channels last): the CUDA kernels take bf16 activations, got {:?}",
                s.dtype()
            )
        }
        kernels::view(s, l, "batch norm: input")
    }

    fn view_f32<'a>(s: &'a CudaStorage, l: &Layout) -> Result<CudaView<'a, f32>> {
        kernels::view(s, l, "batch norm: parameter")
    }

    /// Runs `f` with a view of an f32 CUDA tensor held by an op (statistics, gamma).
    fn with_held<R>(t: &Tensor, f: impl FnOnce(CudaView<'_, f32>) -> Result<R>) -> Result<R> {
        kernels::with_held(t, "batch norm: held tensor", f)
    }

    fn i32_of(v: usize) -> Result<i32> {
        kernels::i32_arg(v, "batch norm")
    }

    /// Whether 8-value (16-byte) vectors fit: whole vectors a row, every operand starting
    /// on a whole vector.
    fn vectorised(c: usize, layouts: &[&Layout]) -> bool {
        c.is_multiple_of(8) && layouts.iter().all(|l| l.start_offset().is_multiple_of(8))
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

    pub(super) fn stats(s: &CudaStorage, l: &Layout, m: usize, c: usize) -> Result<CudaStorage> {
        let dev = &s.device;
        let x = view_bf16(s, l)?;
        let vec = vectorised(c, &[l]);
        let v = if vec { 8 } else { 1 };
        let split = RowSplit::new(c / v, m);
        // SAFETY: every (channel, split) entry is written by its block.
        let mut part = unsafe { dev.alloc::<f32>(3 * c * split.splits)? };
        // SAFETY: the final kernel writes all 2c outputs.
        let mut out = unsafe { dev.alloc::<f32>(2 * c)? };
        let (ci, mi) = (i32_of(c)?, i32_of(m)?);
        let (chunk, splits, vflag) = (i32_of(split.chunk)?, i32_of(split.splits)?, vec as i32);
        let (stream, f) = kernels_cl::func(dev, "cl_stats_partial")?;
        let mut b = stream.launch_builder(&f);
        b.arg(&x).arg(&mut part).arg(&ci).arg(&mi);
        b.arg(&chunk).arg(&splits).arg(&vflag);
        // SAFETY: argument types and counts match cl_stats_partial.
        unsafe { b.launch(split.launch())? };
        drop(b);
        let (stream, f) = kernels::func(dev, "bn_stats_final")?;
        let mut b = stream.launch_builder(&f);
        b.arg(&part).arg(&mut out).arg(&ci).arg(&splits);
        // SAFETY: argument types and counts match bn_stats_final.
        unsafe { b.launch(kernels::per_channel(c))? };
        drop(b);
        Ok(CudaStorage::wrap_cuda_slice(out, dev.clone()))
    }

    pub(super) fn apply(
        s1: &CudaStorage,
        l1: &Layout,
        s2: &CudaStorage,
        l2: &Layout,
        s3: &CudaStorage,
        l3: &Layout,
        op: &ClApply,
    ) -> Result<CudaStorage> {
        let dev = &s1.device;
        let (_, c) = rows_c(l1)?;
        let total = l1.shape().elem_count();
        let (x, gamma, beta) = (view_bf16(s1, l1)?, view_f32(s2, l2)?, view_f32(s3, l3)?);
        let vec = vectorised(c, &[l1]);
        let items = if vec { total / 8 } else { total };
        // SAFETY: the kernel writes every element.
        let mut y = unsafe { dev.alloc::<bf16>(total.max(1))? };
        with_held(&op.stats, |st| {
            let (ci, it, relu, vflag) = (i32_of(c)?, items as i64, op.relu as i32, vec as i32);
            let (stream, f) = kernels_cl::func(dev, "cl_apply")?;
            let mut b = stream.launch_builder(&f);
            b.arg(&x).arg(&st).arg(&gamma).arg(&beta).arg(&mut y);
            b.arg(&ci).arg(&it).arg(&op.eps).arg(&relu).arg(&vflag);
            // SAFETY: argument types and counts match cl_apply.
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
        s3: &CudaStorage,
        l3: &Layout,
        op: &ClBwdReduce,
    ) -> Result<CudaStorage> {
        let dev = &s1.device;
        let (m, c) = rows_c(l1)?;
        check_same(l1, l2)?;
        check_same(l1, l3)?;
        let (x, dy, y) = (view_bf16(s1, l1)?, view_bf16(s2, l2)?, view_bf16(s3, l3)?);
        let vec = vectorised(c, &[l1, l2, l3]);
        let split = RowSplit::new(c / if vec { 8 } else { 1 }, m);
        // SAFETY: every (channel, split) entry is written by its block.
        let mut part = unsafe { dev.alloc::<f32>(2 * c * split.splits)? };
        // SAFETY: the final kernel writes all 2c outputs.
        let mut out = unsafe { dev.alloc::<f32>(2 * c)? };
        with_held(&op.stats, |st| {
            let (ci, mi) = (i32_of(c)?, i32_of(m)?);
            let (chunk, splits) = (i32_of(split.chunk)?, i32_of(split.splits)?);
            let (relu, vflag) = (op.relu as i32, vec as i32);
            let (stream, f) = kernels_cl::func(dev, "cl_bwd_partial")?;
            let mut b = stream.launch_builder(&f);
            b.arg(&x).arg(&dy).arg(&y).arg(&st).arg(&mut part);
            b.arg(&ci)
                .arg(&mi)
                .arg(&chunk)
                .arg(&splits)
                .arg(&relu)
                .arg(&vflag);
            // SAFETY: argument types and counts match cl_bwd_partial.
            unsafe { b.launch(split.launch())? };
            drop(b);
            let (stream, f) = kernels::func(dev, "bn_bwd_final")?;
            let mut b = stream.launch_builder(&f);
            b.arg(&part)
                .arg(&st)
                .arg(&mut out)
                .arg(&ci)
                .arg(&splits)
                .arg(&op.eps);
            // SAFETY: argument types and counts match bn_bwd_final.
            unsafe { b.launch(kernels::per_channel(c))? };
            Ok(())
        })?;
        Ok(CudaStorage::wrap_cuda_slice(out, dev.clone()))
    }

    pub(super) fn bwd_dx(
        s1: &CudaStorage,
        l1: &Layout,
        s2: &CudaStorage,
        l2: &Layout,
        s3: &CudaStorage,
        l3: &Layout,
        op: &ClBwdDx,
    ) -> Result<CudaStorage> {
        let dev = &s1.device;
        let (m, c) = rows_c(l1)?;
        check_same(l1, l2)?;
        let total = l1.shape().elem_count();
        let (x, dy, sums) = (view_bf16(s1, l1)?, view_bf16(s2, l2)?, view_f32(s3, l3)?);
        // SAFETY: the kernel writes every element.
        let mut dx = unsafe { dev.alloc::<bf16>(total.max(1))? };
        let (ys, yl) = op.y.storage_and_layout();
        let Storage::Cuda(ys) = &*ys else {
            bail!("batch norm: held output is not on a CUDA device")
        };
        check_same(l1, yl)?;
        let y = view_bf16(ys, yl)?;
        let vec = vectorised(c, &[l1, l2, yl]);
        let items = if vec { total / 8 } else { total };
        with_held(&op.stats, |st| {
            with_held(&op.gamma, |g| {
                let (ci, it, mf) = (i32_of(c)?, items as i64, m as f32);
                let (relu, vflag) = (op.relu as i32, vec as i32);
                let (stream, f) = kernels_cl::func(dev, "cl_bwd_dx")?;
                let mut b = stream.launch_builder(&f);
                b.arg(&x)
                    .arg(&dy)
                    .arg(&y)
                    .arg(&st)
                    .arg(&g)
                    .arg(&sums)
                    .arg(&mut dx);
                b.arg(&ci)
                    .arg(&it)
                    .arg(&mf)
                    .arg(&op.eps)
                    .arg(&relu)
                    .arg(&vflag);
                // SAFETY: argument types and counts match cl_bwd_dx.
                unsafe { b.launch(kernels::elementwise(items))? };
                Ok(())
            })
        })?;
        Ok(CudaStorage::wrap_cuda_slice(dx, dev.clone()))
    }
}
