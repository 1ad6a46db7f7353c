use std::f64::consts::PI;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::choice::{self, value_enum, Named};

/// The shape of the learning rate over training, as a factor of the base rate.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Schedule {
    Constant,
    /// × gamma every `every` epochs (PyTorch StepLR).
    Step {
        every: usize,
        gamma: f64,
    },
    /// Cosine from the base rate to 0 (CosineAnnealingLR over the whole run).
    Cosine,
    /// PyTorch OneCycleLR (cosine): base/25 → base over the first 30%, then → base/25e4.
    OneCycle,
}

impl Schedule {
    /// `step` as named alone: × 0.1 every 30 epochs (`--step-every`, `--gamma`).
    pub const STEP: Schedule = Schedule::Step {
        every: 30,
        gamma: 0.1,
    };

    /// Every schedule with its names and help, as `--schedule` takes them (`step` stands for
    /// [`Schedule::STEP`]).
    pub const NAMED: &'static [Named<Schedule>] = &[
        Named {
            value: Schedule::Constant,
            names: &["constant"],
            help: "the rate stays at --lr",
        },
        Named {
            value: Schedule::STEP,
            names: &["step"],
            help: "× --gamma every --step-every epochs (PyTorch StepLR)",
        },
        Named {
            value: Schedule::Cosine,
            names: &["cosine"],
            help: "cosine from --lr to 0 over the run (CosineAnnealingLR)",
        },
        Named {
            value: Schedule::OneCycle,
            names: &["onecycle", "one-cycle"],
            help: "lr/25 → lr over the first 30%, then → lr/25e4 (OneCycleLR)",
        },
    ];
}

value_enum!(
    Schedule,
    [
        Schedule::Constant,
        Schedule::STEP,
        Schedule::Cosine,
        Schedule::OneCycle
    ]
);

impl FromStr for Schedule {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        choice::parse(s, "--schedule", Schedule::NAMED)
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Schedule::Constant => f.write_str("constant"),
            Schedule::Step { every, gamma } => {
                write!(f, "step(every {every} epochs, gamma {gamma})")
            }
            Schedule::Cosine => f.write_str("cosine"),
            Schedule::OneCycle => f.write_str("onecycle"),
        }
    }
}

/// The linear scaling rule (Goyal et al., 2017, "Accurate, Large Minibatch SGD"): a rate
/// tuned for `base_batch` images per step, multiplied by `global_batch / base_batch` for a
/// larger (all ranks together) batch. Pair it with a few epochs of warm-up, which the rule
/// needs early in training. A `base_batch` of 0 counts as 1.
pub fn scaled_lr(base_lr: f64, global_batch: usize, base_batch: usize) -> f64 {
    base_lr * global_batch as f64 / base_batch.max(1) as f64
}

/// A schedule laid over a run: the learning rate of every optimiser step.
#[derive(Debug, Clone, PartialEq)]
pub struct LrPlan {
    pub base_lr: f64,
    pub schedule: Schedule,
    pub warmup_steps: usize,
    pub steps_per_epoch: usize,
    pub total_steps: usize,
}

impl LrPlan {
    pub fn new(
        base_lr: f64,
        schedule: Schedule,
        warmup_epochs: f64,
        steps_per_epoch: usize,
        epochs: usize,
    ) -> Self {
        let total_steps = steps_per_epoch.saturating_mul(epochs).max(1);
        let warmup_steps =
            ((warmup_epochs * steps_per_epoch as f64).round() as usize).min(total_steps);
        Self {
            base_lr,
            schedule,
            warmup_steps,
            steps_per_epoch: steps_per_epoch.max(1),
            total_steps,
        }
    }

    /// Learning rate of step `step` (0-based). Linear warm-up from base/warmup to base, then
    /// the schedule over the remaining steps.
    pub fn lr(&self, step: usize) -> f64 {
        if step < self.warmup_steps {
            return self.base_lr * (step + 1) as f64 / self.warmup_steps as f64;
        }
        let span = (self.total_steps - self.warmup_steps).max(1) as f64;
        let t = ((step - self.warmup_steps) as f64 / span).min(1.0);
        let factor = match self.schedule {
            Schedule::Constant => 1.0,
            Schedule::Step { every, gamma } => {
                gamma.powi((step / self.steps_per_epoch / every.max(1)) as i32)
            }
            Schedule::Cosine => 0.5 * (1.0 + (PI * t).cos()),
            Schedule::OneCycle => {
                let (start, low) = (1.0 / 25.0, 1.0 / 25.0 / 1e4);
                let anneal =
                    |from: f64, to: f64, x: f64| to + (from - to) * 0.5 * (1.0 + (PI * x).cos());
                if t < 0.3 {
                    anneal(start, 1.0, t / 0.3)
                } else {
                    anneal(1.0, low, (t - 0.3) / 0.7)
                }
            }
        };
        self.base_lr * factor
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn shapes() {
        let p = LrPlan::new(0.1, Schedule::Constant, 0.0, 10, 5);
        assert_eq!(p.lr(0), 0.1);
        assert_eq!(p.lr(49), 0.1);
        let p = LrPlan::new(
            0.1,
            Schedule::Step {
                every: 2,
                gamma: 0.1,
            },
            0.0,
            10,
            6,
        );
        assert!(
            (p.lr(19) - 0.1).abs() < 1e-12
                && (p.lr(20) - 0.01).abs() < 1e-12
                && (p.lr(45) - 0.001).abs() < 1e-12
        );
        let p = LrPlan::new(0.1, Schedule::Cosine, 0.0, 10, 10);
        assert_eq!(p.lr(0), 0.1);
        assert!((p.lr(50) - 0.05).abs() < 1e-12);
        assert!(p.lr(99) < 1e-4);
        let p = LrPlan::new(0.1, Schedule::OneCycle, 0.0, 10, 10);
        assert!((p.lr(0) - 0.004).abs() < 1e-12);
        assert!((p.lr(30) - 0.1).abs() < 1e-12);
        assert!(
            p.lr(99) < 1e-4 && p.lr(100) < 1e-6,
            "reaches base/25e4 at the end"
        );
        let p = LrPlan::new(0.1, Schedule::Cosine, 1.0, 10, 10);
        assert!(
            (p.lr(0) - 0.01).abs() < 1e-12
                && (p.lr(9) - 0.1).abs() < 1e-12
                && (p.lr(10) - 0.1).abs() < 1e-12
        );
    }

    #[test]
    fn linear_scaling_rule() {
        // Goyal et al.: 0.1 per 256 images gives 3.2 for 8192.
        assert!((scaled_lr(0.1, 8192, 256) - 3.2).abs() < 1e-12);
        assert!((scaled_lr(0.1, 128, 128) - 0.1).abs() < 1e-15);
        assert!((scaled_lr(0.1, 4 * 128, 128) - 0.4).abs() < 1e-12);
        assert!((scaled_lr(0.2, 64, 128) - 0.1).abs() < 1e-12);
        assert_eq!(scaled_lr(0.1, 32, 0), 3.2);
    }

    #[test]
    fn fractional_warmup_epochs() {
        // Half an epoch of 10 steps: 5 warm-up steps rising linearly, then the schedule.
        let p = LrPlan::new(0.4, Schedule::Constant, 0.5, 10, 4);
        assert_eq!(p.warmup_steps, 5);
        let lrs: Vec<f64> = (0..7).map(|s| p.lr(s)).collect();
        for (got, want) in lrs.iter().zip([0.08, 0.16, 0.24, 0.32, 0.4, 0.4, 0.4]) {
            assert!((got - want).abs() < 1e-12, "{lrs:?}");
        }
        // 2.5 epochs of 4 steps end at step 10; cosine then spans the 30 remaining steps.
        let p = LrPlan::new(0.1, Schedule::Cosine, 2.5, 4, 10);
        assert_eq!(p.warmup_steps, 10);
        assert!((p.lr(9) - 0.1).abs() < 1e-12 && (p.lr(10) - 0.1).abs() < 1e-12);
        assert!((p.lr(25) - 0.05).abs() < 1e-12);
        assert!(p.lr(8) < p.lr(9) && p.lr(10) > p.lr(11));
        // Fractions round to whole steps: 0.26 of 10 steps is 3 steps.
        assert_eq!(
            LrPlan::new(0.1, Schedule::Constant, 0.26, 10, 2).warmup_steps,
            3
        );
        // Warm-up longer than the run is cut to the run.
        let p = LrPlan::new(0.1, Schedule::Constant, 7.5, 10, 2);
        assert_eq!(p.warmup_steps, 20);
        assert!((p.lr(19) - 0.1).abs() < 1e-12);
    }

    #[test]
    fn parse_rejects_unknown() {
        assert_eq!("cosine".parse::<Schedule>().unwrap(), Schedule::Cosine);
        assert!("exp".parse::<Schedule>().unwrap_err().contains("onecycle"));
    }

    proptest! {
        #[test]
        fn rate_stays_within_base(kind in 0usize..4, warm in 0.0f64..3.0, spe in 1usize..50, ep in 1usize..20, step in 0usize..2000) {
            let s = [Schedule::Constant, Schedule::Step { every: 2, gamma: 0.5 }, Schedule::Cosine, Schedule::OneCycle][kind];
            let p = LrPlan::new(0.1, s, warm, spe, ep);
            let lr = p.lr(step);
            prop_assert!(lr.is_finite() && (0.0..=0.1 + 1e-12).contains(&lr));
        }
    }
}
