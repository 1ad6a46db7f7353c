//! One epoch: the pass of steps over this rank's share of the training set, then its times
//! and sums over ranks, then the test set.

use std::time::Instant;

use indicatif::ProgressBar;

use super::step::Accumulation;
use super::{progress, RunOptions, Trainer};
use crate::data::{Augment, Loader, LoaderConfig, Sampler};
use crate::device::sync;
use crate::dist::BnMode;
use crate::metrics::{EpochRecord, EpochTimes};
use crate::readback::{Tally, READBACK_STEPS};
use crate::step_clock::{Phase, StepClock};
use crate::upload::Uploader;
use crate::{Result, TrainError};

/// What the pass of steps leaves for the epoch's record.
struct Pass {
    tally: Tally,
    /// The learning rate of the last optimiser step.
    lr: f64,
    /// The loader's wait and the pass's wall time; the rest is filled in by `epoch_times`.
    times: EpochTimes,
    clock: StepClock,
}

impl Trainer {
    pub(super) fn train_epoch(&mut self, opts: &RunOptions) -> Result<EpochRecord> {
        // The loader thread starts preparing batches while the ranks line up.
        let loader = self.loader(opts.prefetch)?;
        // Every rank starts the epoch's clock together, as the PyTorch peer does
        // (`synchronize(); barrier()`): whatever rank 0 did after the last epoch (copying the
        // checkpoint to the host, evaluation) belongs to no epoch.
        self.dp.barrier(&self.dev)?;
        let _ = self.dp.collective().take_stats()?;
        let pass = self.pass(loader, opts)?;
        let (mut times, ranks) = self.epoch_times(pass.times, &pass.clock, opts)?;
        // Every rank holds every rank's times: the slowest rank's decide, alike everywhere.
        let slowest =
            |f: fn(&crate::metrics::RankTimes) -> f64| ranks.iter().map(f).fold(0.0, f64::max);
        let bucket_tail = self.dp.choose_tail(
            slowest(|r| r.compute_s),
            slowest(|r| r.comm_s + r.comm_wait_s),
        );
        let t = &pass.tally;
        let totals = self
            .dp
            .sum(&[t.loss_sum, t.correct as f64, t.seen as f64], &self.dev)?;
        let (loss_sum, correct, seen) = (totals[0], totals[1], totals[2] as usize);
        if self.cfg.bn == BnMode::Broadcast {
            self.dp.broadcast_buffers(self.model.params())?;
        }
        let test = self.evaluate_epoch()?;
        if let Some(t) = &test {
            times.eval_s = t.seconds;
        }
        Ok(EpochRecord {
            epoch: self.epoch + 1,
            step: self.step,
            lr: pass.lr,
            train_loss: loss_sum / seen.max(1) as f64,
            train_accuracy: correct / seen.max(1) as f64,
            test_loss: test.as_ref().map(|t| t.loss),
            test_accuracy: test.as_ref().map(|t| t.accuracy),
            images: seen,
            images_per_s: seen as f64 / times.train_s.max(1e-9),
            times,
            world: self.dp.world(),
            ranks,
            bucket_tail,
        })
    }

    /// The steps over this rank's share of the epoch, ended by waiting for the device.
    fn pass(&mut self, mut loader: Loader, opts: &RunOptions) -> Result<Pass> {
        let batches = loader.num_batches();
        let show = opts.progress && self.dp.rank() == 0;
        let bar = progress::bar(show, batches as u64, self.epoch + 1, self.cfg.epochs);
        let mut clock = match opts.timeline {
            Some(_) => StepClock::with_timeline(&self.dev)?,
            None => StepClock::new(&self.dev),
        };
        let mut uploader = Uploader::new();
        let mut acc = Accumulation::new(self.model.as_ref());
        let mut tally = Tally::default();
        let mut times = EpochTimes::default();
        let mut lr = self.plan.lr(self.step);
        let start = Instant::now();
        for index in 0.. {
            let t = Instant::now();
            let Some(batch) = loader.next() else { break };
            times.data_s += t.elapsed().as_secs_f64();

            // Nothing below waits for the device: steps queue up behind each other, and the
            // loss is read back every few steps (`readback.rs`), so the GPU never idles while
            // the host prepares the next launch.
            clock.start()?;
            let n = batch.len;
            let ds = &self.train;
            let shape = (n, ds.channels, ds.height, ds.width);
            let (x, y) = uploader
                .upload(batch.images, batch.labels, shape, &self.dev)
                .map_err(|e| TrainError::from_step(e, self.cfg.batch_size))?;
            clock.end(Phase::H2d)?;
            let last = index + 1 == batches;
            let r = self.train_batch(&mut acc, &x, &y, last)?;
            lr = r.stepped_at.unwrap_or(lr);
            clock.end(Phase::Compute)?;
            tally.push(r.loss, r.correct, n, self.step);
            if tally.queued() >= READBACK_STEPS || last {
                self.read_back(&mut tally, &bar)?;
                progress::show(&bar, index + 1, &tally);
            }
        }
        sync(&self.dev)?;
        times.train_s = start.elapsed().as_secs_f64();
        bar.finish_and_clear();
        Ok(Pass {
            tally,
            lr,
            times,
            clock,
        })
    }

    /// This rank's share of the epoch's batches, shuffled and augmented by epoch and seed,
    /// prepared `prefetch` batches ahead on a thread.
    fn loader(&self, prefetch: usize) -> Result<Loader> {
        let cfg = &self.cfg;
        let sampler = Sampler::new(self.train.len(), true, cfg.seed)
            .with_rank(self.dp.rank(), self.dp.world())?;
        let batches = LoaderConfig {
            batch_size: cfg.batch_size,
            augment: cfg.augment.then(Augment::standard),
            seed: cfg.seed,
            prefetch,
        };
        Ok(Loader::new(
            self.train.clone(),
            &sampler,
            self.epoch as u64,
            &batches,
        ))
    }

    /// Reads the queued losses back; a failure ends the epoch with the bar left standing.
    fn read_back(&self, tally: &mut Tally, bar: &ProgressBar) -> Result<()> {
        tally.read().map_err(|e| {
            bar.abandon();
            e.at(self.epoch + 1, self.cfg.batch_size)
        })
    }
}
