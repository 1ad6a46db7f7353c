//! One (micro-)batch of training: forward, backward, its gradients added to those of the
//! earlier micro-batches, and after the last one the all-reduce and the SGD update.

use candle_core::backprop::{GradReady, GradStore};
use candle_core::{DType, Tensor, Var};
use octet_models::Network;

use super::Trainer;
use crate::{Normalizer, Result, TrainError};

/// Gradients of the micro-batches since the last optimiser step.
pub(super) struct Accumulation {
    /// The trainable parameters, whose gradients add up.
    vars: Vec<Var>,
    pending: Option<GradStore>,
    micro: usize,
}

/// A batch's mean loss and correct count, still on the device, and the learning rate of the
/// optimiser step it ended, if it ended one.
pub(super) struct StepResult {
    pub loss: Tensor,
    pub correct: Tensor,
    pub stepped_at: Option<f64>,
}

impl Accumulation {
    pub(super) fn new(model: &dyn Network) -> Self {
        Self {
            vars: model.params().trainable().map(|p| p.var.clone()).collect(),
            pending: None,
            micro: 0,
        }
    }

    /// `grads` added to those of the earlier micro-batches since the last step.
    fn add(&mut self, mut grads: GradStore) -> candle_core::Result<GradStore> {
        let Some(mut sum) = self.pending.take() else {
            return Ok(grads);
        };
        for v in &self.vars {
            if let Some(g) = grads.remove(v.as_tensor()) {
                let total = match sum.get(v.as_tensor()) {
                    Some(a) => (a + g)?,
                    None => g,
                };
                sum.insert(v.as_tensor(), total);
            }
        }
        Ok(sum)
    }
}

impl Trainer {
    /// Trains on one uploaded batch; `last_batch` (of the epoch) steps the optimiser even
    /// before `accumulate` micro-batches have added up. Nothing here waits for the device.
    pub(super) fn train_batch(
        &mut self,
        acc: &mut Accumulation,
        x: &Tensor,
        y: &Tensor,
        last_batch: bool,
    ) -> Result<StepResult> {
        let batch_size = self.cfg.batch_size;
        let on_device = |e| TrainError::from_step(e, batch_size);
        // Dropout's masks from the seed, step and micro-batch: a resumed run draws the same.
        let key = octet_models::dropout::key(self.cfg.seed, self.step, acc.micro);
        self.model.set_dropout_key(key);
        acc.micro += 1;
        let scale = 1.0 / self.cfg.accumulate as f64;
        let (model, norm) = (self.model.as_ref(), &self.norm);
        if acc.micro < self.cfg.accumulate && !last_batch {
            let (grads, loss, correct) =
                forward_backward(model, norm, x, y, scale, None).map_err(on_device)?;
            acc.pending = Some(acc.add(grads)?);
            return Ok(StepResult {
                loss,
                correct,
                stepped_at: None,
            });
        }
        let lr = self.plan.lr(self.step);
        let mut step = || -> candle_core::Result<(Tensor, Tensor)> {
            let (grads, loss, correct) = if self.dp.overlaps() {
                // Each bucket's all-reduce starts while the rest of backward is queued.
                let mut reducer = self.dp.reducer(acc.pending.take());
                let mut ready = |v: &Tensor, g: &Tensor| reducer.ready(v, g);
                let (mut grads, loss, correct) =
                    forward_backward(model, norm, x, y, scale, Some(&mut ready))?;
                reducer.finish(&mut grads)?;
                (grads, loss, correct)
            } else {
                let (grads, loss, correct) = forward_backward(model, norm, x, y, scale, None)?;
                let mut grads = acc.add(grads)?;
                self.dp.average_grads(&mut grads)?;
                (grads, loss, correct)
            };
            self.opt.step(&grads, lr)?;
            Ok((loss, correct))
        };
        let (loss, correct) = step().map_err(on_device)?;
        self.step += 1;
        acc.micro = 0;
        Ok(StepResult {
            loss,
            correct,
            stepped_at: Some(lr),
        })
    }
}

/// Forward and backward of one (micro-)batch, the loss scaled by `scale` before backward,
/// `ready` called with each parameter's gradient as soon as backward has finished it;
/// returns the gradients and, still on the device, the batch's mean loss and correct count.
fn forward_backward(
    model: &dyn Network,
    norm: &Normalizer,
    x: &Tensor,
    y: &Tensor,
    scale: f64,
    ready: Option<GradReady<'_>>,
) -> candle_core::Result<(GradStore, Tensor, Tensor)> {
    let logits = model.forward(&norm.apply(x)?, true)?;
    let loss = candle_nn::loss::cross_entropy(&logits, y)?;
    let scaled = if scale == 1.0 {
        loss.clone()
    } else {
        (&loss * scale)?
    };
    let grads = match ready {
        Some(ready) => model.ops().backward_hooked(&scaled, ready)?,
        None => model.ops().backward(&scaled)?,
    };
    let ok = logits.argmax(1)?.eq(y)?.to_dtype(DType::F32)?.sum_all()?;
    Ok((grads, loss.detach(), ok))
}
