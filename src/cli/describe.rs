//! `octet describe`: a network's layers, their output shapes and parameters; with `--json`, its
//! description in the file format `--model` reads (so a built-in network is a starting point
//! for one of your own).

use std::fmt::Write as _;
use std::io::Write as _;

use clap::Args;
use octet_models::spec::Layer;
use octet_models::{Model, IMAGE_SIDE};

use super::values;

#[derive(Args)]
pub struct DescribeArgs {
    /// A built-in network or a description file.
    #[arg(value_parser = values::model(), long_help = octet_models::model_help("The network."))]
    model: Model,
    /// Input channels (1: Fashion-MNIST, 3: CIFAR-10).
    #[arg(long, default_value_t = 1, value_parser = super::common::at_least_one)]
    channels: usize,
    /// Classes.
    #[arg(long, default_value_t = 10, value_parser = super::common::at_least_one)]
    classes: usize,
    /// The description as JSON (the `--model` file format) instead of the table.
    #[arg(long)]
    json: bool,
}

pub fn run(a: DescribeArgs) -> anyhow::Result<()> {
    super::common::exit_quietly_on_closed_stdout();
    let text = if a.json {
        serde_json::to_string_pretty(&a.model.spec())? + "\n"
    } else {
        table(&a)?
    };
    // A closed pipe (`| head`) ends the output, not the program with a panic.
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}

/// The layer table.
fn table(a: &DescribeArgs) -> anyhow::Result<String> {
    let spec = a.model.spec();
    let mut out = String::new();
    let image = (a.channels, IMAGE_SIDE, IMAGE_SIDE);
    let r = spec.resolve(image, a.classes)?;
    let net = octet_models::build(
        &a.model,
        a.channels,
        a.classes,
        0,
        &candle_core::Device::Cpu,
    )?;
    writeln!(
        out,
        "{} for {}×{}×{} images, {} classes: {} layers, {} trained parameters",
        a.model,
        image.0,
        image.1,
        image.2,
        a.classes,
        spec.layers.len(),
        net.params().num_trainable()
    )?;
    writeln!(
        out,
        "{:>3}  {:<28} {:<16} {:<14} {:>10}",
        "#", "layer", "op", "output", "parameters"
    )?;
    for (i, node) in spec.layers.iter().enumerate() {
        let params: usize = net
            .params()
            .trainable()
            .filter(|p| {
                p.name
                    .strip_prefix(&node.name)
                    .is_some_and(|r| r.starts_with('.'))
            })
            .map(|p| p.var.elem_count())
            .sum();
        let reads = match (&node.input, &node.layer) {
            (_, Layer::Add { with }) => format!(" (+ {with})"),
            (Some(from), _) => format!(" (from {from})"),
            (None, _) => String::new(),
        };
        writeln!(
            out,
            "{:>3}  {:<28} {:<16} {:<14} {:>10}{reads}",
            i + 1,
            node.name,
            node.layer.op(),
            r.shapes[i].to_string(),
            params
        )?;
    }
    Ok(out)
}
