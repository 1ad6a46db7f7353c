//! Integer kernels and their dispatch, one concept per file:
//! - `select`: [`Kernels`] (what a caller asks for), CPU feature detection, and the set resolved
//!   against this CPU;
//! - `params`: the kernels' parameters, one struct per op kind, built once per op at prepare;
//! - `scratch`: the scratch each kernel set states for an op at prepare;
//! - `dispatch`: each op with the resolved set (the only place that picks a kernel);
//! - `add_tables`: what the SIMD tflite_add kernels share: the inputs' requantizations
//!   tabulated per call ([`TfliteAddTables`]).
//!
//! `scalar` holds the reference loops, the definition every other kernel must match byte for
//! byte, in both roundings ([`crate::requant::Rounding`]). Per target folder:
//! - `avx2`: the pixels-in-lanes conv (8 pixels per vector, exact `vpmaddubsw` with the sign
//!   moved onto the weight; its AVX-VNNI variant with 256-bit `vpdpbusd`; a mode for few input
//!   channels), the older packed-patch conv it falls back to, fully_connected, max_pool,
//!   tflite_add (also the AVX-VNNI set's);
//! - `vnni` (AVX-512 VNNI): the pixels-in-lanes conv over one image or a group, the
//!   few-input-channel conv (kernel rows in quads), the packed-patch conv, fully_connected, the
//!   residual add, tflite_add; the x86 convs' epilogues compute both roundings
//!   ([`crate::requant::FusedRequant`]), the tflite_adds' `requant::HighRequant`'s form of it;
//! - `amx` (AMX-INT8 tiles, with the AVX-512 VNNI set for the rest): conv2d over weights
//!   packed at prepare into weight tiles, 32 pixels' patches per pass;
//! - `neon` (aarch64): conv2d and fully_connected, with `SDOT` (dotprod) and without,
//!   tflite_add;
//! - `cortex_m` (Armv7E-M, the DSP extension: Cortex-M4/M7): conv2d over any undilated window
//!   (its pointwise form a matrix product over the image), depthwise_conv2d (depth multiplier
//!   1), fully_connected, max_pool, tflite_add and tflite_avg_pool with `SMLAD`, `SXTB16` and
//!   the other SIMD instructions of the extension (`cfg(octet_arm_dsp)`, set by `build.rs`;
//!   compiled on every target for tests, with the DSP instructions emulated bit for bit).
//!
//! Kernels that may decline an op (a geometry they do not cover; on Arm, for now, the double
//! rounding too) return `false`, output untouched, for the dispatch to run another. Every
//! kernel instantiates the one test suite of `test_util` (against the scalar reference, in
//! both roundings). Ops a set has no kernel of its own for (depthwise conv and the TFLite
//! average pool outside Cortex-M, softmax, pad, reshape) run the scalar reference.

pub mod scalar;

#[cfg(target_arch = "x86_64")]
pub mod avx2;

#[cfg(target_arch = "x86_64")]
pub mod vnni;

#[cfg(target_arch = "x86_64")]
pub mod amx;

#[cfg(target_arch = "aarch64")]
pub mod neon;

#[cfg(any(octet_arm_dsp, test))]
pub mod cortex_m;

mod add_tables;
mod arm_dsp;
mod dispatch;
mod packed;
mod params;
mod scratch;
mod select;
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
mod valid;

#[cfg(test)]
pub(crate) mod test_util;

pub use add_tables::{InputDirect, InputLine, PairLine, TfliteAddTables};
pub(crate) use dispatch::*;
pub(crate) use packed::{
    add_packing, conv_packing, cortex_m_fc_packing, depthwise_packing, fc_packing, pack, Layout,
    PackOp,
};
pub use packed::{
    AmxFc, CortexMFc, FcEpi, Packed, PackedFc, AMX_K_STEP, AMX_MAX_K, AMX_MIN_COUT, AMX_MIN_K,
    AMX_MIN_PIXELS, FC_BLOCK_ROWS, FC_EPI_BYTES, FC_STEP, IM2COL_MAX_K, IM2COL_MAX_PIXELS,
    PACKED_ALIGN,
};
pub use params::*;
pub use scratch::*;
pub use select::Kernels;
pub(crate) use select::Resolved;

pub use crate::requant::{AddRequant, OutputQuant, Rounding};
