//! The GPU kernels: the CUDA C source (`kernels.cu`, `conv_mma.cu`), its entry points and
//! tensor-core tiles, compiled with NVRTC once per process, architecture and rounding (the
//! rounding is a compile-time define, so no epilogue branches on it at run time), loaded into
//! each model's context.

use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::{sys, CudaContext, CudaFunction, CudaModule};
use cudarc::nvrtc::{CompileOptions, Ptx};

use super::Result;
use crate::Rounding;

/// The CUDA C source of every kernel (self-contained, compiled at run time with NVRTC): the
/// dp4a and element-wise kernels, then the tensor-core conv, which uses their helpers.
pub const KERNEL_SOURCE: &str = concat!(include_str!("kernels.cu"), include_str!("conv_mma.cu"));

/// Kernel entry points in [`KERNEL_SOURCE`].
pub const KERNEL_NAMES: [&str; 17] = [
    "input_u8_to_hwc",
    "input_hwc",
    "conv2d_dp4a",
    "fc_warp",
    "max_pool",
    "avg_pool",
    "tflite_avg_pool",
    "add_requant",
    "depthwise_conv2d",
    "pad_hwc",
    "tflite_add",
    "softmax",
    "conv_mma_128x128",
    "conv_mma_128x64",
    "conv_mma_64x64",
    "conv_mma_128x64_gather",
    "conv_mma_64x64_gather",
];

/// One instantiation of the tensor-core conv (a `CONV_MMA` line of conv_mma.cu).
#[derive(Clone, Copy, Debug)]
pub(super) struct MmaTile {
    /// Entry point.
    pub name: &'static str,
    /// Output pixels per block.
    pub bm: usize,
    /// Output channels per block.
    pub bn: usize,
    /// Bytes of K per pipeline stage.
    pub bk: usize,
    /// Threads per block.
    pub threads: u32,
    /// Pipeline stages of the shared-memory ring.
    pub stages: usize,
    /// Gathers 4-byte words (any C_in) instead of loading 16-byte pieces (C_in % 16 == 0).
    pub gather: bool,
}

impl MmaTile {
    /// A tile of `bm × bn` outputs and `bk`-byte k-steps (the order of the `CONV_MMA` macro).
    const fn new(
        name: &'static str,
        (bm, bn, bk): (usize, usize, usize),
        threads: u32,
        stages: usize,
        gather: bool,
    ) -> Self {
        MmaTile {
            name,
            bm,
            bn,
            bk,
            threads,
            stages,
            gather,
        }
    }

    /// Dynamic shared memory: the k-tile ring (BK-byte rows of A and B per stage).
    pub fn smem(&self) -> u32 {
        (self.stages * (self.bm + self.bn) * self.bk) as u32
    }
}

/// Tensor-core conv tiles, as instantiated in conv_mma.cu, largest first per kind: the host
/// takes the largest tile that still half-fills the GPU (see `launch::mma_tile`).
const MMA_TILES: [MmaTile; 5] = [
    MmaTile::new("conv_mma_128x128", (128, 128, 128), 256, 3, false),
    MmaTile::new("conv_mma_128x64", (128, 64, 64), 128, 4, false),
    MmaTile::new("conv_mma_64x64", (64, 64, 64), 128, 4, false),
    MmaTile::new("conv_mma_128x64_gather", (128, 64, 64), 128, 2, true),
    MmaTile::new("conv_mma_64x64_gather", (64, 64, 64), 128, 2, true),
];

/// Compiles [`KERNEL_SOURCE`] with NVRTC for a virtual architecture (`"compute_90"`) and a
/// model rounding, giving PTX text. Needs only NVRTC, no device.
pub fn compile_ptx(arch: &str, rounding: Rounding) -> Result<String> {
    Ok(compile(arch, rounding)?.to_src())
}

fn compile(arch: &str, rounding: Rounding) -> Result<Ptx> {
    let opts = CompileOptions {
        options: vec![
            format!("--gpu-architecture={arch}"),
            format!("-DOCTET_ROUNDING={}", rounding.code()),
        ],
        name: Some("octet_kernels.cu".into()),
        ..Default::default()
    };
    Ok(cudarc::nvrtc::compile_ptx_with_opts(KERNEL_SOURCE, opts)?)
}

/// PTX per architecture and rounding, compiled once per process.
fn cached_ptx(arch: &str, rounding: Rounding) -> Result<Ptx> {
    static CACHE: OnceLock<Mutex<Vec<(String, Rounding, Ptx)>>> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(Vec::new()));
    let mut guard = cache.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, _, ptx)) = guard.iter().find(|(a, r, _)| a == arch && *r == rounding) {
        return Ok(ptx.clone());
    }
    let ptx = compile(arch, rounding)?;
    guard.push((arch.to_string(), rounding, ptx.clone()));
    Ok(ptx)
}

/// The kernels loaded into one context.
pub(super) struct Kernels {
    /// Keeps the functions' module loaded.
    _module: Arc<CudaModule>,
    pub input: CudaFunction,
    pub input_hwc: CudaFunction,
    pub conv: CudaFunction,
    /// The tensor-core convs, one per [`MMA_TILES`] entry (empty below sm_80).
    pub mma: Vec<(MmaTile, CudaFunction)>,
    pub fc_warp: CudaFunction,
    pub max_pool: CudaFunction,
    pub avg_pool: CudaFunction,
    pub tflite_avg_pool: CudaFunction,
    pub add: CudaFunction,
    pub depthwise: CudaFunction,
    pub pad: CudaFunction,
    pub tflite_add: CudaFunction,
    pub softmax: CudaFunction,
}

impl Kernels {
    /// Compiles (once per process) and loads the kernels for a device of compute capability
    /// `cc` and a model of rounding `rounding`; the tensor-core tiles from sm_80 on.
    pub fn load(ctx: &Arc<CudaContext>, cc: (i32, i32), rounding: Rounding) -> Result<Kernels> {
        let ptx = cached_ptx(&format!("compute_{}{}", cc.0, cc.1), rounding)?;
        let module = ctx.load_module(ptx)?;
        let mut mma = Vec::new();
        if cc >= (8, 0) {
            for t in MMA_TILES {
                let f = module.load_function(t.name)?;
                f.set_attribute(
                    sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    t.smem() as i32,
                )?;
                mma.push((t, f));
            }
        }
        Ok(Kernels {
            input: module.load_function("input_u8_to_hwc")?,
            input_hwc: module.load_function("input_hwc")?,
            conv: module.load_function("conv2d_dp4a")?,
            mma,
            fc_warp: module.load_function("fc_warp")?,
            max_pool: module.load_function("max_pool")?,
            avg_pool: module.load_function("avg_pool")?,
            tflite_avg_pool: module.load_function("tflite_avg_pool")?,
            add: module.load_function("add_requant")?,
            depthwise: module.load_function("depthwise_conv2d")?,
            pad: module.load_function("pad_hwc")?,
            tflite_add: module.load_function("tflite_add")?,
            softmax: module.load_function("softmax")?,
            _module: module,
        })
    }
}
