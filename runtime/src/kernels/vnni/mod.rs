//! AVX-512 VNNI kernels on 256-bit vectors (`vpdpbusd`, needs `avx512vnni` + `avx512vl`):
//! 32 multiply-adds per instruction. Bit-identical to `kernels::scalar`: the activations are
//! offset to u8 (x + 128) and the accumulator corrected by −128·Σw, exact in wrapping i32.
//!
//! The functions are `unsafe` only because they need those CPU features: call them only when
//! `Kernels::vnni_available()`.

mod conv2d;

pub use conv2d::conv2d;
