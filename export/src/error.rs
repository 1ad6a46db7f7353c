use octet_models::ModelError;

/// Everything that can go wrong while exporting. Each variant names what is at fault.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// A checkpoint tensor is missing, misshapen or unreadable: the models crate's errors for
    /// the same faults (`MissingTensor`, `ShapeMismatch`, `Tensor`).
    #[error(transparent)]
    Checkpoint(#[from] ModelError),
    #[error("bad input: {0}")]
    BadInput(String),
    #[error(
        "layer '{layer}' sums {k} products per output; the int32 accumulator is only safe up to {}",
        octet_runtime::format::MAX_ACCUMULATION
    )]
    AccumulatorOverflow { layer: String, k: usize },
    #[error("layer '{layer}': multiplier {value:e} cannot be encoded as M0·2^(shift−31)")]
    Multiplier { layer: String, value: f64 },
    #[error("{what} does not fit the .o8 format: {value} > {max}")]
    TooLarge { what: String, value: u64, max: u64 },
    /// A `.o8` the TFLite converter cannot express with the same arithmetic.
    #[error("cannot express in TFLite: {0}")]
    Tflite(String),
    #[error("runtime: {0}")]
    Runtime(String),
    #[error("plot: {0}")]
    Plot(String),
    /// The OS error's text is part of the message, not a `source` (printed twice by `{:#}`).
    #[error("{path}: {error}")]
    Io {
        path: std::path::PathBuf,
        error: std::io::Error,
    },
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
}

pub type Result<T> = std::result::Result<T, ExportError>;
