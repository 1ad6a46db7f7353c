//! Training for octet: data sets and augmentation, SGD and schedules, checkpoints, timing and
//! the training loop (one device here; data parallelism builds on the same loop).

pub mod atomic;
pub mod checkpoint;
mod choice;
pub mod config;
pub mod data;
pub mod device;
pub mod dist;
mod error;
pub mod eval;
pub mod metrics;
mod normalize;
pub mod optim;
mod precision;
mod pth;
mod readback;
pub mod saver;
pub mod step_clock;
pub mod timeline;
pub mod train;
pub mod upload;

pub use error::{Result, TrainError};
pub use normalize::Normalizer;
pub use precision::Precision;
