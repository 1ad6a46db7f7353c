//! Errors of the data pipeline. Every variant that comes from a file names it, so a
//! message alone tells the user what to fix.

use std::path::PathBuf;

/// The forms [`crate::data::DataSource`] accepts, quoted by parse errors.
pub(crate) const SOURCE_FORMS: &str = "auto, bundled, fashion-mnist, fashion-mnist:DIR, \
     cifar10:DIR, synthetic, synthetic:N, synthetic:N:M, synthetic:N:M:SEED";

#[derive(Debug, thiserror::Error)]
pub enum DataError {
    #[error("not found: {} ({hint})", display_paths(.paths))]
    Missing { paths: Vec<PathBuf>, hint: String },

    /// The OS or gzip error's text is part of the message, not a `source` (which `{:#}` would
    /// print a second time).
    #[error("{}: {error}", .path.display())]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },

    #[error("{}: bad magic number: expected {expected:#010x}, found {found:#010x}", .path.display())]
    BadMagic {
        path: PathBuf,
        expected: u32,
        found: u32,
    },

    #[error("{}: truncated: expected {expected} bytes, found {actual}", .path.display())]
    Truncated {
        path: PathBuf,
        expected: u64,
        actual: u64,
    },

    #[error("{}: expected {expected} bytes, found {actual} (trailing data)", .path.display())]
    TrailingData {
        path: PathBuf,
        expected: u64,
        actual: u64,
    },

    #[error(
        "{}: size {size} bytes is not a positive multiple of the {record}-byte record \
         (an official CIFAR-10 batch is {official} bytes)",
        .path.display()
    )]
    BadRecordSize {
        path: PathBuf,
        size: u64,
        record: u64,
        official: u64,
    },

    #[error("{}: expected {expected} images, found {found}", .path.display())]
    BadShape {
        path: PathBuf,
        expected: String,
        found: String,
    },

    #[error(
        "{} has {images} images but {} has {labels} labels",
        .images_path.display(),
        .labels_path.display()
    )]
    CountMismatch {
        images_path: PathBuf,
        images: usize,
        labels_path: PathBuf,
        labels: usize,
    },

    #[error("{}: record {index} has label {label}, expected below {classes}", .path.display())]
    LabelOutOfRange {
        path: PathBuf,
        index: usize,
        label: u8,
        classes: usize,
    },

    #[error("invalid data source {input:?}: {reason}; accepted: {SOURCE_FORMS}")]
    BadSource { input: String, reason: String },

    /// Arguments that do not fit together (shapes, ranks, sizes).
    #[error("{0}")]
    Invalid(String),
}

fn display_paths(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}
