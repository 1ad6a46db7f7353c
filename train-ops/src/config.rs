//! The training ops' settings: one value, built once by the program (the trainer from its
//! command-line flags), held by the networks and passed to the ops that read it. No
//! process-wide switch: two models in one process may run differently.

use candle_core::backprop::{GradReady, GradStore, GradSum};
use candle_core::{Result, Tensor};

/// Which implementations the training ops use. `Default` is what training uses: every fast
/// op, TF32 convolutions, the fused gradient sum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpsConfig {
    /// The fused CUDA ops (cuDNN convolution, fused batch norm, one-kernel ReLU and adds).
    /// `false` runs candle's own ops on CUDA too: the reference the fast ops are checked
    /// against (slow: candle's conv backward on CUDA is a naive kernel).
    pub fast: bool,
    /// Whether f32 convolutions on CUDA may use TF32 tensor cores (PyTorch's
    /// `torch.backends.cudnn.allow_tf32`, on by default there and here). Off gives full f32
    /// precision.
    pub tf32: bool,
    /// Whether autograd sums two bf16 gradients of one CUDA tensor (a residual block's
    /// input) with [`crate::grad_sum`]'s 16-byte-per-thread kernel instead of candle's
    /// 2-byte one; bit for bit the same sum. Needs `fast`.
    pub fused_grad_sum: bool,
}

impl Default for OpsConfig {
    fn default() -> Self {
        Self {
            fast: true,
            tf32: true,
            fused_grad_sum: true,
        }
    }
}

impl OpsConfig {
    /// candle's own ops everywhere, full f32 precision: what the fast ops are tested against.
    pub const REFERENCE: Self = Self {
        fast: false,
        tf32: false,
        fused_grad_sum: false,
    };

    /// The gradient sum for candle's backward pass ([`Tensor::backward_with`]), `None` for
    /// candle's add.
    pub fn grad_sum(&self) -> Option<GradSum> {
        (self.fast && self.fused_grad_sum).then_some(crate::grad_sum as GradSum)
    }

    /// The gradients of `loss`, candle's backward pass with [`Self::grad_sum`].
    pub fn backward(&self, loss: &Tensor) -> Result<GradStore> {
        loss.backward_with(self.grad_sum())
    }

    /// [`Self::backward`] calling `ready(var, grad)` as each variable's gradient is complete
    /// (candle's [`Tensor::backward_hooked`]).
    pub fn backward_hooked(&self, loss: &Tensor, ready: GradReady<'_>) -> Result<GradStore> {
        loss.backward_hooked(self.grad_sum(), Some(ready))
    }
}
