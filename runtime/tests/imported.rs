//! Models imported from TFLite — the MLPerf Tiny reference models, which the runtime cannot
//! import itself — on whatever target the tests run (x86, aarch64 under QEMU in CI): every
//! kernel set here gives the host's output bytes, which are TensorFlow Lite Micro's
//! (tests/mlperf_tiny.rs). `bench/imported_models.sh DIR` writes NAME.o8, NAME.inputs and
//! NAME.expected into DIR; this test reads DIR from OCTET_IMPORTED_DIR and says SKIP without it.

use octet_runtime::{Kernels, Model, PreparedOp};

#[test]
fn imported_models_give_the_hosts_bytes_on_every_kernel_set() {
    let Some(cases) = octet_testkit::imported::imported_cases() else {
        return;
    };
    for case in cases {
        let m = Model::parse(&case.model).unwrap();
        let batch = m.batch_of(case.inputs.len()).unwrap();
        for k in Kernels::available() {
            // As read, and prepared with the set's packed weights (what `octet run` runs).
            let mut table = vec![PreparedOp::EMPTY; m.num_ops()];
            let mut packed = vec![0u8; m.packed_bytes(k).unwrap()];
            let p = m.prepare_packed(&mut table, &mut packed, k).unwrap();
            for (model, how) in [(&m, "unpacked"), (&p, "packed")] {
                let mut arena = vec![0u8; model.arena_bytes_for(k, batch)];
                let out = model.run_with(k, &case.inputs, &mut arena).unwrap();
                let out: Vec<u8> = out.iter().map(|&v| v as u8).collect();
                let path = case.path.display();
                assert_eq!(
                    out,
                    case.expected,
                    "{path} with the {} kernels, {how}",
                    k.name()
                );
            }
        }
        println!(
            "{}: {batch} inputs, {} kernel sets",
            case.path.display(),
            Kernels::available().count()
        );
    }
}
