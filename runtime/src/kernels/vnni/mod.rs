//! AVX-512 VNNI kernels on 512-bit vectors (`vpdpbusd`, needs `avx512vnni`, `avx512bw` and
//! `avx512vl`): 64 multiply-adds per instruction; and the residual adds (octet's and TFLite's)
//! on AVX-512 F. Bit-identical to `kernels::scalar`: the activations are offset to u8
//! (x + 128) and the accumulator corrected by −128·Σw, exact in wrapping i32.
//!
//! The functions are `unsafe` only because they need those CPU features: call them only when
//! `Kernels::vnni_available()`.

mod add;
mod conv2d;
mod fully_connected;
mod implicit;
mod lanes;
mod narrow;
mod packed_conv;
mod padded;
pub(crate) mod short_requant;
mod tflite_add;

pub use super::ConvImage;
pub use add::add;
pub(crate) use add::add_supported;
pub use conv2d::conv2d;
pub use fully_connected::{fully_connected, fully_connected_batch};
pub(crate) use fully_connected::{input_sum, BlockEpi, Limits};
pub use implicit::{conv2d_implicit, conv2d_implicit_rows, implicit_rows_covered};
pub(crate) use implicit::{implicit_fits, implicit_packed, implicit_scratch};
pub use lanes::{conv2d_lanes, conv2d_lanes_batch, covers as lanes_covers, MAX_IMAGES};
pub use narrow::{conv2d_narrow, narrow_preferred, narrow_supported};
pub use packed_conv::{conv2d_packed, conv2d_packed_rows, packed_rows_covered};
pub(crate) use packed_conv::{copy, Gather};
pub(crate) use padded::{band_rows, row_bytes};
pub use tflite_add::tflite_add;
