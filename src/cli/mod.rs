mod bench;
mod common;
mod demo;
mod eval;
mod export;
mod inspect;
mod run;
mod train;

use clap::{Parser, Subcommand};

pub const COMMIT: &str = env!("OCTET_COMMIT");

/// Train small CNNs (LeNet, ResNet-18) on CPUs and GPUs, export them to int8 and run them.
///
/// Start with `octet demo`: it trains LeNet on the bundled Fashion-MNIST subset.
#[derive(Parser)]
#[command(name = "octet", version, about, long_about)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Train a model and write checkpoints (safetensors) and metrics.csv.
    Train(train::TrainArgs),
    /// Test accuracy and loss of a checkpoint on a data set.
    Eval(eval::EvalArgs),
    /// Calibrate a float checkpoint and write an int8 .o8 model, with an accuracy report.
    Export(export::ExportArgs),
    /// Run an int8 .o8 model over a data set: accuracy and images/s.
    Run(run::RunArgs),
    /// Show what a checkpoint or an .o8 model holds.
    Inspect(inspect::InspectArgs),
    /// The main job on the bundled data: train LeNet, export it to int8, compare.
    Demo(demo::DemoArgs),
    /// Measure training speed (the lab's timing protocol).
    #[command(subcommand)]
    Bench(bench::BenchCommand),
}

pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Train(a) => train::run(a),
        Command::Eval(a) => eval::run(a),
        Command::Export(a) => export::run(a),
        Command::Run(a) => run::run(a),
        Command::Inspect(a) => inspect::run(a),
        Command::Demo(a) => demo::run(a),
        Command::Bench(b) => bench::run(b),
    }
}
