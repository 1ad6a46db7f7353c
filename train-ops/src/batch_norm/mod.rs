//! Training-mode batch norm over (N, H, W) per channel with PyTorch's semantics: the batch's
//! biased variance normalises, the unbiased one enters the running estimate
//! (`running = (1 - momentum) * running + momentum * batch`). One op family for both
//! layouts ([`BnLayout`]) and an optional following rectifier ([`Activation`]): statistics, running update, apply,
//! backward sums and input gradient, each a custom op ([`op`], described by [`params`]) with one launcher ([`cuda`])
//! that picks the layout's kernels. Statistics, the affine parameters and their gradients are
//! f32; the activations keep their dtype (f32 NCHW, bf16 channels-last for
//! `--precision bf16`).
//!
//! The fused version is four kernels forward (statistics, two running-stat updates, apply)
//! and two backward (per-channel sums, input gradient) instead of some twenty candle ops.

#[cfg(feature = "cuda")]
mod cuda;
mod op;
mod params;

use candle_core::{bail, DType, Result, Tensor, Var};

use crate::{Activation, OpsConfig, StatsSync};

/// How a batch-norm input holds its channels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BnLayout {
    /// `(n, c, h, w)`.
    #[default]
    Nchw,
    /// `(n, h, w, c)`.
    ChannelsLast,
}

impl BnLayout {
    /// The reduction axes of per-channel statistics.
    fn stat_axes(self) -> [usize; 3] {
        match self {
            BnLayout::Nchw => [0, 2, 3],
            BnLayout::ChannelsLast => [0, 1, 2],
        }
    }

    /// The shape a `(c)` tensor takes to broadcast over the activations.
    pub fn channel_shape(self, c: usize) -> (usize, usize, usize, usize) {
        match self {
            BnLayout::Nchw => (1, c, 1, 1),
            BnLayout::ChannelsLast => (1, 1, 1, c),
        }
    }
}

/// A batch-norm layer's tensors: the affine parameters `(c)` and the running statistics
/// `(c)` a training step updates.
#[derive(Clone, Copy)]
pub struct BnParams<'a> {
    pub gamma: &'a Tensor,
    pub beta: &'a Tensor,
    pub running_mean: &'a Var,
    pub running_var: &'a Var,
}

/// How one training-mode batch norm runs. `Default`: PyTorch's BatchNorm2d (momentum 0.1,
/// eps 1e-5), NCHW, no rectifier.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BnConfig {
    pub momentum: f64,
    pub eps: f64,
    pub layout: BnLayout,
    /// The rectifier after the normalisation (fused into the channels-last kernels).
    pub act: Option<Activation>,
}

impl Default for BnConfig {
    fn default() -> Self {
        Self {
            momentum: 0.1,
            eps: 1e-5,
            layout: BnLayout::Nchw,
            act: None,
        }
    }
}

impl OpsConfig {
    /// Training-mode batch norm of `x`, then the rectifier `cfg.act`, updating the running
    /// statistics. Fused kernels on a CUDA device (f32 NCHW, bf16 channels-last), candle's
    /// ops ([`batch_norm_train_reference`]) everywhere else.
    pub fn batch_norm_train(&self, x: &Tensor, p: &BnParams, cfg: &BnConfig) -> Result<Tensor> {
        let activations = match cfg.layout {
            BnLayout::Nchw => DType::F32,
            BnLayout::ChannelsLast => DType::BF16,
        };
        let fused = cfg!(feature = "cuda")
            && self.fast
            && x.device().is_cuda()
            && x.rank() == 4
            && x.dtype() == activations
            && [p.gamma.dtype(), p.beta.dtype()] == [DType::F32; 2]
            && [p.running_mean.dtype(), p.running_var.dtype()] == [DType::F32; 2];
        match (fused, cfg.layout) {
            (true, _) => batch_norm_train_fused(x, p, cfg),
            // As before the op family: NCHW's rectifier is the dispatching one,
            // channels-last's candle's.
            (false, BnLayout::Nchw) => {
                let y = train_over(x, p, cfg)?;
                match cfg.act {
                    Some(act) => self.rectify(&y, act),
                    None => Ok(y),
                }
            }
            (false, BnLayout::ChannelsLast) => batch_norm_train_reference(x, p, cfg),
        }
    }
}

/// [`OpsConfig::batch_norm_train`] with candle's ops, exactly as octet computed it before the
/// fused ops (CPU results depend on it bit for bit): computed in f32 for 16-bit input and
/// returned in its dtype, then the rectifier `cfg.act` with candle's ops.
pub fn batch_norm_train_reference(x: &Tensor, p: &BnParams, cfg: &BnConfig) -> Result<Tensor> {
    let y = train_over(x, p, cfg)?;
    match cfg.act {
        Some(Activation::Relu) => y.relu(),
        Some(Activation::Relu6) => y.clamp(0f32, 6f32),
        None => Ok(y),
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

/// The reference batch norm (no rectifier) over either layout.
fn train_over(x: &Tensor, p: &BnParams, cfg: &BnConfig) -> Result<Tensor> {
    let dtype = x.dtype();
    let x = x.to_dtype(compute_dtype(dtype))?;
    let axes = cfg.layout.stat_axes();
    let c = p.gamma.elem_count();
    let mean = x.mean_keepdim(axes)?;
    let centred = x.broadcast_sub(&mean)?;
    let var = centred.sqr()?.mean_keepdim(axes)?;
    let n = (x.elem_count() / c) as f64;
    let unbiased = if n > 1.0 { n / (n - 1.0) } else { 1.0 };
    let m = mean.detach().flatten_all()?;
    let v = var.detach().flatten_all()?;
    let momentum = cfg.momentum;
    let rm = ((p.running_mean.as_tensor() * (1.0 - momentum))? + (m * momentum)?)?;
    let rv = ((p.running_var.as_tensor() * (1.0 - momentum))? + (v * (momentum * unbiased))?)?;
    p.running_mean.set(&rm)?;
    p.running_var.set(&rv)?;
    normalize(&x, mean, var, p.gamma, p.beta, cfg.eps)?.to_dtype(dtype)
}

/// Training-mode batch norm with statistics over every rank of a data-parallel job
/// (SyncBatchNorm): per-channel sums, sums of squares and counts are summed by `sync`, whose
/// gradient flows back to every rank. Candle's ops on any device and either layout; 16-bit
/// input is computed in f32 and returned in its dtype. `cfg.act` is the caller's (the
/// result is the normalisation alone).
pub fn batch_norm_train_synced(
    x: &Tensor,
    p: &BnParams,
    cfg: &BnConfig,
    sync: &dyn StatsSync,
) -> Result<Tensor> {
    let dtype = x.dtype();
    let x = &x.to_dtype(compute_dtype(dtype))?;
    let axes = cfg.layout.stat_axes();
    let c = p.gamma.elem_count();
    let bshape = cfg.layout.channel_shape(c);
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
    let momentum = cfg.momentum;
    let rm = ((p.running_mean.as_tensor() * (1.0 - momentum))? + (mean.detach() * momentum)?)?;
    let rv = ((p.running_var.as_tensor() * (1.0 - momentum))? + (unbiased.detach() * momentum)?)?;
    p.running_mean.set(&rm)?;
    p.running_var.set(&rv)?;
    normalize(
        x,
        mean.reshape(bshape)?,
        var.reshape(bshape)?,
        p.gamma,
        p.beta,
        cfg.eps,
    )?
    .to_dtype(dtype)
}

/// `(x - mean) / sqrt(var + eps) * gamma + beta` with candle's ops, `mean` and `var` shaped
/// to broadcast over `x` ([`BnLayout::channel_shape`]); also the inference path of a
/// network's batch-norm layer.
pub fn normalize(
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

/// Batch norm through the fused custom ops on any device (plain loops on the CPU, which is
/// how the ops' arithmetic and wiring are tested without a GPU). On CUDA: f32 NCHW, or bf16
/// channels-last; on the CPU f32 or bf16 activations; everything else f32. An NCHW rectifier
/// is the one-kernel op after the normalisation ([`crate::relu_fused`],
/// [`crate::relu6_fused`]); a channels-last one is fused into the apply kernel and its
/// backward.
pub fn batch_norm_train_fused(x: &Tensor, p: &BnParams, cfg: &BnConfig) -> Result<Tensor> {
    let x = x.contiguous()?;
    let geom = params::Geom::of(x.layout(), cfg.layout)?;
    check_channels(geom.c, &x, p)?;
    let stats = x.apply_op1_no_bwd(&params::Stats { layout: cfg.layout })?;
    update_running(p, &stats, geom.m, cfg.momentum)?;
    let fused_act = cfg.act.filter(|_| cfg.layout == BnLayout::ChannelsLast);
    let y = x.apply_op3(
        &p.gamma.contiguous()?,
        &p.beta.contiguous()?,
        params::Apply {
            stats,
            eps: cfg.eps as f32,
            layout: cfg.layout,
            act: fused_act,
        },
    )?;
    match (cfg.act, fused_act) {
        (Some(Activation::Relu), None) => crate::relu_fused(&y),
        (Some(Activation::Relu6), None) => crate::relu6_fused(&y),
        _ => Ok(y),
    }
}

/// gamma, beta and the running statistics each `(c)` for an input of `c` channels.
fn check_channels(c: usize, x: &Tensor, p: &BnParams) -> Result<()> {
    for (t, what) in [
        (p.gamma, "gamma"),
        (p.beta, "beta"),
        (p.running_mean.as_tensor(), "running mean"),
        (p.running_var.as_tensor(), "running var"),
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
fn update_running(p: &BnParams, stats: &Tensor, m: usize, momentum: f64) -> Result<()> {
    let m = m as f64;
    let unbiased = if m > 1.0 { m / (m - 1.0) } else { 1.0 };
    let keep = (1.0 - momentum) as f32;
    for (running, row, take) in [
        (p.running_mean, 0, momentum),
        (p.running_var, 1, momentum * unbiased),
    ] {
        running.as_tensor().inplace_op2(
            stats,
            &params::RunningUpdate {
                row,
                keep,
                take: take as f32,
            },
        )?;
    }
    Ok(())
}
