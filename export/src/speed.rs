//! Int8 models for speed benchmarks. The peers time their models with random weights, so ours
//! do too: a freshly initialised, seeded model on the peers' 3×32×32 CIFAR shape (or 1×32×32,
//! the padded Fashion-MNIST shape), exported after calibration on a few given images. Accuracy
//! means nothing here; the bytes are a real model.

use std::collections::HashMap;

use candle_core::{Device, Tensor};
use octet_models::{build, ModelKind, Network};

use crate::{export, ExportOptions, Input, Result};

/// CIFAR-10's per-channel normalisation, which the peer models assume.
pub const CIFAR_MEAN: [f32; 3] = [0.4914, 0.4822, 0.4465];
pub const CIFAR_STD: [f32; 3] = [0.2023, 0.1994, 0.2010];

/// A random-weight `kind` (3×32×32 input, 10 classes, `seed`) on the CPU and its `.o8` bytes,
/// calibrated on `calibration` (raw u8 images, 3·32·32 each).
pub fn speed_model(
    kind: ModelKind,
    seed: u64,
    calibration: &[u8],
) -> Result<(Box<dyn Network>, Vec<u8>)> {
    speed_model_normalized(kind, &CIFAR_MEAN, &CIFAR_STD, seed, calibration)
}

/// [`speed_model`] for `mean.len()` input channels normalised by `mean`/`std` (one channel:
/// the Fashion-MNIST shape); `calibration` holds `channels`·32·32 bytes per image.
pub fn speed_model_normalized(
    kind: ModelKind,
    mean: &[f32],
    std: &[f32],
    seed: u64,
    calibration: &[u8],
) -> Result<(Box<dyn Network>, Vec<u8>)> {
    let channels = mean.len();
    let net = build(kind, channels, 10, seed, &Device::Cpu).map_err(candle_core::Error::wrap)?;
    let tensors: HashMap<String, Tensor> = net
        .params()
        .iter()
        .map(|p| (p.name.clone(), p.var.as_tensor().clone()))
        .collect();
    let model = kind.into();
    let input = Input {
        model: &model,
        tensors: &tensors,
        mean,
        std,
        channels,
        height: 32,
        width: 32,
        classes: 10,
    };
    let images = calibration.len() / (channels * 32 * 32);
    let opts = ExportOptions {
        calibration_images: images,
        sqnr_images: images.min(8),
        ..ExportOptions::default()
    };
    let bytes = export(&input, calibration, &opts)?.bytes;
    Ok((net, bytes))
}
