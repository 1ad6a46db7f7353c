use std::path::PathBuf;

/// Everything training, evaluation and checkpointing can fail with.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    #[error(transparent)]
    Data(#[from] crate::data::DataError),
    #[error(transparent)]
    Model(#[from] octet_models::ModelError),
    #[error(
        "the loss became {value} at epoch {epoch}, step {step}: training stopped. The last \
         checkpoint of a finished epoch is intact; lower --lr or add --warmup-epochs and resume"
    )]
    NonFiniteLoss {
        epoch: usize,
        step: usize,
        value: f32,
    },
    #[error(
        "batch size {batch} does not fit in GPU memory ({detail}): try --batch-size {}",
        (batch / 2).max(1)
    )]
    OutOfMemory { batch: usize, detail: String },
    #[error(
        "batch size {batch} is beyond what cuDNN accepts ({detail}; tensors over 2^31 elements \
         are refused): try --batch-size {}",
        (batch / 2).max(1)
    )]
    BatchTooLarge { batch: usize, detail: String },
    #[error("device '{0}': expected {forms}", forms = crate::device::DEVICE_FORMS)]
    BadDevice(String),
    #[error(
        "this octet was built without CUDA support, so --device {0} is unavailable: rebuild with \
         `cargo build --release --features cuda`, or use --device cpu"
    )]
    NoCuda(String),
    #[error("checkpoint {path}: {reason}")]
    Checkpoint { path: PathBuf, reason: String },
    #[error("{0}")]
    Config(String),
    /// Distributed setup: the rank environment, the rendezvous or the communicator.
    #[error("{0}")]
    Dist(String),
    /// The OS error's text is part of the message, not a `source` (which `{:#}` would print a
    /// second time).
    #[error("{path}: {error}")]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error(transparent)]
    Candle(candle_core::Error),
}

impl From<candle_core::Error> for TrainError {
    fn from(e: candle_core::Error) -> Self {
        TrainError::Candle(without_backtrace(e))
    }
}

/// The error itself: a user needs the message, not candle's captured stack.
pub(crate) fn without_backtrace(e: candle_core::Error) -> candle_core::Error {
    match e {
        candle_core::Error::WithBacktrace { inner, .. } => without_backtrace(*inner),
        e => e,
    }
}

impl TrainError {
    /// Maps a device error raised while running a batch of `batch` images: an allocation
    /// failure becomes [`TrainError::OutOfMemory`] with advice, anything else stays as it is.
    pub fn from_step(e: candle_core::Error, batch: usize) -> Self {
        let e = without_backtrace(e);
        let text = e.to_string();
        let detail = text.lines().next().unwrap_or("").to_string();
        if text.to_ascii_lowercase().contains("out of memory")
            || text.contains("OUT_OF_MEMORY")
            || text.contains("ALLOC_FAILED")
        {
            TrainError::OutOfMemory { batch, detail }
        } else if text.contains("CUDNN_STATUS_NOT_SUPPORTED") && batch > 1 {
            TrainError::BatchTooLarge { batch, detail }
        } else {
            TrainError::Candle(e)
        }
    }
}

pub type Result<T> = std::result::Result<T, TrainError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_allocation_failure_becomes_advice() {
        let e = candle_core::Error::Msg(
            "DriverError(CUDA_ERROR_OUT_OF_MEMORY, \"out of memory\")".into(),
        );
        let t = TrainError::from_step(e, 4096).to_string();
        assert!(
            t.contains("batch size 4096 does not fit") && t.contains("--batch-size 2048"),
            "{t}"
        );
        let e = candle_core::Error::Msg("CudnnError(CUDNN_STATUS_NOT_SUPPORTED)".into()).bt();
        let t = TrainError::from_step(e, 65536).to_string();
        assert!(
            t.contains("65536 is beyond what cuDNN accepts") && !t.contains("__libc_start_main"),
            "{t}"
        );
        let other = TrainError::from_step(candle_core::Error::Msg("shape mismatch".into()), 8);
        assert!(matches!(other, TrainError::Candle(_)));
    }
}
