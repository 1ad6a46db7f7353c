//! The fuzz targets' property, shared with `runtime/tests/regressions.rs` (which replays the
//! inputs the fuzzer once broke the runtime with): `Model::parse` refuses the bytes, or gives a
//! model that runs without panicking, the scalar and the fastest kernels giving the same bytes.
// Each target uses what it needs (`parse` has no repair).
#![allow(dead_code)]

use octet_runtime::{Kernels, Model};

/// Makes the header's file_len and CRC match `data`, so that a mutation reaches the
/// validation behind the CRC check (the `parse_fixed` target).
pub fn repaired(data: &[u8]) -> Vec<u8> {
    use octet_runtime::format::{header, seal};
    let mut f = data.to_vec();
    if f.len() >= header::FILE_LEN + 4 {
        let n = f.len() as u32;
        f[header::FILE_LEN..header::FILE_LEN + 4].copy_from_slice(&n.to_le_bytes());
        seal(&mut f);
    }
    f
}

/// Panics when `data` parses into a model that does not run, or runs differently with the
/// fastest kernels; models too large to run quickly (over 1 Mi pixels or 64 MiB of arena) are
/// only parsed. The pixels are the input's own bytes, repeated.
pub fn parses_or_is_refused(data: &[u8]) {
    let Ok(model) = Model::parse(data) else {
        return;
    };
    let n = model.input_len();
    if n > 1 << 20 || model.arena_bytes(Kernels::Auto) > 64 << 20 {
        return;
    }
    let pixels: Vec<u8> = data.iter().copied().cycle().take(n).collect();
    let mut arena = vec![0u8; model.arena_bytes(Kernels::Auto)];
    let a = model
        .run_with(Kernels::Scalar, &pixels, &mut arena)
        .expect("a model that parses runs")
        .to_vec();
    let b = model
        .run(&pixels, &mut arena)
        .expect("a model that parses runs");
    assert_eq!(&a[..], b, "the fastest kernels differ from the scalar ones");
}
