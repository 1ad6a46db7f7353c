//! The optimiser and learning-rate schedules.

#[cfg(feature = "cuda")]
mod fused_sgd;
mod schedule;
mod sgd;

pub use schedule::{scaled_lr, LrPlan, Schedule};
pub use sgd::{Sgd, MOMENTUM_PREFIX};
