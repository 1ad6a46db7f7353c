mod bench;
mod common;
mod convert;
mod curves;
mod demo;
mod describe;
mod eval;
mod export;
#[cfg(test)]
mod help_tests;
mod import;
mod inspect;
mod launch;
mod pack;
mod plot;
mod ranks;
mod restart;
mod run;
mod train;
mod values;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

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
    Train(Box<train::TrainArgs>),
    /// Start one training process per GPU on this machine and supervise them as one job.
    ///
    /// Starts N processes, each with the environment `torchrun` sets: RANK, WORLD_SIZE,
    /// LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
    /// TORCHELASTIC_RESTART_COUNT (and NCCL_NVLS_ENABLE=0 unless already set); the rest of the
    /// environment (NCCL_SOCKET_IFNAME, CUDA_VISIBLE_DEVICES, …) passes through. By default
    /// each runs this octet with ARGS.
    ///
    /// Rank 0's output passes through untouched, so stdout stays machine-readable; the other
    /// ranks' lines go to stderr prefixed with `[rank i]`. When a rank fails, the others get
    /// SIGTERM, then SIGKILL after --grace seconds; with --max-restarts all ranks start again
    /// (`octet train` resumes from the last checkpoint of its --out), else octet launch exits
    /// with the failing rank's code (128 + signal if it was killed by one). Ctrl-C stops all
    /// ranks the same way (press it twice to kill at once).
    ///
    /// Several machines: run one octet launch on each with the same --nnodes, --gpus,
    /// --master-addr (node 0's address) and --master-port, and --node-rank 0..nnodes-1; node R
    /// runs global ranks R·N..R·N+N-1. Under Slurm, `srun octet train …` with one task per GPU
    /// needs no launcher.
    Launch(launch::LaunchArgs),
    /// Check a multi-process launch without GPUs: every rank reads its place (torchrun's,
    /// octet launch's or Slurm's variables), meets the others at the rendezvous and prints
    /// where it runs.
    Ranks(ranks::RanksArgs),
    /// Test accuracy and loss of a checkpoint on a data set.
    Eval(eval::EvalArgs),
    /// Calibrate a float checkpoint and write an int8 .o8 model, with an accuracy report.
    Export(export::ExportArgs),
    /// Run an int8 .o8 model over a data set: accuracy and images/s.
    Run(run::RunArgs),
    /// Convert an int8 .o8 model to a .tflite of the same model (TFLite, TFLite Micro).
    Convert(convert::ConvertArgs),
    /// Import an int8 .tflite (e.g. the MLPerf Tiny models) as an .o8 of the same arithmetic.
    ///
    /// The .o8 gives TensorFlow Lite Micro's bytes (with the default --rounding double). `run`,
    /// `inspect` and `bench` also take a .tflite directly (imported in memory).
    Import(import::ImportArgs),
    /// Show what a checkpoint or an .o8 model holds.
    Inspect(inspect::InspectArgs),
    /// Write a model's packed image: the Cortex-M kernels' weights in their own order, for
    /// firmware to keep in flash beside the model.
    Pack(pack::PackArgs),
    /// A network's layers, output shapes and parameters; its description file with --json.
    Describe(describe::DescribeArgs),
    /// The main job on the bundled data: train LeNet, export it to int8, compare.
    Demo(demo::DemoArgs),
    /// Measure training speed (the lab's timing protocol).
    #[command(subcommand)]
    Bench(bench::BenchCommand),
}

/// Runs a command; the exit code is that of the job for `launch`, success for the others.
pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Launch(a) => return launch::run(a),
        Command::Train(a) => train::run(*a),
        Command::Ranks(a) => ranks::run(a),
        Command::Eval(a) => eval::run(a),
        Command::Export(a) => export::run(a),
        Command::Run(a) => run::run(a),
        Command::Convert(a) => convert::run(a),
        Command::Import(a) => import::run(a),
        Command::Inspect(a) => inspect::run(a),
        Command::Pack(a) => pack::run(a),
        Command::Describe(a) => describe::run(a),
        Command::Demo(a) => demo::run(a),
        Command::Bench(b) => bench::run(b),
    }?;
    Ok(ExitCode::SUCCESS)
}
