//! Sums over ranks that autograd can see through, for synchronised batch norm: the forward
//! value is the all-reduced sum, and the gradient reaching each rank's input is the sum of
//! every rank's gradient of that sum (what PyTorch's SyncBatchNorm all-reduces in backward).

use std::sync::Arc;

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, CudaStorage, CustomOp1, Layout, Result, Shape, Tensor};
use octet_models::StatsSync;

use super::collective::Collective;

pub struct RankSum {
    coll: Arc<dyn Collective>,
}

impl RankSum {
    pub fn new(coll: Arc<dyn Collective>) -> Self {
        Self { coll }
    }
}

impl StatsSync for RankSum {
    fn sum(&self, t: &Tensor) -> Result<Tensor> {
        let value = self.coll.all_reduce_sum(&t.detach())?;
        let t = t.contiguous()?;
        // Zero-valued, but its backward all-reduces the incoming gradient.
        let path = t.apply_op1_arc(Arc::new(Box::new(GradSum {
            coll: self.coll.clone(),
        })))?;
        value + (&path - path.detach())?
    }
}

/// Identity forward; backward sums the gradient over ranks.
struct GradSum {
    coll: Arc<dyn Collective>,
}

fn whole(l: &Layout) -> Result<()> {
    match l.contiguous_offsets() {
        Some((0, _)) => Ok(()),
        _ => candle_core::bail!("rank sum: expected a contiguous tensor at offset 0"),
    }
}

impl CustomOp1 for GradSum {
    fn name(&self) -> &'static str {
        "rank-sum-grad"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        whole(l)?;
        Ok((s.try_clone(l)?, l.shape().clone()))
    }

    fn cuda_fwd(&self, s: &CudaStorage, l: &Layout) -> Result<(CudaStorage, Shape)> {
        whole(l)?;
        Ok((s.try_clone(l)?, l.shape().clone()))
    }

    fn bwd(&self, _arg: &Tensor, _res: &Tensor, grad: &Tensor) -> Result<Option<Tensor>> {
        Ok(Some(self.coll.all_reduce_sum(&grad.contiguous()?)?))
    }
}
