//! Epoch orders for (distributed) training, with torch `DistributedSampler` semantics:
//! one permutation per epoch shared by all ranks, padded by wrapping around (or
//! trimmed with `drop_last`) to a multiple of the world size, then dealt out
//! round-robin so that rank r takes positions r, r + world, r + 2·world, ….

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::{DataError, Result};

/// Domain tags keep the sampler's and the loader's random streams apart even for the
/// same (seed, epoch).
pub(crate) const SAMPLER_STREAM: u64 = 0x5341_4d50_0000_0000; // "SAMP"
pub(crate) const LOADER_STREAM: u64 = 0x4c4f_4144_0000_0000; // "LOAD"

/// A generator keyed by four words. ChaCha's 256-bit key takes them as they are, so
/// distinct keys give independent streams with no hashing needed.
pub(crate) fn keyed_rng(words: [u64; 4]) -> ChaCha8Rng {
    let mut key = [0u8; 32];
    for (chunk, word) in key.chunks_exact_mut(8).zip(words) {
        chunk.copy_from_slice(&word.to_le_bytes());
    }
    ChaCha8Rng::from_seed(key)
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sampler {
    len: usize,
    shuffle: bool,
    seed: u64,
    rank: usize,
    world: usize,
    drop_last: bool,
}

impl Sampler {
    /// A single-process sampler over `0..len`.
    pub fn new(len: usize, shuffle: bool, seed: u64) -> Self {
        Self {
            len,
            shuffle,
            seed,
            rank: 0,
            world: 1,
            drop_last: false,
        }
    }

    /// This process's share of a `world`-process job; errors unless `rank < world`.
    pub fn with_rank(self, rank: usize, world: usize) -> Result<Self> {
        if rank >= world {
            return Err(DataError::Invalid(format!(
                "rank {rank} is not below the world size {world}"
            )));
        }
        Ok(Self {
            rank,
            world,
            ..self
        })
    }

    /// Drop the tail that does not divide evenly among ranks instead of padding.
    pub fn with_drop_last(self, drop_last: bool) -> Self {
        Self { drop_last, ..self }
    }

    /// Size of the data set being sampled.
    pub fn dataset_len(&self) -> usize {
        self.len
    }

    pub fn rank(&self) -> usize {
        self.rank
    }

    pub fn world(&self) -> usize {
        self.world
    }

    /// Indices this rank gets per epoch.
    pub fn num_samples(&self) -> usize {
        if self.drop_last {
            self.len / self.world
        } else {
            self.len.div_ceil(self.world)
        }
    }

    /// This rank's indices for `epoch`: reproducible from (seed, epoch) alone.
    pub fn indices(&self, epoch: u64) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.len).collect();
        if self.shuffle {
            order.shuffle(&mut keyed_rng([self.seed, epoch, 0, SAMPLER_STREAM]));
        }
        let total = self.num_samples() * self.world;
        order.truncate(total);
        // Pad by repeating the permutation from its start (several times if len < world).
        while order.len() < total {
            let take = (total - order.len()).min(self.len);
            order.extend_from_within(..take);
        }
        order
            .into_iter()
            .skip(self.rank)
            .step_by(self.world)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn all_ranks(len: usize, world: usize, drop_last: bool, epoch: u64) -> Vec<Vec<usize>> {
        (0..world)
            .map(|r| {
                Sampler::new(len, true, 42)
                    .with_rank(r, world)
                    .unwrap()
                    .with_drop_last(drop_last)
                    .indices(epoch)
            })
            .collect()
    }

    #[test]
    fn single_rank_without_shuffle_is_identity() {
        assert_eq!(
            Sampler::new(7, false, 3).indices(5),
            (0..7).collect::<Vec<_>>()
        );
    }

    #[test]
    fn ranks_are_disjoint_and_cover() {
        let parts = all_ranks(100, 4, false, 0);
        assert!(parts.iter().all(|p| p.len() == 25));
        let union: BTreeSet<usize> = parts.iter().flatten().copied().collect();
        assert_eq!(union.len(), 100, "disjoint and covering");
        assert_eq!(union, (0..100).collect());
    }

    #[test]
    fn uneven_split_pads_by_wrapping() {
        let parts = all_ranks(10, 4, false, 1);
        assert!(parts.iter().all(|p| p.len() == 3));
        let flat: Vec<usize> = parts.iter().flatten().copied().collect();
        assert_eq!(flat.iter().copied().collect::<BTreeSet<_>>().len(), 10);
        // The two padded slots repeat the first two entries of the permutation.
        let order = Sampler::new(10, true, 42).indices(1);
        assert_eq!(parts[2][2], order[0]);
        assert_eq!(parts[3][2], order[1]);
    }

    #[test]
    fn tiny_dataset_many_ranks() {
        let parts = all_ranks(2, 5, false, 0);
        assert!(parts.iter().all(|p| p.len() == 1));
        assert!(parts.iter().flatten().all(|&i| i < 2));
        assert!(all_ranks(0, 3, false, 0).iter().all(Vec::is_empty));
    }

    #[test]
    fn drop_last_trims() {
        let parts = all_ranks(10, 4, true, 0);
        assert!(parts.iter().all(|p| p.len() == 2));
        let union: BTreeSet<usize> = parts.iter().flatten().copied().collect();
        assert_eq!(union.len(), 8);
        assert_eq!(
            Sampler::new(10, false, 0)
                .with_drop_last(true)
                .num_samples(),
            10
        );
    }

    #[test]
    fn epochs_differ_and_repeat() {
        let s = Sampler::new(1000, true, 9);
        assert_eq!(s.indices(3), s.indices(3));
        assert_ne!(s.indices(3), s.indices(4));
        assert_ne!(s.indices(3), Sampler::new(1000, true, 10).indices(3));
        let mut sorted = s.indices(3);
        sorted.sort_unstable();
        assert_eq!(sorted, (0..1000).collect::<Vec<_>>());
    }

    #[test]
    fn bad_rank_is_an_error() {
        assert!(Sampler::new(10, true, 0).with_rank(2, 2).is_err());
        assert!(Sampler::new(10, true, 0).with_rank(0, 0).is_err());
    }
}
