//! Data sets, augmentation, sampling and batching for training.
//!
//! Images are kept as raw `u8` pixels, planar C×H×W; conversion to normalised floats
//! happens on the device, and the int8 runtime consumes the same raw pixels.

mod augment;
mod bundled;
mod cifar;
mod dataset;
mod error;
mod idx;
mod loader;
mod sampler;
mod source;
mod synthetic;

pub use augment::Augment;
pub use dataset::{DataSplit, Dataset, Normalization};
pub use error::DataError;
pub use loader::{Batch, Loader, LoaderConfig};
pub use sampler::Sampler;
pub use source::{load, DataSource, FASHION_MNIST_SYSTEM_DIR};
pub use synthetic::synthetic;

pub type Result<T> = std::result::Result<T, DataError>;
