//! candle custom ops for training on GPUs: cuDNN convolution (forward, backward-data,
//! backward-filter; NCHW or channels-last), one fused batch-norm op family (NCHW f32, and
//! bf16 channels-last with an optional fused ReLU or ReLU6), one-kernel ReLU and ReLU6, fused
//! residual adds, the cast of conv weights to the channels-last layout, and the loader of the
//! CUDA kernels (`kernels/*.cu`, also the trainer's fused SGD). candle's own CUDA backward
//! for conv2d (a naive transposed convolution) and its many-small-op batch norm dominate a
//! ResNet-18 step; these replace them on CUDA tensors and leave CPU tensors on candle's ops.
//!
//! Which ops run is one explicit value, [`OpsConfig`]; its methods ([`OpsConfig::conv2d`],
//! [`OpsConfig::batch_norm_train`], [`OpsConfig::relu`], ...) pick the fast op or candle's.
//! Every op also runs on the CPU (through candle's ops or plain loops), so the autograd
//! wiring is tested without a GPU; the dispatching methods still pick candle's own ops on
//! the CPU so CPU results stay bit-identical to plain candle.

mod activation;
pub mod batch_norm;
mod config;
pub mod conv2d;
mod cpu;
#[cfg(feature = "cuda")]
mod cudnn;
mod custom_op;
#[cfg(feature = "cuda")]
pub mod kernels;
#[cfg(feature = "cuda")]
mod launch;
pub mod permute;
mod pointwise;
mod stats_sync;
mod weight_layout;

pub use activation::Activation;
pub use batch_norm::{
    batch_norm_train_fused, batch_norm_train_reference, batch_norm_train_synced, BnConfig,
    BnLayout, BnParams,
};
pub use config::OpsConfig;
pub use conv2d::{Conv2dBackward, Conv2dOp, ConvGrad};
pub use pointwise::{add_fused, add_relu_fused, grad_sum, relu6_fused, relu_fused};
pub use stats_sync::StatsSync;
pub use weight_layout::weight_channels_last_fused;
