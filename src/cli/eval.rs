use std::path::PathBuf;

use clap::Args;
use octet_models::ModelKind;
use octet_trainer::checkpoint;
use octet_trainer::data::{self, DataSource, Normalization};
use octet_trainer::device::parse_device;
use octet_trainer::eval::evaluate;
use octet_trainer::Normalizer;

#[derive(Args)]
pub struct EvalArgs {
    /// A checkpoint written by `octet train`, or a PyTorch state_dict saved as safetensors.
    checkpoint: PathBuf,
    /// Data set to test on [default: the one the checkpoint was trained on].
    #[arg(long, short)]
    data: Option<String>,
    /// Architecture, for checkpoints without octet metadata (PyTorch files).
    #[arg(long, short)]
    model: Option<String>,
    /// Evaluate the training split instead of the test split.
    #[arg(long)]
    train_split: bool,
    #[arg(long, default_value_t = 1000)]
    batch_size: usize,
    #[arg(long, default_value = "cpu")]
    device: String,
    #[arg(long)]
    json: bool,
}

pub fn run(a: EvalArgs) -> anyhow::Result<()> {
    let ck = checkpoint::load(&a.checkpoint)?;
    let hint = a
        .model
        .as_deref()
        .map(str::parse::<ModelKind>)
        .transpose()?;
    let kind = ck.model_kind(hint)?;
    let (in_channels, classes) = ck.io_shape(kind)?;
    let data_str = match (&a.data, &ck.meta) {
        (Some(d), _) => d.clone(),
        (None, Some(m)) => m.config.data.clone(),
        (None, None) => "auto".into(),
    };
    let split = data::load(&data_str.parse::<DataSource>()?)?;
    let ds = if a.train_split {
        &split.train
    } else {
        &split.test
    };
    anyhow::ensure!(
        ds.channels == in_channels,
        "the checkpoint's model takes {in_channels}-channel images, {} has {}",
        split.name,
        ds.channels
    );
    // The normalisation the model was trained with travels in the checkpoint.
    let norm: Normalization = ck
        .meta
        .as_ref()
        .map(|m| m.normalization.clone())
        .unwrap_or(split.norm.clone());
    let dev = parse_device(&a.device)?;
    let model = octet_models::build(kind, in_channels, classes, 0, &dev)?;
    ck.restore_model(model.params())?;
    let r = evaluate(
        model.as_ref(),
        ds,
        &Normalizer::new(&norm, &dev)?,
        a.batch_size,
        &dev,
    )?;
    if a.json {
        let v = serde_json::json!({
            "checkpoint": a.checkpoint, "model": kind.to_string(), "data": split.name,
            "split": if a.train_split { "train" } else { "test" },
            "images": r.images, "correct": r.correct, "accuracy": r.accuracy, "loss": r.loss,
        });
        println!("{v}");
    } else {
        println!(
            "{kind} on {} {} ({} images): accuracy {:.2}%  loss {:.4}",
            split.name,
            if a.train_split { "train" } else { "test" },
            r.images,
            100.0 * r.accuracy,
            r.loss
        );
    }
    Ok(())
}
