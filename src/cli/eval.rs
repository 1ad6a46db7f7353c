use std::path::PathBuf;

use clap::Args;
use octet_models::Model;
use octet_trainer::data::DataSource;
use octet_trainer::device::DeviceSpec;
use octet_trainer::eval::evaluate;
use octet_trainer::Normalizer;

use super::common::{at_least_one, open_trained, MODEL_HELP};
use super::values;

#[derive(Args)]
pub struct EvalArgs {
    /// A checkpoint written by `octet train`, or a PyTorch state_dict (a torch.save .pth, or
    /// safetensors) with --model.
    checkpoint: PathBuf,
    /// Data set to test on: auto, bundled, fashion-mnist[:DIR], cifar10:DIR,
    /// synthetic[:TRAIN[:TEST[:SEED]]] [default: the one the checkpoint was trained on].
    #[arg(long, short, value_parser = values::data())]
    data: Option<DataSource>,
    /// Architecture, for checkpoints without octet metadata (PyTorch files) [default: the one
    /// the checkpoint's metadata names].
    #[arg(long, short, value_parser = super::values::model(), long_help = octet_models::model_help(MODEL_HELP))]
    model: Option<Model>,
    /// Evaluate the training split instead of the test split.
    #[arg(long)]
    train_split: bool,
    /// Images per forward pass.
    #[arg(long, default_value_t = 1000, value_parser = at_least_one)]
    batch_size: usize,
    /// cpu, cuda or cuda:N.
    #[arg(long, default_value = "cpu", value_parser = values::device())]
    device: DeviceSpec,
    /// One JSON object on stdout instead of text.
    #[arg(long)]
    json: bool,
}

pub fn run(a: EvalArgs) -> anyhow::Result<()> {
    let t = open_trained(&a.checkpoint, a.model.as_ref(), a.data.as_ref())?;
    let (kind, split) = (&t.model, &t.split);
    let ds = if a.train_split {
        &split.train
    } else {
        &split.test
    };
    let dev = a.device.open()?;
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
