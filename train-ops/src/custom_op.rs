//! candle's `CustomOp1/2/3` traits for an op type, from the op's own methods: `cpu` and
//! `cuda` take the operands as an array of `(storage, layout)` pairs, and a differentiable op
//! names its `bwd`. One definition of the traits' long signatures for every op of the crate.

/// `impl CustomOpN for Type` with `name`, the `cpu` and `cuda` methods of the type and, when
/// given, its `bwd` method. The operands are named as `(storage, layout)` pairs, the
/// backward's arguments as the trait's (inputs, output, output gradient):
/// `custom_op!(CustomOp2 for Op, "name", (s1, l1, s2, l2), bwd(a, b, y, dy) -> Grads2 = f)`.
macro_rules! custom_op {
    (
        $trait:ident for $ty:ty, $name:literal, ($($s:ident, $l:ident),+)
        $(, bwd($($t:ident),+) -> $grads:ident = $bwd:ident)?
    ) => {
        impl candle_core::$trait for $ty {
            fn name(&self) -> &'static str {
                $name
            }

            fn cpu_fwd(
                &self,
                $($s: &candle_core::CpuStorage, $l: &candle_core::Layout),+
            ) -> candle_core::Result<(candle_core::CpuStorage, candle_core::Shape)> {
                self.cpu([$(($s, $l)),+])
            }

            #[cfg(feature = "cuda")]
            fn cuda_fwd(
                &self,
                $($s: &candle_core::CudaStorage, $l: &candle_core::Layout),+
            ) -> candle_core::Result<(candle_core::CudaStorage, candle_core::Shape)> {
                self.cuda([$(($s, $l)),+])
            }

            $(
                fn bwd(
                    &self,
                    $($t: &candle_core::Tensor),+
                ) -> candle_core::Result<$crate::custom_op::$grads> {
                    self.$bwd($($t),+)
                }
            )?
        }
    };
}

pub(crate) use custom_op;

/// The input gradient of a one-operand op.
pub(crate) type Grads1 = Option<candle_core::Tensor>;

/// The input gradients of a two-operand op.
pub(crate) type Grads2 = (Option<candle_core::Tensor>, Option<candle_core::Tensor>);

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
