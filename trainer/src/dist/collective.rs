//! What synchronous data parallelism needs from a communication library, and the two
//! implementations that need no GPU: one rank alone, and ranks as threads of one process
//! (tests and CPU runs). NCCL implements the same trait in `nccl.rs`.

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use candle_core::{DType, Tensor};
use serde::{Deserialize, Serialize};

/// Collective operations over the ranks of one job. Every rank calls them in the same order
/// with tensors of the same shape; a call returns once this rank's result is enqueued.
pub trait Collective: Send + Sync {
    fn rank(&self) -> usize;
    fn world(&self) -> usize;
    /// Element-wise sum over all ranks of an f32 tensor.
    fn all_reduce_sum(&self, t: &Tensor) -> candle_core::Result<Tensor>;
    /// [`Collective::all_reduce_sum`] of each tensor, issued in order; an implementation may
    /// launch them together (NCCL groups them into one launch).
    fn all_reduce_sum_many(&self, ts: &[Tensor]) -> candle_core::Result<Vec<Tensor>> {
        ts.iter().map(|t| self.all_reduce_sum(t)).collect()
    }
    /// Starts [`Collective::all_reduce_sum_many`] (f32 or bf16 tensors) without ordering
    /// this rank's later work after it: the sums are this rank's to use once
    /// [`InFlight::wait`] returns them. NCCL runs them on a communication stream, so backward
    /// goes on meanwhile; implementations without one finish them here.
    fn all_reduce_start(&self, ts: &[Tensor]) -> candle_core::Result<Box<dyn InFlight>> {
        Ok(Box::new(Finished(self.all_reduce_sum_many(ts)?)))
    }
    /// Rank `root`'s `t` on every rank.
    fn broadcast(&self, t: &Tensor, root: usize) -> candle_core::Result<Tensor>;
    /// All-reduce traffic and time since the last call. Times are device times (CUDA events)
    /// where the implementation has them, so call this after the device has synchronised.
    fn take_stats(&self) -> candle_core::Result<CommStats>;
    /// The timed all-reduces since the last [`Collective::take_stats`], one row each, for a
    /// timeline; call it before `take_stats`. Empty where there are no device events.
    fn timeline(&self) -> candle_core::Result<Vec<CommMarks>> {
        Ok(Vec::new())
    }
}

/// Collectives started by [`Collective::all_reduce_start`].
pub trait InFlight: Send {
    /// The results, which this rank's later device work waits for; the inputs are held until
    /// then, so their memory is not reused while a transfer reads it.
    fn wait(self: Box<Self>) -> candle_core::Result<Vec<Tensor>>;
}

/// Collectives that finished when they were started.
pub struct Finished(pub Vec<Tensor>);

impl InFlight for Finished {
    fn wait(self: Box<Self>) -> candle_core::Result<Vec<Tensor>> {
        Ok(self.0)
    }
}

/// One all-reduce on a timeline, µs on the host clock (`step_clock::host_us`): when the host
/// queued it and when the device reached it, had every rank (the wait ends) and finished;
/// and when the compute stream began and ended waiting for its result (`exposed_*`, equal
/// where it did not have to wait).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CommMarks {
    pub host: f64,
    pub dev_arrived: f64,
    pub dev_start: f64,
    pub dev_end: f64,
    pub exposed_start: f64,
    pub exposed_end: f64,
    pub bytes: u64,
}

/// Traffic of the gradient all-reduces. `bytes` counts each call's payload once, as the
/// nccl-tests define algorithm bandwidth. `seconds` is the transfer alone; `wait_s` the time
/// this rank waited for the slowest rank to arrive (load imbalance), measured apart by a
/// one-element all-reduce just before each transfer. `exposed_s` is how long this rank's
/// compute waited for the results: the part of `seconds + wait_s` that nothing overlapped
/// (all of it where collectives block).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct CommStats {
    pub calls: usize,
    pub bytes: u64,
    pub seconds: f64,
    #[serde(default)]
    pub wait_s: f64,
    #[serde(default)]
    pub exposed_s: f64,
}

impl CommStats {
    pub fn add(&mut self, o: CommStats) {
        self.calls += o.calls;
        self.bytes += o.bytes;
        self.seconds += o.seconds;
        self.wait_s += o.wait_s;
        self.exposed_s += o.exposed_s;
    }

    /// The share of the collectives' time (transfer and waiting for peers) that compute
    /// overlapped, 0 to 1; `None` without any.
    pub fn hidden_share(&self) -> Option<f64> {
        let total = self.seconds + self.wait_s;
        (total > 0.0).then(|| (1.0 - self.exposed_s / total).clamp(0.0, 1.0))
    }

    /// Algorithm bandwidth, GB/s.
    pub fn algbw_gbs(&self) -> f64 {
        if self.seconds > 0.0 {
            self.bytes as f64 / self.seconds / 1e9
        } else {
            0.0
        }
    }

    /// Bus bandwidth as nccl-tests define it for all-reduce: algbw · 2(n−1)/n.
    pub fn busbw_gbs(&self, world: usize) -> f64 {
        busbw_factor(world) * self.algbw_gbs()
    }
}

pub fn busbw_factor(world: usize) -> f64 {
    if world > 1 {
        2.0 * (world - 1) as f64 / world as f64
    } else {
        0.0
    }
}

/// One rank alone: every collective is the identity.
#[derive(Debug, Default, Clone, Copy)]
pub struct Solo;

impl Collective for Solo {
    fn rank(&self) -> usize {
        0
    }
    fn world(&self) -> usize {
        1
    }
    fn all_reduce_sum(&self, t: &Tensor) -> candle_core::Result<Tensor> {
        Ok(t.clone())
    }
    fn broadcast(&self, t: &Tensor, _root: usize) -> candle_core::Result<Tensor> {
        Ok(t.clone())
    }
    fn take_stats(&self) -> candle_core::Result<CommStats> {
        Ok(CommStats::default())
    }
}

/// Ranks that are threads of one process, exchanging host copies of the tensors (as f64, so
/// f64 tensors stay exact and f32 sums are rounded once). Sums run in rank order,
/// so results are deterministic and identical on every rank.
pub struct ThreadRank {
    rank: usize,
    shared: Arc<Shared>,
    stats: Mutex<CommStats>,
}

struct Shared {
    world: usize,
    timeout: Duration,
    state: Mutex<Round>,
    turn: Condvar,
}

#[derive(Default)]
struct Round {
    generation: u64,
    slots: Vec<Option<Vec<f64>>>,
    result: Arc<Vec<f64>>,
}

/// `world` connected ranks; a rank waiting longer than `timeout` for the others gets an error
/// instead of hanging.
pub fn thread_group(world: usize, timeout: Duration) -> Vec<ThreadRank> {
    let shared = Arc::new(Shared {
        world,
        timeout,
        state: Mutex::new(Round {
            slots: vec![None; world],
            ..Round::default()
        }),
        turn: Condvar::new(),
    });
    (0..world)
        .map(|rank| ThreadRank {
            rank,
            shared: shared.clone(),
            stats: Mutex::new(CommStats::default()),
        })
        .collect()
}

impl ThreadRank {
    /// Deposits `mine`; the last rank to arrive combines all slots with `combine`.
    fn exchange(
        &self,
        mine: Vec<f64>,
        combine: impl Fn(&[Option<Vec<f64>>]) -> Vec<f64>,
    ) -> candle_core::Result<Arc<Vec<f64>>> {
        let s = &self.shared;
        fn lock_err<T>(_: T) -> candle_core::Error {
            candle_core::Error::Msg("a rank thread panicked".into())
        }
        let mut st = s.state.lock().map_err(lock_err)?;
        let gen = st.generation;
        st.slots[self.rank] = Some(mine);
        if st.slots.iter().all(Option::is_some) {
            st.result = Arc::new(combine(&st.slots));
            st.slots.iter_mut().for_each(|x| *x = None);
            st.generation += 1;
            s.turn.notify_all();
            return Ok(st.result.clone());
        }
        let deadline = Instant::now() + s.timeout;
        while st.generation == gen {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                let missing: Vec<usize> = (0..s.world).filter(|&r| st.slots[r].is_none()).collect();
                return Err(candle_core::Error::Msg(format!(
                    "rank {}: ranks {missing:?} did not reach the collective within {:?}",
                    self.rank, s.timeout
                )));
            }
            st = s.turn.wait_timeout(st, left).map_err(lock_err)?.0;
        }
        Ok(st.result.clone())
    }
}

impl Collective for ThreadRank {
    fn rank(&self) -> usize {
        self.rank
    }
    fn world(&self) -> usize {
        self.shared.world
    }
    fn all_reduce_sum(&self, t: &Tensor) -> candle_core::Result<Tensor> {
        let start = Instant::now();
        let host = t.to_dtype(DType::F64)?.flatten_all()?.to_vec1::<f64>()?;
        let n = host.len();
        let sum = self.exchange(host, |slots| {
            // Ranks that disagree on the length get nothing rather than a silently wrong sum.
            if slots.iter().flatten().any(|s| s.len() != n) {
                return Vec::new();
            }
            let mut acc = vec![0f64; n];
            for s in slots.iter().flatten() {
                acc.iter_mut().zip(s).for_each(|(a, b)| *a += b);
            }
            acc
        })?;
        if sum.len() != n {
            candle_core::bail!(
                "rank {}: the ranks called all-reduce with different lengths (mine {n})",
                self.rank
            );
        }
        let out = Tensor::from_slice(&sum, t.shape(), t.device())?.to_dtype(t.dtype())?;
        if let Ok(mut st) = self.stats.lock() {
            let seconds = start.elapsed().as_secs_f64();
            st.add(CommStats {
                calls: 1,
                bytes: (t.dtype().size_in_bytes() * n) as u64,
                seconds,
                wait_s: 0.0,
                // The host does the sum: nothing runs beside it.
                exposed_s: seconds,
            });
        }
        Ok(out)
    }
    fn broadcast(&self, t: &Tensor, root: usize) -> candle_core::Result<Tensor> {
        let host = t.to_dtype(DType::F64)?.flatten_all()?.to_vec1::<f64>()?;
        let got = self.exchange(host, |slots| slots[root].clone().unwrap_or_default())?;
        Tensor::from_slice(&got, t.shape(), t.device())?.to_dtype(t.dtype())
    }
    fn take_stats(&self) -> candle_core::Result<CommStats> {
        Ok(self
            .stats
            .lock()
            .map(|mut s| std::mem::take(&mut *s))
            .unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn threads_sum_and_broadcast_in_rank_order() {
        let ranks = thread_group(3, Duration::from_secs(10));
        let out: Vec<(Vec<f32>, Vec<f32>)> = std::thread::scope(|s| {
            let hs: Vec<_> = ranks
                .iter()
                .map(|r| {
                    s.spawn(move || {
                        let v = Tensor::new(&[r.rank() as f32, 1.0], &Device::Cpu).unwrap();
                        let mut sum = Vec::new();
                        for _ in 0..5 {
                            sum = r.all_reduce_sum(&v).unwrap().to_vec1::<f32>().unwrap();
                        }
                        let b = r.broadcast(&v, 2).unwrap().to_vec1::<f32>().unwrap();
                        (sum, b)
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for (sum, b) in out {
            assert_eq!(sum, vec![3.0, 3.0]);
            assert_eq!(b, vec![2.0, 1.0]);
        }
        let st = ranks[0].take_stats().unwrap();
        assert_eq!((st.calls, st.bytes), (5, 40));
    }

    #[test]
    fn a_missing_rank_is_an_error_not_a_hang() {
        let ranks = thread_group(2, Duration::from_millis(200));
        let v = Tensor::new(&[1f32], &Device::Cpu).unwrap();
        let e = ranks[0].all_reduce_sum(&v).unwrap_err().to_string();
        assert!(e.contains("ranks [1]"), "{e}");
    }

    #[test]
    fn busbw_follows_nccl_tests() {
        let s = CommStats {
            calls: 1,
            bytes: 2_000_000_000,
            seconds: 1.0,
            wait_s: 0.5,
            exposed_s: 0.3,
        };
        assert!((s.hidden_share().unwrap() - 0.8).abs() < 1e-12);
        assert_eq!(CommStats::default().hidden_share(), None);
        assert_eq!(s.algbw_gbs(), 2.0);
        assert_eq!(s.busbw_gbs(2), 2.0);
        assert_eq!(s.busbw_gbs(4), 3.0);
    }
}
