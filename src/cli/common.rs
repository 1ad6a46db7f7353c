//! What several commands share: opening a checkpoint with its data, running an `.o8` model.

use std::path::Path;

use anyhow::Context;
use octet_models::ModelKind;
use octet_trainer::checkpoint::{self, Checkpoint};
use octet_trainer::data::{self, DataSource, DataSplit, Dataset, Normalization};

/// A checkpoint, the architecture it holds and the data it belongs with.
pub struct Trained {
    pub ck: Checkpoint,
    pub kind: ModelKind,
    pub in_channels: usize,
    pub classes: usize,
    pub split: DataSplit,
    /// The normalisation the model was trained with (travels in the checkpoint).
    pub norm: Normalization,
}

impl Trained {
    /// What the exporter needs: architecture, tensors, normalisation, shapes.
    pub fn export_input(&self) -> octet_export::Input<'_> {
        octet_export::Input {
            kind: self.kind,
            tensors: &self.ck.tensors,
            mean: &self.norm.mean,
            std: &self.norm.std,
            channels: self.in_channels,
            height: self.split.train.height,
            width: self.split.train.width,
            classes: self.classes,
        }
    }
}

/// Opens `path`; `model` names the architecture of files without octet metadata; `data`
/// overrides the data set the checkpoint was trained on.
pub fn open_trained(
    path: &Path,
    model: Option<&str>,
    data: Option<&str>,
) -> anyhow::Result<Trained> {
    let ck = checkpoint::load(path)?;
    let hint = model.map(str::parse::<ModelKind>).transpose()?;
    let kind = ck.model_kind(hint)?;
    let (in_channels, classes) = ck.io_shape(kind)?;
    let data_str = match (data, &ck.meta) {
        (Some(d), _) => d.to_string(),
        (None, Some(m)) => m.config.data.clone(),
        (None, None) => "auto".into(),
    };
    let split = data::load(&data_str.parse::<DataSource>()?)?;
    anyhow::ensure!(
        split.train.channels == in_channels,
        "the checkpoint's model takes {in_channels}-channel images, {} has {}",
        split.name,
        split.train.channels
    );
    let norm = ck
        .meta
        .as_ref()
        .map(|m| m.normalization.clone())
        .unwrap_or(split.norm.clone());
    Ok(Trained {
        ck,
        kind,
        in_channels,
        classes,
        split,
        norm,
    })
}

/// The first `n` images of `ds` (all when `n` is 0 or larger than the set).
pub fn first(ds: &Dataset, n: usize) -> (&[u8], &[u8]) {
    let n = if n == 0 { ds.len() } else { n.min(ds.len()) };
    (&ds.images[..n * ds.image_len()], &ds.labels[..n])
}

/// `--kernels`: one of the runtime's kernel-set names.
pub fn parse_kernels(s: &str) -> Result<octet_runtime::Kernels, String> {
    octet_runtime::Kernels::from_name(s).ok_or_else(|| {
        let names: Vec<&str> = octet_runtime::Kernels::ALL
            .iter()
            .map(|k| k.name())
            .collect();
        format!("unknown kernels {s:?}: one of {}", names.join(", "))
    })
}

/// Int8 logits of `pixels` through the runtime on `threads` threads.
pub fn run_o8(bytes: &[u8], pixels: &[u8], threads: usize) -> anyhow::Result<Vec<i8>> {
    run_o8_with(bytes, octet_runtime::Kernels::Auto, pixels, threads)
}

/// [`run_o8`] with the chosen kernels.
pub fn run_o8_with(
    bytes: &[u8],
    kernels: octet_runtime::Kernels,
    pixels: &[u8],
    threads: usize,
) -> anyhow::Result<Vec<i8>> {
    let model = octet_runtime::Model::parse(bytes)
        .map_err(|e| anyhow::anyhow!("invalid .o8 model: {e}"))?;
    let batch = model
        .batch_of(pixels.len())
        .map_err(|e| anyhow::anyhow!("input: {e}"))?;
    let threads = threads.max(1);
    let mut arena =
        vec![0u8; octet_runtime::parallel::arena_bytes_parallel(&model, batch, threads)];
    let logits =
        octet_runtime::parallel::run_parallel_with(&model, kernels, pixels, &mut arena, threads)
            .map_err(|e| anyhow::anyhow!("runtime: {e}"))?;
    Ok(logits.to_vec())
}

/// Fraction of rows of `logits` (`classes` wide) whose argmax equals the label.
pub fn accuracy(logits: &[i8], classes: usize, labels: &[u8]) -> f64 {
    let correct = logits
        .chunks(classes)
        .zip(labels)
        .filter(|(row, &y)| argmax(row) == y as usize)
        .count();
    correct as f64 / labels.len().max(1) as f64
}

/// Index of the largest value; the first on ties, as PyTorch's argmax.
pub fn argmax(row: &[i8]) -> usize {
    let mut best = 0;
    for (i, &v) in row.iter().enumerate() {
        if v > row[best] {
            best = i;
        }
    }
    best
}

/// Default number of worker threads: the machine's cores.
pub fn cores() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

pub fn read(path: &Path) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))
}
