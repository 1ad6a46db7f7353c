//! 2-D convolution (NCHW, or channels-last NHWC with a `(K, R, S, C)` weight; square stride
//! and padding, no dilation; grouped — depthwise included — when the weight reads fewer
//! channels than the input has, `groups = C_in / C_w`) whose CUDA forward and both backward passes call cuDNN. candle's own CUDA backward runs a naive
//! transposed-convolution kernel for the input gradient; cuDNN's backward-data and
//! backward-filter are what PyTorch uses.

use candle_core::{bail, CpuStorage, DType, Result, Shape, Tensor};

#[cfg(feature = "cuda")]
use crate::cudnn::Direction;
#[cfg(feature = "cuda")]
use crate::custom_op::CudaArgs;
use crate::custom_op::{custom_op, CpuArgs};
use crate::permute::{nchw, nhwc};
use crate::{cpu, OpsConfig};

impl OpsConfig {
    /// `x.conv2d(weight, padding, stride, 1, 1)`, through cuDNN (forward and backward) for
    /// f32 and bf16 tensors on a CUDA device and through candle's own op everywhere else.
    pub fn conv2d(&self, x: &Tensor, w: &Tensor, padding: usize, stride: usize) -> Result<Tensor> {
        self.conv_in(x, w, self.conv_op(padding, stride, false))
    }

    /// The convolution of a channels-last input `x` `(n, h, w, c)` with a `(k, kh, kw, c)`
    /// weight (see [`OpsConfig::weight_channels_last`]), giving a contiguous `(n, oh, ow, k)`
    /// tensor. cuDNN with NHWC descriptors on CUDA (no layout transposes around its
    /// kernels); elsewhere candle's conv2d on NCHW views, permuted back.
    pub fn conv2d_channels_last(
        &self,
        x: &Tensor,
        w: &Tensor,
        padding: usize,
        stride: usize,
    ) -> Result<Tensor> {
        self.conv_in(x, w, self.conv_op(padding, stride, true))
    }

    /// `op` through cuDNN where it applies, else candle's conv2d in the op's layout.
    fn conv_in(&self, x: &Tensor, w: &Tensor, op: Conv2dOp) -> Result<Tensor> {
        if self.uses_cudnn(x, w) {
            // The op checks the shapes itself.
            return x.contiguous()?.apply_op2(&w.contiguous()?, op);
        }
        // candle's grouped conv2d would split channels that do not divide into groups.
        let cl = op.channels_last;
        check_geom(
            &logical(x.dims(), cl),
            &logical(w.dims(), cl),
            op.padding,
            op.stride,
        )?;
        in_nchw(x, w, op.channels_last, |x, w| {
            x.conv2d(w, op.padding, op.stride, 1, groups(x, w)?)
        })
    }

    fn conv_op(&self, padding: usize, stride: usize, channels_last: bool) -> Conv2dOp {
        Conv2dOp {
            padding,
            stride,
            channels_last,
            tf32: self.tf32,
        }
    }

    fn uses_cudnn(&self, x: &Tensor, weight: &Tensor) -> bool {
        cfg!(feature = "cuda")
            && self.fast
            && x.device().is_cuda()
            && matches!(x.dtype(), DType::F32 | DType::BF16)
            && x.dtype() == weight.dtype()
            && x.rank() == 4
            && weight.rank() == 4
    }
}

/// `f`, an NCHW computation, on two tensors in the op's layout: with `channels_last` both
/// are made NCHW first and the result is made NHWC again.
fn in_nchw(
    a: &Tensor,
    b: &Tensor,
    channels_last: bool,
    f: impl FnOnce(&Tensor, &Tensor) -> Result<Tensor>,
) -> Result<Tensor> {
    if channels_last {
        nhwc(&f(&nchw(a)?, &nchw(b)?)?)
    } else {
        f(a, b)
    }
}

/// NCHW dims of a tensor given in `channels_last` order when that flag is set.
fn logical(d: &[usize], channels_last: bool) -> Vec<usize> {
    if channels_last && d.len() == 4 {
        vec![d[0], d[3], d[1], d[2]]
    } else {
        d.to_vec()
    }
}

/// NHWC dims of NCHW dims `d` when `channels_last`, else `d`.
#[cfg(feature = "cuda")]
fn physical(d: &[usize], channels_last: bool) -> Shape {
    if channels_last && d.len() == 4 {
        Shape::from((d[0], d[2], d[3], d[1]))
    } else {
        Shape::from(d.to_vec())
    }
}

/// The convolution as a custom op on `(x, weight)`. On the CPU it runs candle's conv2d, so
/// applying it there gives exactly what candle gives. With `channels_last`, `x` is
/// `(n, h, w, c)`, the weight `(k, kh, kw, c)` and the output `(n, oh, ow, k)`.
#[derive(Debug, Clone, Copy)]
pub struct Conv2dOp {
    pub padding: usize,
    pub stride: usize,
    pub channels_last: bool,
    /// Whether cuDNN may use TF32 tensor cores for f32 ([`OpsConfig::tf32`]).
    pub tf32: bool,
}

/// Which gradient a [`Conv2dBackward`] computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConvGrad {
    /// Of the input, from `(grad_y, weight)` (backward-data).
    Input,
    /// Of the weight, from `(x, grad_y)` (backward-filter).
    Weight,
}

/// A gradient of the convolution `conv`: a custom op giving a tensor of `shape` (the input's
/// or the weight's, in the op's layout).
#[derive(Debug, Clone)]
pub struct Conv2dBackward {
    /// The forward convolution.
    pub conv: Conv2dOp,
    pub grad: ConvGrad,
    pub shape: Shape,
}

/// The groups of a convolution of NCHW `x` with `w`: input channels per weight channel.
fn groups(x: &Tensor, w: &Tensor) -> Result<usize> {
    Ok(x.dim(1)? / w.dim(1)?.max(1))
}

fn check_geom(x: &[usize], w: &[usize], padding: usize, stride: usize) -> Result<()> {
    if x.len() != 4 || w.len() != 4 {
        bail!("conv2d: expected 4-d input and weight, got {x:?} and {w:?}")
    }
    if w[1] == 0 || !x[1].is_multiple_of(w[1]) || !w[0].is_multiple_of((x[1] / w[1]).max(1)) {
        bail!(
            "conv2d: input has {} channels, weight {w:?}: the input's channels must be the \
             weight's times the groups, and the groups must divide the output channels",
            x[1]
        )
    }
    if stride == 0 || x[2] + 2 * padding < w[2] || x[3] + 2 * padding < w[3] {
        bail!("conv2d: kernel {w:?} does not fit input {x:?} with padding {padding}")
    }
    Ok(())
}

/// candle's input gradient of a convolution (what its autograd does for `Op::Conv2D`).
fn reference_grad_x(
    dy: &Tensor,
    w: &Tensor,
    x_shape: &Shape,
    pad: usize,
    stride: usize,
) -> Result<Tensor> {
    let groups = x_shape.dims()[1] / w.dim(1)?;
    if groups > 1 {
        // Per group: its output channels' gradient through its weights, to its input channels.
        let mut part = x_shape.dims().to_vec();
        part[1] /= groups;
        let part = Shape::from(part);
        let dxs = (dy.chunk(groups, 1)?.iter())
            .zip(&w.chunk(groups, 0)?)
            .map(|(dy, w)| reference_grad_x(&dy.contiguous()?, w, &part, pad, stride))
            .collect::<Result<Vec<_>>>()?;
        return Tensor::cat(&dxs, 1);
    }
    let x_h = x_shape.dims()[2];
    let out_size = (dy.dim(2)? - 1) * stride + (w.dim(2)? - 1) + 1 - 2 * pad;
    let dx = dy.conv_transpose2d(w, pad, x_h - out_size, stride, 1)?;
    if dx.shape() != x_shape {
        bail!(
            "conv2d backward: input gradient {:?} does not match input {x_shape:?}",
            dx.shape()
        )
    }
    Ok(dx)
}

/// candle's weight gradient of a convolution (what its autograd does for `Op::Conv2D`).
fn reference_grad_w(
    x: &Tensor,
    dy: &Tensor,
    w_shape: &Shape,
    pad: usize,
    stride: usize,
) -> Result<Tensor> {
    let groups = x.dim(1)? / w_shape.dims()[1];
    if groups > 1 {
        let mut part = w_shape.dims().to_vec();
        part[0] /= groups;
        let part = Shape::from(part);
        let gws = (x.chunk(groups, 1)?.iter())
            .zip(&dy.chunk(groups, 1)?)
            .map(|(x, dy)| {
                reference_grad_w(&x.contiguous()?, &dy.contiguous()?, &part, pad, stride)
            })
            .collect::<Result<Vec<_>>>()?;
        return Tensor::cat(&gws, 0);
    }
    let gw = x
        .transpose(0, 1)?
        .conv2d(&dy.transpose(0, 1)?, pad, 1, stride, 1)?
        .transpose(0, 1)?;
    let (k0, k1) = (w_shape.dims()[2], w_shape.dims()[3]);
    if gw.dim(2)? != k0 || gw.dim(3)? != k1 {
        gw.narrow(2, 0, k0)?.narrow(3, 0, k1)
    } else {
        Ok(gw)
    }
}

custom_op!(
    CustomOp2 for Conv2dOp, "octet-conv2d", (s1, l1, s2, l2),
    bwd(x, w, y, dy) -> Grads2 = backward
);

impl Conv2dOp {
    fn cpu(&self, [(s1, l1), (s2, l2)]: CpuArgs<2>) -> Result<(CpuStorage, Shape)> {
        let cl = self.channels_last;
        check_geom(
            &logical(l1.dims(), cl),
            &logical(l2.dims(), cl),
            self.padding,
            self.stride,
        )?;
        let (x, w) = (cpu::tensor(s1, l1)?, cpu::tensor(s2, l2)?);
        let y = in_nchw(&x, &w, cl, |x, w| {
            x.conv2d(w, self.padding, self.stride, 1, groups(x, w)?)
        })?;
        Ok((cpu::storage(&y)?, y.shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda(&self, [(s1, l1), (s2, l2)]: CudaArgs<2>) -> Result<(candle_core::CudaStorage, Shape)> {
        let cl = self.channels_last;
        let (x, w) = (logical(l1.dims(), cl), logical(l2.dims(), cl));
        check_geom(&x, &w, self.padding, self.stride)?;
        let g = cuda::geom(&x, &w, self.padding, self.stride);
        let y = cuda::run((s1, l1), (s2, l2), g, self, Direction::Forward)?;
        Ok((y, physical(&[g.n, g.c_out, g.out_h(), g.out_w()], cl)))
    }

    fn backward(
        &self,
        x: &Tensor,
        w: &Tensor,
        _y: &Tensor,
        dy: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let dy = dy.contiguous()?;
        // No input gradient where nothing upstream wants one (the network's first layer):
        // autograd would drop it, and it costs a backward-data convolution.
        let dx = if x.track_op() {
            Some(dy.apply_op2_no_bwd(
                w,
                &Conv2dBackward {
                    conv: *self,
                    grad: ConvGrad::Input,
                    shape: x.shape().clone(),
                },
            )?)
        } else {
            None
        };
        let dw = x.apply_op2_no_bwd(
            &dy,
            &Conv2dBackward {
                conv: *self,
                grad: ConvGrad::Weight,
                shape: w.shape().clone(),
            },
        )?;
        Ok((dx, Some(dw)))
    }
}

custom_op!(CustomOp2 for Conv2dBackward, "octet-conv2d-bwd", (s1, l1, s2, l2));

impl Conv2dBackward {
    /// candle's gradient, computed on NCHW views of the operands.
    fn cpu(&self, [(s1, l1), (s2, l2)]: CpuArgs<2>) -> Result<(CpuStorage, Shape)> {
        let (a, b) = (cpu::tensor(s1, l1)?, cpu::tensor(s2, l2)?);
        let conv = &self.conv;
        let nchw_shape = Shape::from(logical(self.shape.dims(), conv.channels_last));
        let grad = match self.grad {
            ConvGrad::Input => reference_grad_x,
            ConvGrad::Weight => reference_grad_w,
        };
        let g = in_nchw(&a, &b, conv.channels_last, |a, b| {
            grad(a, b, &nchw_shape, conv.padding, conv.stride)
        })?;
        Ok((cpu::storage(&g)?, self.shape.clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda(&self, ops: CudaArgs<2>) -> Result<(candle_core::CudaStorage, Shape)> {
        let dir = match self.grad {
            ConvGrad::Input => Direction::BackwardData,
            ConvGrad::Weight => Direction::BackwardFilter,
        };
        cuda::backward(&self.conv, ops, &self.shape, dir)
    }
}

#[cfg(feature = "cuda")]
mod cuda {
    use candle_core::backend::BackendStorage;
    use candle_core::cuda_backend::cudarc::driver::{DevicePtr, DeviceRepr};
    use candle_core::cuda_backend::CudaDType;
    use candle_core::{bail, CudaStorage, DType, Layout, Result, Shape, WithDType};
    use half::bf16;

    use super::{check_geom, logical, Conv2dOp};
    use crate::cudnn::{self, Conv, ConvGeom, Direction};
    use crate::custom_op::CudaArgs;

    /// A backward op: the convolution `dir` of the op's operands (backward-data `(dy, w)`,
    /// backward-filter `(x, dy)`), giving the gradient of `shape` (in the op's layout).
    pub(super) fn backward(
        op: &Conv2dOp,
        [(s1, l1), (s2, l2)]: CudaArgs<2>,
        shape: &Shape,
        dir: Direction,
    ) -> Result<(CudaStorage, Shape)> {
        let (g, a, b) = match dir {
            Direction::BackwardData => (
                backward_geom(op, shape.dims(), l2.dims(), l1.dims())?,
                (s2, l2),
                (s1, l1),
            ),
            _ => (
                backward_geom(op, l1.dims(), shape.dims(), l2.dims())?,
                (s1, l1),
                (s2, l2),
            ),
        };
        Ok((run(a, b, g, op, dir)?, shape.clone()))
    }

    /// The geometry of a backward convolution from the shapes (in the op's layout) of the
    /// input `x`, the weight `w` and the output gradient `dy`, checked to fit together.
    fn backward_geom(op: &Conv2dOp, x: &[usize], w: &[usize], dy: &[usize]) -> Result<ConvGeom> {
        let cl = op.channels_last;
        let (x, w) = (logical(x, cl), logical(w, cl));
        check_geom(&x, &w, op.padding, op.stride)?;
        let (oh, ow) = out_hw(&x, &w, op.padding, op.stride);
        if logical(dy, cl) != [x[0], w[0], oh, ow] {
            bail!("conv2d backward: output gradient {dy:?} does not match")
        }
        Ok(geom(&x, &w, op.padding, op.stride))
    }

    fn out_hw(x: &[usize], w: &[usize], padding: usize, stride: usize) -> (usize, usize) {
        (
            (x[2] + 2 * padding - w[2]) / stride + 1,
            (x[3] + 2 * padding - w[3]) / stride + 1,
        )
    }

    pub(super) fn geom(x: &[usize], w: &[usize], padding: usize, stride: usize) -> ConvGeom {
        ConvGeom {
            n: x[0],
            c_in: x[1],
            h: x[2],
            w: x[3],
            c_out: w[0],
            groups: x[1] / w[1],
            k_h: w[2],
            k_w: w[3],
            stride,
            padding,
        }
    }

    trait Elem: CudaDType + DeviceRepr + WithDType {}
    impl Elem for f32 {}
    impl Elem for bf16 {}

    /// The device address of a contiguous operand holding at least `len` elements.
    fn address<T: Elem>(s: &CudaStorage, l: &Layout, len: usize) -> Result<u64> {
        if !l.is_contiguous() {
            bail!("conv2d: cuDNN path needs contiguous tensors")
        }
        let o = l.start_offset();
        let view = s.as_cuda_slice::<T>()?.slice(o..o + len);
        let stream = s.device.cuda_stream();
        let (ptr, _sync) = view.device_ptr(&stream);
        Ok(ptr)
    }

    /// Runs `f::<T>` for the storages' common element type.
    macro_rules! dispatch {
        ($a:expr, $b:expr, $f:ident($($arg:expr),*)) => {
            match ($a.dtype(), $b.dtype()) {
                (DType::F32, DType::F32) => $f::<f32>($($arg),*),
                (DType::BF16, DType::BF16) => $f::<bf16>($($arg),*),
                (a, b) => bail!("conv2d: cuDNN path supports f32 and bf16, got {a:?} and {b:?}"),
            }
        };
    }

    /// A read operand of a convolution.
    type Operand<'a> = (&'a CudaStorage, &'a Layout);

    /// Runs the convolution `op` in direction `dir` on its two read operands, in (x, w, y)
    /// order with the written one left out (forward `(x, w)`, backward-data `(w, dy)`,
    /// backward-filter `(x, dy)`), into a fresh buffer.
    pub(super) fn run(
        a: Operand,
        b: Operand,
        g: ConvGeom,
        op: &Conv2dOp,
        dir: Direction,
    ) -> Result<CudaStorage> {
        dispatch!(a.0, b.0, convolve(a, b, g, op, dir))
    }

    fn convolve<T: Elem>(
        (a_s, a_l): Operand,
        (b_s, b_l): Operand,
        g: ConvGeom,
        op: &Conv2dOp,
        dir: Direction,
    ) -> Result<CudaStorage> {
        let dev = &a_s.device;
        let (x_len, w_len, y_len) = (g.x_elems(), g.w_elems(), g.y_elems());
        let (a_len, b_len, out_len) = match dir {
            Direction::Forward => (x_len, w_len, y_len),
            Direction::BackwardData => (w_len, y_len, x_len),
            Direction::BackwardFilter => (x_len, y_len, w_len),
        };
        let a = address::<T>(a_s, a_l, a_len)?;
        let b = address::<T>(b_s, b_l, b_len)?;
        // SAFETY: cuDNN writes every element of the output (beta = 0 never reads it).
        let out = unsafe { dev.alloc::<T>(out_len)? };
        let stream = dev.cuda_stream();
        let o = out.device_ptr(&stream).0;
        let (x, w, y) = match dir {
            Direction::Forward => (a, b, o),
            Direction::BackwardData => (o, a, b),
            Direction::BackwardFilter => (a, o, b),
        };
        let conv = Conv {
            dtype: T::DTYPE,
            geom: g,
            tf32: op.tf32,
            channels_last: op.channels_last,
            direction: dir,
            x,
            w,
            y,
        };
        // SAFETY: the operands were checked against `g` by the ops (shapes) and above
        // (contiguous, long enough); `out` is new, and every buffer lives in candle storage
        // freed in stream order, after the convolution.
        unsafe { cudnn::run(dev, &conv)? };
        Ok(CudaStorage::wrap_cuda_slice(out, dev.clone()))
    }
}
