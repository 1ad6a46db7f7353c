//! The rectifiers that follow a batch norm: ReLU, and MobileNets' ReLU6 (`min(max(x, 0), 6)`).
//! Fused into the channels-last batch-norm kernels and run as one-kernel element-wise ops;
//! this is their one definition on the CPU and their flag in the kernels.

/// A rectifier fused after an op.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    /// `max(x, 0)`.
    Relu,
    /// `min(max(x, 0), 6)`.
    Relu6,
}

impl Activation {
    /// The kernels' `act` flag: 0 none, 1 ReLU, 2 ReLU6.
    #[cfg(feature = "cuda")]
    pub(crate) fn code(act: Option<Self>) -> i32 {
        match act {
            None => 0,
            Some(Activation::Relu) => 1,
            Some(Activation::Relu6) => 2,
        }
    }

    /// The rectified value, as the kernels compute it (`fmaxf`, then `fminf`: NaN gives 0,
    /// where `clamp` would keep it).
    #[allow(clippy::manual_clamp)]
    pub(crate) fn apply(self, v: f32) -> f32 {
        match self {
            Activation::Relu => v.max(0.0),
            Activation::Relu6 => v.max(0.0).min(6.0),
        }
    }

    /// Whether the gradient passes where the rectifier's output is `y`: strictly inside the
    /// linear range (PyTorch's threshold and hardtanh backward).
    pub(crate) fn passes(self, y: f32) -> bool {
        match self {
            Activation::Relu => y > 0.0,
            Activation::Relu6 => y > 0.0 && y < 6.0,
        }
    }
}
