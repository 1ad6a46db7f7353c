//! Inputs the fuzzer once broke the runtime with: a model that parses must run.

use octet_runtime::{Kernels, Model};

/// The `parse_fixed` fuzz target's repair: file_len and CRC made to match.
fn repaired(data: &[u8]) -> Vec<u8> {
    let mut f = data.to_vec();
    if f.len() >= 20 {
        let n = f.len() as u32;
        f[16..20].copy_from_slice(&n.to_le_bytes());
        let crc = octet_runtime::format::crc32(&f[16..]);
        f[12..16].copy_from_slice(&crc.to_le_bytes());
    }
    f
}

#[test]
fn every_regression_input_is_refused_or_runs() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/regressions");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let f = repaired(&std::fs::read(&path).unwrap());
        seen += 1;
        let Ok(model) = Model::parse(&f) else {
            continue;
        };
        let pixels: Vec<u8> = f.iter().copied().cycle().take(model.input_len()).collect();
        let mut arena = vec![0u8; model.arena_bytes()];
        let a = model
            .run_with(Kernels::Scalar, &pixels, &mut arena)
            .map(<[i8]>::to_vec);
        assert!(
            a.is_ok(),
            "{}: parsed but does not run: {a:?}",
            path.display()
        );
        assert_eq!(a.unwrap(), model.run(&pixels, &mut arena).unwrap());
    }
    assert!(seen > 0);
}
