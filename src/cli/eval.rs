use std::path::PathBuf;

use clap::Args;
use octet_trainer::device::parse_device;
use octet_trainer::eval::evaluate;
use octet_trainer::Normalizer;

use super::common::{at_least_one, open_trained};

#[derive(Args)]
pub struct EvalArgs {
    /// A checkpoint written by `octet train`, or a PyTorch state_dict (a torch.save .pth, or
    /// safetensors) with --model.
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
    /// Images per forward pass.
    #[arg(long, default_value_t = 1000, value_parser = at_least_one)]
    batch_size: usize,
    #[arg(long, default_value = "cpu")]
    device: String,
    #[arg(long)]
    json: bool,
}

pub fn run(a: EvalArgs) -> anyhow::Result<()> {
    let t = open_trained(&a.checkpoint, a.model.as_deref(), a.data.as_deref())?;
    let (kind, split) = (t.kind, &t.split);
    let ds = if a.train_split {
        &split.train
    } else {
        &split.test
    };
    let dev = parse_device(&a.device)?;
    let model = octet_models::build(kind, t.in_channels, t.classes, 0, &dev)?;
    t.ck.restore_model(model.params())?;
    let r = evaluate(
        model.as_ref(),
        ds,
        &Normalizer::new(&t.norm, &dev)?,
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
