//! Test models and images for the C API's tests and examples (the `.o8` writer of
//! runtime/tests/common, which is independent of the runtime's reader).
#![allow(dead_code)]

pub use octet_testkit as common;

/// LeNet over `channels`×32×32 pixels (conv 5×5→6, max-pool 2, conv 5×5→16, max-pool 2,
/// fc 400→120→84→10, ReLU folded into the clamps) with random weights from `seed`.
pub fn lenet(channels: u16, seed: u64) -> Vec<u8> {
    common::lenet_on(channels, seed).encode()
}

/// `n` images of `len` pixels: all 0, all 255, then random (seeded).
pub fn images(n: usize, len: usize, seed: u64) -> Vec<u8> {
    let mut rng = common::Rng::new(seed);
    (0..n)
        .flat_map(|i| match i {
            0 => vec![0u8; len],
            1 => vec![255u8; len],
            _ => rng.bytes(len),
        })
        .collect()
}
