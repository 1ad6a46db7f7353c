//! Training ops as candle custom ops: cuDNN convolution (forward, backward-data,
//! backward-filter; NCHW or channels-last), fused batch-norm kernels (f32 NCHW, and bf16
//! channels-last with an optional fused ReLU), a one-kernel ReLU backward and the cast of
//! conv weights to the channels-last layout. candle's own CUDA backward for conv2d
//! (a naive transposed convolution) and its many-small-op batch norm dominate a ResNet-18
//! step; these replace them on CUDA tensors and leave CPU tensors on candle's ops.
//!
//! Every op also runs on the CPU (through candle's ops or plain loops), so the autograd
//! wiring is tested without a GPU; the public functions still pick candle's own ops on the
//! CPU so CPU results stay bit-identical to plain candle.

pub mod batch_norm;
pub mod batch_norm_cl;
pub mod conv2d;
mod cpu;
#[cfg(feature = "cuda")]
mod cudnn;
#[cfg(feature = "cuda")]
mod kernels;
#[cfg(feature = "cuda")]
mod kernels_cl;
mod layout;
mod relu;

pub use batch_norm::{batch_norm_train, batch_norm_train_fused, batch_norm_train_reference};
pub use batch_norm_cl::{
    batch_norm_train_channels_last, batch_norm_train_channels_last_fused,
    batch_norm_train_channels_last_reference,
};
pub use conv2d::{
    conv2d, conv2d_channels_last, set_conv_tf32, Conv2dBackwardData, Conv2dBackwardFilter, Conv2dOp,
};
#[cfg(feature = "cuda")]
pub use kernels::Module as KernelModule;
pub use layout::{weight_channels_last, weight_channels_last_fused};
pub use relu::{
    add_fused, add_relu, add_relu_fused, grad_sum, relu, relu_fused, use_fast_grad_sum,
};

use std::sync::atomic::{AtomicBool, Ordering};

static FAST: AtomicBool = AtomicBool::new(true);

/// Process-wide: `false` makes [`conv2d`], [`batch_norm_train`] and [`relu`] use candle's own
/// ops on CUDA too: the reference the fast ops are checked against (slow: candle's conv
/// backward on CUDA is a naive kernel).
pub fn set_fast_ops(on: bool) {
    FAST.store(on, Ordering::Relaxed);
}

/// Whether the fast CUDA ops are in use (the default).
pub fn fast_ops() -> bool {
    FAST.load(Ordering::Relaxed)
}
