//! `run_parallel` (images in groups, op by op) gives the same bytes as the single-threaded
//! scalar reference.
#![cfg(feature = "std")]

use octet_testkit as common;

use octet_runtime::parallel::{
    arena_bytes_parallel, arena_bytes_split, run_parallel, run_split_with,
};
use octet_runtime::{Kernels, Model, RuntimeError};

/// The test models (LeNet, a small ResNet, one with small late layers, the embedded op set),
/// each in both roundings, and the two ResNets as the exporter writes them (TFLite's adds, split
/// after their convs as octet's are), seeds from `seed`.
fn models(seed: u64) -> Vec<Vec<u8>> {
    let nets = [
        common::lenet(seed),
        common::small_resnet(seed + 1),
        common::small_late_resnet(seed + 2),
        common::embedded_net(1, seed + 3),
    ];
    let exported = [
        common::small_resnet(seed + 4),
        common::small_late_resnet(seed + 5),
    ];
    nets.into_iter()
        .flat_map(|mut b| {
            let single = b.encode();
            b.rounding = 2;
            [single, b.encode()]
        })
        .chain(exported.into_iter().map(|mut b| {
            common::exported::as_exported(&mut b);
            b.encode()
        }))
        .collect()
}

/// The single-threaded scalar reference's logits.
fn scalar(m: &Model, pixels: &[u8], batch: usize) -> Vec<i8> {
    let mut arena = vec![0u8; m.arena_bytes_for(Kernels::Scalar, batch)];
    m.run_with(Kernels::Scalar, pixels, &mut arena)
        .unwrap()
        .to_vec()
}

#[test]
fn parallel_equals_single_threaded() {
    for bytes in models(1) {
        let m = Model::parse(&bytes).unwrap();
        for batch in [1usize, 2, 5, 7, 19] {
            let pixels = common::Rng::new(batch as u64).bytes(batch * m.input_len());
            let single = scalar(&m, &pixels, batch);
            let mut a1 = vec![0u8; m.arena_bytes_for(Kernels::Auto, batch)];
            assert_eq!(m.run(&pixels, &mut a1).unwrap(), &single[..]);
            for threads in [1usize, 2, 3, 8] {
                let mut a = vec![0u8; arena_bytes_parallel(&m, Kernels::Auto, batch, threads)];
                let par = run_parallel(&m, &pixels, &mut a, threads).unwrap();
                assert_eq!(par, &single[..], "batch {batch} threads {threads}");
            }
        }
        let pixels = vec![0u8; 4 * m.input_len()];
        let mut a = vec![0u8; arena_bytes_parallel(&m, Kernels::Auto, 4, 2) - 1];
        assert!(matches!(
            run_parallel(&m, &pixels, &mut a, 2),
            Err(RuntimeError::ArenaTooSmall { .. })
        ));
        assert_eq!(
            run_parallel(&m, &pixels, &mut a, 0),
            Err(RuntimeError::BadThreads)
        );
    }
}

/// Each image split between the threads, op by op (every conv's rows or channels, fc outputs, add
/// elements): the bytes of the single-threaded scalar reference, for every kernel set here.
#[test]
fn split_equals_single_threaded() {
    for bytes in models(4) {
        let m = Model::parse(&bytes).unwrap();
        for batch in [1usize, 3] {
            let pixels = common::Rng::new(10 + batch as u64).bytes(batch * m.input_len());
            let single = scalar(&m, &pixels, batch);
            for k in Kernels::available() {
                for threads in [1usize, 2, 3, 5] {
                    let mut a = vec![0x5au8; arena_bytes_split(&m, k, batch, threads)];
                    let par = run_split_with(&m, k, &pixels, &mut a, threads).unwrap();
                    assert_eq!(par, &single[..], "{k:?} batch {batch} threads {threads}");
                }
            }
        }
        let pixels = vec![0u8; m.input_len()];
        let mut a = vec![0u8; arena_bytes_split(&m, Kernels::Auto, 1, 2) - 1];
        assert!(matches!(
            run_split_with(&m, Kernels::Auto, &pixels, &mut a, 2),
            Err(RuntimeError::ArenaTooSmall { .. })
        ));
    }
}
