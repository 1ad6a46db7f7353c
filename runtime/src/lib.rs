//! Integer-only inference of `.o8` models with no heap allocation.
//!
//! ```ignore
//! let model = octet_runtime::Model::parse(&bytes)?;      // validates, borrows bytes
//! let mut table = [PreparedOp::EMPTY; M];                 // optional: M ≥ model.num_ops()
//! let model = model.prepare(&mut table)?;                 // each op's parameters, once
//! // or prepare_packed(&mut table, &mut packed, kernels): the weights also laid out once for
//! // the kernels (packed.len() ≥ model.packed_bytes(kernels); x86 and Cortex-M sets; same
//! // bytes out); or prepare_packed_image(&mut table, &IMAGE, Kernels::CortexM): the same
//! // read in place from flash, written on the host by model.write_packed_image
//! let mut arena = [0u8; N];                               // N ≥ model.arena_bytes()
//! let logits: &[i8] = model.run(&pixels, &mut arena)?;    // no allocation, integer-only
//! ```
//!
//! Layout: `format` (the file's fields), `model` (parsing and validation, inspection, the
//! prepared per-op table and packed weights), `interpreter` (running ops: one image, groups, threads sharing an
//! image), `kernels` (each op's kernels per CPU), `requant` (the fixed-point output stage),
//! `parallel` (threads, `std`), `cuda` (the GPU path).
//!
//! The file layout is specified in `runtime/FORMAT.md`. Every kernel has a scalar reference
//! (`kernels::scalar`); the x86 kernels (`kernels::avx2`, with an AVX-VNNI variant, and
//! `kernels::vnni` for AVX-512 VNNI), the aarch64 NEON kernels (`kernels::neon`, SDOT with
//! `dotprod`) and the Cortex-M kernels (`kernels::cortex_m`, SMLAD, on Armv7E-M) produce the
//! same bytes. `Model::run` picks the fastest the CPU supports
//! (detected at run time, with or without `std`); `Model::run_with` forces one
//! ([`Kernels`]).
//!
//! The crate is `no_std` and never uses `alloc`. The `std` feature adds run-time CPU feature
//! detection, `std::error::Error` for [`RuntimeError`] and the multi-threaded
//! [`parallel`] module.
#![cfg_attr(not(any(feature = "std", test)), no_std)]
#![warn(missing_docs)]

#[cfg(feature = "cuda")]
pub mod cuda;
pub mod error;
mod fixedpoint;
pub mod format;
mod interpreter;
pub mod kernels;
pub mod model;
#[cfg(feature = "std")]
pub mod parallel;
pub mod requant;

pub use error::RuntimeError;
pub use kernels::{Kernels, OpGeometry};
pub use model::{
    Model, OpInfo, OpKind, PackedImageInfo, PreparedOp, TensorInfo, PACKED_IMAGE_HEADER,
    PACKED_IMAGE_MAGIC,
};
pub use requant::{quantize_multiplier, requantize, Rounding};

/// `Result` with [`RuntimeError`].
pub type Result<T> = core::result::Result<T, RuntimeError>;

/// Rounds `n` up to a multiple of 16.
pub const fn align16(n: usize) -> usize {
    (n + 15) & !15
}

/// Views bytes as `i8` (same size and alignment, every bit pattern valid).
pub(crate) fn as_i8(b: &[u8]) -> &[i8] {
    // SAFETY: u8 and i8 have the same size, alignment and validity.
    unsafe { core::slice::from_raw_parts(b.as_ptr().cast::<i8>(), b.len()) }
}

/// Views bytes as `i8`, mutably.
pub(crate) fn as_i8_mut(b: &mut [u8]) -> &mut [i8] {
    // SAFETY: u8 and i8 have the same size, alignment and validity.
    unsafe { core::slice::from_raw_parts_mut(b.as_mut_ptr().cast::<i8>(), b.len()) }
}
