//! cuDNN state shared by the convolution ops: one handle per (thread, device) bound to the
//! candle device's stream, one growing workspace per (thread, device), and cached
//! descriptors plus the chosen algorithms per convolution shape.

use std::any::Any;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;

use candle_core::cuda_backend::cudarc::cudnn::safe::{
    ConvDescriptor, Cudnn, CudnnDataType, FilterDescriptor, TensorDescriptor,
};
use candle_core::cuda_backend::cudarc::cudnn::sys;
use candle_core::cuda_backend::cudarc::driver::{CudaSlice, CudaViewMut};
use candle_core::cuda_backend::{CudaDevice, DeviceId};
use candle_core::{DType, Result};

/// Geometry of one convolution in NCHW terms (the memory layout is the plan's) with a square kernel, stride and padding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct ConvGeom {
    pub n: usize,
    pub c_in: usize,
    pub h: usize,
    pub w: usize,
    pub c_out: usize,
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
        self.c_out * self.c_in * self.k_h * self.k_w
    }
    pub fn y_elems(&self) -> usize {
        self.n * self.c_out * self.out_h() * self.out_w()
    }
}

/// Descriptors of one convolution and, once picked, its algorithm and workspace size for
/// each direction. cuDNN's heuristics are queried once per shape, not per call.
pub(crate) struct ConvPlan<T: CudnnDataType> {
    pub conv: ConvDescriptor<f32>,
    pub x: TensorDescriptor<T>,
    pub w: FilterDescriptor<T>,
    pub y: TensorDescriptor<T>,
    pub fwd: Cell<Option<(sys::cudnnConvolutionFwdAlgo_t, usize)>>,
    pub bwd_data: Cell<Option<(sys::cudnnConvolutionBwdDataAlgo_t, usize)>>,
    pub bwd_filter: Cell<Option<(sys::cudnnConvolutionBwdFilterAlgo_t, usize)>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct PlanKey {
    device: DeviceId,
    dtype: DType,
    geom: ConvGeom,
    tf32: bool,
    channels_last: bool,
}

// cuDNN handles and descriptors are neither Send nor Sync, hence thread-local caches (as
// candle does for its own cuDNN handle).
thread_local! {
    static HANDLES: RefCell<HashMap<DeviceId, Arc<Cudnn>>> = RefCell::new(HashMap::new());
    static WORKSPACES: RefCell<HashMap<DeviceId, CudaSlice<u8>>> = RefCell::new(HashMap::new());
    static PLANS: RefCell<HashMap<PlanKey, Rc<dyn Any>>> = RefCell::new(HashMap::new());
}

fn handle(dev: &CudaDevice) -> Result<Arc<Cudnn>> {
    HANDLES.with(|h| {
        if let Some(c) = h.borrow().get(&dev.id()) {
            return Ok(c.clone());
        }
        let c = Cudnn::new(dev.cuda_stream())?;
        h.borrow_mut().insert(dev.id(), c.clone());
        Ok(c)
    })
}

/// The cached plan for `geom` with element type `T`, built on first use. `channels_last`:
/// input and output NHWC, filter `(K, R, S, C)` (cuDNN's NHWC formats).
pub(crate) fn plan<T: CudnnDataType + 'static>(
    dev: &CudaDevice,
    dtype: DType,
    geom: ConvGeom,
    tf32: bool,
    channels_last: bool,
) -> Result<Rc<ConvPlan<T>>> {
    let key = PlanKey {
        device: dev.id(),
        dtype,
        geom,
        tf32,
        channels_last,
    };
    if let Some(p) = PLANS.with(|p| p.borrow().get(&key).cloned()) {
        if let Ok(p) = p.downcast::<ConvPlan<T>>() {
            return Ok(p);
        }
    }
    let cudnn = handle(dev)?;
    let g = geom;
    let i = |v: usize| v as i32;
    // Compute in f32 for f32 and bf16 data (cuDNN has no true-bf16 convolution config).
    let mut conv = cudnn.create_conv2d::<f32>(
        [i(g.padding), i(g.padding)],
        [i(g.stride), i(g.stride)],
        [1, 1],
        sys::cudnnConvolutionMode_t::CUDNN_CROSS_CORRELATION,
    )?;
    // f32 without TF32 keeps full f32 precision; f32 with TF32 gets tensor cores from the
    // default math on Ampere and later. bf16 must ask for them: under the default math its
    // NHWC convolutions ran on FMA kernels, ~30× slower (104 s for a b128 ResNet-18 epoch on
    // an H100 against 3.4 s in f32).
    let math = match dtype {
        DType::F32 if !tf32 => sys::cudnnMathType_t::CUDNN_FMA_MATH,
        DType::F32 => sys::cudnnMathType_t::CUDNN_DEFAULT_MATH,
        _ => sys::cudnnMathType_t::CUDNN_TENSOR_OP_MATH,
    };
    conv.set_math_type(math)?;
    // Dimensions are given as (N, C, H, W) for either format; the format sets the strides.
    let format = if channels_last {
        sys::cudnnTensorFormat_t::CUDNN_TENSOR_NHWC
    } else {
        sys::cudnnTensorFormat_t::CUDNN_TENSOR_NCHW
    };
    let x = cudnn.create_4d_tensor::<T>(format, [i(g.n), i(g.c_in), i(g.h), i(g.w)])?;
    let w = cudnn.create_4d_filter::<T>(format, [i(g.c_out), i(g.c_in), i(g.k_h), i(g.k_w)])?;
    let y =
        cudnn.create_4d_tensor::<T>(format, [i(g.n), i(g.c_out), i(g.out_h()), i(g.out_w())])?;
    let p = Rc::new(ConvPlan {
        conv,
        x,
        w,
        y,
        fwd: Cell::new(None),
        bwd_data: Cell::new(None),
        bwd_filter: Cell::new(None),
    });
    PLANS.with(|m| m.borrow_mut().insert(key, p.clone() as Rc<dyn Any>));
    Ok(p)
}

/// Runs `f` with the device's workspace grown to at least `bytes` (`None` when no workspace
/// is needed). One buffer per device serves every op: they all run in order on one stream.
pub(crate) fn with_workspace<R>(
    dev: &CudaDevice,
    bytes: usize,
    f: impl FnOnce(Option<&mut CudaViewMut<'_, u8>>) -> Result<R>,
) -> Result<R> {
    if bytes == 0 {
        return f(None);
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
        let buf = w.get_mut(&dev.id()).expect("workspace was just inserted");
        let mut view = buf.slice_mut(0..bytes);
        f(Some(&mut view))
    })
}
