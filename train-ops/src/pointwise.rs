//! The one-kernel element-wise ops: ReLU and ReLU6 (f32 and bf16) whose backward is one kernel,
//! `dx = x >= 0 ? dy : 0` (candle's own backward builds the mask with a comparison and a
//! cast, then multiplies: three full passes over the activation and a tensor of zeros, for
//! each of a ResNet-18's seventeen ReLUs), a residual block's add + ReLU, and the bf16 sum of
//! two gradients that candle's backward pass takes ([`crate::OpsConfig::grad_sum`]).

use candle_core::backend::BackendStorage;
use candle_core::{bail, CpuStorage, CustomOp2, DType, Layout, Result, Shape, Tensor};

#[cfg(feature = "cuda")]
use crate::custom_op::CudaArgs;
use crate::custom_op::{custom_op, CpuArgs};
use crate::{cpu, Activation, OpsConfig};

impl OpsConfig {
    /// `max(x, 0)`. One-kernel forward and backward for f32 and bf16 tensors on a CUDA
    /// device, candle's `relu` elsewhere (CPU results stay those of plain candle). The
    /// gradient is candle's: `dy` where `x >= 0`.
    pub fn relu(&self, x: &Tensor) -> Result<Tensor> {
        if cfg!(feature = "cuda")
            && self.fast
            && x.device().is_cuda()
            && matches!(x.dtype(), DType::F32 | DType::BF16)
        {
            relu_fused(x)
        } else {
            x.relu()
        }
    }

    /// `min(max(x, 0), 6)`, MobileNets' ReLU6. One-kernel forward and backward for f32 and
    /// bf16 tensors on a CUDA device (the gradient PyTorch's: `dy` where `0 < x < 6`),
    /// candle's `clamp` elsewhere (some dozen kernels a step on a GPU).
    pub fn relu6(&self, x: &Tensor) -> Result<Tensor> {
        if cfg!(feature = "cuda")
            && self.fast
            && x.device().is_cuda()
            && matches!(x.dtype(), DType::F32 | DType::BF16)
        {
            relu6_fused(x)
        } else {
            x.clamp(0f32, 6f32)
        }
    }

    /// The rectifier `act` of `x` ([`Self::relu`] or [`Self::relu6`]).
    pub fn rectify(&self, x: &Tensor, act: Activation) -> Result<Tensor> {
        match act {
            Activation::Relu => self.relu(x),
            Activation::Relu6 => self.relu6(x),
        }
    }

    /// `max(a + b, 0)`, a residual block's end. One kernel forward (the bf16 sum, then the
    /// ReLU) and one backward for bf16 tensors of one shape on a CUDA device; `relu(a + b)`
    /// elsewhere. The fused op's gradient, `dy` to both inputs where the output is
    /// positive, differs from candle's (`dy` where the sum is `>= 0`) only where the sum is
    /// exactly zero.
    pub fn add_relu(&self, a: &Tensor, b: &Tensor) -> Result<Tensor> {
        if self.fast && fused_bf16_pair(a, b) {
            add_relu_fused(a, b)
        } else {
            self.relu(&(a + b)?)
        }
    }
}

/// The fused ReLU on any device (the CPU version exists to test its autograd wiring).
pub fn relu_fused(x: &Tensor) -> Result<Tensor> {
    x.contiguous()?.apply_op1(Relu)
}

/// The fused ReLU6 on any device (the CPU version exists to test its autograd wiring).
pub fn relu6_fused(x: &Tensor) -> Result<Tensor> {
    x.contiguous()?.apply_op1(Relu6)
}

/// The fused residual add + ReLU on any device (the CPU version exists to test its autograd
/// wiring).
pub fn add_relu_fused(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    a.contiguous()?.apply_op2(&b.contiguous()?, ADD_RELU)
}

/// `a + b` for two gradients of one tensor, as candle's autograd sums them: one 16-byte-per-
/// thread kernel for contiguous bf16 tensors of one shape on a CUDA device (candle's bf16
/// add moves 2 bytes a thread), `None` (candle's add) for anything else. What
/// [`OpsConfig::grad_sum`] hands candle's backward pass; bit for bit candle's sum.
pub fn grad_sum(a: &Tensor, b: &Tensor) -> Result<Option<Tensor>> {
    if !fused_bf16_pair(a, b) {
        return Ok(None);
    }
    Ok(Some(add_fused(a, b)?))
}

/// Whether the bf16 element-wise kernels take `a` and `b`: bf16 tensors of one shape on a
/// CUDA device.
fn fused_bf16_pair(a: &Tensor, b: &Tensor) -> bool {
    cfg!(feature = "cuda")
        && a.device().is_cuda()
        && a.dtype() == DType::BF16
        && b.dtype() == DType::BF16
        && a.dims() == b.dims()
}

/// `a + b` through the element-wise kernel, no gradient (gradients are not differentiated
/// again); on the CPU in f32, rounded once.
pub fn add_fused(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    a.contiguous()?.apply_op2_no_bwd(&b.contiguous()?, &ADD)
}

struct Relu;
struct Relu6;

/// An element-wise op of two tensors of one shape and dtype: `f` on the CPU (in f32, the
/// result rounded to the dtype), the CUDA kernel `kernel` (f32) or `kernel_bf16`.
#[derive(Clone, Copy)]
struct Pointwise2 {
    name: &'static str,
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    kernel: &'static str,
    /// Whether the CUDA kernel exists in f32 too.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    f32_kernel: bool,
    f: fn(f32, f32) -> f32,
    /// For a differentiable op: the op mapping `(output, dy)` to the gradient of both inputs.
    grad_from_output: Option<&'static Pointwise2>,
}

/// `(x, dy) → dx`, candle's ReLU gradient: `dy` where `x >= 0`.
static RELU_BACKWARD: Pointwise2 = Pointwise2 {
    name: "relu backward",
    kernel: "relu_bwd",
    f32_kernel: true,
    f: |x, g| if x >= 0.0 { g } else { 0.0 },
    grad_from_output: None,
};

/// `(x, dy) → dx`, ReLU6's gradient: `dy` where `0 < x < 6`.
static RELU6_BACKWARD: Pointwise2 = Pointwise2 {
    name: "relu6 backward",
    kernel: "relu6_bwd",
    f32_kernel: true,
    f: |x, g| if Activation::Relu6.passes(x) { g } else { 0.0 },
    grad_from_output: None,
};

/// `(y, dy) → dy where y > 0`, from a ReLU's output.
static RELU_OUT_BACKWARD: Pointwise2 = Pointwise2 {
    name: "add_relu backward",
    kernel: "relu_out_bwd",
    f32_kernel: false,
    f: |y, g| if y > 0.0 { g } else { 0.0 },
    grad_from_output: None,
};

/// `(a, b) → a + b`: the f32 sum of two bf16 values is exact or off by far less than half a
/// bf16 unit, so rounding it to bf16 gives the correctly rounded sum, as candle's add does.
static ADD: Pointwise2 = Pointwise2 {
    name: "add",
    kernel: "add",
    f32_kernel: false,
    f: |u, w| u + w,
    grad_from_output: None,
};

/// `(a, b) → max(a + b, 0)`; rounding `max(s, 0)` equals `max(round(s), 0)` (rounding keeps
/// the sign), so the CPU's f32 result rounded once is the kernel's.
static ADD_RELU: Pointwise2 = Pointwise2 {
    name: "add_relu",
    kernel: "add_relu",
    f32_kernel: false,
    f: |u, w| if u + w >= 0.0 { u + w } else { 0.0 },
    grad_from_output: Some(&RELU_OUT_BACKWARD),
};

custom_op!(
    CustomOp1 for Relu, "octet-relu", (s, l),
    bwd(x, y, dy) -> Grads1 = backward
);

impl Relu {
    fn cpu(&self, [(s, l)]: CpuArgs<1>) -> Result<(CpuStorage, Shape)> {
        let x = cpu::to_f32(s, l)?;
        let y = match s.dtype() {
            // candle's f32 ReLU.
            DType::F32 => x.iter().map(|&v| v.max(0.0)).collect(),
            // candle's bf16 ReLU (half's max): v where v >= 0, -0 kept, NaN to +0; exact,
            // the values are bf16 values.
            _ => x.iter().map(|&v| if v >= 0.0 { v } else { 0.0 }).collect(),
        };
        Ok((cpu::from_f32(s.dtype(), y)?, l.shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda(&self, [(s, l)]: CudaArgs<1>) -> Result<(candle_core::CudaStorage, Shape)> {
        Ok((cuda::launch("relu_fwd", &[(s, l)])?, l.shape().clone()))
    }

    fn backward(&self, x: &Tensor, _y: &Tensor, dy: &Tensor) -> Result<Option<Tensor>> {
        Ok(Some(x.apply_op2_no_bwd(&dy.contiguous()?, &RELU_BACKWARD)?))
    }
}

custom_op!(
    CustomOp1 for Relu6, "octet-relu6", (s, l),
    bwd(x, y, dy) -> Grads1 = backward
);

impl Relu6 {
    /// Exact in either dtype: every result is x, 0 or 6.
    fn cpu(&self, [(s, l)]: CpuArgs<1>) -> Result<(CpuStorage, Shape)> {
        let x = cpu::to_f32(s, l)?;
        let y = x.iter().map(|&v| Activation::Relu6.apply(v)).collect();
        Ok((cpu::from_f32(s.dtype(), y)?, l.shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda(&self, [(s, l)]: CudaArgs<1>) -> Result<(candle_core::CudaStorage, Shape)> {
        Ok((cuda::launch("relu6_fwd", &[(s, l)])?, l.shape().clone()))
    }

    fn backward(&self, x: &Tensor, _y: &Tensor, dy: &Tensor) -> Result<Option<Tensor>> {
        Ok(Some(
            x.apply_op2_no_bwd(&dy.contiguous()?, &RELU6_BACKWARD)?,
        ))
    }
}

impl CustomOp2 for Pointwise2 {
    fn name(&self) -> &'static str {
        self.name
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        check(self.name, (s1.dtype(), l1), (s2.dtype(), l2))?;
        let (a, b) = (cpu::to_f32(s1, l1)?, cpu::to_f32(s2, l2)?);
        let out = a.iter().zip(b).map(|(&u, w)| (self.f)(u, w)).collect();
        Ok((cpu::from_f32(s1.dtype(), out)?, l1.shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s1: &candle_core::CudaStorage,
        l1: &Layout,
        s2: &candle_core::CudaStorage,
        l2: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        check(self.name, (s1.dtype(), l1), (s2.dtype(), l2))?;
        if !self.f32_kernel && s1.dtype() != DType::BF16 {
            bail!(
                "{}: fused on CUDA for bf16 only, got {:?}",
                self.name,
                s1.dtype()
            )
        }
        Ok((
            cuda::launch(self.kernel, &[(s1, l1), (s2, l2)])?,
            l1.shape().clone(),
        ))
    }

    fn bwd(
        &self,
        _a: &Tensor,
        _b: &Tensor,
        y: &Tensor,
        dy: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let Some(op) = self.grad_from_output else {
            bail!("{} has no gradient (it is itself one)", self.name)
        };
        let g = y.apply_op2_no_bwd(&dy.contiguous()?, op)?;
        Ok((Some(g.clone()), Some(g)))
    }
}

/// Both operands of one shape and dtype.
fn check(name: &str, a: (DType, &Layout), b: (DType, &Layout)) -> Result<()> {
    if a.1.dims() != b.1.dims() || a.0 != b.0 {
        bail!(
            "{name}: operands {:?} {:?} and {:?} {:?} differ",
            a.0,
            a.1.dims(),
            b.0,
            b.1.dims()
        )
    }
    Ok(())
}

#[cfg(feature = "cuda")]
mod cuda {
    use candle_core::backend::BackendStorage;
    use candle_core::cuda_backend::cudarc::driver::{
        CudaView, DeviceRepr, PushKernelArg, ValidAsZeroBits,
    };
    use candle_core::cuda_backend::CudaDType;
    use candle_core::{bail, CudaStorage, DType, Layout, Result};
    use half::bf16;

    use crate::kernels::{self, KernelModule, CHANNELS_LAST, NCHW};
    use crate::launch;

    /// Runs the element-wise kernel `name` (f32) or `name_bf16` over equal-length contiguous
    /// inputs of one dtype into a new output.
    pub(super) fn launch(name: &str, inputs: &[(&CudaStorage, &Layout)]) -> Result<CudaStorage> {
        let dtypes: Vec<DType> = inputs.iter().map(|(s, _)| s.dtype()).collect();
        match dtypes.as_slice() {
            [DType::F32, ..] if dtypes.iter().all(|&d| d == DType::F32) => {
                launch_as::<f32>(name, inputs)
            }
            [DType::BF16, ..] if dtypes.iter().all(|&d| d == DType::BF16) => {
                launch_as::<bf16>(&format!("{name}_bf16"), inputs)
            }
            d => bail!("relu: supported on CUDA for f32 or bf16 tensors, got {d:?}"),
        }
    }

    /// Contiguous views of the inputs, their common length, and whether every operand
    /// starts on a whole vector of `width` elements (so the kernel can take vector loads).
    fn views<'a, T: candle_core::cuda_backend::CudaDType>(
        inputs: &[(&'a CudaStorage, &Layout)],
        width: usize,
    ) -> Result<(Vec<CudaView<'a, T>>, usize, bool)> {
        let n = inputs[0].1.shape().elem_count();
        let views = inputs
            .iter()
            .map(|(s, l)| kernels::view::<T>(s, l, "relu: input"))
            .collect::<Result<Vec<_>>>()?;
        let vec = n.is_multiple_of(width)
            && inputs
                .iter()
                .all(|(_, l)| l.start_offset().is_multiple_of(width));
        Ok((views, n, vec))
    }

    /// What differs between the f32 and bf16 element-wise kernels.
    trait Elem: CudaDType + DeviceRepr + ValidAsZeroBits {
        /// Values per vector load: 4 (float4) or 8 (16 bytes of bf16).
        const WIDTH: usize;
        /// The most elements the kernels' index math holds.
        const MAX_N: usize;
        const MODULE: &'static KernelModule;
        /// The kernels' item count: i32 (f32) or i64 (bf16).
        type Count: DeviceRepr + TryFrom<usize>;
    }

    impl Elem for f32 {
        const WIDTH: usize = 4;
        const MAX_N: usize = i32::MAX as usize;
        const MODULE: &'static KernelModule = &NCHW;
        type Count = i32;
    }

    impl Elem for bf16 {
        const WIDTH: usize = 8;
        const MAX_N: usize = usize::MAX;
        const MODULE: &'static KernelModule = &CHANNELS_LAST;
        type Count = i64;
    }

    /// The element-wise kernel `name` over `inputs` of `T`, with vector loads when every
    /// operand starts on a whole vector and the length allows.
    fn launch_as<T: Elem>(name: &str, inputs: &[(&CudaStorage, &Layout)]) -> Result<CudaStorage> {
        let dev = &inputs[0].0.device;
        let (views, n, vec) = views::<T>(inputs, T::WIDTH)?;
        if n > T::MAX_N {
            bail!("relu: {n} elements (supported: up to {})", T::MAX_N)
        }
        let items = if vec { n / T::WIDTH } else { n };
        // SAFETY: the kernel writes every element.
        let mut y = unsafe { dev.alloc::<T>(n.max(1))? };
        let Ok(items_i) = T::Count::try_from(items) else {
            bail!("relu: {items} items too many")
        };
        let vflag = vec as i32;
        let (stream, f) = T::MODULE.func(dev, name)?;
        let mut b = stream.launch_builder(&f);
        for v in &views {
            b.arg(v);
        }
        b.arg(&mut y).arg(&items_i).arg(&vflag);
        // SAFETY: argument types and counts match relu_fwd and relu6_fwd (x, y, n, vec),
        // relu_bwd and relu6_bwd (x, dy, dx, n, vec) and their bf16 versions (items an i64), add_bf16, add_relu_bf16 and
        // relu_out_bwd_bf16 (a, b, out, items, vec).
        unsafe { b.launch(launch::elementwise(items))? };
        Ok(CudaStorage::wrap_cuda_slice(y, dev.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    /// The fused op's forward and gradient equal candle's `relu` on the CPU, zeros included.
    #[test]
    fn fused_matches_candle_with_gradient() -> Result<()> {
        let v: Vec<f32> = (0..24).map(|i| (i as f32 - 11.0) * 0.5).collect();
        let x = Var::from_vec(v, (2, 3, 4), &Device::Cpu)?;
        let w = Tensor::arange(0f32, 24.0, &Device::Cpu)?.reshape((2, 3, 4))?;
        let ours = relu_fused(x.as_tensor())?;
        let theirs = x.as_tensor().relu()?;
        assert_eq!(ours.to_vec3::<f32>()?, theirs.to_vec3::<f32>()?);
        let g_ours = (ours * &w)?.sum_all()?.backward()?;
        let g_theirs = (theirs * &w)?.sum_all()?.backward()?;
        assert_eq!(
            g_ours.get(x.as_tensor()).unwrap().to_vec3::<f32>()?,
            g_theirs.get(x.as_tensor()).unwrap().to_vec3::<f32>()?
        );
        Ok(())
    }

    /// The fused ReLU6 is candle's `clamp(0, 6)` forward, in f32 and bf16, and passes the
    /// gradient strictly inside (0, 6), PyTorch's hardtanh backward: 0 at 0 and at 6.
    #[test]
    fn relu6_clamps_and_passes_the_gradient_inside() -> Result<()> {
        let v: Vec<f32> = (0..32).map(|i| (i as f32 - 12.0) * 0.5).collect();
        let w: Vec<f32> = (0..32).map(|i| i as f32 + 1.0).collect();
        for dtype in [DType::F32, DType::BF16] {
            let x = Var::from_tensor(&Tensor::new(v.as_slice(), &Device::Cpu)?.to_dtype(dtype)?)?;
            let wt = Tensor::new(w.as_slice(), &Device::Cpu)?.to_dtype(dtype)?;
            let y = relu6_fused(x.as_tensor())?;
            let want = x.as_tensor().clamp(0f32, 6f32)?;
            let f32s = |t: &Tensor| t.to_dtype(DType::F32)?.to_vec1::<f32>();
            assert_eq!(f32s(&y)?, f32s(&want)?, "{dtype:?}");
            let g = (y * &wt)?.sum_all()?.backward()?;
            let got = f32s(g.get(x.as_tensor()).unwrap())?;
            let expected: Vec<f32> = (v.iter().zip(&w))
                .map(|(&x, &w)| if x > 0.0 && x < 6.0 { w } else { 0.0 })
                .collect();
            assert_eq!(got, expected, "{dtype:?}");
        }
        Ok(())
    }

    /// candle's autograd sums a tensor's gradients through the function passed to
    /// `backward_with`, and `grad_sum` leaves CPU tensors to candle's add.
    #[test]
    fn autograd_sums_gradients_through_the_given_function() -> Result<()> {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static CALLS: AtomicUsize = AtomicUsize::new(0);
        fn counting(a: &Tensor, b: &Tensor) -> Result<Option<Tensor>> {
            CALLS.fetch_add(1, Ordering::SeqCst);
            grad_sum(a, b)
        }
        let x = Var::from_vec(vec![1f32, -2.0, 3.0], 3, &Device::Cpu)?;
        let y = ((x.as_tensor() * 2.0)? + (x.as_tensor() * 3.0)?)?.sum_all()?;
        let g = y.backward_with(Some(counting))?;
        assert!(CALLS.load(Ordering::SeqCst) >= 1);
        assert_eq!(g.get(x.as_tensor()).unwrap().to_vec1::<f32>()?, [5.0; 3]);
        let bf = x.as_tensor().to_dtype(DType::BF16)?;
        assert!(
            grad_sum(&bf, &bf)?.is_none(),
            "CPU tensors stay on candle's add"
        );
        assert!(OpsConfig::REFERENCE.grad_sum().is_none());
        assert!(OpsConfig::default().grad_sum().is_some());
        Ok(())
    }

    /// The element-wise add rounds the f32 sum once, as candle's bf16 add does.
    #[test]
    fn add_matches_candle_in_bf16() -> Result<()> {
        let u: Vec<f32> = (0..40).map(|i| (i as f32 - 17.3) * 0.37).collect();
        let v: Vec<f32> = (0..40)
            .map(|i| ((i * 13) % 40) as f32 * 1e-3 - 0.02)
            .collect();
        let a = Tensor::from_vec(u, 40, &Device::Cpu)?.to_dtype(DType::BF16)?;
        let b = Tensor::from_vec(v, 40, &Device::Cpu)?.to_dtype(DType::BF16)?;
        let f32s = |t: &Tensor| t.to_dtype(DType::F32)?.to_vec1::<f32>();
        assert_eq!(f32s(&add_fused(&a, &b)?)?, f32s(&(&a + &b)?)?);
        Ok(())
    }

    /// The fused residual add + ReLU equals candle's `relu(a + b)` on the CPU, forward and
    /// both gradients, in f32 and bf16 (no sum exactly zero, where the masks may differ).
    #[test]
    fn fused_add_relu_matches_candle_with_gradient() -> Result<()> {
        for dtype in [DType::F32, DType::BF16] {
            let u: Vec<f32> = (0..24).map(|i| (i as f32 - 11.3) * 0.5).collect();
            let v: Vec<f32> = (0..24)
                .map(|i| ((i * 7) % 24) as f32 * 0.25 - 2.9)
                .collect();
            let a =
                Var::from_tensor(&Tensor::from_vec(u, (2, 3, 4), &Device::Cpu)?.to_dtype(dtype)?)?;
            let b =
                Var::from_tensor(&Tensor::from_vec(v, (2, 3, 4), &Device::Cpu)?.to_dtype(dtype)?)?;
            let w = Tensor::arange(0f32, 24.0, &Device::Cpu)?
                .reshape((2, 3, 4))?
                .to_dtype(dtype)?;
            let ours = add_relu_fused(a.as_tensor(), b.as_tensor())?;
            let theirs = (a.as_tensor() + b.as_tensor())?.relu()?;
            let f32s = |t: &Tensor| t.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>();
            assert_eq!(f32s(&ours)?, f32s(&theirs)?, "{dtype:?}");
            let g_ours = (ours * &w)?.sum_all()?.backward()?;
            let g_theirs = (theirs * &w)?.sum_all()?.backward()?;
            for x in [&a, &b] {
                assert_eq!(
                    f32s(g_ours.get(x.as_tensor()).unwrap())?,
                    f32s(g_theirs.get(x.as_tensor()).unwrap())?,
                    "{dtype:?}"
                );
            }
        }
        Ok(())
    }
}
