//! Like `parse`, but first makes the header's file_len and CRC match the input, so the fuzzer
//! explores the validation behind the CRC check.
#![no_main]

use libfuzzer_sys::fuzz_target;
use octet_runtime::{Kernels, Model};

fuzz_target!(|data: &[u8]| {
    let mut f = data.to_vec();
    if f.len() >= 20 {
        let n = f.len() as u32;
        f[16..20].copy_from_slice(&n.to_le_bytes());
        let crc = octet_runtime::format::crc32(&f[16..]);
        f[12..16].copy_from_slice(&crc.to_le_bytes());
    }
    let Ok(model) = Model::parse(&f) else { return };
    let n = model.input_len();
    if n > 1 << 20 || model.arena_bytes() > 64 << 20 {
        return;
    }
    let pixels: Vec<u8> = f.iter().copied().cycle().take(n).collect();
    let mut arena = vec![0u8; model.arena_bytes()];
    let a = model.run_with(Kernels::Scalar, &pixels, &mut arena).expect("valid model runs").to_vec();
    let b = model.run(&pixels, &mut arena).expect("valid model runs");
    assert_eq!(&a[..], b);
});
