//! Models imported from TFLite — the MLPerf Tiny reference models, which the runtime cannot
//! import itself — on whatever target the tests run (x86, aarch64 under QEMU in CI): every
//! kernel set here gives the host's output bytes, which are TensorFlow Lite Micro's
//! (tests/mlperf_tiny.rs). `bench/imported_models.sh DIR` writes NAME.o8, NAME.inputs and
//! NAME.expected into DIR; this test reads DIR from OCTET_IMPORTED_DIR and says SKIP without it.

use octet_runtime::{Kernels, Model};

#[test]
fn imported_models_give_the_hosts_bytes_on_every_kernel_set() {
    let Some(dir) = std::env::var_os("OCTET_IMPORTED_DIR") else {
        println!("SKIP imported models: set OCTET_IMPORTED_DIR (bench/imported_models.sh DIR)");
        return;
    };
    let dir = std::path::PathBuf::from(dir);
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "o8") {
            continue;
        }
        let read = |ext: &str| std::fs::read(path.with_extension(ext)).unwrap();
        let (bytes, inputs, expected) = (read("o8"), read("inputs"), read("expected"));
        let m = Model::parse(&bytes).unwrap();
        let batch = m.batch_of(inputs.len()).unwrap();
        for k in Kernels::available() {
            let mut arena = vec![0u8; m.arena_bytes_for(k, batch)];
            let out = m.run_with(k, &inputs, &mut arena).unwrap();
            let out: Vec<u8> = out.iter().map(|&v| v as u8).collect();
            assert_eq!(
                out,
                expected,
                "{} with the {} kernels",
                path.display(),
                k.name()
            );
        }
        println!(
            "{}: {batch} inputs, {} kernel sets",
            path.display(),
            Kernels::available().count()
        );
        seen += 1;
    }
    assert!(seen > 0, "no .o8 in {}", dir.display());
}
