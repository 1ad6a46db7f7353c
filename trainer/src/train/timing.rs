//! Where an epoch's time went: this rank's phases from the step clock less the collective's
//! own accounting of its all-reduces, and in a data-parallel run every rank's, gathered, the
//! epoch lasting as long as its slowest rank.

use super::{RunOptions, Trainer};
use crate::metrics::{EpochTimes, RankTimes};
use crate::step_clock::{Phase, StepClock};
use crate::{Result, TrainError};

impl Trainer {
    /// Completes `times` (the loader's wait and the pass's wall time, measured by the loop)
    /// with `clock`'s phases and the all-reduce statistics; writes the epoch's timeline if
    /// asked to; returns every rank's times too when there are several.
    pub(super) fn epoch_times(
        &self,
        mut times: EpochTimes,
        clock: &StepClock,
        opts: &RunOptions,
    ) -> Result<(EpochTimes, Vec<RankTimes>)> {
        let (rank, world) = (self.dp.rank(), self.dp.world());
        times.h2d_s = clock.seconds(Phase::H2d)?;
        times.compute_s = clock.seconds(Phase::Compute)?;
        if let (Some(dir), Some(steps)) = (&opts.timeline, clock.timeline()?) {
            let comm = self.dp.collective().timeline()?;
            crate::timeline::write(dir, rank, self.epoch + 1, &steps, &comm)?;
        }
        // Device-timed all-reduce traffic of this rank. The compute phase above includes
        // only the time its stream waited for the results; the rest ran beside it.
        let comm = self.dp.collective().take_stats()?;
        times.comm_s = comm.seconds;
        times.comm_wait_s = comm.wait_s;
        times.comm_exposed_s = comm.exposed_s;
        times.compute_s = (times.compute_s - comm.exposed_s).max(0.0);
        times.comm_bytes = comm.bytes;
        times.busbw_gbs = comm.busbw_gbs(world);
        if world == 1 {
            return Ok((times, Vec::new()));
        }
        let mine = to_wire(&RankTimes::of(rank, &times));
        let ranks = self
            .dp
            .gather(&mine, &self.dev)?
            .iter()
            .enumerate()
            .map(|(rank, v)| from_wire(rank, v))
            .collect::<Result<Vec<_>>>()?;
        if let Some(slowest) = ranks.iter().map(|r| r.train_s).reduce(f64::max) {
            times.train_s = slowest;
        }
        Ok((times, ranks))
    }
}

impl RankTimes {
    /// Rank `rank`'s share of an epoch that took `times` there.
    fn of(rank: usize, times: &EpochTimes) -> Self {
        RankTimes {
            rank,
            data_s: times.data_s,
            h2d_s: times.h2d_s,
            compute_s: times.compute_s,
            comm_s: times.comm_s,
            comm_wait_s: times.comm_wait_s,
            comm_exposed_s: times.comm_exposed_s,
            comm_bytes: times.comm_bytes,
            busbw_gbs: times.busbw_gbs,
            train_s: times.train_s,
        }
    }
}

/// A rank's times as the numbers `DataParallel::gather` carries, in `from_wire`'s order.
fn to_wire(t: &RankTimes) -> [f64; 9] {
    [
        t.data_s,
        t.h2d_s,
        t.compute_s,
        t.comm_s,
        t.comm_wait_s,
        t.comm_exposed_s,
        t.comm_bytes as f64,
        t.busbw_gbs,
        t.train_s,
    ]
}

fn from_wire(rank: usize, v: &[f64]) -> Result<RankTimes> {
    let [data_s, h2d_s, compute_s, comm_s, comm_wait_s, comm_exposed_s, comm_bytes, busbw_gbs, train_s] =
        <[f64; 9]>::try_from(v).map_err(|_| {
            TrainError::Dist(format!(
                "rank {rank} sent {} timing figures, expected 9",
                v.len()
            ))
        })?;
    Ok(RankTimes {
        rank,
        data_s,
        h2d_s,
        compute_s,
        comm_s,
        comm_wait_s,
        comm_exposed_s,
        comm_bytes: comm_bytes as u64,
        busbw_gbs,
        train_s,
    })
}
