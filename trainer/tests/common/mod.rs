//! Helpers shared by the trainer's integration tests: the bundled subset cut to size, a
//! seeded run's loss curve, and the CUDA device of the GPU tests.
#![allow(dead_code)]

use candle_core::Device;
use octet_models::{ModelKind, OpsConfig};
use octet_trainer::data::{self, DataSource, DataSplit};
use octet_trainer::train::{RunOptions, TrainConfig, Trainer};
use octet_trainer::Precision;

/// CUDA device 0 for a GPU test (marked `#[ignore = "needs a CUDA GPU: ..."]`: run them with
/// `--features cuda -- --include-ignored`); forced to run without a GPU, the test fails here,
/// saying so, rather than passing.
pub fn cuda() -> Device {
    Device::new_cuda(0).unwrap_or_else(|e| {
        panic!("this test needs a CUDA GPU and a build with --features cuda: {e}")
    })
}

/// The bundled Fashion-MNIST subset: `train` training images, every `stride`-th, and the
/// first `test` test images.
pub fn bundled_subset(train: usize, stride: usize, test: usize) -> DataSplit {
    let mut s = data::load(&DataSource::Bundled).expect("bundled subset (set OCTET_DATA_DIR)");
    s.train = s
        .train
        .subset(&(0..train).map(|i| i * stride).collect::<Vec<_>>());
    s.test = s.test.subset(&(0..test).collect::<Vec<_>>());
    s
}

/// (mean training loss, test accuracy) per epoch of a seeded run on the bundled subset's
/// first `train_images` training and 1,000 test images: batch 128, lr 0.05, seed 5, no
/// augmentation, with the training ops `ops`.
pub fn loss_curve(
    dev: &Device,
    ops: OpsConfig,
    kind: ModelKind,
    precision: Precision,
    epochs: usize,
    train_images: usize,
) -> Vec<(f64, f64)> {
    let split = bundled_subset(train_images, 1, 1000);
    let mut cfg = TrainConfig::new(kind, "bundled");
    cfg.epochs = epochs;
    cfg.batch_size = 128;
    cfg.lr = 0.05;
    cfg.seed = 5;
    cfg.augment = false;
    cfg.precision = precision;
    cfg.ops = ops;
    let summary = Trainer::new(cfg, split, dev, None)
        .unwrap()
        .run(&RunOptions::new(dev.clone()), &mut |_| {})
        .unwrap();
    summary
        .records
        .iter()
        .map(|r| (r.train_loss, r.test_accuracy.unwrap_or(0.0)))
        .collect()
}
