//! One epoch of batches, assembled (and augmented) on a background thread while the
//! caller trains on the previous one.

use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::Arc;
use std::thread::JoinHandle;

use super::sampler::{keyed_rng, LOADER_STREAM};
use super::{Augment, DataError, Dataset, Result, Sampler};

/// `len` images (n×C×H×W, the data set's shape) and their labels.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Batch {
    pub images: Vec<u8>,
    pub labels: Vec<u8>,
    pub len: usize,
}

/// How batches are made, the same for every epoch of a run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LoaderConfig {
    /// Images per batch; 0 counts as 1.
    pub batch_size: usize,
    pub augment: Option<Augment>,
    /// Keys the augmentation's generator, with the epoch, the batch and the rank.
    pub seed: u64,
    /// Batches the thread prepares ahead of the consumer.
    pub prefetch: usize,
}

impl Default for LoaderConfig {
    /// Batches of 128, not augmented, 4 ahead.
    fn default() -> Self {
        Self {
            batch_size: 128,
            augment: None,
            seed: 0,
            prefetch: 4,
        }
    }
}

/// Iterates over one epoch of batches produced by a prefetch thread. The last partial
/// batch is kept. Dropping the loader early stops the thread.
pub struct Loader {
    receiver: Option<Receiver<Batch>>,
    worker: Option<JoinHandle<()>>,
    num_batches: usize,
}

impl Loader {
    /// Starts producing the batches of `epoch` in `sampler`'s order, at most `cfg.prefetch`
    /// ahead of the consumer. Augmentation uses a generator keyed by (seed, epoch,
    /// batch index, rank), so the batches do not depend on thread timing or
    /// `prefetch`.
    ///
    /// This cannot fail, so misuse is absorbed rather than reported: a batch size of 0
    /// counts as 1, and indices the data set does not hold (a sampler built for another
    /// data set) are skipped. Data sets from [`crate::data::load`] are always consistent.
    pub fn new(dataset: Arc<Dataset>, sampler: &Sampler, epoch: u64, cfg: &LoaderConfig) -> Loader {
        let LoaderConfig {
            batch_size,
            augment,
            seed,
            prefetch,
        } = *cfg;
        let batch_size = batch_size.max(1);
        let num_batches = sampler.num_samples().div_ceil(batch_size);
        let sampler = sampler.clone();
        let (sender, receiver) = sync_channel(prefetch);
        let worker = std::thread::Builder::new()
            .name("octet-loader".into())
            .spawn(move || {
                let indices = sampler.indices(epoch);
                for (b, chunk) in indices.chunks(batch_size).enumerate() {
                    let key = [seed, epoch, b as u64, LOADER_STREAM ^ sampler.rank() as u64];
                    // Fails only for a shape whose size overflows: nothing to load.
                    let Ok(batch) = assemble(&dataset, chunk, augment, key) else {
                        return;
                    };
                    if sender.send(batch).is_err() {
                        return; // the loader was dropped
                    }
                }
            });
        Loader {
            receiver: Some(receiver),
            // Without a thread (the OS refused one) the sender is gone and the
            // iterator is simply empty.
            worker: worker.ok(),
            num_batches,
        }
    }

    /// Batches in this epoch, the last possibly partial.
    pub fn num_batches(&self) -> usize {
        self.num_batches
    }
}

fn assemble(
    dataset: &Dataset,
    indices: &[usize],
    augment: Option<Augment>,
    key: [u64; 4],
) -> Result<Batch> {
    let (c, h, w) = (dataset.channels, dataset.height, dataset.width);
    let image_len = c
        .checked_mul(h)
        .and_then(|n| n.checked_mul(w))
        .ok_or_else(|| DataError::Invalid(format!("image shape {c}×{h}×{w} overflows")))?;
    let mut images = Vec::with_capacity(indices.len().checked_mul(image_len).unwrap_or(0));
    let mut labels = Vec::with_capacity(indices.len());
    let mut rng = keyed_rng(key);
    for &i in indices {
        let src = i
            .checked_mul(image_len)
            .and_then(|start| dataset.images.get(start..start.checked_add(image_len)?));
        let (Some(src), Some(&label)) = (src, dataset.labels.get(i)) else {
            continue;
        };
        match augment {
            Some(aug) => {
                let start = images.len();
                images.resize(start + image_len, 0);
                aug.apply(src, &mut images[start..], c, h, w, &mut rng)?;
            }
            None => images.extend_from_slice(src),
        }
        labels.push(label);
    }
    Ok(Batch {
        images,
        len: labels.len(),
        labels,
    })
}

impl Iterator for Loader {
    type Item = Batch;

    fn next(&mut self) -> Option<Batch> {
        self.receiver.as_ref()?.recv().ok()
    }
}

impl Drop for Loader {
    fn drop(&mut self) {
        // Dropping the receiver first makes a blocked `send` fail, so the join
        // cannot hang.
        self.receiver.take();
        if let Some(worker) = self.worker.take() {
            let _ = worker.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Batches of `batch_size`, plain, one ahead.
    fn batches(batch_size: usize) -> LoaderConfig {
        LoaderConfig {
            batch_size,
            prefetch: 1,
            ..LoaderConfig::default()
        }
    }

    fn dataset(n: usize) -> Arc<Dataset> {
        // Image i is filled with i + 1 so its origin is visible.
        let images = (0..n)
            .flat_map(|i| vec![(i + 1) as u8; 2 * 3 * 3])
            .collect();
        let labels = (0..n).map(|i| (i % 4) as u8).collect();
        Arc::new(Dataset::new(images, labels, 2, 3, 3, 4).unwrap())
    }

    /// Plain batches of `batch_size` over `dataset(10)` in `sampler`'s order at `epoch`.
    fn ten(sampler: &Sampler, epoch: u64, batch_size: usize) -> Loader {
        Loader::new(dataset(10), sampler, epoch, &batches(batch_size))
    }

    #[test]
    fn plain_batches_follow_the_sampler() {
        let sampler = Sampler::new(10, true, 1);
        let loader = ten(&sampler, 2, 4);
        assert_eq!(loader.num_batches(), 3);
        let batches: Vec<Batch> = loader.collect();
        assert_eq!(batches.iter().map(|b| b.len).collect::<Vec<_>>(), [4, 4, 2]);
        let order = sampler.indices(2);
        let got: Vec<usize> = batches
            .iter()
            .flat_map(|b| b.images.chunks(18).map(|img| img[0] as usize - 1))
            .collect();
        assert_eq!(got, order);
        let labels: Vec<u8> = batches.iter().flat_map(|b| b.labels.clone()).collect();
        assert_eq!(
            labels,
            order
                .iter()
                .map(|&i| dataset(10).label(i))
                .collect::<Vec<_>>()
        );
    }

    #[test]
    fn misuse_does_not_panic() {
        let sampler = Sampler::new(10, false, 0);
        // Batch size 0 counts as 1.
        let loader = ten(&sampler, 0, 0);
        assert_eq!(loader.num_batches(), 10);
        assert_eq!(loader.count(), 10);
        // A sampler over more images than the data set holds: the extra index is skipped.
        let lens: Vec<usize> = ten(&Sampler::new(11, false, 0), 0, 4)
            .map(|b| b.len)
            .collect();
        assert_eq!(lens, [4, 4, 2]);
        // A pixel buffer shorter than the labels claim: the image without pixels is skipped.
        let mut broken = (*dataset(10)).clone();
        broken.images.pop();
        let augmented = LoaderConfig {
            augment: Some(Augment::standard()),
            ..batches(4)
        };
        let total: usize = Loader::new(Arc::new(broken), &sampler, 0, &augmented)
            .map(|b| b.len)
            .sum();
        assert_eq!(total, 9);
    }

    #[test]
    fn empty_epoch() {
        let mut loader = Loader::new(dataset(0), &Sampler::new(0, true, 0), 0, &batches(4));
        assert_eq!(loader.num_batches(), 0);
        assert!(loader.next().is_none());
    }
}
