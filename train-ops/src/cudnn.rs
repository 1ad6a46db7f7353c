//! cuDNN state shared by the convolution ops, on cuDNN's backend (graph) API: one handle per
//! (thread, device) bound to the candle device's stream, one growing workspace per (thread,
//! device), and one execution plan per convolution shape, direction and operand alignment,
//! built once. A call then only binds its three pointers (a variant pack) and executes.
//!
//! Why not the legacy `cudnnConvolutionForward` family: in cuDNN 9 those entry points
//! rebuild much of a plan on every call. Sampled on an H100 (pprof), they were 79% of the
//! host's time in a ResNet-18 bf16 b512 step and 56% in a LeNet f32 b512 step, so the host,
//! not the GPU, set the pace (NOTES §6).

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::c_void;
use std::rc::Rc;
use std::sync::Arc;

use candle_core::cuda_backend::cudarc::cudnn::{result, sys};
use candle_core::cuda_backend::cudarc::driver::{CudaSlice, CudaStream};
use candle_core::cuda_backend::{CudaDevice, DeviceId};
use candle_core::{DType, Result};

use sys::cudnnBackendAttributeName_t as Attr;
use sys::cudnnBackendAttributeType_t as Ty;
use sys::cudnnBackendDescriptorType_t as Kind;

/// Geometry of one convolution in NCHW terms (the memory layout is the plan's) with a square kernel, stride and padding;
/// grouped when the weight reads `c_in / groups` channels (cuDNN's backend infers the groups
/// from the channel counts of x and w).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct ConvGeom {
    pub n: usize,
    pub c_in: usize,
    pub h: usize,
    pub w: usize,
    pub c_out: usize,
    pub groups: usize,
    pub k_h: usize,
    pub k_w: usize,
    pub stride: usize,
    pub padding: usize,
}

impl ConvGeom {
    pub fn out_h(&self) -> usize {
        (self.h + 2 * self.padding - self.k_h) / self.stride + 1
    }
    pub fn out_w(&self) -> usize {
        (self.w + 2 * self.padding - self.k_w) / self.stride + 1
    }
    pub fn x_elems(&self) -> usize {
        self.n * self.c_in * self.h * self.w
    }
    pub fn w_elems(&self) -> usize {
        self.c_out * (self.c_in / self.groups) * self.k_h * self.k_w
    }
    pub fn y_elems(&self) -> usize {
        self.n * self.c_out * self.out_h() * self.out_w()
    }
}

/// Which of the three convolutions: each reads two of (x, w, y) and writes the third.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Direction {
    /// y = conv(x, w).
    Forward,
    /// x = dx from y = dy and w.
    BackwardData,
    /// w = dw from x and y = dy.
    BackwardFilter,
}

/// One convolution to run: its shape and element type, and where its operands live. In
/// every direction `x` is the input (or its gradient), `w` the filter (or its gradient), `y`
/// the output (or its gradient), as device addresses.
pub(crate) struct Conv {
    pub dtype: DType,
    pub geom: ConvGeom,
    /// f32 only: TF32 tensor cores allowed.
    pub tf32: bool,
    /// NHWC input and output, `(K, R, S, C)` filter; otherwise NCHW and `(K, C, R, S)`.
    pub channels_last: bool,
    pub direction: Direction,
    pub x: u64,
    pub w: u64,
    pub y: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct PlanKey {
    device: DeviceId,
    dtype: DType,
    geom: ConvGeom,
    tf32: bool,
    channels_last: bool,
    direction: Direction,
    /// Byte alignment promised for x, w and y (a plan may use vector loads that need it).
    align: [u8; 3],
}

// cuDNN handles and descriptors are neither Send nor Sync, hence thread-local caches (as
// candle does for its own cuDNN handle).
thread_local! {
    static HANDLES: RefCell<HashMap<DeviceId, Rc<Handle>>> = RefCell::new(HashMap::new());
    static WORKSPACES: RefCell<HashMap<DeviceId, CudaSlice<u8>>> = RefCell::new(HashMap::new());
    static PLANS: RefCell<HashMap<PlanKey, Rc<Plan>>> = RefCell::new(HashMap::new());
}

/// A cuDNN handle whose work goes to one stream (kept alive with it).
struct Handle {
    raw: sys::cudnnHandle_t,
    _stream: Arc<CudaStream>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        // SAFETY: created by `create_handle` and used by nothing after this.
        let _ = unsafe { result::destroy_handle(self.raw) };
    }
}

fn handle(dev: &CudaDevice) -> Result<Rc<Handle>> {
    HANDLES.with(|h| {
        if let Some(c) = h.borrow().get(&dev.id()) {
            return Ok(c.clone());
        }
        let stream = dev.cuda_stream();
        stream.context().bind_to_thread().map_err(wrap)?;
        let raw = result::create_handle().map_err(|e| cudnn_error("cudnnCreate", e))?;
        let handle = Rc::new(Handle {
            raw,
            _stream: stream.clone(),
        });
        // SAFETY: a live handle and stream; the stream outlives the handle (kept above).
        unsafe { result::set_stream(raw, stream.cu_stream() as *mut _) }
            .map_err(|e| cudnn_error("cudnnSetStream", e))?;
        h.borrow_mut().insert(dev.id(), handle.clone());
        Ok(handle)
    })
}

fn wrap(e: impl std::error::Error + Send + Sync + 'static) -> candle_core::Error {
    candle_core::Error::wrap(e)
}

fn cudnn_error(what: &str, e: result::CudnnError) -> candle_core::Error {
    candle_core::Error::Msg(format!("cuDNN {what} failed: {e}"))
}

fn check(status: sys::cudnnStatus_t, what: &str) -> Result<()> {
    status.result().map_err(|e| cudnn_error(what, e))
}

/// A backend descriptor, destroyed on drop.
struct Desc(sys::cudnnBackendDescriptor_t);

impl Drop for Desc {
    fn drop(&mut self) {
        // SAFETY: created by cudnnBackendCreateDescriptor, destroyed once.
        let _ = unsafe { sys::cudnnBackendDestroyDescriptor(self.0) };
    }
}

impl Desc {
    fn new(kind: Kind) -> Result<Desc> {
        let mut raw = std::ptr::null_mut();
        // SAFETY: `raw` receives a new descriptor.
        check(
            unsafe { sys::cudnnBackendCreateDescriptor(kind, &mut raw) },
            "cudnnBackendCreateDescriptor",
        )?;
        Ok(Desc(raw))
    }

    /// Sets attribute `name` to `values`, whose element type cuDNN knows as `ty`.
    fn set<T>(&self, name: Attr, ty: Ty, values: &[T]) -> Result<()> {
        // SAFETY: `values` holds `len` elements of the type `ty` names (callers pair them).
        check(
            unsafe {
                sys::cudnnBackendSetAttribute(
                    self.0,
                    name,
                    ty,
                    values.len() as i64,
                    values.as_ptr() as *const c_void,
                )
            },
            "cudnnBackendSetAttribute",
        )
    }

    fn set_i64(&self, name: Attr, values: &[i64]) -> Result<()> {
        self.set(name, Ty::CUDNN_TYPE_INT64, values)
    }

    fn set_desc(&self, name: Attr, d: &Desc) -> Result<()> {
        self.set(name, Ty::CUDNN_TYPE_BACKEND_DESCRIPTOR, &[d.0])
    }

    fn finalize(self) -> Result<Desc> {
        // SAFETY: a live descriptor with its attributes set.
        check(
            unsafe { sys::cudnnBackendFinalize(self.0) },
            "cudnnBackendFinalize",
        )?;
        Ok(self)
    }

    /// Reads up to `requested` elements of attribute `name` into `out`; returns how many the
    /// attribute holds.
    ///
    /// # Safety
    /// `out` must have room for `requested` elements of the type `ty` names (null when
    /// `requested` is 0); descriptor elements must be created descriptors of the right kind.
    unsafe fn get(&self, name: Attr, ty: Ty, requested: i64, out: *mut c_void) -> Result<i64> {
        let mut n = 0i64;
        // SAFETY: the caller's contract.
        check(
            unsafe { sys::cudnnBackendGetAttribute(self.0, name, ty, requested, &mut n, out) },
            "cudnnBackendGetAttribute",
        )?;
        Ok(n.max(0))
    }

    /// Up to `N` values of attribute `name` (read as u32: cuDNN's enums are 32-bit).
    fn get_u32s<const N: usize>(&self, name: Attr, ty: Ty) -> Result<Vec<u32>> {
        let mut out = [0u32; N];
        // SAFETY: `out` has room for N 32-bit elements.
        let n = unsafe { self.get(name, ty, N as i64, out.as_mut_ptr() as *mut c_void)? };
        Ok(out[..(n as usize).min(N)].to_vec())
    }
}

/// A finalised execution plan, the descriptors it was built from, and its workspace size.
struct Plan {
    plan: Desc,
    workspace: usize,
    /// Tensors, convolution, operation, graph and engine config: alive as long as the plan.
    _parts: Vec<Desc>,
}

const X: i64 = 1;
const W: i64 = 2;
const Y: i64 = 3;

/// Runs `conv` on the device's stream; every element of the written operand is written.
///
/// # Safety
/// `conv.x`, `conv.w` and `conv.y` must address device buffers on `dev` of the sizes
/// `conv.geom` gives, in `conv.dtype` and the layout `conv.channels_last` names, alive until
/// the stream has run the convolution; the written one must not overlap the others.
pub(crate) unsafe fn run(dev: &CudaDevice, conv: &Conv) -> Result<()> {
    let handle = handle(dev)?;
    let align = [conv.x, conv.w, conv.y].map(|p| 1u8 << p.trailing_zeros().min(4));
    let key = PlanKey {
        device: dev.id(),
        dtype: conv.dtype,
        geom: conv.geom,
        tf32: conv.tf32,
        channels_last: conv.channels_last,
        direction: conv.direction,
        align,
    };
    let plan = match PLANS.with(|p| p.borrow().get(&key).cloned()) {
        Some(p) => p,
        None => {
            let p = Rc::new(build(&handle, &key)?);
            PLANS.with(|m| m.borrow_mut().insert(key, p.clone()));
            p
        }
    };
    with_workspace(dev, plan.workspace, |ws| {
        let pack = Desc::new(Kind::CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR)?;
        pack.set_i64(Attr::CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, &[X, W, Y])?;
        let ptrs = [conv.x, conv.w, conv.y].map(|p| p as *mut c_void);
        pack.set(
            Attr::CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
            Ty::CUDNN_TYPE_VOID_PTR,
            &ptrs,
        )?;
        pack.set(
            Attr::CUDNN_ATTR_VARIANT_PACK_WORKSPACE,
            Ty::CUDNN_TYPE_VOID_PTR,
            &[ws as *mut c_void],
        )?;
        let pack = pack.finalize()?;
        // SAFETY: the plan matches the operands (the caller's contract) and the workspace
        // holds `plan.workspace` bytes, reserved for this stream's work.
        check(
            unsafe { sys::cudnnBackendExecute(handle.raw, plan.plan.0, pack.0) },
            "cudnnBackendExecute",
        )
    })
}

/// A backend tensor descriptor: dims in (N, C, H, W) order, strides of the layout.
fn tensor(
    uid: i64,
    dtype: sys::cudnnDataType_t,
    dims: [i64; 4],
    nhwc: bool,
    align: u8,
) -> Result<Desc> {
    let [_, c, h, w] = dims;
    let strides = if nhwc {
        [h * w * c, 1, w * c, c]
    } else {
        [c * h * w, h * w, w, 1]
    };
    let t = Desc::new(Kind::CUDNN_BACKEND_TENSOR_DESCRIPTOR)?;
    t.set(
        Attr::CUDNN_ATTR_TENSOR_DATA_TYPE,
        Ty::CUDNN_TYPE_DATA_TYPE,
        &[dtype],
    )?;
    t.set_i64(Attr::CUDNN_ATTR_TENSOR_DIMENSIONS, &dims)?;
    t.set_i64(Attr::CUDNN_ATTR_TENSOR_STRIDES, &strides)?;
    t.set_i64(Attr::CUDNN_ATTR_TENSOR_UNIQUE_ID, &[uid])?;
    t.set_i64(Attr::CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, &[align as i64])?;
    t.finalize()
}

/// The operation graph of one convolution, cuDNN's heuristics over it, and the first engine
/// configuration that finalises into a plan and keeps the numerics asked for.
fn build(handle: &Handle, key: &PlanKey) -> Result<Plan> {
    let g = key.geom;
    let dtype = match key.dtype {
        DType::F32 => sys::cudnnDataType_t::CUDNN_DATA_FLOAT,
        DType::BF16 => sys::cudnnDataType_t::CUDNN_DATA_BFLOAT16,
        other => candle_core::bail!("conv2d: cuDNN path supports f32 and bf16, got {other:?}"),
    };
    // x, w and y, each in (N, C, H, W) order.
    let shapes = [
        [g.n, g.c_in, g.h, g.w],
        [g.c_out, g.c_in / g.groups, g.k_h, g.k_w],
        [g.n, g.c_out, g.out_h(), g.out_w()],
    ];
    let tensors = [X, W, Y]
        .into_iter()
        .zip(shapes)
        .zip(key.align)
        .map(|((uid, dims), align)| {
            tensor(uid, dtype, dims.map(|v| v as i64), key.channels_last, align)
        })
        .collect::<Result<Vec<_>>>()?;
    let conv = convolution(&g)?;
    let op = operation(key.direction, &tensors, &conv)?;
    let graph = Desc::new(Kind::CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR)?;
    graph.set(
        Attr::CUDNN_ATTR_OPERATIONGRAPH_HANDLE,
        Ty::CUDNN_TYPE_HANDLE,
        &[handle.raw],
    )?;
    graph.set_desc(Attr::CUDNN_ATTR_OPERATIONGRAPH_OPS, &op)?;
    let graph = graph.finalize()?;

    let mut parts = tensors;
    parts.extend([conv, op]);
    let mut why = Vec::new();
    for cfg in candidates(&graph, key, &mut why)? {
        let plan = match plan_of(handle, &cfg)?.finalize() {
            Ok(p) => p,
            Err(e) => {
                why.push(e.to_string());
                continue;
            }
        };
        let workspace = workspace_bytes(&plan)?;
        parts.push(graph);
        parts.push(cfg);
        return Ok(Plan {
            plan,
            workspace,
            _parts: parts,
        });
    }
    why.dedup();
    candle_core::bail!(
        "cuDNN has no usable engine for the {:?} convolution {:?} ({:?}, channels_last {}, tf32 {}): {}",
        key.direction,
        g,
        key.dtype,
        key.channels_last,
        key.tf32,
        why.join("; ")
    )
}

/// The convolution descriptor: cross-correlation with `g`'s stride and padding, accumulated
/// in f32.
fn convolution(g: &ConvGeom) -> Result<Desc> {
    let i = |v: usize| v as i64;
    let conv = Desc::new(Kind::CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR)?;
    // Accumulate in f32 for f32 and bf16 data alike.
    conv.set(
        Attr::CUDNN_ATTR_CONVOLUTION_COMP_TYPE,
        Ty::CUDNN_TYPE_DATA_TYPE,
        &[sys::cudnnDataType_t::CUDNN_DATA_FLOAT],
    )?;
    conv.set(
        Attr::CUDNN_ATTR_CONVOLUTION_CONV_MODE,
        Ty::CUDNN_TYPE_CONVOLUTION_MODE,
        &[sys::cudnnConvolutionMode_t::CUDNN_CROSS_CORRELATION],
    )?;
    conv.set_i64(Attr::CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, &[2])?;
    conv.set_i64(Attr::CUDNN_ATTR_CONVOLUTION_DILATIONS, &[1, 1])?;
    conv.set_i64(
        Attr::CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES,
        &[i(g.stride), i(g.stride)],
    )?;
    for side in [
        Attr::CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS,
        Attr::CUDNN_ATTR_CONVOLUTION_POST_PADDINGS,
    ] {
        conv.set_i64(side, &[i(g.padding), i(g.padding)])?;
    }
    conv.finalize()
}

/// The operation of one direction on the x, w and y tensor descriptors: y = conv(x, w),
/// or the data or filter gradient.
fn operation(direction: Direction, tensors: &[Desc], conv: &Desc) -> Result<Desc> {
    use Attr::*;
    let (kind, [ax, aw, ay, ac, alpha, beta]) = match direction {
        Direction::Forward => (
            Kind::CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
            [
                CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
                CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
                CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
                CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
                CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
                CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA,
            ],
        ),
        Direction::BackwardData => (
            Kind::CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
            [
                CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
                CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
                CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY,
                CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
                CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
                CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA,
            ],
        ),
        Direction::BackwardFilter => (
            Kind::CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
            [
                CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
                CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
                CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY,
                CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
                CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
                CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA,
            ],
        ),
    };
    let op = Desc::new(kind)?;
    for (name, t) in [ax, aw, ay].into_iter().zip(tensors) {
        op.set_desc(name, t)?;
    }
    op.set_desc(ac, conv)?;
    // beta = 0: the output is written, never read.
    op.set(alpha, Ty::CUDNN_TYPE_FLOAT, &[1.0f32])?;
    op.set(beta, Ty::CUDNN_TYPE_FLOAT, &[0.0f32])?;
    op.finalize()
}

/// The engine configurations to try for `graph`, in order: the instant heuristic's ranking,
/// then the fallback list; engines compiled at run time after all others (their first call
/// compiles for a second or more). Those refused for `key`'s numerics are left out, their
/// reason added to `why`.
fn candidates(graph: &Desc, key: &PlanKey, why: &mut Vec<String>) -> Result<Vec<Desc>> {
    let mut ready = Vec::new();
    let mut compiled = Vec::new();
    for mode in [
        sys::cudnnBackendHeurMode_t::CUDNN_HEUR_MODE_A,
        sys::cudnnBackendHeurMode_t::CUDNN_HEUR_MODE_FALLBACK,
    ] {
        for cfg in engine_configs(graph, mode)? {
            let notes = Notes::of(&cfg)?;
            if let Some(reason) = notes.refused(key) {
                why.push(reason.to_string());
            } else if notes.runtime_compiled() {
                compiled.push(cfg);
            } else {
                ready.push(cfg);
            }
        }
    }
    ready.extend(compiled);
    Ok(ready)
}

/// The execution plan of an engine configuration, to finalise (which fails for
/// configurations that cannot run this graph).
fn plan_of(handle: &Handle, cfg: &Desc) -> Result<Desc> {
    let plan = Desc::new(Kind::CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR)?;
    plan.set(
        Attr::CUDNN_ATTR_EXECUTION_PLAN_HANDLE,
        Ty::CUDNN_TYPE_HANDLE,
        &[handle.raw],
    )?;
    plan.set_desc(Attr::CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, cfg)?;
    Ok(plan)
}

/// The workspace a plan needs, in bytes.
fn workspace_bytes(plan: &Desc) -> Result<usize> {
    let mut bytes = 0i64;
    // SAFETY: one INT64 value into `bytes`.
    unsafe {
        plan.get(
            Attr::CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
            Ty::CUDNN_TYPE_INT64,
            1,
            &mut bytes as *mut i64 as *mut c_void,
        )?
    };
    Ok(bytes.max(0) as usize)
}

/// The engine configurations cuDNN's heuristic `mode` proposes for `graph`, best first.
fn engine_configs(graph: &Desc, mode: sys::cudnnBackendHeurMode_t) -> Result<Vec<Desc>> {
    let heur = Desc::new(Kind::CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR)?;
    heur.set_desc(Attr::CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph)?;
    heur.set(
        Attr::CUDNN_ATTR_ENGINEHEUR_MODE,
        Ty::CUDNN_TYPE_HEUR_MODE,
        &[mode],
    )?;
    let heur = heur.finalize()?;
    let results = Attr::CUDNN_ATTR_ENGINEHEUR_RESULTS;
    let ty = Ty::CUDNN_TYPE_BACKEND_DESCRIPTOR;
    // SAFETY: a count query (no elements requested).
    let count = unsafe { heur.get(results, ty, 0, std::ptr::null_mut())? };
    let cfgs = (0..count)
        .map(|_| Desc::new(Kind::CUDNN_BACKEND_ENGINECFG_DESCRIPTOR))
        .collect::<Result<Vec<_>>>()?;
    let mut raw: Vec<sys::cudnnBackendDescriptor_t> = cfgs.iter().map(|d| d.0).collect();
    // SAFETY: `raw` holds `count` created engine-config descriptors for cuDNN to fill.
    let got = unsafe { heur.get(results, ty, count, raw.as_mut_ptr() as *mut c_void)? };
    Ok(cfgs.into_iter().take(got as usize).collect())
}

/// The numerical and behaviour notes of an engine configuration's engine.
struct Notes {
    numerical: Vec<u32>,
    behavior: Vec<u32>,
}

impl Notes {
    fn of(cfg: &Desc) -> Result<Notes> {
        let engine = Desc::new(Kind::CUDNN_BACKEND_ENGINE_DESCRIPTOR)?;
        let mut raw = [engine.0];
        // SAFETY: one created engine descriptor for cuDNN to fill.
        unsafe {
            cfg.get(
                Attr::CUDNN_ATTR_ENGINECFG_ENGINE,
                Ty::CUDNN_TYPE_BACKEND_DESCRIPTOR,
                1,
                raw.as_mut_ptr() as *mut c_void,
            )?
        };
        Ok(Notes {
            numerical: engine.get_u32s::<16>(
                Attr::CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
                Ty::CUDNN_TYPE_NUMERICAL_NOTE,
            )?,
            behavior: engine.get_u32s::<16>(
                Attr::CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE,
                Ty::CUDNN_TYPE_BEHAVIOR_NOTE,
            )?,
        })
    }

    /// Why the engine may not run this convolution, if it may not: no engine may
    /// accumulate below f32, and f32 without TF32 refuses tensor-core (TF32) engines, as the
    /// legacy API's FMA math did.
    fn refused(&self, key: &PlanKey) -> Option<&'static str> {
        use sys::cudnnBackendNumericalNote_t as Note;
        let has = |note: Note| self.numerical.contains(&(note as u32));
        if has(Note::CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION) {
            return Some("reduced-precision reduction");
        }
        let tensor_cores = has(Note::CUDNN_NUMERICAL_NOTE_TENSOR_CORE)
            || has(Note::CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS);
        if key.dtype == DType::F32 && !key.tf32 && tensor_cores {
            return Some("TF32 tensor cores with --no-tf32");
        }
        None
    }

    fn runtime_compiled(&self) -> bool {
        let note = sys::cudnnBackendBehaviorNote_t::CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION;
        self.behavior.contains(&(note as u32))
    }
}

/// Runs `f` with the device address of the device's workspace grown to at least `bytes` (0
/// when no workspace is needed). One buffer per device serves every op: they all run in
/// order on one stream.
fn with_workspace<R>(
    dev: &CudaDevice,
    bytes: usize,
    f: impl FnOnce(u64) -> Result<R>,
) -> Result<R> {
    use candle_core::cuda_backend::cudarc::driver::DevicePtr;
    if bytes == 0 {
        return f(0);
    }
    WORKSPACES.with(|w| {
        let mut w = w.borrow_mut();
        let grow = w.get(&dev.id()).is_none_or(|b| b.len() < bytes);
        if grow {
            // The old buffer is freed in stream order, after the work that used it.
            w.remove(&dev.id());
            // SAFETY: cuDNN only uses the workspace as scratch; it never reads unwritten bytes.
            let buf = unsafe { dev.alloc::<u8>(bytes)? };
            w.insert(dev.id(), buf);
        }
        let buf = w.get(&dev.id()).expect("workspace was just inserted");
        let stream = dev.cuda_stream();
        let (ptr, _sync) = buf.device_ptr(&stream);
        f(ptr)
    })
}
