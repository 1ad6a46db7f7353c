//! `.o8` → `.tflite`: the same quantized model as a TensorFlow Lite flatbuffer, for TFLite and
//! TFLite Micro (int8 tensors, per-channel weight scales, int32 biases, raw `u8` pixels in); and
//! back, `.tflite` → `.o8` ([`import`]).
//!
//! One concern per file: `lower` maps the `.o8`'s ops to TFLite's (how each piece of octet's
//! arithmetic is expressed), `scales` chooses the float scales from which TFLite derives the
//! `.o8`'s integer multipliers, `graph` is the model in TFLite's terms, `encode` writes it with
//! the code flatc generated from TensorFlow Lite's `schema.fbs` (`schema_generated.rs`; see
//! `regenerate.sh` for its source and how to regenerate it).

mod encode;
mod graph;
pub mod import;
mod lower;
mod scales;

#[allow(
    clippy::all,
    clippy::pedantic,
    dead_code,
    deprecated,
    non_camel_case_types,
    non_snake_case,
    unsafe_op_in_unsafe_fn,
    unused_imports,
    mismatched_lifetime_syntaxes
)]
#[rustfmt::skip]
mod schema_generated;

/// TensorFlow Lite's schema (namespace `tflite`), as flatc generates it: the reader for tests
/// and tools, the builders for `encode`.
pub mod schema {
    pub use super::schema_generated::tflite::*;
}

pub use lower::{InexactMultiplier, MultiplierCheck};

use crate::{ExportError, Result};

/// A `.tflite` file and what its conversion found.
#[derive(Debug, Clone)]
pub struct TfliteExport {
    /// The flatbuffer.
    pub bytes: Vec<u8>,
    /// Whether TFLite derives every one of the `.o8`'s requantization multipliers.
    pub multipliers: MultiplierCheck,
}

/// Converts the `.o8` bytes to a `.tflite` flatbuffer of the same integer model.
pub fn to_tflite(o8: &[u8]) -> Result<TfliteExport> {
    let model = octet_runtime::Model::parse(o8)
        .map_err(|e| ExportError::BadInput(format!("not a valid .o8 model: {e}")))?;
    let (graph, multipliers) = lower::lower(&model)?;
    let bytes = encode::encode(&graph, "octet int8 model, converted from .o8");
    Ok(TfliteExport { bytes, multipliers })
}
