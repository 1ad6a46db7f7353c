//! The SGD update of one parameter as one CUDA kernel (instead of some six candle ops, each
//! a launch and a fresh tensor): d = g + λ·p; b = μ·b + d; p = p − lr·b, updating p and b
//! in place. Rounded operation by operation exactly as the candle ops of the CPU path
//! compute it (including their `x·a + 0` affine), so CPU and GPU steps agree bit for bit.
//! Compiled once per process with NVRTC and loaded once per device through candle.

use std::sync::OnceLock;

use candle_core::cuda_backend::cudarc::driver::{DevicePtr, LaunchConfig, PushKernelArg};
use candle_core::cuda_backend::cudarc::nvrtc;
use candle_core::{bail, CpuStorage, CudaStorage, DType, InplaceOp3, Layout, Result, Tensor};

const MODULE: &str = "octet_fused_sgd";

pub(crate) const SOURCE: &str = r#"
// One parameter's step. No FMA contraction (__fmul_rn/__fadd_rn): each product and sum is
// rounded on its own, like candle's CPU ops; `+ 0.0f` is their affine's add (it also turns
// -0 into +0, as they do).
extern "C" __global__ void sgd_step(float* __restrict__ p, float* __restrict__ buf,
                                    const float* __restrict__ g, int n, float lr,
                                    float momentum, float wd, int decay, int use_momentum) {
    unsigned stride = gridDim.x * blockDim.x;
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < (unsigned)n; i += stride) {
        float pi = p[i];
        float d = g[i];
        if (decay) d = __fadd_rn(d, __fadd_rn(__fmul_rn(pi, wd), 0.0f));
        if (use_momentum) {
            d = __fadd_rn(__fadd_rn(__fmul_rn(buf[i], momentum), 0.0f), d);
            buf[i] = d;
        }
        p[i] = __fsub_rn(pi, __fadd_rn(__fmul_rn(d, lr), 0.0f));
    }
}
"#;

fn ptx() -> Result<&'static str> {
    static PTX: OnceLock<std::result::Result<String, String>> = OnceLock::new();
    PTX.get_or_init(|| {
        nvrtc::compile_ptx(SOURCE)
            .map(|p| p.to_src())
            .map_err(|e| format!("compiling the fused SGD kernel with NVRTC: {e:?}"))
    })
    .as_deref()
    .map_err(|e| candle_core::Error::Msg(e.clone()))
}

/// Whether [`step`] takes this parameter: f32 tensors on a CUDA device, of one shape.
pub(crate) fn supports(param: &Tensor, velocity: &Tensor, grad: &Tensor) -> bool {
    param.device().is_cuda()
        && [param.dtype(), velocity.dtype(), grad.dtype()] == [DType::F32; 3]
        && param.shape() == velocity.shape()
        && param.shape() == grad.shape()
}

/// One SGD step of `param` with momentum buffer `velocity`, both updated in place.
/// `momentum == 0` leaves `velocity` untouched (the update is then `d`), like the CPU path.
pub(crate) fn step(
    param: &Tensor,
    velocity: &Tensor,
    grad: &Tensor,
    lr: f64,
    momentum: f64,
    weight_decay: f64,
) -> Result<()> {
    // candle's affine ops take their factors as f32 (`T::from_f64`); so does the kernel.
    let op = SgdStep {
        lr: lr as f32,
        momentum: momentum as f32,
        weight_decay: weight_decay as f32,
        decay: weight_decay != 0.0,
        use_momentum: momentum != 0.0,
    };
    param.inplace_op3(velocity, &grad.contiguous()?, &op)
}

struct SgdStep {
    lr: f32,
    momentum: f32,
    weight_decay: f32,
    decay: bool,
    use_momentum: bool,
}

fn offsets(l: &Layout, what: &str) -> Result<(usize, usize)> {
    match l.contiguous_offsets() {
        Some(o) => Ok(o),
        None => bail!("fused SGD: {what} is not contiguous"),
    }
}

impl InplaceOp3 for SgdStep {
    fn name(&self) -> &'static str {
        "octet-fused-sgd"
    }

    fn cpu_fwd(
        &self,
        _: &mut CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
    ) -> Result<()> {
        // The CPU keeps candle's ops (`Sgd::step`), whose results checkpoints depend on.
        bail!("fused SGD runs on CUDA devices only")
    }

    fn cuda_fwd(
        &self,
        sp: &mut CudaStorage,
        lp: &Layout,
        sv: &CudaStorage,
        lv: &Layout,
        sg: &CudaStorage,
        lg: &Layout,
    ) -> Result<()> {
        let dev = sp.device.clone();
        let n = lp.shape().elem_count();
        if lv.shape().elem_count() != n || lg.shape().elem_count() != n {
            bail!("fused SGD: parameter, momentum and gradient differ in size")
        }
        let Ok(ni) = i32::try_from(n) else {
            bail!("fused SGD: {n} elements (at most {})", i32::MAX)
        };
        if n == 0 {
            return Ok(());
        }
        let (pa, pb) = offsets(lp, "parameter")?;
        let (va, vb) = offsets(lv, "momentum buffer")?;
        let (ga, gb) = offsets(lg, "gradient")?;
        let func = dev
            .get_or_load_custom_func("sgd_step", MODULE, ptx()?)?
            .into_cuda_function();
        let stream = dev.cuda_stream();
        let mut p = sp.as_cuda_slice_mut::<f32>()?.slice_mut(pa..pb);
        let v = sv.as_cuda_slice::<f32>()?.slice(va..vb);
        let g = sg.as_cuda_slice::<f32>()?.slice(ga..gb);
        // candle lends the momentum buffer read-only (one in-place operand per op), yet the
        // kernel also writes it. Sound: candle has checked that it shares no storage with the
        // parameter or the gradient, it is only ever used on this device's one stream, so
        // the write is ordered with every other use, and the optimiser owns it (checkpoints
        // only read it between steps).
        let (v_ptr, _record) = v.device_ptr(&stream);
        let (decay, use_momentum) = (i32::from(self.decay), i32::from(self.use_momentum));
        const THREADS: u32 = 256;
        let cfg = LaunchConfig {
            grid_dim: (n.div_ceil(THREADS as usize).min(4096) as u32, 1, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = stream.launch_builder(&func);
        b.arg(&mut p).arg(&v_ptr).arg(&g).arg(&ni);
        b.arg(&self.lr).arg(&self.momentum).arg(&self.weight_decay);
        b.arg(&decay).arg(&use_momentum);
        // SAFETY: argument types and counts match sgd_step (v_ptr is the buffer's float*);
        // all three ranges hold n f32s.
        unsafe { b.launch(cfg)? };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    /// NVRTC (no GPU needed) accepts the kernel. Ignored by default: it needs the CUDA
    /// runtime libraries (`source shared/cuda/toolkit.sh`) even where there is no GPU.
    #[test]
    #[ignore = "needs libnvrtc"]
    fn kernel_compiles_with_nvrtc() {
        let ptx = super::nvrtc::compile_ptx(super::SOURCE).expect("NVRTC compiles sgd_step");
        assert!(ptx.to_src().contains("sgd_step"));
    }
}
