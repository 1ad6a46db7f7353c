//! CPU inference: the int8 runtime against candle f32 on the peer models' shapes (3×32×32
//! LeNet and ResNet-18, random weights: speed only), plus the 1-channel (Fashion-MNIST shape)
//! int8 models. Batch-1 latency and batch-64 throughput; the runtime at 1 and 2 threads (a
//! batch of 1 on 2 threads splits each op between them when the model is large enough),
//! candle at the thread count of its pool (`RAYON_NUM_THREADS`, recorded in the benchmark
//! name). Every int8 row names the kernels that ran (`int8-<kernels>`); on a CPU with AVX-512
//! VNNI the AVX2 and AVX-VNNI kernels are timed too (on one with AMX, the AVX-512 VNNI ones
//! as well), each set over its own packed weights. `bench/cpu_infer.sh` runs this and the ONNX Runtime /
//! TFLite peer in one command.

use candle_core::{Device, Tensor};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use octet_export::speed_model_normalized;
use octet_models::{ModelKind, Network};
use octet_runtime::parallel::{arena_bytes_parallel, run_parallel_with};
use octet_runtime::{Kernels, Model};

mod common;
use octet_trainer::data::Normalization;
use octet_trainer::Normalizer;
use rand::{Rng, SeedableRng};

fn pixels(n: usize, channels: usize, seed: u64) -> Vec<u8> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    (0..n * channels * 32 * 32).map(|_| rng.random()).collect()
}

/// A random-weight float model and its int8 export (calibrated on random images).
fn models(kind: ModelKind, norm: &Normalization, name: &str) -> (Box<dyn Network>, Vec<u8>) {
    let calib = pixels(32, norm.mean.len(), 1);
    let (net, bytes) =
        speed_model_normalized(kind, &norm.mean, &norm.std, 0, &calib).expect("export");
    // For profiling the benchmarked models op by op (runtime/tests/perf.rs, OCTET_MODEL).
    if let Ok(dir) = std::env::var("OCTET_BENCH_DUMP") {
        std::fs::write(format!("{dir}/{name}.o8"), &bytes).expect("dump");
    }
    (net, bytes)
}

fn bench(c: &mut Criterion) {
    let candle_threads = std::env::var("RAYON_NUM_THREADS").unwrap_or_else(|_| "all".into());
    // The default kernels, and every other SIMD set this CPU has (AVX2 and AVX-VNNI on an
    // AVX-512 VNNI machine): what CPUs without the faster sets would run.
    let auto = Kernels::Auto.resolved_name().expect("kernels");
    let mut kernel_sets = vec![Kernels::Auto];
    kernel_sets.extend(Kernels::available().filter(|&k| {
        k != Kernels::Scalar && k != Kernels::Auto && k.resolved_name().ok() != Some(auto)
    }));
    for kind in [ModelKind::LENET, ModelKind::RESNET18] {
        for norm in [Normalization::cifar10(), Normalization::fashion_mnist()] {
            let ch = norm.mean.len();
            let name = if ch == 3 {
                kind.to_string()
            } else {
                format!("{kind}-{ch}ch")
            };
            let (net, bytes) = models(kind, &norm, &name);
            let parsed = Model::parse(&bytes).expect("parse");
            let prepared: Vec<Model> = kernel_sets
                .iter()
                .map(|&k| common::prepared(parsed, k))
                .collect();
            let mut g = c.benchmark_group(&name);
            g.sample_size(if kind == ModelKind::RESNET18 { 10 } else { 50 });
            for batch in [1usize, 64] {
                let px = pixels(batch, ch, 2);
                g.throughput(Throughput::Elements(batch as u64));
                for (&k, model) in kernel_sets.iter().zip(&prepared) {
                    let kname = k.resolved_name().expect("kernels");
                    for threads in [1usize, 2] {
                        // The other sets: the 3-channel models only, one thread.
                        if k != Kernels::Auto && (ch != 3 || threads != 1) {
                            continue;
                        }
                        let mut arena = vec![0u8; arena_bytes_parallel(model, k, batch, threads)];
                        g.bench_function(
                            BenchmarkId::new(format!("int8-{kname}/threads{threads}"), batch),
                            |b| {
                                b.iter(|| {
                                    run_parallel_with(model, k, &px, &mut arena, threads)
                                        .expect("run")[0]
                                })
                            },
                        );
                    }
                }
                if ch != 3 {
                    continue; // candle f32: the peers' 3-channel shapes only
                }
                let x = Tensor::from_vec(px.clone(), (batch, ch, 32, 32), &Device::Cpu)
                    .expect("tensor");
                let norm = Normalizer::new(&norm, &Device::Cpu).expect("norm");
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
}

criterion_group!(benches, bench);
criterion_main!(benches);
