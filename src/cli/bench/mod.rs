//! `octet bench`: training speed, all-reduce bandwidth and multi-GPU scaling, measured.

mod allreduce;
mod infer;
mod scaling;
mod train;

use clap::Subcommand;

#[derive(Subcommand)]
pub enum BenchCommand {
    /// Epoch time per batch size on synthetic CIFAR-shaped data: epoch 1 warms up, epoch 2
    /// is timed (host-to-device copy, forward, backward and update; no augmentation).
    Train(train::TrainBench),
    /// Inference speed: int8 runtime (CPU, CUDA) against candle f32 (CPU, CUDA).
    Infer(infer::InferBench),
    /// NCCL all-reduce bus bandwidth across message sizes (run it under `octet launch`).
    Allreduce(allreduce::AllreduceBench),
    /// The lab's scaling report: epoch time per batch size, speed-up per GPU count, compute vs
    /// communication, bandwidth utilisation and large-batch accuracy (markdown, JSON, PNG).
    Scaling(scaling::ScalingBench),
}

pub fn run(cmd: BenchCommand) -> anyhow::Result<()> {
    match cmd {
        BenchCommand::Train(a) => train::run(a),
        BenchCommand::Infer(a) => infer::run(a),
        BenchCommand::Allreduce(a) => allreduce::run(a),
        BenchCommand::Scaling(a) => scaling::run(a),
    }
}
