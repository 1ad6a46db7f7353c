//! A prepared model (`Model::prepare`: each op's kernel parameters built once into a table)
//! runs every path to the same bytes as the unprepared one (each op prepared as it runs) and the
//! scalar reference: image by image, in groups, timed, on threads, split between threads.

use octet_testkit as common;

use octet_runtime::{Kernels, Model, PreparedOp, RuntimeError};

/// The logits of the unprepared model with the scalar kernels, one image at a time.
fn reference(m: &Model, pixels: &[u8]) -> Vec<i8> {
    let batch = pixels.len() / m.input_len();
    let mut a = vec![0u8; m.arena_bytes_for(Kernels::Scalar, batch)];
    m.run_with(Kernels::Scalar, pixels, &mut a)
        .unwrap()
        .to_vec()
}

fn models() -> Vec<Vec<u8>> {
    vec![
        common::lenet(7).encode(),
        common::lenet_on(3, 8).encode(),
        common::small_resnet(9).encode(),
        common::small_late_resnet(10).encode(),
        common::wide_block_net(13).encode(),
        common::hand_model().encode(),
        common::embedded_net(1, 11).encode(),
        common::embedded_net(2, 12).encode(),
    ]
}

#[test]
fn prepared_runs_the_same_bytes() {
    for bytes in models() {
        let m = Model::parse(&bytes).unwrap();
        let mut table = vec![PreparedOp::EMPTY; m.num_ops()];
        let p = m.prepare(&mut table).unwrap();
        assert!(!m.is_prepared() && p.is_prepared());
        for batch in [1usize, 3, 9] {
            let pixels = common::Rng::new(batch as u64).bytes(batch * m.input_len());
            let reference = reference(&m, &pixels);
            // One working area (image by image), and room for groups of images.
            for k in Kernels::available() {
                for extra in [0, 7 * m.working_bytes(k)] {
                    let mut a = vec![0x5au8; m.arena_bytes_for(k, batch) + extra];
                    let got = p.run_with(k, &pixels, &mut a).unwrap();
                    assert_eq!(got, &reference[..], "{k:?} batch {batch} extra {extra}");
                    let mut times = vec![0.0; m.num_ops()];
                    p.run_timed(k, &pixels, &mut a, &mut times, || 0.0).unwrap();
                }
            }
        }
    }
}

#[cfg(feature = "std")]
#[test]
fn prepared_runs_the_same_bytes_on_threads() {
    use octet_runtime::parallel::{
        arena_bytes_parallel, arena_bytes_split, run_parallel, run_split_with,
    };
    for bytes in models() {
        let m = Model::parse(&bytes).unwrap();
        let mut table = vec![PreparedOp::default(); m.num_ops() + 3];
        let p = m.prepare(&mut table).unwrap();
        for batch in [1usize, 5] {
            let pixels = common::Rng::new(20 + batch as u64).bytes(batch * m.input_len());
            let reference = reference(&m, &pixels);
            for threads in [2usize, 3] {
                let mut a = vec![0u8; arena_bytes_parallel(&p, Kernels::Auto, batch, threads)];
                let got = run_parallel(&p, &pixels, &mut a, threads).unwrap();
                assert_eq!(got, &reference[..], "batch {batch} threads {threads}");
                for k in Kernels::available() {
                    let mut a = vec![0x5au8; arena_bytes_split(&p, k, batch, threads)];
                    let got = run_split_with(&p, k, &pixels, &mut a, threads).unwrap();
                    assert_eq!(got, &reference[..], "{k:?} batch {batch} threads {threads}");
                }
            }
        }
    }
}

/// A table shorter than the op count is refused; inspection is the same prepared or not.
#[test]
fn prepare_checks_the_table() {
    let bytes = common::small_resnet(11).encode();
    let m = Model::parse(&bytes).unwrap();
    let mut short = vec![PreparedOp::EMPTY; m.num_ops() - 1];
    assert_eq!(
        m.prepare(&mut short).map(|_| ()),
        Err(RuntimeError::OutOfBounds {
            what: "op (prepared table too short)",
            index: m.num_ops() as u32 - 1,
        })
    );
    let mut table = vec![PreparedOp::EMPTY; m.num_ops()];
    let p = m.prepare(&mut table).unwrap();
    let kinds = |m: &Model| {
        m.ops()
            .map(|o| (o.kind, o.input0, o.output))
            .collect::<Vec<_>>()
    };
    assert_eq!(kinds(&p), kinds(&m));
    for k in Kernels::ALL {
        assert_eq!(p.arena_bytes(k), m.arena_bytes(k));
    }
}

/// Prepared with packed weights (`Model::prepare_packed`) for each kernel set: every set and
/// path runs the same bytes as the reference (only the set that packed reads the packing), on
/// one thread, in groups and split between threads.
#[test]
fn packed_runs_the_same_bytes() {
    let mut packed_some = false;
    for bytes in models() {
        let m = Model::parse(&bytes).unwrap();
        for packer in Kernels::available() {
            let need = m.packed_bytes(packer).unwrap();
            packed_some |= need > 0;
            let mut table = vec![PreparedOp::EMPTY; m.num_ops()];
            let mut packed = vec![0xa5u8; need + 5];
            let p = m.prepare_packed(&mut table, &mut packed, packer).unwrap();
            for batch in [1usize, 6] {
                let pixels = common::Rng::new(40 + batch as u64).bytes(batch * m.input_len());
                let reference = reference(&m, &pixels);
                for k in [packer, Kernels::Scalar] {
                    for extra in [0, 7 * m.working_bytes(k)] {
                        let mut a = vec![0x5au8; m.arena_bytes_for(k, batch) + extra];
                        let got = p.run_with(k, &pixels, &mut a).unwrap();
                        assert_eq!(got, &reference[..], "{packer:?} run by {k:?} batch {batch}");
                    }
                }
                #[cfg(feature = "std")]
                {
                    use octet_runtime::parallel::{arena_bytes_split, run_split_with};
                    let mut a = vec![0u8; arena_bytes_split(&p, packer, batch, 2)];
                    let got = run_split_with(&p, packer, &pixels, &mut a, 2).unwrap();
                    assert_eq!(got, &reference[..], "{packer:?} split, batch {batch}");
                }
            }
        }
    }
    // The AVX-512 VNNI set packs the fully connected layers of these models.
    if Kernels::Avx512Vnni.resolved_name().is_ok() {
        assert!(packed_some);
    } else {
        println!("SKIP (part): no AVX-512 VNNI, no set here packs weights");
    }
}

/// A packed-weights buffer shorter than `packed_bytes` is refused with the size it needed.
#[test]
fn prepare_packed_checks_the_buffer() {
    let bytes = common::lenet(7).encode();
    let m = Model::parse(&bytes).unwrap();
    let k = Kernels::Auto;
    let need = m.packed_bytes(k).unwrap();
    if need == 0 {
        println!("SKIP: the kernels here pack no weights");
        return;
    }
    let mut table = vec![PreparedOp::EMPTY; m.num_ops()];
    let mut short = vec![0u8; need - 1];
    assert!(matches!(
        m.prepare_packed(&mut table, &mut short, k).map(|_| ()),
        Err(RuntimeError::OutOfBounds { .. })
    ));
}
