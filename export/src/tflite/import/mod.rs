//! `.tflite` → `.o8`: TensorFlow Lite int8 models (the MLPerf Tiny reference models, MobileNets,
//! DS-CNNs, ResNets, octet's own `.tflite` exports) imported into octet's format, the same
//! integer arithmetic, so that octet's runtime gives TensorFlow Lite Micro's bytes.
//!
//! One concern per file: `read` verifies the flatbuffer and reads its tensors and operators
//! with every index checked (a hostile file is an error, never a panic); `lower` maps each
//! TFLite op to the `.o8` op of the same arithmetic, its fixed-point parameters derived from the
//! float scales as TFLite Micro derives them. The result is written by the exporter's `.o8`
//! writer and checked by the runtime's parser before it is handed out.

mod lower;
mod read;

pub use lower::SUPPORTED;

use octet_runtime::Rounding;
use serde::Serialize;

/// Why a `.tflite` cannot be imported.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImportError {
    /// Not a TFLite flatbuffer, or one that fails verification.
    #[error("not a valid .tflite: {0}")]
    NotTflite(String),
    /// A structural fault: an index out of range, a missing input, shapes that disagree.
    #[error("malformed .tflite: {0}")]
    Malformed(String),
    /// A valid model using something outside octet's op set or int8 contract.
    #[error("cannot import: {0}")]
    Unsupported(String),
    /// The `.o8` written fails the runtime's validation (an importer bug, or a model beyond the
    /// format's limits, e.g. an accumulator that could overflow int32).
    #[error("the imported model fails octet's validation: {0}")]
    Invalid(String),
}

/// How to import.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImportOptions {
    /// The rounding the `.o8` records: TFLite's double rounding (stock TFLite Micro's, the
    /// default) or octet's single (TFLite built with `TFLITE_SINGLE_ROUNDING`).
    pub rounding: Rounding,
}

impl Default for ImportOptions {
    fn default() -> Self {
        ImportOptions {
            rounding: Rounding::Double,
        }
    }
}

/// One TFLite operator and what it became.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ImportedOp {
    /// Its index in the TFLite subgraph.
    pub index: usize,
    /// TFLite's builtin name (`CONV_2D`).
    pub tflite: String,
    /// The `.o8` op kind, or how it was absorbed (`view (no op)`, the input conversion).
    pub octet: String,
}

/// An imported model: the `.o8` bytes and what each operator became.
#[derive(Debug, Clone)]
pub struct Imported {
    pub bytes: Vec<u8>,
    pub ops: Vec<ImportedOp>,
}

/// Imports the `.tflite` flatbuffer `tflite` into `.o8` bytes (validated by the runtime).
pub fn import(tflite: &[u8], opts: &ImportOptions) -> Result<Imported, ImportError> {
    let file = read::TfliteFile::parse(tflite)?;
    let (model, ops) = lower::Lowering::new(&file, opts.rounding).run()?;
    let bytes = model
        .to_bytes()
        .map_err(|e| ImportError::Unsupported(e.to_string()))?;
    octet_runtime::Model::parse(&bytes).map_err(|e| ImportError::Invalid(e.to_string()))?;
    Ok(Imported { bytes, ops })
}

/// Whether `bytes` look like a `.tflite` flatbuffer (the `TFL3` identifier at bytes 4..8).
pub fn is_tflite(bytes: &[u8]) -> bool {
    bytes.get(4..8) == Some(b"TFL3")
}
