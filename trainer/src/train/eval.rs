//! The test set at the end of an epoch: every rank evaluates its share, the sums are added
//! over ranks.

use std::time::Instant;

use super::Trainer;
use crate::eval::evaluate_shard;
use crate::Result;

/// The test set's mean loss and accuracy over all ranks, and the seconds it took.
pub(super) struct TestScore {
    pub loss: f64,
    pub accuracy: f64,
    pub seconds: f64,
}

impl Trainer {
    /// Evaluates after every epoch with `eval_every_epoch`, else after the last only; `None`
    /// when this epoch does not evaluate or there is no test set.
    pub(super) fn evaluate_epoch(&self) -> Result<Option<TestScore>> {
        let last = self.epoch + 1 == self.cfg.epochs;
        if !(self.cfg.eval_every_epoch || last) || self.data.test.is_empty() {
            return Ok(None);
        }
        let t = Instant::now();
        let r = evaluate_shard(
            self.model.as_ref(),
            &self.data.test,
            &self.norm,
            self.cfg.eval_batch_size,
            &self.dev,
            (self.dp.rank(), self.dp.world()),
        )?;
        let s = self.dp.sum(
            &[r.loss * r.images as f64, r.correct as f64, r.images as f64],
            &self.dev,
        )?;
        Ok(Some(TestScore {
            loss: s[0] / s[2].max(1.0),
            accuracy: s[1] / s[2].max(1.0),
            seconds: t.elapsed().as_secs_f64(),
        }))
    }
}
