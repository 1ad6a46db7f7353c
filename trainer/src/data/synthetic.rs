//! Seeded random CIFAR-shaped data for throughput measurements: the content does not
//! matter, only that every run and every rank sees the same bytes.

use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::{DataSplit, Dataset, Normalization};

const CHANNELS: usize = 3;
const SIDE: usize = 32;
const CLASSES: u8 = 10;
/// Bytes one synthetic image takes, for overflow checks before allocating.
pub(crate) const IMAGE_BYTES: usize = CHANNELS * SIDE * SIDE;

/// `train` and `test` uniformly random 3×32×32 images with uniform labels in 0..10,
/// reproducible from `seed`. Panics only if the pixel buffer size overflows `usize`
/// ([`crate::data::load`] checks that first).
pub fn synthetic(train: usize, test: usize, seed: u64) -> DataSplit {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let train = random_dataset(train, &mut rng);
    let test = random_dataset(test, &mut rng);
    DataSplit {
        name: "synthetic".to_string(),
        train,
        test,
        norm: Normalization::cifar10(),
        origin: format!("synthetic(seed={seed})"),
    }
}

fn random_dataset(n: usize, rng: &mut ChaCha8Rng) -> Dataset {
    let mut images = vec![0u8; n * IMAGE_BYTES];
    rng.fill_bytes(&mut images);
    let labels = (0..n).map(|_| rng.random_range(0..CLASSES)).collect();
    Dataset {
        images,
        labels,
        channels: CHANNELS,
        height: SIDE,
        width: SIDE,
        classes: usize::from(CLASSES),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shape_and_determinism() {
        let a = synthetic(100, 20, 7);
        assert_eq!(a.name, "synthetic");
        assert_eq!(a.origin, "synthetic(seed=7)");
        assert_eq!((a.train.len(), a.test.len()), (100, 20));
        assert_eq!(a.train.images.len(), 100 * IMAGE_BYTES);
        assert_eq!(
            (a.train.channels, a.train.height, a.train.width),
            (3, 32, 32)
        );
        assert!(a.train.labels.iter().all(|&l| l < 10));
        assert_eq!(a.norm, Normalization::cifar10());
        let b = synthetic(100, 20, 7);
        assert_eq!(a.train, b.train);
        assert_eq!(a.test, b.test);
        assert_ne!(a.train, synthetic(100, 20, 8).train);
        // Train and test are different draws.
        assert_ne!(a.train.images[..20 * IMAGE_BYTES], a.test.images[..]);
    }
}
