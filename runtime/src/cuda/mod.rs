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
//!   for the device's compute capability and the model's rounding (single or TensorFlow Lite's
//!   double, a compile-time define: no run-time branch in any epilogue, the single rounding's
//!   the code it was) the first time a process needs that pair; the PTX is cached for the life
//!   of the process and loaded into each model's context.
//! - **Plan once.** Activations live in one device buffer: each tensor gets a region for
//!   `max_batch` images (batch-major, HWC per image), placed first-fit so that tensors with
//!   overlapping lifetimes never share memory — the CPU arena's rule, without the scratch the
//!   GPU kernels do not need (see `plan.rs`).
//! - **Run.** Copy the input in, convert it to int8 HWC on the device as the model's input
//!   encoding says (planar u8 pixels, u8 HWC or the int8 tensor itself), run the forward on
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
//! max_pool, avg_pool, tflite_avg_pool, depthwise_conv2d, pad, tflite_add and the
//! requantizing add (16 bytes per thread) are element-wise (one thread per output value),
//! softmax one thread per pixel (gemmlowp's fixed point, as `fixedpoint.rs`), reshape a copy.
//! Every window is FORMAT.md's: two strides, top/left padding, dilation.
//!
//! The driver library (`libcuda.so.1`) and NVRTC (`libnvrtc.so.13`) are linked dynamically, as
//! candle's CUDA build links them: a machine without them cannot start the binary. A machine
//! whose driver reports no device (or no device `ordinal`) gets [`CudaError::NoDevice`].

//!
//! Files: `lower.rs` decides what runs (ops → steps, constants repacked, which adds may fuse),
//! `plan.rs` where activations live, `upload.rs` copies constants to the device,
//! `kernels.rs` compiles and loads the `.cu` sources, `launch.rs` runs the steps (kernel
//! choice, grids, arguments), `graph.rs` captures and replays the forward, `transfer.rs`
//! copies pixels in and logits out; `emulate.rs` (tests) replays the dp4a kernel on the host.

#[cfg(test)]
mod emulate;
mod error;
mod graph;
mod kernels;
mod launch;
mod lower;
mod plan;
mod transfer;
mod upload;

use std::sync::Arc;

use cudarc::driver::{
    sys, CudaContext, CudaSlice, CudaStream, DevicePtr, DeviceRepr, PinnedHostSlice,
    ValidAsZeroBits,
};

use crate::format::InputEncoding;
use crate::Model;

pub use error::{CudaError, Result};
pub use kernels::{compile_ptx, KERNEL_NAMES, KERNEL_SOURCE};
pub use launch::FC_WARP_MAX_BATCH;

use graph::Graphs;
use kernels::Kernels;
use launch::Marks;
use plan::Layout;
use upload::DeviceStep;

/// A model uploaded to one GPU, with kernels compiled and activation buffers planned for up to
/// `max_batch` images.
pub struct CudaModel {
    stream: Arc<CudaStream>,
    kernels: Kernels,
    steps: Vec<DeviceStep>,
    /// Activations (one region per tensor, `max_batch` images each).
    acts: CudaSlice<i8>,
    acts_ptr: u64,
    /// Raw pixels of up to `max_batch` images.
    pixels: CudaSlice<u8>,
    pixels_ptr: u64,
    input_off: usize,
    output_off: usize,
    input_chw: (usize, usize, usize),
    input_encoding: InputEncoding,
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
    /// Test hook: this `kernels.mma` entry instead of the automatic pick, where it applies.
    forced_tile: Option<usize>,
    /// Whether adds are fused into the conv before them where possible.
    fuse_adds: bool,
    /// Multiprocessors: the tile choice aims at one full wave of blocks.
    sms: usize,
    /// Images of the last [`CudaModel::load`] still in the pixel buffer (0: none).
    loaded: usize,
    /// The whole forward captured as a CUDA graph, per batch size, replayed by later runs
    /// (one launch instead of one per op); `None` when graphs are off.
    graphs: Option<Graphs>,
    device_bytes: usize,
    compute_capability: (i32, i32),
}

/// The activation layout for `max_batch` images, or [`CudaError::BadMaxBatch`] when
/// `max_batch` is 0 or makes a tensor exceed the kernels' 32-bit index range.
fn layout(model: &Model, max_batch: usize) -> Result<Layout> {
    let bad = || CudaError::BadMaxBatch { max_batch };
    if max_batch == 0 {
        return Err(bad());
    }
    let limit = i32::MAX as usize;
    for t in model.tensors() {
        if t.len().checked_mul(max_batch).is_none_or(|n| n > limit) {
            return Err(bad());
        }
    }
    plan::plan(model, max_batch).ok_or_else(bad)
}

/// A device buffer of `len` zeros (at least one element) and its address.
fn zeroed<T: DeviceRepr + ValidAsZeroBits>(
    stream: &Arc<CudaStream>,
    len: usize,
) -> Result<(CudaSlice<T>, u64)> {
    let buf = stream.alloc_zeros::<T>(len.max(1))?;
    let ptr = buf.device_ptr(stream).0;
    Ok((buf, ptr))
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
        let layout = layout(model, max_batch)?;
        let needed = upload::device_bytes(model, &layout, max_batch);
        let (free, _total) = ctx.mem_get_info()?;
        if needed > free {
            return Err(CudaError::OutOfMemory { needed, free });
        }
        let kernels = Kernels::load(&ctx, cc, model.rounding())?;
        let sms = ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?
            .max(1) as usize;
        // Its own stream: the legacy default stream cannot be captured into a CUDA graph.
        let stream = ctx.new_stream()?;
        let steps = upload::upload(&stream, lower::lower(model, &layout, max_batch)?)?;
        let (input_len, output_len) = (model.input_len(), model.output_len());
        let (acts, acts_ptr) = zeroed::<i8>(&stream, layout.total)?;
        let (pixels, pixels_ptr) = zeroed::<u8>(&stream, input_len * max_batch)?;
        stream.synchronize()?;
        let offset = |t: u16| layout.offsets.get(t as usize).copied().flatten();
        Ok(CudaModel {
            input_off: offset(model.input_tensor()).ok_or_else(error::invalid)?,
            output_off: offset(model.output_tensor()).ok_or_else(error::invalid)?,
            input_chw: model.input_shape(),
            input_encoding: model.input_encoding(),
            stream,
            kernels,
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
        self.tensor_cores = on && !self.kernels.mma.is_empty();
        self.drop_graphs();
    }

    /// Test hook: every conv/fc that the tensor cores take runs with the tile kernel `name` (a
    /// `conv_mma_*` entry of [`KERNEL_NAMES`]) where it applies (gather tiles for C_in % 16 ≠ 0,
    /// direct tiles otherwise), instead of the automatic pick; `None` restores the pick.
    /// Returns whether `name` is a tile kernel this device has.
    #[doc(hidden)]
    pub fn force_mma_tile(&mut self, name: Option<&str>) -> bool {
        self.forced_tile = name.and_then(|n| self.kernels.mma.iter().position(|t| t.0.name == n));
        self.drop_graphs();
        name.is_none() || self.forced_tile.is_some()
    }

    /// Benchmark hook: fuse each residual add into the tensor-core conv before it (the default)
    /// or run it as its own kernel.
    #[doc(hidden)]
    pub fn set_fused_adds(&mut self, on: bool) {
        self.fuse_adds = on;
        self.drop_graphs();
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

    /// Runs `pixels` (1..=max_batch inputs, each as [`Model::run`] takes it: the model's input
    /// encoding); returns `batch · output_len()` logits, the same bytes as [`Model::run`].
    pub fn run(&mut self, pixels: &[u8]) -> Result<&[i8]> {
        let batch = self.batch_of(pixels.len())?;
        self.fill_host_out(batch * self.output_len, |m, out| m.run_into(pixels, out))
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

    /// Runs any number of images (a positive multiple of `input_len()` bytes), `max_batch` at a
    /// time; returns all their logits, the same bytes as [`Model::run`] image by image.
    pub fn run_all(&mut self, pixels: &[u8]) -> Result<Vec<i8>> {
        let n = self.input_len;
        if pixels.is_empty() || !pixels.len().is_multiple_of(n) {
            return Err(CudaError::InputLength {
                expected: n,
                got: pixels.len(),
            });
        }
        let mut out = vec![0i8; pixels.len() / n * self.output_len];
        let per_chunk = self.max_batch * self.output_len;
        for (px, o) in pixels
            .chunks(self.max_batch * n)
            .zip(out.chunks_mut(per_chunk))
        {
            self.run_into(px, o)?;
        }
        Ok(out)
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
}
