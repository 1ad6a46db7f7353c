//! Test-set evaluation in inference mode (batch norm on running statistics).

use candle_core::{DType, Device, Tensor};
use octet_models::Network;
use serde::{Deserialize, Serialize};

use crate::data::Dataset;
use crate::{Normalizer, Result, TrainError};

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct EvalResult {
    pub loss: f64,
    pub accuracy: f64,
    pub images: usize,
    pub correct: usize,
}

/// Mean cross-entropy and accuracy of `model` over all of `ds`.
pub fn evaluate(
    model: &dyn Network,
    ds: &Dataset,
    norm: &Normalizer,
    batch: usize,
    dev: &Device,
) -> Result<EvalResult> {
    evaluate_shard(model, ds, norm, batch, dev, (0, 1))
}

/// [`evaluate`] over rank `r`'s contiguous share of `ds` when `world` ranks split it.
pub fn evaluate_shard(
    model: &dyn Network,
    ds: &Dataset,
    norm: &Normalizer,
    batch: usize,
    dev: &Device,
    (r, world): (usize, usize),
) -> Result<EvalResult> {
    let (c, h, w, il) = (ds.channels, ds.height, ds.width, ds.image_len());
    let (mut loss_sum, mut correct) = (0f64, 0usize);
    let batch = batch.max(1);
    let world = world.max(1);
    let (first, end) = (ds.len() * r / world, ds.len() * (r + 1) / world);
    let mut start = first;
    while start < end {
        let n = batch.min(end - start);
        let run = || -> candle_core::Result<(f32, u32)> {
            let x =
                Tensor::from_slice(&ds.images[start * il..(start + n) * il], (n, c, h, w), dev)?;
            let y =
                Tensor::from_slice(&ds.labels[start..start + n], n, dev)?.to_dtype(DType::U32)?;
            let logits = model.forward(&norm.apply(&x)?, false)?;
            let loss = candle_nn::loss::cross_entropy(&logits, &y)?.to_scalar::<f32>()?;
            let ok = logits
                .argmax(1)?
                .eq(&y)?
                .to_dtype(DType::U32)?
                .sum_all()?
                .to_scalar::<u32>()?;
            Ok((loss, ok))
        };
        let (loss, ok) = run().map_err(|e| TrainError::from_step(e, batch))?;
        loss_sum += loss as f64 * n as f64;
        correct += ok as usize;
        start += n;
    }
    let images = end - first;
    Ok(EvalResult {
        loss: if images > 0 {
            loss_sum / images as f64
        } else {
            f64::NAN
        },
        accuracy: if images > 0 {
            correct as f64 / images as f64
        } else {
            0.0
        },
        images,
        correct,
    })
}
