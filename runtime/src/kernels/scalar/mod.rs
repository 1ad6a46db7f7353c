//! Scalar reference kernels: plain loops, the definition the other kernels must match.

mod add;
mod avg_pool;
mod conv2d;
mod depthwise_conv2d;
mod fully_connected;
mod max_pool;
mod pad;
mod reshape;
mod softmax;
mod tflite_add;
mod tflite_avg_pool;

pub use add::add;
pub use avg_pool::avg_pool;
pub use conv2d::conv2d;
pub use depthwise_conv2d::depthwise_conv2d;
pub use fully_connected::fully_connected;
pub use max_pool::max_pool;
pub use pad::pad;
pub use reshape::reshape;
pub use softmax::softmax;
pub use tflite_add::tflite_add;
pub use tflite_avg_pool::tflite_avg_pool;
