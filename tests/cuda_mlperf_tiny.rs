//! The MLPerf Tiny reference models (tests/data/mlperf_tiny, imported as `octet import` does)
//! on the CUDA path: its output bytes at batches 1, 7 and 1,024 must equal the CPU runtime's
//! (the scalar reference and the CPU's default kernels), on the tensor-core and the dp4a paths.
//!
//! Needs a CUDA device: ignored by default, run with
//! `cargo test --release --features cuda --test cuda_mlperf_tiny -- --include-ignored`.
#![cfg(feature = "cuda")]

use octet_export::tflite::import::{import, ImportOptions};
use octet_runtime::cuda::CudaModel;
use octet_runtime::parallel::{arena_bytes_parallel, run_parallel_with};
use octet_runtime::{Kernels, Model};
use rand::{Rng, SeedableRng};

/// Batches compared; the largest is the one the note's throughput is measured at.
const BATCHES: [usize; 3] = [1, 7, 1024];

/// `model`'s outputs for `inputs` on the CPU with `kernels`.
fn cpu(model: &Model, kernels: Kernels, inputs: &[u8]) -> Vec<i8> {
    let batch = inputs.len() / model.input_len();
    let mut arena = vec![0u8; arena_bytes_parallel(model, kernels, batch, 2)];
    run_parallel_with(model, kernels, inputs, &mut arena, 2)
        .expect("cpu run")
        .to_vec()
}

/// The first differing byte of two output buffers, as a message.
fn first_difference(model: &Model, got: &[i8], want: &[i8]) -> Option<String> {
    let i = got.iter().zip(want).position(|(a, b)| a != b)?;
    Some(format!(
        "input {}, output {}: {} vs {}",
        i / model.output_len(),
        i % model.output_len(),
        got[i],
        want[i]
    ))
}

#[test]
#[ignore = "needs a CUDA GPU: run with --features cuda -- --include-ignored"]
fn mlperf_tiny_models_match_cpu() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/mlperf_tiny");
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "tflite"))
        .collect();
    files.sort();
    assert_eq!(files.len(), 4, "{dir}");
    let max = *BATCHES.iter().max().unwrap();
    for path in files {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let bytes = import(&std::fs::read(&path).unwrap(), &ImportOptions::default())
            .unwrap()
            .bytes;
        let model = Model::parse(&bytes).unwrap();
        let mut g = CudaModel::new(&model, 0, max).expect("a CUDA device");
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
        for b in BATCHES {
            let x: Vec<u8> = (0..b * model.input_len()).map(|_| rng.random()).collect();
            let want = cpu(&model, Kernels::Scalar, &x);
            assert_eq!(
                cpu(&model, Kernels::Auto, &x),
                want,
                "{name} batch {b}: CPU kernels"
            );
            for tensor_cores in [true, false] {
                g.set_tensor_cores(tensor_cores);
                let got = g.run(&x).unwrap().to_vec();
                assert_eq!(got.len(), want.len(), "{name} batch {b}");
                if let Some(d) = first_difference(&model, &got, &want) {
                    panic!("{name} batch {b} (tensor cores {tensor_cores}): GPU != CPU at {d}");
                }
            }
            println!(
                "{name} batch {b}: GPU bytes = CPU bytes ({} outputs)",
                want.len()
            );
        }
    }
}
