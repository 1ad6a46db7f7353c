//! A prepared model (`Model::prepare`: each op's kernel parameters built once into a table)
//! runs every path to the same bytes as the unprepared one (each op prepared as it runs) and the
//! scalar reference: image by image, in groups, timed, on threads, split between threads.

use octet_testkit as common;

use octet_runtime::{Kernels, Model, PackedImageInfo, PreparedOp, RuntimeError};

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
    // The AVX-512 VNNI and Cortex-M sets pack the fully connected layers of these models.
    if Kernels::Avx512Vnni.resolved_name().is_ok() || Kernels::CortexM.resolved_name().is_ok() {
        assert!(packed_some);
    } else {
        println!("SKIP (part): no AVX-512 VNNI or Cortex-M set, no set here packs weights");
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

/// `b` copied to an address aligned as packed images need (`PACKED_ALIGN`, 64) plus `skew`:
/// the store and where the copy starts in it.
fn aligned_copy(b: &[u8], skew: usize) -> (Vec<u8>, usize) {
    let mut store = vec![0u8; b.len() + 64 + skew];
    let at = store.as_ptr().align_offset(64) + skew;
    store[at..at + b.len()].copy_from_slice(b);
    (store, at)
}

/// This model's packed image for the Cortex-M set, as a firmware's build script writes it.
fn cortex_m_image(m: &Model) -> Vec<u8> {
    let n = m.packed_image_bytes(Kernels::CortexM).unwrap();
    let mut image = vec![0x5au8; n + 3];
    assert_eq!(
        m.write_packed_image(Kernels::CortexM, &mut image).unwrap(),
        n
    );
    image.truncate(n);
    image
}

/// Prepared from a packed image (`Model::prepare_packed_image`, weights read in place as
/// from flash): the Cortex-M set and the scalar kernels run the reference's bytes, one image
/// and groups. Where the Cortex-M set cannot run, the image is still checked whole and the
/// error is that the set is unavailable.
#[test]
fn packed_image_runs_the_same_bytes() {
    let mut ran = false;
    for bytes in models() {
        let m = Model::parse(&bytes).unwrap();
        let image = cortex_m_image(&m);
        let (store, at) = aligned_copy(&image, 0);
        let mut table = vec![PreparedOp::EMPTY; m.num_ops()];
        let p = match m.prepare_packed_image(
            &mut table,
            &store[at..at + image.len()],
            Kernels::CortexM,
        ) {
            Ok(p) => p,
            Err(RuntimeError::KernelsUnavailable) => continue,
            Err(e) => panic!("{e}"),
        };
        ran = true;
        for batch in [1usize, 6] {
            let pixels = common::Rng::new(60 + batch as u64).bytes(batch * m.input_len());
            let reference = reference(&m, &pixels);
            for k in [Kernels::CortexM, Kernels::Scalar] {
                let mut a = vec![0x5au8; m.arena_bytes_for(k, batch)];
                let got = p.run_with(k, &pixels, &mut a).unwrap();
                assert_eq!(got, &reference[..], "image run by {k:?}, batch {batch}");
            }
        }
    }
    if !ran {
        println!("SKIP (part): no Cortex-M set here; the images were written and checked only");
    }
}

/// A packed image that is not this model's, or is damaged, truncated or misplaced, is refused
/// with what was wrong, before any kernel runs; so are images for a set that has none.
#[test]
fn packed_image_refuses_what_is_not_this_models() {
    let bytes = common::lenet(7).encode();
    let other_bytes = common::lenet(8).encode();
    let (m, other) = (
        Model::parse(&bytes).unwrap(),
        Model::parse(&other_bytes).unwrap(),
    );
    let image = cortex_m_image(&m);
    let n = image.len();
    // The header as `octet inspect` reads it.
    let info = PackedImageInfo::read(&image).unwrap();
    assert_eq!(
        (info.kernels, info.model_crc, info.len),
        (Kernels::CortexM, m.crc(), n)
    );
    assert!(PackedImageInfo::read(&image[..n - 1]).is_err());
    let refused = |model: &Model, image: &[u8], skew: usize| -> &'static str {
        let (store, at) = aligned_copy(image, skew);
        let mut table = vec![PreparedOp::EMPTY; model.num_ops()];
        match model.prepare_packed_image(&mut table, &store[at..at + image.len()], Kernels::CortexM)
        {
            Err(RuntimeError::BadPackedImage { what }) => what,
            r => panic!("expected a refusal, got {:?}", r.map(|_| ())),
        }
    };
    let with = |at: usize, v: u8| {
        let mut b = image.clone();
        b[at] ^= v;
        b
    };
    assert!(refused(&m, &image[..10], 0).contains("header"));
    assert!(refused(&m, &image[..n - 1], 0).contains("truncated"));
    assert!(refused(&m, &with(0, 1), 0).contains("magic"));
    assert!(refused(&m, &with(4, 1), 0).contains("version"));
    assert!(refused(&m, &with(n - 1, 0x10), 0).contains("CRC"));
    assert!(refused(&other, &image, 0).contains("another model"));
    assert!(refused(&m, &image, 1).contains("aligned"));
    // A set code this runtime does not know.
    assert!(refused(&m, &with(6, 3), 0).contains("kernel set"));
    // Only the Cortex-M set has images; a buffer shorter than the image is refused.
    assert!(matches!(
        m.packed_image_bytes(Kernels::Scalar),
        Err(RuntimeError::BadPackedImage { .. })
    ));
    assert!(matches!(
        m.write_packed_image(Kernels::CortexM, &mut vec![0u8; n - 1]),
        Err(RuntimeError::OutOfBounds { .. })
    ));
}
