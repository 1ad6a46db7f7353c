//! The one loader of the training ops' CUDA kernels. Each module's source is a `.cu` file of
//! `kernels/` built into the binary; NVRTC compiles it once per process (no CUDA compiler is
//! needed to build octet) and candle loads it once per device (and caches it).

use std::sync::{Arc, OnceLock};

use candle_core::cuda_backend::cudarc::driver::{CudaFunction, CudaStream, CudaView};
use candle_core::cuda_backend::cudarc::nvrtc;
use candle_core::cuda_backend::{CudaDType, CudaDevice};
use candle_core::{Layout, Result, Storage, Tensor};

/// A module of octet's kernels: its CUDA source, compiled on first use.
pub struct KernelModule {
    name: &'static str,
    source: &'static str,
    /// What the kernels are, for the compile error.
    what: &'static str,
    ptx: OnceLock<std::result::Result<String, String>>,
}

/// Batch norm over NCHW f32 tensors (and the final per-channel reductions the channels-last
/// kernels share) and the f32 ReLU.
pub static NCHW: KernelModule = KernelModule::new(
    "octet_fastops",
    include_str!("../kernels/nchw.cu"),
    "octet's fused-op kernels",
);

/// The bf16 channels-last training path: batch norm over NHWC tensors, element-wise ops and
/// the conv weight's layout cast.
pub static CHANNELS_LAST: KernelModule = KernelModule::new(
    "octet_channels_last",
    include_str!("../kernels/channels_last.cu"),
    "octet's channels-last kernels",
);

/// The SGD update of every parameter in one launch (used by the trainer's optimiser).
pub static FUSED_SGD: KernelModule = KernelModule::new(
    "octet_fused_sgd",
    include_str!("../kernels/fused_sgd.cu"),
    "the fused SGD kernel",
);

impl KernelModule {
    const fn new(name: &'static str, source: &'static str, what: &'static str) -> Self {
        Self {
            name,
            source,
            what,
            ptx: OnceLock::new(),
        }
    }

    /// The module's CUDA source.
    pub fn source(&self) -> &'static str {
        self.source
    }

    fn ptx(&self) -> Result<&str> {
        self.ptx
            .get_or_init(|| {
                nvrtc::compile_ptx(self.source)
                    .map(|p| p.to_src())
                    .map_err(|e| format!("compiling {} with NVRTC: {e:?}", self.what))
            })
            .as_deref()
            .map_err(|e| candle_core::Error::Msg(e.to_string()))
    }

    /// The kernel `name`, loaded on `dev`, and the device's stream to launch it on.
    pub fn func(&self, dev: &CudaDevice, name: &str) -> Result<(Arc<CudaStream>, CudaFunction)> {
        let f = dev.get_or_load_custom_func(name, self.name, self.ptx()?)?;
        Ok((dev.cuda_stream(), f.into_cuda_function()))
    }
}

/// A contiguous view of `T` elements of a CUDA tensor, or an error naming `what` it is.
pub(crate) fn view<'a, T: CudaDType>(
    s: &'a candle_core::CudaStorage,
    l: &Layout,
    what: &str,
) -> Result<CudaView<'a, T>> {
    let Some((a, b)) = l.contiguous_offsets() else {
        candle_core::bail!("{what} is not contiguous")
    };
    Ok(s.as_cuda_slice::<T>()?.slice(a..b))
}

/// Runs `f` with a contiguous view of a CUDA tensor an op holds (statistics, gamma, an
/// output kept for the backward).
pub(crate) fn with_held<T: CudaDType, R>(
    t: &Tensor,
    what: &str,
    f: impl FnOnce(CudaView<'_, T>) -> Result<R>,
) -> Result<R> {
    let (s, l) = t.storage_and_layout();
    match &*s {
        Storage::Cuda(c) => f(view(c, l, what)?),
        _ => candle_core::bail!("{what} is not on a CUDA device"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// NVRTC (no GPU needed) accepts every module and each holds its kernels. Ignored by
    /// default: it needs the CUDA runtime libraries (`source shared/cuda/toolkit.sh`) even
    /// where there is no GPU.
    #[test]
    #[ignore = "needs libnvrtc"]
    fn kernels_compile_with_nvrtc() {
        let modules: [(&KernelModule, &[&str]); 3] = [
            (
                &NCHW,
                &[
                    "bn_stats_partial",
                    "bn_stats_final",
                    "bn_running",
                    "bn_apply",
                    "bn_bwd_partial",
                    "bn_bwd_final",
                    "bn_bwd_dx",
                    "relu_fwd",
                    "relu_bwd",
                ],
            ),
            (
                &CHANNELS_LAST,
                &[
                    "cl_stats_partial",
                    "cl_apply",
                    "cl_bwd_partial",
                    "cl_bwd_dx",
                    "relu_fwd_bf16",
                    "relu_bwd_bf16",
                    "add_relu_bf16",
                    "add_bf16",
                    "relu_out_bwd_bf16",
                    "kcrs_to_krsc_bf16",
                    "krsc_bf16_to_kcrs",
                ],
            ),
            (&FUSED_SGD, &["sgd_step"]),
        ];
        for (module, names) in modules {
            let ptx = module.ptx().unwrap_or_else(|e| panic!("{e}"));
            for name in names {
                assert!(ptx.contains(name), "{name} missing from {}", module.name);
            }
        }
    }
}
