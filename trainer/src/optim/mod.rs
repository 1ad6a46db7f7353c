//! The optimiser and learning-rate schedules.

mod schedule;
mod sgd;

pub use schedule::{LrPlan, Schedule};
pub use sgd::Sgd;
