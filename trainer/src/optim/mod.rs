//! The optimiser and learning-rate schedules.

mod schedule;
mod sgd;

pub use schedule::{scaled_lr, LrPlan, Schedule};
pub use sgd::Sgd;
