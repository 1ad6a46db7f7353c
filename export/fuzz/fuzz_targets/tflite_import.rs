//! `octet import` on arbitrary bytes: an error, or an `.o8` the runtime parses and runs (the
//! scalar and the fastest kernels giving the same bytes). The seed corpus is the MLPerf Tiny
//! models of tests/data/mlperf_tiny (bench/fuzz_run.sh copies them in).
#![no_main]

use libfuzzer_sys::fuzz_target;
use octet_export::tflite::import::{import, ImportOptions};
use octet_runtime::{Kernels, Model};

fuzz_target!(|data: &[u8]| {
    let Ok(imported) = import(data, &ImportOptions::default()) else {
        return;
    };
    let model = Model::parse(&imported.bytes).expect("an imported model parses");
    if model.macs_per_image() > 50_000_000 || model.arena_bytes(Kernels::Auto) > 64 << 20 {
        return;
    }
    let input: Vec<u8> = data.iter().copied().cycle().take(model.input_len()).collect();
    let mut arena = vec![0u8; model.arena_bytes(Kernels::Auto)];
    let a = model
        .run_with(Kernels::Scalar, &input, &mut arena)
        .expect("an imported model runs")
        .to_vec();
    let b = model.run(&input, &mut arena).expect("an imported model runs");
    assert_eq!(&a[..], b, "the fastest kernels differ from the scalar ones");
});
