//! Scalar reference kernels: plain loops, the definition the SIMD kernels must match.

mod add;
mod avg_pool;
mod conv2d;
mod fully_connected;
mod max_pool;

pub use add::{add, add_reference};
pub use avg_pool::avg_pool;
pub use conv2d::conv2d;
pub use fully_connected::fully_connected;
pub use max_pool::max_pool;
