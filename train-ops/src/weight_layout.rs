//! The convolution weight of the channels-last path: the f32 master weight `(K, C, R, S)`
//! (PyTorch's layout, what checkpoints and the optimiser hold) as a `(K, R, S, C)` tensor of
//! the activations' dtype, cuDNN's NHWC filter layout. Its gradient comes back as an f32
//! `(K, C, R, S)` tensor, so autograd hands the f32 `Var` an f32 gradient in its own layout
//! and SGD stays as it is.

use candle_core::{bail, CpuStorage, DType, Layout, Result, Shape, Tensor};

#[cfg(feature = "cuda")]
use crate::custom_op::CudaArgs;
use crate::custom_op::{custom_op, CpuArgs};
use crate::{cpu, OpsConfig};

impl OpsConfig {
    /// `w` `(k, c, r, s)` permuted to `(k, r, s, c)` and cast to `dtype`, contiguous. One
    /// kernel each way for an f32 weight going to bf16 on a CUDA device; candle's permute and
    /// cast otherwise (the same values: both round to nearest even).
    pub fn weight_channels_last(&self, w: &Tensor, dtype: DType) -> Result<Tensor> {
        if w.rank() != 4 {
            bail!(
                "channels-last weight: expected (out, in, kh, kw), got {:?}",
                w.dims()
            )
        }
        if cfg!(feature = "cuda")
            && self.fast
            && w.device().is_cuda()
            && w.dtype() == DType::F32
            && dtype == DType::BF16
        {
            return weight_channels_last_fused(w, dtype);
        }
        w.permute((0, 2, 3, 1))?.to_dtype(dtype)?.contiguous()
    }
}

/// The custom op on any device (its CPU version tests the wiring without a GPU). `w` must be
/// f32; `dtype` f32 or bf16.
pub fn weight_channels_last_fused(w: &Tensor, dtype: DType) -> Result<Tensor> {
    if w.dtype() != DType::F32 || !matches!(dtype, DType::F32 | DType::BF16) {
        bail!(
            "channels-last weight: converts an f32 weight to f32 or bf16, got {:?} to {dtype:?}",
            w.dtype()
        )
    }
    w.contiguous()?.apply_op1(ToChannelsLast { dtype })
}

/// f32 `(k, c, r, s)` → `dtype` `(k, r, s, c)`.
struct ToChannelsLast {
    dtype: DType,
}

/// Its gradient: `(k, r, s, c)` of any float dtype → f32 `(k, c, r, s)`.
struct FromChannelsLast;

fn dims4(l: &Layout, what: &str) -> Result<[usize; 4]> {
    match l.dims() {
        &[a, b, c, d] => Ok([a, b, c, d]),
        d => bail!("{what}: expected a 4-d tensor, got {d:?}"),
    }
}

custom_op!(
    CustomOp1 for ToChannelsLast, "octet-weight-channels-last", (s, l),
    bwd(w, y, dy) -> Grads1 = backward
);

impl ToChannelsLast {
    fn cpu(&self, [(s, l)]: CpuArgs<1>) -> Result<(CpuStorage, Shape)> {
        let [k, c, r, q] = dims4(l, "channels-last weight")?;
        let w = cpu::slice::<f32>(s, l)?;
        let mut out = Vec::with_capacity(w.len());
        for ki in 0..k {
            for p in 0..r * q {
                for ci in 0..c {
                    out.push(w[(ki * c + ci) * r * q + p]);
                }
            }
        }
        Ok((cpu::from_f32(self.dtype, out)?, Shape::from((k, r, q, c))))
    }

    #[cfg(feature = "cuda")]
    fn cuda(&self, [(s, l)]: CudaArgs<1>) -> Result<(candle_core::CudaStorage, Shape)> {
        let [k, c, r, q] = dims4(l, "channels-last weight")?;
        if self.dtype != DType::BF16 {
            bail!("channels-last weight: the CUDA op writes bf16 (use candle's cast for f32)")
        }
        let y = cuda::to_krsc(s, l, [k, c, r * q])?;
        Ok((y, Shape::from((k, r, q, c))))
    }

    fn backward(&self, _w: &Tensor, _y: &Tensor, dy: &Tensor) -> Result<Option<Tensor>> {
        Ok(Some(dy.contiguous()?.apply_op1_no_bwd(&FromChannelsLast)?))
    }
}

custom_op!(CustomOp1 for FromChannelsLast, "octet-weight-channels-last-bwd", (s, l));

impl FromChannelsLast {
    fn cpu(&self, [(s, l)]: CpuArgs<1>) -> Result<(CpuStorage, Shape)> {
        let [k, r, q, c] = dims4(l, "channels-last weight gradient")?;
        let g = cpu::to_f32(s, l)?;
        let mut out = Vec::with_capacity(g.len());
        for ki in 0..k {
            for ci in 0..c {
                for p in 0..r * q {
                    out.push(g[(ki * r * q + p) * c + ci]);
                }
            }
        }
        Ok((CpuStorage::F32(out), Shape::from((k, c, r, q))))
    }

    #[cfg(feature = "cuda")]
    fn cuda(&self, [(s, l)]: CudaArgs<1>) -> Result<(candle_core::CudaStorage, Shape)> {
        let [k, r, q, c] = dims4(l, "channels-last weight gradient")?;
        let y = cuda::from_krsc(s, l, [k, c, r * q])?;
        Ok((y, Shape::from((k, c, r, q))))
    }
}

#[cfg(feature = "cuda")]
mod cuda {
    use candle_core::backend::BackendStorage;
    use candle_core::cuda_backend::cudarc::driver::{DeviceRepr, PushKernelArg, ValidAsZeroBits};
    use candle_core::cuda_backend::CudaDType;
    use candle_core::{bail, CudaStorage, DType, Layout, Result};
    use half::bf16;

    use crate::kernels::{self, CHANNELS_LAST};
    use crate::launch;

    fn i32s(d: [usize; 3]) -> Result<[i32; 3]> {
        if d.iter().product::<usize>() > i32::MAX as usize {
            bail!("channels-last weight: {d:?} is too large")
        }
        Ok(d.map(|v| v as i32))
    }

    /// One launch of the permuting kernel `kernel` from `I` to `O` elements over the
    /// `(k, c, rs)` weight `d` (either direction: the kernel knows which).
    fn permute<I: CudaDType, O: CudaDType + DeviceRepr + ValidAsZeroBits>(
        kernel: &str,
        what: &str,
        s: &CudaStorage,
        l: &Layout,
        d: [usize; 3],
    ) -> Result<CudaStorage> {
        let dev = &s.device;
        let src = kernels::view::<I>(s, l, what)?;
        let n = src.len();
        // SAFETY: the kernel writes every element.
        let mut out = unsafe { dev.alloc::<O>(n.max(1))? };
        let [k, c, rs] = i32s(d)?;
        let (stream, f) = CHANNELS_LAST.func(dev, kernel)?;
        let mut lb = stream.launch_builder(&f);
        lb.arg(&src).arg(&mut out).arg(&k).arg(&c).arg(&rs);
        // SAFETY: argument types and counts match both kernels (in, out, k, c, rs).
        unsafe { lb.launch(launch::elementwise(n))? };
        Ok(CudaStorage::wrap_cuda_slice(out, dev.clone()))
    }

    pub(super) fn to_krsc(s: &CudaStorage, l: &Layout, d: [usize; 3]) -> Result<CudaStorage> {
        permute::<f32, bf16>("kcrs_to_krsc_bf16", "channels-last weight", s, l, d)
    }

    pub(super) fn from_krsc(s: &CudaStorage, l: &Layout, d: [usize; 3]) -> Result<CudaStorage> {
        if s.dtype() != DType::BF16 {
            bail!(
                "channels-last weight gradient: the CUDA op reads bf16, got {:?}",
                s.dtype()
            )
        }
        permute::<bf16, f32>(
            "krsc_bf16_to_kcrs",
            "channels-last weight gradient",
            s,
            l,
            d,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    /// The op and its gradient equal candle's permute + cast on the CPU, bit for bit.
    #[test]
    fn fused_matches_candle_permute_and_cast() -> Result<()> {
        let v: Vec<f32> = (0..2 * 3 * 2 * 2)
            .map(|i| (i as f32 * 0.37).sin() * 3.1)
            .collect();
        let w = Var::from_vec(v, (2, 3, 2, 2), &Device::Cpu)?;
        for dtype in [DType::F32, DType::BF16] {
            let ours = weight_channels_last_fused(w.as_tensor(), dtype)?;
            let theirs = w.as_tensor().permute((0, 2, 3, 1))?.to_dtype(dtype)?;
            assert_eq!(ours.dims(), [2, 2, 2, 3]);
            let (a, b) = (
                ours.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?,
                theirs
                    .to_dtype(DType::F32)?
                    .flatten_all()?
                    .to_vec1::<f32>()?,
            );
            assert_eq!(a, b, "{dtype:?}");
            let r = Tensor::arange(0f32, 24.0, &Device::Cpu)?
                .reshape((2, 2, 2, 3))?
                .to_dtype(dtype)?;
            let g_ours = (ours * &r)?.to_dtype(DType::F32)?.sum_all()?.backward()?;
            let g_theirs = (theirs * &r)?.to_dtype(DType::F32)?.sum_all()?.backward()?;
            let (ga, gb) = (
                g_ours.get(w.as_tensor()).expect("gradient"),
                g_theirs.get(w.as_tensor()).expect("gradient"),
            );
            assert_eq!(ga.dtype(), DType::F32);
            assert_eq!(ga.dims(), [2, 3, 2, 2]);
            assert_eq!(
                ga.flatten_all()?.to_vec1::<f32>()?,
                gb.flatten_all()?.to_vec1::<f32>()?
            );
        }
        Ok(())
    }
}
