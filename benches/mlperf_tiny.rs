//! CPU inference of the MLPerf Tiny reference models (`tests/data/mlperf_tiny/*.tflite`,
//! imported as `octet import` does): batch-1 latency and batch-64 throughput, the runtime at 1
//! and 2 threads with the default kernels, and at 1 thread with every other SIMD set this CPU
//! has. Inputs are seeded random int8 tensors (speed only; `tests/mlperf_tiny.rs` checks the
//! bytes). `bench/cpu_mlperf_tiny.sh` runs this and TFLite (XNNPACK) on the same files in one
//! command.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use octet_export::tflite::import::{import, ImportOptions};
use octet_runtime::parallel::{arena_bytes_parallel, run_parallel_with};
use octet_runtime::{Kernels, Model};

mod common;
use rand::{Rng, SeedableRng};

fn bench(c: &mut Criterion) {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/mlperf_tiny");
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .expect("tests/data/mlperf_tiny")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "tflite"))
        .collect();
    files.sort();
    let auto = Kernels::Auto.resolved_name().expect("kernels");
    let mut kernel_sets = vec![Kernels::Auto];
    kernel_sets.extend(Kernels::available().filter(|&k| {
        k != Kernels::Scalar && k != Kernels::Auto && k.resolved_name().ok() != Some(auto)
    }));
    for path in files {
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        let tflite = std::fs::read(&path).expect("read");
        let bytes = import(&tflite, &ImportOptions::default())
            .expect("import")
            .bytes;
        let parsed = Model::parse(&bytes).expect("parse");
        let prepared: Vec<Model> = kernel_sets
            .iter()
            .map(|&k| common::prepared(parsed, k))
            .collect();
        let len = parsed.input_len();
        let mut g = c.benchmark_group(&name);
        for batch in [1usize, 64] {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(batch as u64);
            let x: Vec<u8> = (0..batch * len).map(|_| rng.random()).collect();
            g.throughput(Throughput::Elements(batch as u64));
            for (&k, model) in kernel_sets.iter().zip(&prepared) {
                let kname = k.resolved_name().expect("kernels");
                for threads in [1usize, 2] {
                    if k != Kernels::Auto && threads != 1 {
                        continue;
                    }
                    let mut arena = vec![0u8; arena_bytes_parallel(model, k, batch, threads)];
                    g.bench_function(
                        BenchmarkId::new(format!("int8-{kname}/threads{threads}"), batch),
                        |b| {
                            b.iter(|| {
                                run_parallel_with(model, k, &x, &mut arena, threads).expect("run")
                                    [0]
                            })
                        },
                    );
                }
            }
        }
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
