//! Reading the training loss back from the device: every `READBACK_STEPS` steps, in one
//! transfer, rather than once per step.

use candle_core::Tensor;

use crate::TrainError;

/// Steps queued between two read-backs of the loss: each read-back waits for the device, so
/// this bounds how far the host runs ahead and how late a non-finite loss is noticed.
pub const READBACK_STEPS: usize = 20;

/// One step's loss and correct count, still on the device.
struct Queued {
    loss: Tensor,
    correct: Tensor,
    images: usize,
    step: usize,
}

/// Losses and correct counts of the steps since the last read-back, on the device, and the
/// sums of those read back so far.
#[derive(Default)]
pub struct Tally {
    queued: Vec<Queued>,
    pub loss_sum: f64,
    pub correct: usize,
    pub seen: usize,
}

impl Tally {
    /// Queues the mean `loss` and `correct` count of `images` images at optimiser `step`.
    pub fn push(&mut self, loss: Tensor, correct: Tensor, images: usize, step: usize) {
        self.queued.push(Queued {
            loss,
            correct,
            images,
            step,
        });
    }

    pub fn queued(&self) -> usize {
        self.queued.len()
    }

    pub fn mean_loss(&self) -> f64 {
        self.loss_sum / self.seen.max(1) as f64
    }

    pub fn accuracy(&self) -> f64 {
        self.correct as f64 / self.seen.max(1) as f64
    }

    /// Reads the queued values back in one transfer; a non-finite loss is an error naming
    /// its step.
    pub fn read(&mut self) -> Result<(), NonFinite> {
        let queued = std::mem::take(&mut self.queued);
        if queued.is_empty() {
            return Ok(());
        }
        let both: Vec<Tensor> = queued
            .iter()
            .flat_map(|q| [q.loss.reshape(1), q.correct.reshape(1)])
            .collect::<candle_core::Result<_>>()
            .map_err(NonFinite::Device)?;
        let values = Tensor::cat(&both, 0)
            .and_then(|t| {
                crate::device::wait_idle(t.device())?;
                t.to_vec1::<f32>()
            })
            .map_err(NonFinite::Device)?;
        for (q, v) in queued.iter().zip(values.chunks(2)) {
            if !v[0].is_finite() {
                return Err(NonFinite::Loss {
                    step: q.step,
                    value: v[0],
                });
            }
            self.loss_sum += v[0] as f64 * q.images as f64;
            self.correct += v[1] as usize;
            self.seen += q.images;
        }
        Ok(())
    }
}

/// Why a read-back failed: the device, or a loss that is not finite.
pub enum NonFinite {
    Device(candle_core::Error),
    Loss { step: usize, value: f32 },
}

impl NonFinite {
    pub fn at(self, epoch: usize, batch_size: usize) -> TrainError {
        match self {
            NonFinite::Device(e) => TrainError::from_step(e, batch_size),
            NonFinite::Loss { step, value } => TrainError::NonFiniteLoss { epoch, step, value },
        }
    }
}
