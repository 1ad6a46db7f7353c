//! The batch-norm custom ops, each for either layout: CPU bodies (plain loops, which test
//! the arithmetic and wiring without a GPU) and the CUDA entry points ([`super::cuda`]).

use candle_core::backend::BackendStorage;
use candle_core::{bail, CpuStorage, InplaceOp2, Layout, Result, Shape, Storage, Tensor};

use super::params::{Apply, BwdDx, BwdReduce, Geom, RunningUpdate, Stats};
#[cfg(feature = "cuda")]
use crate::custom_op::CudaArgs;
use crate::custom_op::{custom_op, CpuArgs, Grads3};
use crate::{cpu, Activation};

/// The elements of a CPU tensor held by an op (statistics, gamma, a bf16 output) as f32.
fn held_cpu(t: &Tensor) -> Result<Vec<f32>> {
    let (s, l) = t.storage_and_layout();
    match &*s {
        Storage::Cpu(c) => cpu::to_f32(c, l),
        _ => bail!("batch norm: held tensor is not on the CPU"),
    }
}

fn inv_std(var: f32, eps: f32) -> f32 {
    1.0 / (var + eps).sqrt()
}

/// The gradient reaching the normalisation: dy, masked where the fused rectifier `act`
/// (with output `y`) passes none.
fn masked(dy: Vec<f32>, y: Option<Vec<f32>>, act: Option<Activation>) -> Vec<f32> {
    match (y, act) {
        (Some(y), Some(act)) => dy
            .iter()
            .zip(&y)
            .map(|(&g, &o)| if act.passes(o) { g } else { 0.0 })
            .collect(),
        _ => dy,
    }
}

custom_op!(CustomOp1 for Stats, "octet-bn-stats", (s, l));

impl Stats {
    fn cpu(&self, [(s, l)]: CpuArgs<1>) -> Result<(CpuStorage, Shape)> {
        let g = Geom::of(l, self.layout)?;
        let x = cpu::to_f32(s, l)?;
        let m = g.m as f32;
        let mut out = vec![0f32; 2 * g.c];
        for ch in 0..g.c {
            let values = || (0..g.m).map(|j| x[g.at(ch, j)]);
            let mean = values().sum::<f32>() / m;
            let var = values().map(|v| (v - mean) * (v - mean)).sum::<f32>() / m;
            out[ch] = mean;
            out[g.c + ch] = var;
        }
        Ok((CpuStorage::F32(out), Shape::from((2, g.c))))
    }

    #[cfg(feature = "cuda")]
    fn cuda(&self, [(s, l)]: CudaArgs<1>) -> Result<(candle_core::CudaStorage, Shape)> {
        let g = Geom::of(l, self.layout)?;
        Ok((super::cuda::stats(s, l, &g)?, Shape::from((2, g.c))))
    }
}

impl InplaceOp2 for RunningUpdate {
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
        super::cuda::running(s1, l1, s2, l2, self)
    }
}

custom_op!(
    CustomOp3 for Apply, "octet-bn-apply", (s1, l1, s2, l2, s3, l3),
    bwd(x, gamma, beta, y, dy) -> Grads3 = backward
);

impl Apply {
    fn cpu(&self, [(s1, l1), (s2, l2), (s3, l3)]: CpuArgs<3>) -> Result<(CpuStorage, Shape)> {
        let g = Geom::of(l1, self.layout)?;
        let x = cpu::to_f32(s1, l1)?;
        let (gamma, beta) = (cpu::slice::<f32>(s2, l2)?, cpu::slice::<f32>(s3, l3)?);
        let stats = held_cpu(&self.stats)?;
        let y = x
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                let ch = g.channel(i);
                let inv = inv_std(stats[g.c + ch], self.eps);
                let r = (v - stats[ch]) * (gamma[ch] * inv) + beta[ch];
                self.act.map_or(r, |a| a.apply(r))
            })
            .collect();
        Ok((cpu::from_f32(s1.dtype(), y)?, l1.shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda(&self, ops: CudaArgs<3>) -> Result<(candle_core::CudaStorage, Shape)> {
        Ok((super::cuda::apply(ops, self)?, ops[0].1.shape().clone()))
    }

    fn backward(
        &self,
        x: &Tensor,
        gamma: &Tensor,
        _beta: &Tensor,
        y: &Tensor,
        dy: &Tensor,
    ) -> Result<Grads3> {
        let dy = dy.contiguous()?;
        let sums = x.apply_op3_no_bwd(
            &dy,
            y,
            &BwdReduce {
                stats: self.stats.clone(),
                eps: self.eps,
                layout: self.layout,
                act: self.act,
            },
        )?;
        let dx = x.apply_op3_no_bwd(
            &dy,
            &sums,
            &BwdDx {
                stats: self.stats.clone(),
                gamma: gamma.contiguous()?,
                y: y.clone(),
                eps: self.eps,
                layout: self.layout,
                act: self.act,
            },
        )?;
        Ok((Some(dx), Some(sums.get(0)?), Some(sums.get(1)?)))
    }
}

custom_op!(CustomOp3 for BwdReduce, "octet-bn-bwd-reduce", (s1, l1, s2, l2, s3, l3));

impl BwdReduce {
    fn cpu(&self, [(s1, l1), (s2, l2), (s3, l3)]: CpuArgs<3>) -> Result<(CpuStorage, Shape)> {
        let geom = Geom::of(l1, self.layout)?;
        let x = cpu::to_f32(s1, l1)?;
        let y = self.act.map(|_| cpu::to_f32(s3, l3)).transpose()?;
        let g = masked(cpu::to_f32(s2, l2)?, y, self.act);
        let stats = held_cpu(&self.stats)?;
        let c = geom.c;
        let mut out = vec![0f32; 2 * c];
        for ch in 0..c {
            let (mut sdy, mut sdyx) = (0f32, 0f32);
            for j in 0..geom.m {
                let i = geom.at(ch, j);
                sdy += g[i];
                sdyx += g[i] * (x[i] - stats[ch]);
            }
            out[ch] = sdyx * inv_std(stats[c + ch], self.eps);
            out[c + ch] = sdy;
        }
        Ok((CpuStorage::F32(out), Shape::from((2, c))))
    }

    #[cfg(feature = "cuda")]
    fn cuda(&self, ops: CudaArgs<3>) -> Result<(candle_core::CudaStorage, Shape)> {
        let c = Geom::of(ops[0].1, self.layout)?.c;
        Ok((super::cuda::bwd_reduce(ops, self)?, Shape::from((2, c))))
    }
}

custom_op!(CustomOp3 for BwdDx, "octet-bn-bwd-dx", (s1, l1, s2, l2, s3, l3));

impl BwdDx {
    fn cpu(&self, [(s1, l1), (s2, l2), (s3, l3)]: CpuArgs<3>) -> Result<(CpuStorage, Shape)> {
        let geom = Geom::of(l1, self.layout)?;
        let x = cpu::to_f32(s1, l1)?;
        let sums = cpu::slice::<f32>(s3, l3)?;
        let y = self.act.map(|_| held_cpu(&self.y)).transpose()?;
        let g = masked(cpu::to_f32(s2, l2)?, y, self.act);
        let (stats, gamma) = (held_cpu(&self.stats)?, held_cpu(&self.gamma)?);
        let (c, m) = (geom.c, geom.m as f32);
        let dx = x
            .iter()
            .zip(&g)
            .enumerate()
            .map(|(i, (&v, &g))| {
                let ch = geom.channel(i);
                let inv = inv_std(stats[c + ch], self.eps);
                let xhat = (v - stats[ch]) * inv;
                gamma[ch] * inv * (g - sums[c + ch] / m - xhat * (sums[ch] / m))
            })
            .collect();
        Ok((cpu::from_f32(s1.dtype(), dx)?, l1.shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda(&self, ops: CudaArgs<3>) -> Result<(candle_core::CudaStorage, Shape)> {
        Ok((super::cuda::bwd_dx(ops, self)?, ops[0].1.shape().clone()))
    }
}
