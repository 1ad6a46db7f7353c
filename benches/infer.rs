//! CPU inference: the int8 runtime against candle f32 on the peer models' shapes (3×32×32
//! LeNet and ResNet-18, random weights: speed only). Batch-1 latency and batch-64 throughput;
//! the runtime at 1 and 2 threads, candle at the thread count of its pool
//! (`RAYON_NUM_THREADS`, recorded in the benchmark name). `bench/cpu_infer.sh` runs this and
//! the ONNX Runtime / TFLite peer in one command.

use candle_core::{Device, Tensor};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use octet_export::speed_model;
use octet_models::{ModelKind, Network};
use octet_runtime::parallel::{arena_bytes_parallel, run_parallel};
use octet_runtime::Model;
use octet_trainer::data::Normalization;
use octet_trainer::Normalizer;
use rand::{Rng, SeedableRng};

fn pixels(n: usize, seed: u64) -> Vec<u8> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    (0..n * 3 * 32 * 32).map(|_| rng.random()).collect()
}

/// A random-weight float model and its int8 export (calibrated on random images).
fn models(kind: ModelKind) -> (Box<dyn Network>, Vec<u8>) {
    let (net, bytes) = speed_model(kind, 0, &pixels(32, 1)).expect("export");
    // For profiling the benchmarked models op by op (runtime/tests/perf.rs, OCTET_MODEL).
    if let Ok(dir) = std::env::var("OCTET_BENCH_DUMP") {
        std::fs::write(format!("{dir}/{kind}.o8"), &bytes).expect("dump");
    }
    (net, bytes)
}

fn bench(c: &mut Criterion) {
    let candle_threads = std::env::var("RAYON_NUM_THREADS").unwrap_or_else(|_| "all".into());
    for kind in [ModelKind::LeNet, ModelKind::ResNet18] {
        let (net, bytes) = models(kind);
        let model = Model::parse(&bytes).expect("parse");
        let mut g = c.benchmark_group(kind.to_string());
        g.sample_size(if kind == ModelKind::ResNet18 { 10 } else { 50 });
        for batch in [1usize, 64] {
            let px = pixels(batch, 2);
            g.throughput(Throughput::Elements(batch as u64));
            for threads in [1usize, 2] {
                if batch == 1 && threads == 2 {
                    continue; // one image runs on one thread
                }
                let mut arena = vec![0u8; arena_bytes_parallel(&model, batch, threads)];
                g.bench_function(
                    BenchmarkId::new(format!("int8/threads{threads}"), batch),
                    |b| b.iter(|| run_parallel(&model, &px, &mut arena, threads).expect("run")[0]),
                );
            }
            let x = Tensor::from_vec(px.clone(), (batch, 3, 32, 32), &Device::Cpu).expect("tensor");
            let norm = Normalizer::new(&Normalization::cifar10(), &Device::Cpu).expect("norm");
            g.bench_function(
                BenchmarkId::new(format!("candle-f32/threads-{candle_threads}"), batch),
                |b| {
                    b.iter(|| {
                        let input = norm.apply(&x)?;
                        net.forward(&input, false)?.argmax(1)?.to_vec1::<u32>()
                    })
                },
            );
        }
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
