use std::path::PathBuf;

use clap::Args;

#[derive(Args)]
pub struct InspectArgs {
    /// A checkpoint (.safetensors).
    file: PathBuf,
    #[arg(long)]
    json: bool,
}

pub fn run(a: InspectArgs) -> anyhow::Result<()> {
    let ck = octet_trainer::checkpoint::load(&a.file)?;
    let size = std::fs::metadata(&a.file)?.len();
    let mut names: Vec<&String> = ck.tensors.keys().collect();
    names.sort();
    let tensors: Vec<serde_json::Value> = names
        .iter()
        .map(|n| {
            let t = &ck.tensors[*n];
            serde_json::json!({"name": n, "dtype": format!("{:?}", t.dtype()), "shape": t.dims(), "elements": t.elem_count()})
        })
        .collect();
    let model_elems: usize = names
        .iter()
        .filter(|n| {
            !n.starts_with("optim.")
                && !n.ends_with("running_mean")
                && !n.ends_with("running_var")
                && !n.ends_with("num_batches_tracked")
        })
        .map(|n| ck.tensors[*n].elem_count())
        .sum();
    if a.json {
        let v = serde_json::json!({
            "file": a.file, "bytes": size, "trained_parameters": model_elems,
            "meta": ck.meta, "tensors": tensors,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!(
        "{}  ({size} bytes, {} tensors, {model_elems} trained parameters)",
        a.file.display(),
        names.len()
    );
    match &ck.meta {
        Some(m) => {
            println!(
                "model {} ({} input channels, {} classes), trained on {}, epoch {}/{}, step {}, commit {}",
                m.model, m.in_channels, m.classes, m.dataset, m.epoch, m.config.epochs, m.step, m.commit
            );
            println!(
                "normalisation mean {:?} std {:?}",
                m.normalization.mean, m.normalization.std
            );
            println!("config {}", serde_json::to_string(&m.config)?);
            if let Some(r) = m.history.last() {
                let acc = r
                    .test_accuracy
                    .map(|a| format!("{:.2}%", 100.0 * a))
                    .unwrap_or("-".into());
                println!(
                    "last epoch: train loss {:.4}, test accuracy {acc}",
                    r.train_loss
                );
            }
        }
        None => println!("no octet metadata (a PyTorch state_dict?)"),
    }
    println!("{:<44} {:<5} shape", "tensor", "dtype");
    for n in names {
        let t = &ck.tensors[n];
        println!("{n:<44} {:<5} {:?}", format!("{:?}", t.dtype()), t.dims());
    }
    Ok(())
}
