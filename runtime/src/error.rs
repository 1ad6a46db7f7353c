//! Errors of parsing and running a model.

use core::fmt;

/// Everything that can go wrong when parsing or running a `.o8` model. Small and `Copy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuntimeError {
    /// The file does not start with `b"OCTET8\r\n"`.
    BadMagic,
    /// The file's format version is not supported.
    UnsupportedVersion(u16),
    /// A header field is invalid.
    BadHeader {
        /// Which field.
        what: &'static str,
    },
    /// The file is shorter than a length it declares.
    Truncated {
        /// Bytes needed.
        needed: u64,
        /// Bytes present.
        len: u64,
    },
    /// The stored CRC-32 does not match the file.
    CrcMismatch {
        /// CRC in the header.
        stored: u32,
        /// CRC of the bytes.
        computed: u32,
    },
    /// An offset, length or id points outside what it must lie in.
    OutOfBounds {
        /// What was out of bounds.
        what: &'static str,
        /// The op, tensor or id concerned.
        index: u32,
    },
    /// A tensor record is invalid.
    BadTensor {
        /// Tensor id.
        index: u32,
        /// Which field.
        what: &'static str,
    },
    /// An op's tensor shapes are inconsistent with its parameters.
    BadShape {
        /// Op index.
        op: u32,
    },
    /// An op parameter or constant array is invalid.
    BadParam {
        /// Op index.
        op: u32,
        /// Which parameter.
        what: &'static str,
    },
    /// The op could overflow its i32 accumulator (K > 65 536, or |bias| + 128·Σ|w| ≥ 2^31).
    AccumulatorOverflow {
        /// Op index.
        op: u32,
        /// Multiply-adds per output.
        k: u32,
    },
    /// An op's output or scratch overlaps a tensor that is still live (its inputs included),
    /// or the data flow is broken (a tensor read before it is written, or written twice).
    Aliasing {
        /// Op index.
        op: u32,
        /// Tensor id.
        tensor: u32,
    },
    /// The arena passed to `run` is too small.
    ArenaTooSmall {
        /// Bytes needed.
        needed: usize,
        /// Bytes given.
        len: usize,
    },
    /// The pixel slice is not a positive multiple of the input size.
    InputLength {
        /// Bytes per image (c·h·w).
        expected: usize,
        /// Bytes given.
        got: usize,
    },
    /// The requested kernels are not available on this CPU.
    KernelsUnavailable,
    /// Thread count must be at least 1.
    BadThreads,
    /// A packed image (`Model::prepare_packed_image`) is not one of this model for this
    /// kernel set, or is damaged.
    BadPackedImage {
        /// What was wrong.
        what: &'static str,
    },
}

impl fmt::Display for RuntimeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use RuntimeError::*;
        match *self {
            BadMagic => write!(f, "not an .o8 model (bad magic)"),
            UnsupportedVersion(v) => write!(f, "unsupported .o8 version {v}"),
            BadHeader { what } => write!(f, "invalid header field: {what}"),
            Truncated { needed, len } => {
                write!(f, "truncated file: needs {needed} bytes, has {len}")
            }
            CrcMismatch { stored, computed } => {
                write!(
                    f,
                    "CRC mismatch: stored {stored:#010x}, computed {computed:#010x}"
                )
            }
            OutOfBounds { what, index } => write!(f, "{what} {index} out of bounds"),
            BadTensor { index, what } => write!(f, "tensor {index}: invalid {what}"),
            BadShape { op } => write!(f, "op {op}: inconsistent shapes"),
            BadParam { op, what } => write!(f, "op {op}: invalid {what}"),
            AccumulatorOverflow { op, k } => {
                write!(f, "op {op}: i32 accumulator may overflow (K = {k})")
            }
            Aliasing { op, tensor } => {
                write!(
                    f,
                    "op {op}: output or scratch overlaps live tensor {tensor}, or bad data flow"
                )
            }
            ArenaTooSmall { needed, len } => {
                write!(f, "arena too small: needs {needed} bytes, has {len}")
            }
            InputLength { expected, got } => write!(
                f,
                "input length {got} is not a positive multiple of the image size {expected}"
            ),
            KernelsUnavailable => write!(f, "the requested kernels are not available on this CPU"),
            BadThreads => write!(f, "thread count must be at least 1"),
            BadPackedImage { what } => write!(f, "packed image: {what}"),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for RuntimeError {}
