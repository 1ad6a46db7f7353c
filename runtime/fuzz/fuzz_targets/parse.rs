//! `Model::parse` on arbitrary bytes must return `Err` or a model that runs without panicking
//! (scalar and fastest kernels giving the same bytes).
#![no_main]

use libfuzzer_sys::fuzz_target;
use octet_runtime::{Kernels, Model};

fuzz_target!(|data: &[u8]| {
    let Ok(model) = Model::parse(data) else { return };
    let n = model.input_len();
    if n > 1 << 20 || model.arena_bytes() > 64 << 20 {
        return;
    }
    // Pixels from the input itself, repeated.
    let pixels: Vec<u8> = data.iter().copied().cycle().take(n).collect();
    let mut arena = vec![0u8; model.arena_bytes()];
    let a = model.run_with(Kernels::Scalar, &pixels, &mut arena).expect("valid model runs").to_vec();
    let b = model.run(&pixels, &mut arena).expect("valid model runs");
    assert_eq!(&a[..], b);
});
