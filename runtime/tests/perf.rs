//! Timing smoke tests (ignored by default): `cargo test --release -p octet-runtime --test perf
//! -- --ignored --nocapture`.

mod common;

use std::time::Instant;

use octet_runtime::{Kernels, Model};

fn time_it(model: &Model, k: Kernels, pixels: &[u8], reps: usize) -> f64 {
    let batch = pixels.len() / model.input_len();
    let mut arena = vec![0u8; model.arena_bytes_for(batch)];
    model.run_with(k, pixels, &mut arena).unwrap();
    let t = Instant::now();
    for _ in 0..reps {
        std::hint::black_box(model.run_with(k, pixels, &mut arena).unwrap());
    }
    t.elapsed().as_secs_f64() / reps as f64
}

#[test]
#[ignore]
fn resnet18_batch64_throughput() {
    let bytes = common::resnet18(1).encode();
    let m = Model::parse(&bytes).unwrap();
    let pixels = common::Rng::new(2).bytes(64 * m.input_len());
    for k in [Kernels::Avx512Vnni, Kernels::Avx2] {
        if m.run_with(k, &pixels[..m.input_len()], &mut vec![0; m.arena_bytes()])
            .is_err()
        {
            continue;
        }
        let s = time_it(&m, k, &pixels, 2);
        println!(
            "resnet18 batch 64, 1 thread, {k:?}: {:.1} img/s ({:.3} s/batch)",
            64.0 / s,
            s
        );
    }
}

#[test]
#[ignore]
fn lenet_batch1_latency() {
    let bytes = common::lenet(1).encode();
    let m = Model::parse(&bytes).unwrap();
    let pixels = common::Rng::new(2).bytes(m.input_len());
    for k in [Kernels::Avx512Vnni, Kernels::Avx2, Kernels::Scalar] {
        if m.run_with(k, &pixels, &mut vec![0; m.arena_bytes()])
            .is_err()
        {
            continue;
        }
        let s = time_it(&m, k, &pixels, 2000);
        println!("lenet batch 1, {k:?}: {:.4} ms", s * 1e3);
    }
}

/// Writes the fuzz seed corpus (run once by hand).
#[test]
#[ignore]
fn write_fuzz_corpus() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/fuzz/corpus/parse");
    std::fs::create_dir_all(dir).unwrap();
    let mut small = common::Builder::new(2, 6, 6, 4);
    let x = small.conv(0, 3, 3, 1, 1, true);
    let x = small.max_pool(x, 2, 2);
    let y = small.conv(x, 3, 1, 1, 0, false);
    let z = small.add(x, y, true);
    let z = small.avg_pool(z, 3, 3);
    small.fc(z, 4, false);
    for (name, b) in [
        ("hand.o8", common::hand_model()),
        ("lenet.o8", common::lenet(1)),
        ("small_resnet.o8", common::small_resnet(2)),
        ("all_ops.o8", small),
    ] {
        let bytes = b.encode();
        assert!(bytes.len() < 64 * 1024, "{name}: {}", bytes.len());
        Model::parse(&bytes).unwrap();
        std::fs::write(format!("{dir}/{name}"), bytes).unwrap();
    }
}
