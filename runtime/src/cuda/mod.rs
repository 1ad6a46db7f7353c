//! The NVIDIA GPU path (feature `cuda`): runs a parsed `.o8` model with integer kernels that
//! produce the same bytes as [`Model::run`].
//!
//! ```ignore
//! let model = octet_runtime::Model::parse(&bytes)?;
//! let mut gpu = octet_runtime::cuda::CudaModel::new(&model, 0, 256)?; // device 0, ≤ 256 images
//! let logits: &[i8] = gpu.run(&pixels)?;                               // same bytes as model.run
//! ```
//!
//! - **Upload once.** [`CudaModel::new`] copies every op's constants to the device, repacked
//!   for the kernels: conv/fc weights as int32 words of four int8 (input channels padded to a
//!   multiple of 4 with zero weights), and per output channel `{bias, M0, n = 31 − shift, 0}`
//!   so the kernels do no decoding (TFLite-Micro style precomputed quantization parameters).
//! - **Compile once.** The CUDA C source (`kernels.cu`, no `#include`) is compiled with NVRTC
//!   for the device's compute capability the first time a process needs that architecture; the
//!   PTX is cached for the life of the process and loaded into each model's context.
//! - **Plan once.** Activations live in one device buffer: each tensor gets a region for
//!   `max_batch` images (batch-major, HWC per image), placed first-fit so that tensors with
//!   overlapping lifetimes never share memory — the CPU arena's rule, without the scratch the
//!   GPU kernels do not need (see `plan.rs`).
//! - **Run.** Copy the pixels in, convert them to int8 HWC on the device, run the forward on
//!   the model's own stream, copy the logits out, synchronise. The forward (one kernel per op)
//!   is captured as a CUDA graph the first time a batch size runs and replayed after, one
//!   launch instead of one per op. [`CudaModel::load`] + [`CudaModel::run_loaded`] keep a batch
//!   on the device and run the model on it without copies.
//!
//! Kernels (all integer; requantization exactly `requant.rs`, in 64-bit integer arithmetic):
//! conv2d as an implicit GEMM, fully_connected as the same GEMM (a 1×1 conv over a 1×1×K
//! input) or, for batches of at most [`FC_WARP_MAX_BATCH`] images, one warp per output with
//! `__dp4a`. On sm_80+ the GEMM runs on the int8 tensor cores (`conv_mma.cu`: `mma.sync`
//! m16n8k32, a `cp.async` shared-memory ring, `ldmatrix`), with the tile chosen per layer and
//! batch, and a residual add that directly follows a conv fused into its epilogue; below sm_80
//! (or with [`CudaModel::set_tensor_cores`] off) it is the `__dp4a` kernel of `kernels.cu`.
//! max_pool, avg_pool and the requantizing add (16 bytes per thread) are element-wise.
//!
//! The driver library (`libcuda.so.1`) and NVRTC (`libnvrtc.so.13`) are linked dynamically, as
//! candle's CUDA build links them: a machine without them cannot start the binary. A machine
//! whose driver reports no device (or no device `ordinal`) gets [`CudaError::NoDevice`].

#[cfg(test)]
mod emulate;
mod plan;

use std::fmt;
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::{
    result::{self, DriverError},
    sys, CudaContext, CudaEvent, CudaFunction, CudaGraph, CudaModule, CudaSlice, CudaStream,
    DevicePtr, LaunchConfig, PinnedHostSlice, PushKernelArg,
};
use cudarc::nvrtc::{CompileError, CompileOptions, Ptx};

use crate::{Model, OpKind};

/// The CUDA C source of every kernel (self-contained, compiled at run time with NVRTC): the
/// dp4a and element-wise kernels, then the tensor-core conv, which uses their helpers.
pub const KERNEL_SOURCE: &str = concat!(include_str!("kernels.cu"), include_str!("conv_mma.cu"));

/// Kernel entry points in [`KERNEL_SOURCE`].
pub const KERNEL_NAMES: [&str; 11] = [
    "input_u8_to_hwc",
    "conv2d_dp4a",
    "fc_warp",
    "max_pool",
    "avg_pool",
    "add_requant",
    "conv_mma_128x128",
    "conv_mma_128x64",
    "conv_mma_64x64",
    "conv_mma_128x64_gather",
    "conv_mma_64x64_gather",
];

/// Tensor-core conv tiles, as instantiated in conv_mma.cu: (entry point, BM, BN, BK, threads,
/// pipeline stages, gather, automatic). The host takes the largest automatic tile that still
/// half-fills the GPU (see `mma_tile`); non-automatic tiles would serve only `force_mma_tile`.
const MMA_TILES: [MmaTile; 5] = [
    MmaTile::new("conv_mma_128x128", 128, 128, 128, 256, 3, false, true),
    MmaTile::new("conv_mma_128x64", 128, 64, 64, 128, 4, false, true),
    MmaTile::new("conv_mma_64x64", 64, 64, 64, 128, 4, false, true),
    MmaTile::new("conv_mma_128x64_gather", 128, 64, 64, 128, 2, true, true),
    MmaTile::new("conv_mma_64x64_gather", 64, 64, 64, 128, 2, true, true),
];

/// One instantiation of the tensor-core conv.
#[derive(Clone, Copy, Debug)]
struct MmaTile {
    name: &'static str,
    bm: usize,
    bn: usize,
    bk: usize,
    threads: u32,
    stages: usize,
    gather: bool,
    auto: bool,
}

impl MmaTile {
    #[allow(clippy::too_many_arguments)]
    const fn new(
        name: &'static str,
        bm: usize,
        bn: usize,
        bk: usize,
        threads: u32,
        stages: usize,
        gather: bool,
        auto: bool,
    ) -> Self {
        MmaTile {
            name,
            bm,
            bn,
            bk,
            threads,
            stages,
            gather,
            auto,
        }
    }

    /// Dynamic shared memory: the k-tile ring (BK-byte rows of A and B per stage).
    fn smem(&self) -> u32 {
        (self.stages * (self.bm + self.bn) * self.bk) as u32
    }
}

/// fully_connected uses the warp-per-output kernel up to this batch, the GEMM above it.
pub const FC_WARP_MAX_BATCH: usize = 8;

/// Threads per block of the element-wise kernels.
const THREADS: u32 = 256;
/// Grid cap of the grid-stride kernels.
const MAX_BLOCKS: u64 = 1 << 20;
/// GEMM tile (must match BM, BN in kernels.cu).
const TILE_M: usize = 64;
const TILE_N: usize = 64;

/// Errors of the GPU path.
#[derive(Debug)]
pub enum CudaError {
    /// No usable CUDA device at this ordinal (none present, ordinal out of range, driver
    /// failed to initialise).
    NoDevice {
        /// The ordinal asked for.
        ordinal: usize,
        /// The driver's error.
        error: DriverError,
    },
    /// The device's compute capability is too old for these kernels (needs 7.5 or newer, the
    /// oldest NVRTC 13 targets).
    Unsupported {
        /// Major, minor compute capability.
        compute_capability: (i32, i32),
    },
    /// NVRTC failed to compile the kernels (the log says why).
    Compile {
        /// NVRTC's log or error.
        log: String,
    },
    /// The model's weights and activation buffers for `max_batch` images do not fit.
    OutOfMemory {
        /// Bytes the model needs on the device.
        needed: usize,
        /// Bytes free on the device (0 when unknown).
        free: usize,
    },
    /// `max_batch` × a tensor's size exceeds the kernels' 32-bit index range (2^31 − 1 bytes
    /// per tensor), or `max_batch` is 0.
    BadMaxBatch {
        /// The maximum batch asked for.
        max_batch: usize,
    },
    /// More images than the model was planned for.
    BatchTooLarge {
        /// Images given.
        batch: usize,
        /// `max_batch` of [`CudaModel::new`].
        max: usize,
    },
    /// The pixel slice is not a positive multiple of the input size.
    InputLength {
        /// Bytes per image.
        expected: usize,
        /// Bytes given.
        got: usize,
    },
    /// `run_into`'s output slice is not batch × output_len long.
    OutputLength {
        /// Bytes needed.
        expected: usize,
        /// Bytes given.
        got: usize,
    },
    /// [`CudaModel::run_loaded`] before any [`CudaModel::load`], or after `run`/`run_into`
    /// replaced the loaded images.
    NothingLoaded,
    /// Any other driver failure (allocation, copy, launch).
    Driver(DriverError),
}

impl fmt::Display for CudaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CudaError::NoDevice { ordinal, error } => {
                write!(f, "no usable CUDA device {ordinal}: {error:?}")
            }
            CudaError::Unsupported {
                compute_capability: (a, b),
            } => write!(
                f,
                "CUDA device of compute capability {a}.{b} is not supported (needs 7.5 or newer)"
            ),
            CudaError::Compile { log } => write!(f, "NVRTC failed to compile the kernels: {log}"),
            CudaError::OutOfMemory { needed, free } => write!(
                f,
                "model needs {needed} bytes of device memory, {free} bytes are free"
            ),
            CudaError::BadMaxBatch { max_batch } => write!(
                f,
                "max_batch {max_batch} is 0 or makes a tensor exceed 2^31 − 1 bytes"
            ),
            CudaError::BatchTooLarge { batch, max } => {
                write!(
                    f,
                    "batch of {batch} images exceeds the planned maximum {max}"
                )
            }
            CudaError::InputLength { expected, got } => write!(
                f,
                "input of {got} bytes is not a positive multiple of {expected} bytes per image"
            ),
            CudaError::OutputLength { expected, got } => {
                write!(
                    f,
                    "output slice holds {got} bytes, the batch needs {expected}"
                )
            }
            CudaError::NothingLoaded => {
                write!(f, "no images are loaded: call CudaModel::load first")
            }
            CudaError::Driver(e) => write!(f, "CUDA driver error: {e:?}"),
        }
    }
}

impl std::error::Error for CudaError {}

impl From<DriverError> for CudaError {
    fn from(e: DriverError) -> Self {
        if e.0 == sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY {
            CudaError::OutOfMemory { needed: 0, free: 0 }
        } else {
            CudaError::Driver(e)
        }
    }
}

impl From<CompileError> for CudaError {
    fn from(e: CompileError) -> Self {
        let log = match e {
            CompileError::CompileError { nvrtc, log, .. } => {
                format!("{nvrtc:?}: {}", log.to_string_lossy())
            }
            other => format!("{other:?}"),
        };
        CudaError::Compile { log }
    }
}

/// `Result` with [`CudaError`].
pub type Result<T> = core::result::Result<T, CudaError>;

/// Compiles [`KERNEL_SOURCE`] with NVRTC for a virtual architecture (`"compute_90"`), giving
/// PTX text. Needs only NVRTC, no device.
pub fn compile_ptx(arch: &str) -> Result<String> {
    Ok(compile(arch)?.to_src())
}

fn compile(arch: &str) -> Result<Ptx> {
    let opts = CompileOptions {
        options: vec![format!("--gpu-architecture={arch}")],
        name: Some("octet_kernels.cu".into()),
        ..Default::default()
    };
    Ok(cudarc::nvrtc::compile_ptx_with_opts(KERNEL_SOURCE, opts)?)
}

/// PTX per architecture, compiled once per process.
fn cached_ptx(arch: &str) -> Result<Ptx> {
    static CACHE: OnceLock<Mutex<Vec<(String, Ptx)>>> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(Vec::new()));
    let mut guard = cache.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, ptx)) = guard.iter().find(|(a, _)| a == arch) {
        return Ok(ptx.clone());
    }
    let ptx = compile(arch)?;
    guard.push((arch.to_string(), ptx.clone()));
    Ok(ptx)
}

struct Funcs {
    input: CudaFunction,
    conv: CudaFunction,
    /// The tensor-core convs, one per [`MMA_TILES`] entry (empty below sm_80).
    mma: Vec<(MmaTile, CudaFunction)>,
    fc_warp: CudaFunction,
    max_pool: CudaFunction,
    avg_pool: CudaFunction,
    add: CudaFunction,
}

/// Output zero point and clamp.
#[derive(Clone, Copy, Debug)]
struct Quant {
    zout: i32,
    act_min: i32,
    act_max: i32,
}

/// A conv2d or fully_connected op, ready to launch.
struct Dense {
    fc: bool,
    x: usize,
    y: usize,
    /// Packed weights [C_out][kh·kw·cin_words] (int32 words of 4 int8).
    w: CudaSlice<i32>,
    /// {bias, M0, n, 0} per output channel.
    rq: CudaSlice<i32>,
    /// Pad value per input channel (the input zero point where the model has none).
    padv: CudaSlice<i8>,
    /// `w` and `padv` start on 16-byte boundaries (driver allocations do).
    aligned16: bool,
    /// Per image: input (h, w, c), output (h, w, c).
    h: i32,
    w_in: i32,
    cin: i32,
    ho: i32,
    wo: i32,
    cout: i32,
    kh: i32,
    kw: i32,
    stride: i32,
    pad: i32,
    cin_words: i32,
    q: Quant,
}

struct Pool {
    avg: bool,
    x: usize,
    y: usize,
    h: i32,
    w: i32,
    c: i32,
    ho: i32,
    wo: i32,
    kh: i32,
    kw: i32,
    stride: i32,
    zin: i32,
    m0: i32,
    n: i32,
    q: Quant,
}

struct Add {
    /// Fusable into the conv before it: `Some(true)` when that conv's output is input `a`,
    /// `Some(false)` when it is `b`.
    fuse: Option<bool>,
    a: usize,
    b: usize,
    y: usize,
    len: usize,
    z0: i32,
    m0: i32,
    z1: i32,
    m1: i32,
    n: i32,
    q: Quant,
}

impl Add {
    /// The fused-add arguments of an mma launch without an add.
    fn default_fused() -> (u64, i32, i32, i32, i32, i32, i32, i32, i32) {
        (0, 0, 0, 0, 0, 1, 0, -128, 127)
    }
}

enum Step {
    Dense(Dense),
    Pool(Pool),
    Add(Add),
}

/// A model uploaded to one GPU, with kernels compiled and activation buffers planned for up to
/// `max_batch` images.
pub struct CudaModel {
    stream: Arc<CudaStream>,
    _module: Arc<CudaModule>,
    funcs: Funcs,
    steps: Vec<Step>,
    /// Activations (one region per tensor, `max_batch` images each).
    acts: CudaSlice<i8>,
    acts_ptr: u64,
    /// Raw pixels of up to `max_batch` images.
    pixels: CudaSlice<u8>,
    pixels_ptr: u64,
    input_off: usize,
    output_off: usize,
    input_chw: (usize, usize, usize),
    input_len: usize,
    output_len: usize,
    max_batch: usize,
    host_out: Vec<i8>,
    /// Page-locked copy of the pixels, in chunks whose DMA overlaps the host-side copy into it
    /// (`None`, the default: plain pageable copies). Off by default because on the H100 host it
    /// was measured no faster: ResNet-18 b1024 3.18 ms pinned vs 3.07 ms pageable, the copy
    /// bound by the host-side memcpy rather than the DMA.
    staging: Option<PinnedHostSlice<u8>>,
    /// Whether conv/fc use the tensor-core kernels where they apply (sm_80+).
    tensor_cores: bool,
    /// Test hook: this [`MMA_TILES`] entry instead of the automatic pick, where it applies.
    forced_tile: Option<usize>,
    /// Whether adds are fused into the conv before them where possible.
    fuse_adds: bool,
    /// Multiprocessors: the tile choice aims at one full wave of blocks.
    sms: usize,
    /// Images of the last [`CudaModel::load`] still in the pixel buffer (0: none).
    loaded: usize,
    /// The whole forward captured as a CUDA graph, per batch size, replayed by later runs
    /// (one launch instead of one per op); `None` when graphs are off.
    graphs: Option<Vec<(usize, CudaGraph)>>,
    device_bytes: usize,
    compute_capability: (i32, i32),
}

/// Batch sizes whose captured forward graphs a model keeps.
const MAX_GRAPHS: usize = 8;

/// Bytes per chunk of the staged host→device pixel copy.
const STAGE_CHUNK: usize = 1 << 18;

/// Labels and end events of the launches of one profiled run.
type Marks = Vec<(String, CudaEvent)>;

fn rq_words(bias: i32, m0: i32, shift: i32) -> [i32; 4] {
    // n = 31 − shift, shift clamped to [−31, 30] as requant.rs does.
    [bias, m0, 31 - shift.clamp(-31, 30), 0]
}

/// Packs `[rows][taps][cin]` int8 weights as `[rows][taps][cin_words]` int32 words
/// (little-endian groups of 4, zero-padded channels).
fn pack_weights(w: &[i8], rows: usize, taps: usize, cin: usize) -> (Vec<i32>, usize) {
    let cin_words = cin.div_ceil(4);
    let mut out = vec![0i32; (rows * taps * cin_words).max(1)];
    for r in 0..rows {
        for t in 0..taps {
            let src = &w[(r * taps + t) * cin..][..cin];
            let dst = &mut out[(r * taps + t) * cin_words..][..cin_words];
            for (word, chunk) in dst.iter_mut().zip(src.chunks(4)) {
                let mut b = [0u8; 4];
                for (d, &s) in b.iter_mut().zip(chunk) {
                    *d = s as u8;
                }
                *word = i32::from_le_bytes(b);
            }
        }
    }
    (out, cin_words)
}

fn to_i32(v: usize) -> Result<i32> {
    i32::try_from(v)
        .map_err(|_| CudaError::Driver(DriverError(sys::CUresult::CUDA_ERROR_INVALID_VALUE)))
}

fn grid_stride(total: usize) -> LaunchConfig {
    let blocks = (total as u64).div_ceil(THREADS as u64).clamp(1, MAX_BLOCKS) as u32;
    LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
}

impl CudaModel {
    /// Uploads `model` to device `ordinal`, compiles the kernels (once per process and
    /// architecture) and plans activation buffers for up to `max_batch` images.
    pub fn new(model: &Model, ordinal: usize, max_batch: usize) -> Result<CudaModel> {
        let ctx =
            CudaContext::new(ordinal).map_err(|error| CudaError::NoDevice { ordinal, error })?;
        // One stream, no cross-stream use: no per-buffer event tracking needed.
        // SAFETY: every buffer of this model is used only on `stream`, in order.
        unsafe { ctx.disable_event_tracking() };
        let cc = ctx.compute_capability()?;
        if cc < (7, 5) {
            return Err(CudaError::Unsupported {
                compute_capability: cc,
            });
        }
        if max_batch == 0 {
            return Err(CudaError::BadMaxBatch { max_batch });
        }
        let limit = i32::MAX as usize;
        for t in model.tensors() {
            if t.len().checked_mul(max_batch).is_none_or(|n| n > limit) {
                return Err(CudaError::BadMaxBatch { max_batch });
            }
        }
        let layout = plan::plan(model, max_batch).ok_or(CudaError::BadMaxBatch { max_batch })?;
        let input_len = model.input_len();
        let output_len = model.output_len();

        // Device memory needed: activations, pixels, constants.
        let mut const_bytes = 0usize;
        for o in model.ops() {
            const_bytes += o.weights.len() + 3 + 16 * o.bias.len() + 4 * 256;
        }
        let needed = layout.total + input_len * max_batch + const_bytes;
        let (free, _total) = ctx.mem_get_info()?;
        if needed > free {
            return Err(CudaError::OutOfMemory { needed, free });
        }

        let ptx = cached_ptx(&format!("compute_{}{}", cc.0, cc.1))?;
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
        let sms = ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?
            .max(1) as usize;
        let funcs = Funcs {
            input: module.load_function("input_u8_to_hwc")?,
            conv: module.load_function("conv2d_dp4a")?,
            mma,
            fc_warp: module.load_function("fc_warp")?,
            max_pool: module.load_function("max_pool")?,
            avg_pool: module.load_function("avg_pool")?,
            add: module.load_function("add_requant")?,
        };
        // Its own stream: the legacy default stream cannot be captured into a CUDA graph.
        let stream = ctx.new_stream()?;
        let off = |t: u16| -> Result<usize> {
            layout
                .offsets
                .get(t as usize)
                .copied()
                .flatten()
                .ok_or(CudaError::Driver(DriverError(
                    sys::CUresult::CUDA_ERROR_INVALID_VALUE,
                )))
        };
        let tensor = |t: u16| {
            model.tensor(t).ok_or(CudaError::Driver(DriverError(
                sys::CUresult::CUDA_ERROR_INVALID_VALUE,
            )))
        };

        // Readers per tensor (the model output counts one): an add can be fused into the conv
        // before it only if the conv's output has no other reader.
        let mut readers = vec![0usize; model.num_tensors()];
        for o in model.ops() {
            for t in [Some(o.input0), o.input1].into_iter().flatten() {
                if let Some(r) = readers.get_mut(t as usize) {
                    *r += 1;
                }
            }
        }
        if let Some(r) = readers.get_mut(model.output_tensor() as usize) {
            *r += 1;
        }
        let region = |t: u16| -> Result<std::ops::Range<usize>> {
            let o = off(t)?;
            Ok(o..o + tensor(t)?.len() * max_batch)
        };
        let disjoint = |a: &std::ops::Range<usize>, b: &std::ops::Range<usize>| {
            a.end <= b.start || b.end <= a.start
        };
        // (output, input) of the previous op when it is a conv/fc.
        let mut prev_dense: Option<(u16, u16)> = None;
        let mut steps = Vec::with_capacity(model.num_ops());
        for o in model.ops() {
            let tin = tensor(o.input0)?;
            let tout = tensor(o.output)?;
            let q = Quant {
                zout: tout.zero_point,
                act_min: o.act_min,
                act_max: o.act_max,
            };
            let step = match o.kind {
                OpKind::Conv2d | OpKind::FullyConnected => {
                    let fc = o.kind == OpKind::FullyConnected;
                    let (h, w, cin) = if fc {
                        (1, 1, tin.len())
                    } else {
                        (tin.h as usize, tin.w as usize, tin.c as usize)
                    };
                    let (ho, wo, cout) = if fc {
                        (1, 1, tout.len())
                    } else {
                        (tout.h as usize, tout.w as usize, tout.c as usize)
                    };
                    let (kh, kw) = if fc {
                        (1, 1)
                    } else {
                        (o.kernel_h as usize, o.kernel_w as usize)
                    };
                    let (wp, cin_words) = pack_weights(o.weights, cout, kh * kw, cin);
                    let mut rq = Vec::with_capacity(4 * cout);
                    for c in 0..cout {
                        rq.extend_from_slice(&rq_words(
                            o.bias.get(c),
                            o.multipliers.get(c),
                            o.shifts.get(c),
                        ));
                    }
                    let zin = tin.zero_point.clamp(-128, 127) as i8;
                    let padv: Vec<i8> = (0..cin.max(1))
                        .map(|c| o.pad_values.get(c).copied().unwrap_or(zin))
                        .collect();
                    let (wp, padv) = (stream.clone_htod(&wp)?, stream.clone_htod(&padv)?);
                    // The direct tensor-core tiles read 16-byte pieces of weights and pad bytes.
                    let aligned16 = {
                        let (a, _s0) = wp.device_ptr(&stream);
                        let (b, _s1) = padv.device_ptr(&stream);
                        (a | b) % 16 == 0
                    };
                    Step::Dense(Dense {
                        fc,
                        x: off(o.input0)?,
                        y: off(o.output)?,
                        w: wp,
                        rq: stream.clone_htod(&rq)?,
                        padv,
                        aligned16,
                        h: to_i32(h)?,
                        w_in: to_i32(w)?,
                        cin: to_i32(cin)?,
                        ho: to_i32(ho)?,
                        wo: to_i32(wo)?,
                        cout: to_i32(cout)?,
                        kh: to_i32(kh)?,
                        kw: to_i32(kw)?,
                        stride: if fc { 1 } else { o.stride as i32 },
                        pad: if fc { 0 } else { o.pad as i32 },
                        cin_words: to_i32(cin_words)?,
                        q,
                    })
                }
                OpKind::MaxPool | OpKind::AvgPool => {
                    let avg = o.kind == OpKind::AvgPool;
                    let (m0, n) = if avg {
                        let r = rq_words(0, o.multipliers.get(0), o.shifts.get(0));
                        (r[1], r[2])
                    } else {
                        (0, 1)
                    };
                    Step::Pool(Pool {
                        avg,
                        x: off(o.input0)?,
                        y: off(o.output)?,
                        h: tin.h as i32,
                        w: tin.w as i32,
                        c: tin.c as i32,
                        ho: tout.h as i32,
                        wo: tout.w as i32,
                        kh: o.kernel_h as i32,
                        kw: o.kernel_w as i32,
                        stride: o.stride as i32,
                        zin: tin.zero_point,
                        m0,
                        n,
                        q,
                    })
                }
                OpKind::Add => {
                    let t1 = o.input1.ok_or(CudaError::Driver(DriverError(
                        sys::CUresult::CUDA_ERROR_INVALID_VALUE,
                    )))?;
                    let tin1 = tensor(t1)?;
                    // Fusable into the previous conv: it writes one of our inputs that nothing
                    // else reads, and our output shares memory with neither the conv's input
                    // nor the other input (plan.rs keeps the conv's input alive until here).
                    let mut fuse = None;
                    if let Some((d_out, d_in)) = prev_dense {
                        if (o.input0 == d_out || t1 == d_out) && readers[d_out as usize] == 1 {
                            let res = if o.input0 == d_out { t1 } else { o.input0 };
                            let y = region(o.output)?;
                            if disjoint(&y, &region(d_in)?) && disjoint(&y, &region(res)?) {
                                fuse = Some(o.input0 == d_out);
                            }
                        }
                    }
                    Step::Add(Add {
                        fuse,
                        a: off(o.input0)?,
                        b: off(t1)?,
                        y: off(o.output)?,
                        len: tout.len(),
                        z0: tin.zero_point,
                        m0: o.multipliers.get(0),
                        z1: tin1.zero_point,
                        m1: o.multipliers.get(1),
                        n: o.shifts.get(0).clamp(1, 62),
                        q,
                    })
                }
            };
            prev_dense = match step {
                Step::Dense(_) => Some((o.output, o.input0)),
                _ => None,
            };
            steps.push(step);
        }

        let acts = stream.alloc_zeros::<i8>(layout.total.max(1))?;
        let pixels = stream.alloc_zeros::<u8>((input_len * max_batch).max(1))?;
        let acts_ptr = {
            let (p, _sync) = acts.device_ptr(&stream);
            p
        };
        let pixels_ptr = {
            let (p, _sync) = pixels.device_ptr(&stream);
            p
        };
        stream.synchronize()?;
        Ok(CudaModel {
            input_off: off(model.input_tensor())?,
            output_off: off(model.output_tensor())?,
            input_chw: model.input_shape(),
            stream,
            _module: module,
            funcs,
            steps,
            acts,
            acts_ptr,
            pixels,
            pixels_ptr,
            input_len,
            output_len,
            max_batch,
            host_out: vec![0; output_len * max_batch],
            staging: None,
            tensor_cores: cc >= (8, 0),
            forced_tile: None,
            fuse_adds: true,
            sms,
            loaded: 0,
            graphs: Some(Vec::new()),
            device_bytes: needed,
            compute_capability: cc,
        })
    }

    /// The largest batch `run` accepts.
    pub fn max_batch(&self) -> usize {
        self.max_batch
    }

    /// Bytes per image of input.
    pub fn input_len(&self) -> usize {
        self.input_len
    }

    /// Logits per image.
    pub fn output_len(&self) -> usize {
        self.output_len
    }

    /// Device memory the model holds (approximate upper bound, bytes).
    pub fn device_bytes(&self) -> usize {
        self.device_bytes
    }

    /// The device's compute capability (major, minor).
    pub fn compute_capability(&self) -> (i32, i32) {
        self.compute_capability
    }

    /// Turns the tensor-core conv kernels on (the default on sm_80+) or off (every conv and fc
    /// then runs the dp4a kernel): for tests and benchmarks of both paths. No effect below sm_80.
    pub fn set_tensor_cores(&mut self, on: bool) {
        self.tensor_cores = on && !self.funcs.mma.is_empty();
    }

    /// Test hook: every conv/fc that the tensor cores take runs with the tile kernel `name` (a
    /// `conv_mma_*` entry of [`KERNEL_NAMES`]) where it applies (gather tiles for C_in % 16 ≠ 0,
    /// direct tiles otherwise), instead of the automatic pick; `None` restores the pick.
    /// Returns whether `name` is a tile kernel this device has.
    #[doc(hidden)]
    pub fn force_mma_tile(&mut self, name: Option<&str>) -> bool {
        self.forced_tile = name.and_then(|n| self.funcs.mma.iter().position(|t| t.0.name == n));
        name.is_none() || self.forced_tile.is_some()
    }

    /// Benchmark hook: fuse each residual add into the tensor-core conv before it (the default)
    /// or run it as its own kernel.
    #[doc(hidden)]
    pub fn set_fused_adds(&mut self, on: bool) {
        self.fuse_adds = on;
    }

    /// Turns the page-locked staging of the pixel copy on or off (the default: a plain
    /// pageable copy, which measured as fast): for benchmarks and hosts where DMA bound.
    pub fn set_pinned_staging(&mut self, on: bool) -> Result<()> {
        if on && self.staging.is_none() {
            let ctx = self.stream.context();
            // SAFETY: the staging buffer is only written by `copy_in` before its copies are
            // queued, and every run ends with a stream synchronisation.
            self.staging =
                Some(unsafe { ctx.alloc_pinned::<u8>((self.input_len * self.max_batch).max(1)) }?);
        } else if !on {
            self.staging = None;
        }
        Ok(())
    }

    /// Runs `pixels` like [`CudaModel::run`] and times every step on the device with events:
    /// `(label, milliseconds)` for the pixel copy in, the input conversion, each op (its kernel
    /// named) and the logits copy out.
    pub fn profile(&mut self, pixels: &[u8]) -> Result<Vec<(String, f32)>> {
        let batch = self.batch_of(pixels.len())?;
        let ctx = self.stream.context().clone();
        let timed = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
        let start = ctx.new_event(timed)?;
        start.record(&self.stream)?;
        let mut marks: Marks = Vec::new();
        self.copy_in(pixels, batch)?;
        marks.push(("copy pixels in".into(), self.stream.record_event(timed)?));
        self.enqueue(batch, Some(&mut marks))?;
        self.fill_host_out(batch * self.output_len, |m, out| m.copy_out(out))?;
        marks.push(("copy logits out".into(), self.stream.record_event(timed)?));
        self.stream.synchronize()?;
        let mut prev = &start;
        let mut times = Vec::with_capacity(marks.len());
        for (label, ev) in &marks {
            times.push((label.clone(), prev.elapsed_ms(ev)?));
            prev = ev;
        }
        Ok(times)
    }

    /// Images in `pixels`, or the typed error.
    pub fn batch_of(&self, pixels: usize) -> Result<usize> {
        let n = self.input_len;
        if pixels == 0 || !pixels.is_multiple_of(n) {
            return Err(CudaError::InputLength {
                expected: n,
                got: pixels,
            });
        }
        let batch = pixels / n;
        if batch > self.max_batch {
            return Err(CudaError::BatchTooLarge {
                batch,
                max: self.max_batch,
            });
        }
        Ok(batch)
    }

    /// Runs `pixels` (1..=max_batch raw u8 images, planar C×H×W each, as [`Model::run`] takes
    /// them); returns `batch · output_len()` logits, the same bytes as [`Model::run`].
    pub fn run(&mut self, pixels: &[u8]) -> Result<&[i8]> {
        let batch = self.batch_of(pixels.len())?;
        self.fill_host_out(batch * self.output_len, |m, out| m.run_into(pixels, out))
    }

    /// Fills the first `n` bytes of the model's host logits buffer with `fill` (which also
    /// needs the model, hence the buffer is lent out meanwhile) and returns them.
    fn fill_host_out(
        &mut self,
        n: usize,
        fill: impl FnOnce(&mut Self, &mut [i8]) -> Result<()>,
    ) -> Result<&[i8]> {
        let mut out = std::mem::take(&mut self.host_out);
        let r = fill(self, &mut out[..n]);
        self.host_out = out;
        r?;
        Ok(&self.host_out[..n])
    }

    /// [`CudaModel::run`] writing the logits into `out` (exactly `batch · output_len()` bytes).
    pub fn run_into(&mut self, pixels: &[u8], out: &mut [i8]) -> Result<()> {
        let batch = self.batch_of(pixels.len())?;
        let n_out = batch * self.output_len;
        if out.len() != n_out {
            return Err(CudaError::OutputLength {
                expected: n_out,
                got: out.len(),
            });
        }
        self.loaded = 0;
        self.copy_in(pixels, batch)?;
        self.forward(batch)?;
        self.copy_out(out)?;
        self.stream.synchronize()?;
        Ok(())
    }

    /// Copies `pixels` to the device and keeps them there for [`CudaModel::run_loaded`];
    /// returns the batch. With the two, images cross the bus once and the model runs on them
    /// as often as wanted: what GPU float benchmarks time (a batch already on the device).
    pub fn load(&mut self, pixels: &[u8]) -> Result<usize> {
        let batch = self.batch_of(pixels.len())?;
        self.copy_in(pixels, batch)?;
        self.stream.synchronize()?;
        self.loaded = batch;
        Ok(batch)
    }

    /// Runs the model on the loaded images and waits for it; the logits stay on the device
    /// (the same bytes `run` would return for those images).
    pub fn run_loaded(&mut self) -> Result<()> {
        if self.loaded == 0 {
            return Err(CudaError::NothingLoaded);
        }
        self.forward(self.loaded)?;
        self.stream.synchronize()?;
        Ok(())
    }

    /// Turns the replay of captured CUDA graphs on (the default) or off (every op launched
    /// one by one, as `profile` does); turning them off drops the captured graphs.
    pub fn set_cuda_graphs(&mut self, on: bool) {
        self.graphs = on.then(|| self.graphs.take().unwrap_or_default());
    }

    /// Queues the forward of `batch` images: the captured graph for this batch size, captured
    /// now if it is the first run at this size.
    fn forward(&mut self, batch: usize) -> Result<()> {
        let Some(mut graphs) = self.graphs.take() else {
            return self.enqueue(batch, None);
        };
        let r = self.forward_graph(batch, &mut graphs);
        self.graphs = Some(graphs);
        r
    }

    fn forward_graph(&self, batch: usize, graphs: &mut Vec<(usize, CudaGraph)>) -> Result<()> {
        if let Some((_, g)) = graphs.iter().find(|(b, _)| *b == batch) {
            g.launch()?;
            return Ok(());
        }
        // Thread-local capture: other threads' CUDA calls (other models) are not affected.
        let mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
        self.stream.begin_capture(mode)?;
        let queued = self.enqueue(batch, None);
        let captured = self.stream.end_capture(sys::CUgraphInstantiate_flags(0));
        queued?;
        let Some(graph) = captured? else {
            // Nothing was captured (cannot happen: the forward launches at least one kernel).
            return self.enqueue(batch, None);
        };
        graph.launch()?;
        // A few sizes at most in practice; bound the cache anyway (each graph holds the
        // launch parameters of every op, a few KB).
        if graphs.len() >= MAX_GRAPHS {
            graphs.remove(0);
        }
        graphs.push((batch, graph));
        Ok(())
    }

    /// The logits of the last [`CudaModel::run_loaded`], copied to the host.
    pub fn read_logits(&mut self) -> Result<&[i8]> {
        if self.loaded == 0 {
            return Err(CudaError::NothingLoaded);
        }
        self.fill_host_out(self.loaded * self.output_len, |m, out| {
            m.copy_out(out)?;
            Ok(m.stream.synchronize()?)
        })
    }

    /// Queues the copy of `pixels` (checked: `batch` images) to the device.
    fn copy_in(&mut self, pixels: &[u8], batch: usize) -> Result<()> {
        let too_large = CudaError::BatchTooLarge {
            batch,
            max: self.max_batch,
        };
        if pixels.len() > self.pixels.len() {
            return Err(too_large);
        }
        let Some(staging) = self.staging.as_mut() else {
            let mut dst = self.pixels.try_slice_mut(..pixels.len()).ok_or(too_large)?;
            self.stream.memcpy_htod(pixels, &mut dst)?;
            return Ok(());
        };
        if pixels.len() > staging.len() {
            return Err(too_large);
        }
        // Waits for the staging buffer's last use (none in flight: every run synchronises).
        let host = &mut staging.as_mut_slice()?[..pixels.len()];
        for (i, (src, dst)) in pixels
            .chunks(STAGE_CHUNK)
            .zip(host.chunks_mut(STAGE_CHUNK))
            .enumerate()
        {
            dst.copy_from_slice(src);
            let off = (i * STAGE_CHUNK) as u64;
            // SAFETY: `dst` is page-locked, written above and not touched again before the
            // run's final synchronisation; the device region holds `pixels.len()` bytes. The
            // chunk's DMA overlaps the writing of the next chunk. (Four threads writing the
            // staging buffer were no faster on an H100 host.)
            unsafe {
                result::memcpy_htod_async(self.pixels_ptr + off, dst, self.stream.cu_stream())
            }?;
        }
        Ok(())
    }

    /// Queues the copy of the logits (`out.len()` bytes) to `out`.
    fn copy_out(&mut self, out: &mut [i8]) -> Result<()> {
        let src = self
            .acts
            .try_slice(self.output_off..self.output_off + out.len())
            .ok_or(CudaError::OutputLength {
                expected: out.len(),
                got: out.len(),
            })?;
        self.stream.memcpy_dtoh(&src, out)?;
        Ok(())
    }

    /// Launches the input conversion and every op for `batch` images (no synchronisation).
    /// With `marks`, records a timing event after each launch.
    fn enqueue(&self, batch: usize, mut marks: Option<&mut Marks>) -> Result<()> {
        let timed = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
        let mut mark = |label: &dyn Fn() -> String| -> Result<()> {
            if let Some(m) = marks.as_mut() {
                m.push((label(), self.stream.record_event(timed)?));
            }
            Ok(())
        };
        let s = &self.stream;
        let base = self.acts_ptr;
        let ptr = |off: usize| base + off as u64;
        let (c, h, w) = self.input_chw;
        {
            let total = (batch * self.input_len) as i64;
            let (c, hw) = (c as i32, (h * w) as i32);
            let x = ptr(self.input_off);
            let mut l = s.launch_builder(&self.funcs.input);
            l.arg(&self.pixels_ptr).arg(&x).arg(&total).arg(&c).arg(&hw);
            // SAFETY: pointers and sizes come from the plan (regions hold max_batch ≥ batch
            // images); the kernel's signature matches these arguments.
            unsafe { l.launch(grid_stride(total as usize)) }?;
            mark(&|| "input u8 -> hwc".into())?;
        }
        let mut fused_add = false;
        for (i, step) in self.steps.iter().enumerate() {
            match step {
                Step::Dense(d) => {
                    let next_add = match self.steps.get(i + 1) {
                        Some(Step::Add(a)) if a.fuse.is_some() && self.fuse_adds => Some(a),
                        _ => None,
                    };
                    let (kernel, fused) =
                        self.launch_dense(d, batch, ptr(d.x), ptr(d.y), next_add)?;
                    fused_add = fused;
                    mark(&|| {
                        let kind = if d.fc { "fc" } else { "conv" };
                        let add = if fused { " + add" } else { "" };
                        format!(
                            "{kind} {}x{} s{} {}->{} {}x{}{add} [{kernel}]",
                            d.kh, d.kw, d.stride, d.cin, d.cout, d.ho, d.wo
                        )
                    })?;
                }
                Step::Add(_) if fused_add => fused_add = false,
                Step::Pool(p) => {
                    let (x, y) = (ptr(p.x), ptr(p.y));
                    let total = (batch * p.ho as usize * p.wo as usize * p.c as usize) as i64;
                    let f = if p.avg {
                        &self.funcs.avg_pool
                    } else {
                        &self.funcs.max_pool
                    };
                    let mut l = s.launch_builder(f);
                    l.arg(&x).arg(&y).arg(&total);
                    l.arg(&p.h).arg(&p.w).arg(&p.c).arg(&p.ho).arg(&p.wo);
                    l.arg(&p.kh).arg(&p.kw).arg(&p.stride);
                    if p.avg {
                        l.arg(&p.zin).arg(&p.m0).arg(&p.n).arg(&p.q.zout);
                    }
                    l.arg(&p.q.act_min).arg(&p.q.act_max);
                    // SAFETY: as above.
                    unsafe { l.launch(grid_stride(total as usize)) }?;
                    mark(&|| if p.avg { "avg_pool" } else { "max_pool" }.into())?;
                }
                Step::Add(a) => {
                    let (x0, x1, y) = (ptr(a.a), ptr(a.b), ptr(a.y));
                    let total = (batch * a.len) as i64;
                    let mut l = s.launch_builder(&self.funcs.add);
                    l.arg(&x0).arg(&x1).arg(&y).arg(&total);
                    l.arg(&a.z0).arg(&a.m0).arg(&a.z1).arg(&a.m1).arg(&a.n);
                    l.arg(&a.q.zout).arg(&a.q.act_min).arg(&a.q.act_max);
                    // SAFETY: as above (16-byte steps: regions are REGION_ALIGN-aligned).
                    unsafe { l.launch(grid_stride((total as usize).div_ceil(16))) }?;
                    mark(&|| "add".into())?;
                }
            }
        }
        Ok(())
    }

    /// The tensor-core tile for a conv/fc of `m` output pixels, or `None` for the dp4a kernel
    /// (tensor cores off or absent). C_in % 16 == 0 loads 16-byte pieces of taps directly;
    /// other channel counts gather words. Of the tiles that fit C_out, the largest whose grid
    /// has at least one block per two multiprocessors, else the smallest. (H100, ResNet-18 at
    /// b256: a 128×128 grid of 128 blocks on 132 SMs still ran the 512-channel convs 2.7×
    /// faster than 128×64 tiles: the larger tile's reuse outweighs the idle SMs.)
    fn mma_tile(&self, d: &Dense, m: usize) -> Option<&(MmaTile, CudaFunction)> {
        if !self.tensor_cores {
            return None;
        }
        let gather = d.cin % 16 != 0 || !d.aligned16;
        if let Some(t) = self.forced_tile.and_then(|i| self.funcs.mma.get(i)) {
            if t.0.gather == gather {
                return Some(t);
            }
        }
        let n = d.cout as usize;
        let mut pick = None;
        for t in self.funcs.mma.iter() {
            if !t.0.auto || t.0.gather != gather || (t.0.bn > 64 && n <= 64) {
                continue;
            }
            pick = Some(t);
            if 2 * m.div_ceil(t.0.bm) * n.div_ceil(t.0.bn) >= self.sms {
                break;
            }
        }
        pick
    }

    /// Launches one conv/fc, with the add `add` that follows it fused into its epilogue where
    /// the kernel can (a tensor-core tile, C_out % 16 == 0); returns the kernel's name and
    /// whether the add was fused.
    fn launch_dense(
        &self,
        d: &Dense,
        batch: usize,
        x: u64,
        y: u64,
        add: Option<&Add>,
    ) -> Result<(&'static str, bool)> {
        let s = &self.stream;
        let (w, rq, padv) = {
            let (w, _a) = d.w.device_ptr(s);
            let (rq, _b) = d.rq.device_ptr(s);
            let (p, _c) = d.padv.device_ptr(s);
            (w, rq, p)
        };
        if d.fc && batch <= FC_WARP_MAX_BATCH {
            let b = batch as i32;
            let k_words = d.cin_words;
            let warps = batch as u64 * d.cout as u64;
            let blocks = (warps * 32).div_ceil(THREADS as u64) as u32;
            let cfg = LaunchConfig {
                grid_dim: (blocks, 1, 1),
                block_dim: (THREADS, 1, 1),
                shared_mem_bytes: 0,
            };
            let mut l = s.launch_builder(&self.funcs.fc_warp);
            l.arg(&x).arg(&y).arg(&w).arg(&rq);
            l.arg(&b).arg(&d.cin).arg(&k_words).arg(&d.cout);
            l.arg(&d.q.zout).arg(&d.q.act_min).arg(&d.q.act_max);
            // SAFETY: pointers and sizes come from the plan and the uploaded constants.
            unsafe { l.launch(cfg) }?;
            return Ok(("fc_warp", false));
        }
        let m = batch * (d.ho * d.wo) as usize; // ≤ 2^31 − 1: checked against max_batch
        let m32 = m as i32;
        let tile = self.mma_tile(d, m);
        let fuse = add.filter(|_| tile.is_some() && d.cout % 16 == 0);
        let (name, f, cfg) = match tile {
            Some((t, f)) => (
                t.name,
                f,
                LaunchConfig {
                    grid_dim: (
                        m.div_ceil(t.bm) as u32,
                        (d.cout as usize).div_ceil(t.bn) as u32,
                        1,
                    ),
                    block_dim: (t.threads, 1, 1),
                    shared_mem_bytes: t.smem(),
                },
            ),
            None => (
                "conv2d_dp4a",
                &self.funcs.conv,
                LaunchConfig {
                    grid_dim: (
                        m.div_ceil(TILE_M) as u32,
                        (d.cout as usize).div_ceil(TILE_N) as u32,
                        1,
                    ),
                    block_dim: (THREADS, 1, 1),
                    shared_mem_bytes: 0,
                },
            ),
        };
        // Both kernels take the same arguments.
        let mut l = s.launch_builder(f);
        let y = fuse.map_or(y, |a| self.acts_ptr + a.y as u64);
        l.arg(&x).arg(&y).arg(&w).arg(&rq).arg(&padv);
        l.arg(&m32)
            .arg(&d.h)
            .arg(&d.w_in)
            .arg(&d.cin)
            .arg(&d.ho)
            .arg(&d.wo)
            .arg(&d.cout);
        l.arg(&d.kh)
            .arg(&d.kw)
            .arg(&d.stride)
            .arg(&d.pad)
            .arg(&d.cin_words);
        l.arg(&d.q.zout).arg(&d.q.act_min).arg(&d.q.act_max);
        // The mma kernels' fused add: residual pointer (0: none), (z, m) of the residual and
        // of the conv's side, then the add's shift, zero point and clamp.
        let fz = Add::default_fused();
        let (res, rz, rm, cz, cm, an, az, amin, amax) = match fuse {
            Some(a) => {
                let (r, rz, rm, cz, cm) = if a.fuse == Some(true) {
                    (a.b, a.z1, a.m1, a.z0, a.m0)
                } else {
                    (a.a, a.z0, a.m0, a.z1, a.m1)
                };
                let r = self.acts_ptr + r as u64;
                (r, rz, rm, cz, cm, a.n, a.q.zout, a.q.act_min, a.q.act_max)
            }
            None => fz,
        };
        if tile.is_some() {
            l.arg(&res).arg(&rz).arg(&rm).arg(&cz).arg(&cm);
            l.arg(&an).arg(&az).arg(&amin).arg(&amax);
        }
        // SAFETY: pointers and sizes come from the plan and the uploaded constants; the mma
        // kernels' 16-byte loads need C_in % 16 == 0 (checked by `mma_tile`), 16-byte aligned
        // regions (REGION_ALIGN) and constants (driver allocations are 256-byte aligned).
        unsafe { l.launch(cfg) }?;
        Ok((name, fuse.is_some()))
    }
}
