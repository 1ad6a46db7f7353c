//! The GPU path's errors: one typed variant per way `CudaModel` can refuse or fail.

use std::fmt;

use cudarc::driver::{result::DriverError, sys};
use cudarc::nvrtc::CompileError;

/// Errors of the GPU path.
#[derive(Debug)]
pub enum CudaError {
    /// No usable CUDA device at this ordinal (none present, ordinal out of range, driver
    /// failed to initialise).
    NoDevice {
        /// The ordinal asked for.
        ordinal: usize,
        /// The driver's error.
        error: DriverError,
    },
    /// The device's compute capability is too old for these kernels (needs 7.5 or newer, the
    /// oldest NVRTC 13 targets).
    Unsupported {
        /// Major, minor compute capability.
        compute_capability: (i32, i32),
    },
    /// NVRTC failed to compile the kernels (the log says why).
    Compile {
        /// NVRTC's log or error.
        log: String,
    },
    /// The model's weights and activation buffers for `max_batch` images do not fit.
    OutOfMemory {
        /// Bytes the model needs on the device.
        needed: usize,
        /// Bytes free on the device (0 when unknown).
        free: usize,
    },
    /// `max_batch` × a tensor's size exceeds the kernels' 32-bit index range (2^31 − 1 bytes
    /// per tensor), or `max_batch` is 0.
    BadMaxBatch {
        /// The maximum batch asked for.
        max_batch: usize,
    },
    /// More images than the model was planned for.
    BatchTooLarge {
        /// Images given.
        batch: usize,
        /// `max_batch` of [`CudaModel::new`](super::CudaModel::new).
        max: usize,
    },
    /// The pixel slice is not a positive multiple of the input size.
    InputLength {
        /// Bytes per image.
        expected: usize,
        /// Bytes given.
        got: usize,
    },
    /// `run_into`'s output slice is not batch × output_len long.
    OutputLength {
        /// Bytes needed.
        expected: usize,
        /// Bytes given.
        got: usize,
    },
    /// [`CudaModel::run_loaded`](super::CudaModel::run_loaded) before any [`CudaModel::load`](super::CudaModel::load), or after `run`/`run_into`
    /// replaced the loaded images.
    NothingLoaded,
    /// Any other driver failure (allocation, copy, launch).
    Driver(DriverError),
}

impl fmt::Display for CudaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CudaError::NoDevice { ordinal, error } => {
                write!(f, "no usable CUDA device {ordinal}: {error:?}")
            }
            CudaError::Unsupported {
                compute_capability: (a, b),
            } => write!(
                f,
                "CUDA device of compute capability {a}.{b} is not supported (needs 7.5 or newer)"
            ),
            CudaError::Compile { log } => write!(f, "NVRTC failed to compile the kernels: {log}"),
            CudaError::OutOfMemory { needed, free } => write!(
                f,
                "model needs {needed} bytes of device memory, {free} bytes are free"
            ),
            CudaError::BadMaxBatch { max_batch } => write!(
                f,
                "max_batch {max_batch} is 0 or makes a tensor exceed 2^31 − 1 bytes"
            ),
            CudaError::BatchTooLarge { batch, max } => {
                write!(
                    f,
                    "batch of {batch} images exceeds the planned maximum {max}"
                )
            }
            CudaError::InputLength { expected, got } => write!(
                f,
                "input of {got} bytes is not a positive multiple of {expected} bytes per image"
            ),
            CudaError::OutputLength { expected, got } => {
                write!(
                    f,
                    "output slice holds {got} bytes, the batch needs {expected}"
                )
            }
            CudaError::NothingLoaded => {
                write!(f, "no images are loaded: call CudaModel::load first")
            }
            CudaError::Driver(e) => write!(f, "CUDA driver error: {e:?}"),
        }
    }
}

impl std::error::Error for CudaError {}

impl From<DriverError> for CudaError {
    fn from(e: DriverError) -> Self {
        if e.0 == sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY {
            CudaError::OutOfMemory { needed: 0, free: 0 }
        } else {
            CudaError::Driver(e)
        }
    }
}

impl From<CompileError> for CudaError {
    fn from(e: CompileError) -> Self {
        let log = match e {
            CompileError::CompileError { nvrtc, log, .. } => {
                format!("{nvrtc:?}: {}", log.to_string_lossy())
            }
            other => format!("{other:?}"),
        };
        CudaError::Compile { log }
    }
}

/// `Result` with [`CudaError`].
pub type Result<T> = core::result::Result<T, CudaError>;

/// The error of a model the GPU path cannot describe (a tensor without a region, a size past
/// the kernels' 32-bit arguments): `Model::parse` already rejects such models.
pub(super) fn invalid() -> CudaError {
    CudaError::Driver(DriverError(sys::CUresult::CUDA_ERROR_INVALID_VALUE))
}
