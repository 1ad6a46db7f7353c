//! AMX-INT8 kernels (Intel Xeon from Sapphire Rapids on): the tile unit's `tdpbssd` multiplies
//! a 16 × 64 tile of int8 inputs by a 64 × 16 tile of int8 weights into 16 × 16 i32 sums,
//! 16 384 multiply-adds per instruction, eight times an AVX-512 `vpdpbusd` per cycle.
//!
//! - `tiles`: detection (CPUID, XCR0 and, with `std`, the Linux permission), the tile
//!   configuration and the instructions, through `asm!`;
//! - `gemm`: the product over weights packed in blocks of 16 rows (the B tiles): the AMX
//!   set's own packing ([`crate::kernels::AmxFc`], signed) or the VNNI set's (u8 w + 128),
//!   rows staged 32 at a time (the A tiles) or read in place, requantized by the packed VNNI
//!   epilogue (`vnni::fully_connected`'s short or general form), either rounding, while the
//!   tiles multiply the next blocks;
//! - `conv2d`: the conv over it, its rows the pixels' patches: input tiles read in place from
//!   the input (padded once into scratch) where C_in is a multiple of 64 and output rows are
//!   whole tiles, else copied (pointwise) or gathered, across the images of a group;
//! - `fully_connected`: a group of images over it, each image a row (`tdpbsud` over the VNNI
//!   packing, which one image at a time runs on VNNI: at batch 1 a layer is one row, a
//!   sixteenth of a tile, where the packed VNNI kernel runs at full width).
//!
//! Every other op runs the AVX-512 VNNI set's kernels (`Kernels::Amx` is that set with convs
//! and grouped fully connected layers on tiles).
//!
//! Linux grants a process the tile state only on request (`arch_prctl(ARCH_REQ_XCOMP_PERM)`):
//! with the `std` feature [`available`] asks once; without `std` the embedding program must
//! ask before the first run, and [`available`] only checks the CPU and XCR0.

mod conv2d;
mod fully_connected;
mod gemm;
mod tiles;

pub use conv2d::{conv2d, conv2d_rows, reads_in_place, rows_covered};
pub use fully_connected::{fully_connected_batch, AMX_MIN_FC_IMAGES, AMX_MIN_FC_MACS};
pub use tiles::available;

/// Tests: whether the tiles cannot run here, said once as a SKIP line (the AMX suites then
/// check nothing and say so).
#[cfg(test)]
fn skip() -> bool {
    static SAID: std::sync::Once = std::sync::Once::new();
    let skip = !crate::Kernels::amx_available();
    if skip {
        SAID.call_once(|| println!("SKIP: no AMX-INT8 tiles here"));
    }
    skip
}
