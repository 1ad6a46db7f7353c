//! AMX-INT8 kernels (Intel Xeon from Sapphire Rapids on): the tile unit's `tdpbssd` multiplies
//! a 16 × 64 tile of int8 inputs by a 64 × 16 tile of int8 weights into 16 × 16 i32 sums,
//! 16 384 multiply-adds per instruction (measured: 4.4× an AVX-512 `vpdpbusd` core's peak).
//!
//! - `tiles`: detection (CPUID, XCR0 and, with `std`, the Linux permission), the tile
//!   configuration and the instructions, through `asm!`;
//! - `gemm`: the product over weights packed at prepare ([`crate::kernels::AmxFc`]: the B
//!   tiles, int8, so `tdpbssd`'s sums are the reference's with no correction), rows staged 32
//!   at a time (the A tiles), requantized by the packed VNNI epilogue (`vnni::BlockEpi`, its
//!   short or general form), either rounding;
//! - `conv2d`: the convs the AMX set packs for tiles, their rows the pixels' patches (copied
//!   where pointwise, else gathered), across the images of a group or a band of rows;
//! - `fully_connected`: a group of images (the interpreter's, up to 8) through a layer packed
//!   as the VNNI set packs it, with `tdpbsud` (unsigned weights, −128·Σx per image): one
//!   packing for both, since a single image (batch 1: one row of a tile's 16) stays on the
//!   packed VNNI kernel.
//!
//! Every other op runs the AVX-512 VNNI set's kernels (`Kernels::Amx` is that set with these
//! on tiles).
//!
//! Linux grants a process the tile state only on request (`arch_prctl(ARCH_REQ_XCOMP_PERM)`):
//! with the `std` feature [`available`] asks once; without `std` the embedding program must
//! ask before the first run, and [`available`] only checks the CPU and XCR0.

mod conv2d;
mod fully_connected;
mod gemm;
mod tiles;

pub use conv2d::{conv2d, conv2d_rows, rows_covered};
pub use fully_connected::{fully_connected_batch, AMX_MIN_FC_IMAGES};
pub use tiles::available;
