//! candle's `CustomOp1/2/3` traits for an op type, from the op's own methods: `cpu` and
//! `cuda` take the operands as an array of `(storage, layout)` pairs, and a differentiable op
//! names its `bwd`. One definition of the traits' long signatures for every op of the crate.

/// `impl CustomOpN for Type` with `name`, the `cpu` and `cuda` methods of the type and, when
/// given, its `bwd` method (same arguments as the trait's).
macro_rules! custom_op {
    (CustomOp1 for $ty:ty, $name:literal $(, bwd: $bwd:ident)?) => {
        impl candle_core::CustomOp1 for $ty {
            fn name(&self) -> &'static str {
                $name
            }

            fn cpu_fwd(
                &self,
                s: &candle_core::CpuStorage,
                l: &candle_core::Layout,
            ) -> candle_core::Result<(candle_core::CpuStorage, candle_core::Shape)> {
                self.cpu([(s, l)])
            }

            #[cfg(feature = "cuda")]
            fn cuda_fwd(
                &self,
                s: &candle_core::CudaStorage,
                l: &candle_core::Layout,
            ) -> candle_core::Result<(candle_core::CudaStorage, candle_core::Shape)> {
                self.cuda([(s, l)])
            }

            $(
                fn bwd(
                    &self,
                    x: &candle_core::Tensor,
                    y: &candle_core::Tensor,
                    dy: &candle_core::Tensor,
                ) -> candle_core::Result<Option<candle_core::Tensor>> {
                    self.$bwd(x, y, dy)
                }
            )?
        }
    };
    (CustomOp2 for $ty:ty, $name:literal $(, bwd: $bwd:ident)?) => {
        impl candle_core::CustomOp2 for $ty {
            fn name(&self) -> &'static str {
                $name
            }

            fn cpu_fwd(
                &self,
                s1: &candle_core::CpuStorage,
                l1: &candle_core::Layout,
                s2: &candle_core::CpuStorage,
                l2: &candle_core::Layout,
            ) -> candle_core::Result<(candle_core::CpuStorage, candle_core::Shape)> {
                self.cpu([(s1, l1), (s2, l2)])
            }

            #[cfg(feature = "cuda")]
            fn cuda_fwd(
                &self,
                s1: &candle_core::CudaStorage,
                l1: &candle_core::Layout,
                s2: &candle_core::CudaStorage,
                l2: &candle_core::Layout,
            ) -> candle_core::Result<(candle_core::CudaStorage, candle_core::Shape)> {
                self.cuda([(s1, l1), (s2, l2)])
            }

            $(
                fn bwd(
                    &self,
                    a: &candle_core::Tensor,
                    b: &candle_core::Tensor,
                    y: &candle_core::Tensor,
                    dy: &candle_core::Tensor,
                ) -> candle_core::Result<(Option<candle_core::Tensor>, Option<candle_core::Tensor>)>
                {
                    self.$bwd(a, b, y, dy)
                }
            )?
        }
    };
    (CustomOp3 for $ty:ty, $name:literal $(, bwd: $bwd:ident)?) => {
        impl candle_core::CustomOp3 for $ty {
            fn name(&self) -> &'static str {
                $name
            }

            fn cpu_fwd(
                &self,
                s1: &candle_core::CpuStorage,
                l1: &candle_core::Layout,
                s2: &candle_core::CpuStorage,
                l2: &candle_core::Layout,
                s3: &candle_core::CpuStorage,
                l3: &candle_core::Layout,
            ) -> candle_core::Result<(candle_core::CpuStorage, candle_core::Shape)> {
                self.cpu([(s1, l1), (s2, l2), (s3, l3)])
            }

            #[cfg(feature = "cuda")]
            fn cuda_fwd(
                &self,
                s1: &candle_core::CudaStorage,
                l1: &candle_core::Layout,
                s2: &candle_core::CudaStorage,
                l2: &candle_core::Layout,
                s3: &candle_core::CudaStorage,
                l3: &candle_core::Layout,
            ) -> candle_core::Result<(candle_core::CudaStorage, candle_core::Shape)> {
                self.cuda([(s1, l1), (s2, l2), (s3, l3)])
            }

            $(
                fn bwd(
                    &self,
                    a: &candle_core::Tensor,
                    b: &candle_core::Tensor,
                    c: &candle_core::Tensor,
                    y: &candle_core::Tensor,
                    dy: &candle_core::Tensor,
                ) -> candle_core::Result<$crate::custom_op::Grads3> {
                    self.$bwd(a, b, c, y, dy)
                }
            )?
        }
    };
}

pub(crate) use custom_op;

/// The input gradients of a three-operand op.
pub(crate) type Grads3 = (
    Option<candle_core::Tensor>,
    Option<candle_core::Tensor>,
    Option<candle_core::Tensor>,
);

/// The operands of a CPU op: `N` (storage, layout) pairs.
pub(crate) type CpuArgs<'a, const N: usize> =
    [(&'a candle_core::CpuStorage, &'a candle_core::Layout); N];

/// The operands of a CUDA op: `N` (storage, layout) pairs.
#[cfg(feature = "cuda")]
pub(crate) type CudaArgs<'a, const N: usize> =
    [(&'a candle_core::CudaStorage, &'a candle_core::Layout); N];
