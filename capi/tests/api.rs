//! The C API called as C would call it: results equal the runtime's, and every error path
//! returns its status without touching the caller's buffers.

mod support;

use std::ffi::CStr;
use std::ptr;

use octet_capi::*;
use octet_runtime::{Kernels, Model};

fn parsed(bytes: &[u8]) -> OctetModel {
    let mut m = unparsed();
    let s = unsafe { octet_model_parse(&mut m, bytes.as_ptr(), bytes.len()) };
    assert_eq!(s, OctetStatus::Ok, "{}", message(s as i32));
    m
}

fn unparsed() -> OctetModel {
    // Zeroed storage, as C's `OctetModel m = {0};`.
    unsafe { std::mem::zeroed() }
}

fn parse_status(bytes: &[u8]) -> OctetStatus {
    let mut m = unparsed();
    unsafe { octet_model_parse(&mut m, bytes.as_ptr(), bytes.len()) }
}

fn message(code: i32) -> String {
    let p = octet_status_message(code);
    unsafe { CStr::from_ptr(p) }.to_str().unwrap().to_owned()
}

/// `octet_model_run` with Rust slices; `logits` keeps its contents unless the call succeeds.
fn run(m: &OctetModel, pixels: &[u8], arena: &mut [u8], logits: &mut [i8]) -> OctetStatus {
    unsafe {
        octet_model_run(
            m,
            pixels.as_ptr(),
            pixels.len(),
            arena.as_mut_ptr(),
            arena.len(),
            logits.as_mut_ptr(),
            logits.len(),
        )
    }
}

#[test]
fn sizes_and_logits_match_the_runtime() {
    for channels in [1, 3] {
        let bytes = support::lenet(channels, 7);
        let m = parsed(&bytes);
        let r = Model::parse(&bytes).unwrap();
        unsafe {
            assert_eq!(octet_model_input_len(&m), r.input_len());
            assert_eq!(octet_model_input_len(&m), channels as usize * 32 * 32);
            assert_eq!(octet_model_output_len(&m), 10);
            for batch in [1, 3] {
                let want = r.arena_bytes_for(Kernels::Auto, batch);
                assert_eq!(octet_model_arena_bytes(&m, batch), want);
            }
            assert_eq!(
                octet_model_arena_bytes(&m, 0),
                r.arena_bytes_for(Kernels::Auto, 1)
            );
            let (mut c, mut h, mut w) = (0, 0, 0);
            assert_eq!(
                octet_model_input_shape(&m, &mut c, &mut h, &mut w),
                OctetStatus::Ok
            );
            assert_eq!((c, h, w), (channels as usize, 32, 32));
            assert_eq!(
                octet_model_input_shape(&m, ptr::null_mut(), ptr::null_mut(), &mut w),
                OctetStatus::Ok
            );
            let (mut scale, mut zp) = (0f32, 0i32);
            assert_eq!(
                octet_model_output_quant(&m, &mut scale, &mut zp),
                OctetStatus::Ok
            );
            assert_eq!((scale, zp), (r.output_scale(), r.output_zero_point()));
            let mut e = OctetInputEncoding::I8Hwc;
            assert_eq!(octet_model_input_encoding(&m, &mut e), OctetStatus::Ok);
            assert_eq!(e, OctetInputEncoding::U8ChwPixels);
            assert_eq!(
                octet_model_input_quant(&m, &mut scale, &mut zp),
                OctetStatus::Ok
            );
            assert_eq!((scale, zp), (r.input_scale(), -128));
        }
        let pixels = support::images(3, r.input_len(), 11);
        let mut want_arena = vec![0u8; r.arena_bytes_for(Kernels::Scalar, 3)];
        let want = r
            .run_with(Kernels::Scalar, &pixels, &mut want_arena)
            .unwrap()
            .to_vec();
        // Exactly the arena asked for, and a larger one at an odd address.
        for extra in [0, 1001] {
            let mut arena = vec![0u8; r.arena_bytes_for(Kernels::Auto, 3) + extra + 1];
            let mut logits = vec![0i8; 30];
            assert_eq!(
                run(&m, &pixels, &mut arena[1..], &mut logits),
                OctetStatus::Ok
            );
            assert_eq!(logits, want);
        }
        // One image at a time gives the same logits.
        let mut arena = vec![0u8; r.arena_bytes(Kernels::Auto)];
        for (img, want) in pixels.chunks(r.input_len()).zip(want.chunks(10)) {
            let mut logits = [0i8; 10];
            assert_eq!(run(&m, img, &mut arena, &mut logits), OctetStatus::Ok);
            assert_eq!(&logits[..], want);
        }
    }
}

/// A TensorFlow Lite model's kind of input (int8, H×W×C, its own scale and zero point) and
/// output (a softmax), the double rounding: the C API says so and runs it as the runtime does.
#[test]
fn int8_inputs_run_as_the_runtime_runs_them() {
    let mut b = support::common::embedded_net(2, 4);
    b.replan();
    let bytes = b.encode();
    let m = parsed(&bytes);
    let r = Model::parse(&bytes).unwrap();
    let (mut e, mut scale, mut zp) = (OctetInputEncoding::U8ChwPixels, 0f32, 0i32);
    unsafe {
        assert_eq!(octet_model_input_encoding(&m, &mut e), OctetStatus::Ok);
        assert_eq!(
            octet_model_input_quant(&m, &mut scale, &mut zp),
            OctetStatus::Ok
        );
    }
    assert_eq!(e, OctetInputEncoding::I8Hwc);
    assert_eq!((scale, zp), (0.05, 7));
    let n_in = unsafe { octet_model_input_len(&m) };
    assert_eq!(n_in, r.input_len());
    let inputs = support::images(4, n_in, 3);
    let mut want_arena = vec![0u8; r.arena_bytes_for(Kernels::Scalar, 4)];
    let want = r
        .run_with(Kernels::Scalar, &inputs, &mut want_arena)
        .unwrap()
        .to_vec();
    let n_out = unsafe { octet_model_output_len(&m) };
    let mut arena = vec![0u8; unsafe { octet_model_arena_bytes(&m, 4) }];
    let mut logits = vec![0i8; 4 * n_out];
    assert_eq!(run(&m, &inputs, &mut arena, &mut logits), OctetStatus::Ok);
    assert_eq!(logits, want);
}

#[test]
fn truncated_and_corrupt_models_are_refused() {
    let bytes = support::lenet(1, 3);
    assert_eq!(
        parse_status(&bytes[..bytes.len() - 1]),
        OctetStatus::Truncated
    );
    assert_eq!(parse_status(&bytes[..40]), OctetStatus::Truncated);
    assert_eq!(parse_status(&[]), OctetStatus::Truncated);
    let mut bad = bytes.clone();
    bad[0] ^= 1;
    assert_eq!(parse_status(&bad), OctetStatus::BadMagic);
    let mut bad = bytes.clone();
    let last = bad.len() - 1;
    bad[last] ^= 0x40;
    assert_eq!(parse_status(&bad), OctetStatus::CrcMismatch);
    let mut bad = bytes.clone();
    bad[8] = 99; // version
    assert_eq!(parse_status(&bad), OctetStatus::UnsupportedVersion);
    // A failed parse leaves the handle unusable, even one a good parse had filled.
    let mut m = parsed(&bytes);
    let s = unsafe { octet_model_parse(&mut m, bytes.as_ptr(), bytes.len() - 1) };
    assert_eq!(s, OctetStatus::Truncated);
    unsafe {
        assert_eq!(octet_model_input_len(&m), 0);
        assert_eq!(octet_model_arena_bytes(&m, 1), 0);
    }
    let mut logits = [7i8; 10];
    let mut arena = vec![0u8; 1 << 16];
    assert_eq!(
        run(&m, &[0; 1024], &mut arena, &mut logits),
        OctetStatus::BadHandle
    );
    assert_eq!(logits, [7; 10]);
}

#[test]
fn arena_pixels_and_logits_are_checked() {
    let bytes = support::lenet(1, 5);
    let m = parsed(&bytes);
    let n_in = unsafe { octet_model_input_len(&m) };
    let need = unsafe { octet_model_arena_bytes(&m, 2) };
    let pixels = support::images(2, n_in, 2);
    let mut logits = [7i8; 20];

    // Arena one byte short: refused, nothing written (arena or logits).
    let mut arena = vec![0xA5u8; need - 1];
    assert_eq!(
        run(&m, &pixels, &mut arena, &mut logits),
        OctetStatus::ArenaTooSmall
    );
    assert!(arena.iter().all(|&b| b == 0xA5));
    assert_eq!(logits, [7; 20]);

    let mut arena = vec![0u8; need];
    // Wrong pixel counts: not a whole image, none at all.
    for len in [n_in - 1, n_in + 1, 2 * n_in - 1, 0] {
        assert_eq!(
            run(&m, &pixels[..len], &mut arena, &mut logits),
            OctetStatus::InputLength,
            "{len} pixels"
        );
    }
    // Room for one image's logits, two images given.
    assert_eq!(
        run(&m, &pixels, &mut arena, &mut logits[..19]),
        OctetStatus::OutputTooSmall
    );
    assert_eq!(logits, [7; 20]);
    assert_eq!(run(&m, &pixels, &mut arena, &mut logits), OctetStatus::Ok);
}

#[test]
fn null_pointers_bad_handles_and_overlaps_are_refused() {
    let bytes = support::lenet(1, 9);
    let m = parsed(&bytes);
    let mut arena = vec![0u8; unsafe { octet_model_arena_bytes(&m, 1) } + 1024];
    let pixels = vec![0u8; 1024];
    let mut logits = [0i8; 10];
    unsafe {
        let mut h = unparsed();
        assert_eq!(
            octet_model_parse(ptr::null_mut(), bytes.as_ptr(), bytes.len()),
            OctetStatus::NullPointer
        );
        assert_eq!(
            octet_model_parse(&mut h, ptr::null(), bytes.len()),
            OctetStatus::NullPointer
        );
        assert_eq!(
            octet_model_parse(&mut h, ptr::null(), 0),
            OctetStatus::Truncated
        );
        assert_eq!(octet_model_input_len(ptr::null()), 0);
        assert_eq!(octet_model_output_len(&unparsed()), 0);
        assert_eq!(
            octet_model_input_shape(
                ptr::null(),
                ptr::null_mut(),
                ptr::null_mut(),
                ptr::null_mut()
            ),
            OctetStatus::NullPointer
        );
        assert_eq!(
            octet_model_output_quant(&unparsed(), ptr::null_mut(), ptr::null_mut()),
            OctetStatus::BadHandle
        );
        assert_eq!(
            octet_model_input_quant(&unparsed(), ptr::null_mut(), ptr::null_mut()),
            OctetStatus::BadHandle
        );
        assert_eq!(
            octet_model_input_quant(ptr::null(), ptr::null_mut(), ptr::null_mut()),
            OctetStatus::NullPointer
        );
        assert_eq!(
            octet_model_input_encoding(&unparsed(), ptr::null_mut()),
            OctetStatus::BadHandle
        );
        assert_eq!(
            octet_model_input_quant(&m, ptr::null_mut(), ptr::null_mut()),
            OctetStatus::Ok
        );
        assert_eq!(
            octet_model_input_encoding(&m, ptr::null_mut()),
            OctetStatus::Ok
        );
        let a = (arena.as_mut_ptr(), arena.len());
        let l = (logits.as_mut_ptr(), logits.len());
        let p = (pixels.as_ptr(), pixels.len());
        assert_eq!(
            octet_model_run(ptr::null(), p.0, p.1, a.0, a.1, l.0, l.1),
            OctetStatus::NullPointer
        );
        assert_eq!(
            octet_model_run(&unparsed(), p.0, p.1, a.0, a.1, l.0, l.1),
            OctetStatus::BadHandle
        );
        assert_eq!(
            octet_model_run(&m, ptr::null(), p.1, a.0, a.1, l.0, l.1),
            OctetStatus::NullPointer
        );
        assert_eq!(
            octet_model_run(&m, p.0, p.1, ptr::null_mut(), a.1, l.0, l.1),
            OctetStatus::NullPointer
        );
        assert_eq!(
            octet_model_run(&m, p.0, p.1, a.0, a.1, ptr::null_mut(), l.1),
            OctetStatus::NullPointer
        );
        assert_eq!(
            octet_model_run(&m, p.0, p.1, ptr::null_mut(), 0, l.0, l.1),
            OctetStatus::ArenaTooSmall
        );
        // Logits inside the arena; pixels inside the arena.
        assert_eq!(
            octet_model_run(&m, p.0, p.1, a.0, a.1, a.0.add(a.1 - 10).cast(), 10),
            OctetStatus::BuffersOverlap
        );
        assert_eq!(
            octet_model_run(&m, a.0, 1024, a.0.add(1024), a.1 - 1024, l.0, l.1),
            OctetStatus::Ok,
            "adjacent buffers do not overlap"
        );
        assert_eq!(
            octet_model_run(&m, a.0.add(8), 1024, a.0, a.1, l.0, l.1),
            OctetStatus::BuffersOverlap
        );
    }
}

#[test]
fn every_status_has_a_message() {
    let statuses = [
        OctetStatus::Ok,
        OctetStatus::NullPointer,
        OctetStatus::BadHandle,
        OctetStatus::BadMagic,
        OctetStatus::UnsupportedVersion,
        OctetStatus::BadHeader,
        OctetStatus::Truncated,
        OctetStatus::CrcMismatch,
        OctetStatus::OutOfBounds,
        OctetStatus::BadTensor,
        OctetStatus::BadShape,
        OctetStatus::BadParam,
        OctetStatus::AccumulatorOverflow,
        OctetStatus::Aliasing,
        OctetStatus::ArenaTooSmall,
        OctetStatus::InputLength,
        OctetStatus::OutputTooSmall,
        OctetStatus::BuffersOverlap,
        OctetStatus::Internal,
        OctetStatus::PrepareTooSmall,
        OctetStatus::BadPackedImage,
        OctetStatus::ImageKernelsUnavailable,
    ];
    let mut seen = std::collections::HashSet::new();
    for (i, s) in statuses.iter().enumerate() {
        assert_eq!(*s as i32, i as i32, "codes are 0..n in order");
        let msg = message(*s as i32);
        assert!(msg.len() > 5 && seen.insert(msg.clone()), "{msg}");
    }
    assert_eq!(message(0), "success");
    assert!(message(statuses.len() as i32).starts_with("unknown"));
    assert!(message(-1).starts_with("unknown"));
    assert!(message(i32::MAX).starts_with("unknown"));
    assert!(message(14).contains("octet_model_arena_bytes"));
    assert!(message(19).contains("octet_model_prepared_bytes"));
    assert!(message(20).contains("octet pack"));
    assert!(message(21).contains("octet_model_prepare"));
}

fn prepare(m: &mut OctetModel, buffer: &mut [u8]) -> OctetStatus {
    unsafe { octet_model_prepare(m, buffer.as_mut_ptr(), buffer.len()) }
}

/// Prepared into a buffer at any alignment, a model runs the unprepared model's bytes (on x86
/// from weights packed for its kernels: the MLPerf-style nets have fully connected layers,
/// pointwise and depthwise convs and residual adds); the arena it needs is unchanged.
#[test]
fn a_prepared_model_runs_the_same_bytes() {
    let models = [
        support::lenet(3, 5),
        support::common::small_resnet(6).encode(),
        {
            let mut b = support::common::embedded_net(2, 7);
            b.replan();
            b.encode()
        },
    ];
    for bytes in &models {
        let unprepared = parsed(bytes);
        let r = Model::parse(bytes).unwrap();
        let pixels = support::images(3, r.input_len(), 3);
        let n_out = 3 * r.output_len();
        let arena_len = unsafe { octet_model_arena_bytes(&unprepared, 3) };
        let mut want = vec![0i8; n_out];
        let mut arena = vec![0u8; arena_len];
        assert_eq!(
            run(&unprepared, &pixels, &mut arena, &mut want),
            OctetStatus::Ok
        );
        let need = unsafe { octet_model_prepared_bytes(&unprepared) };
        let packed = r.packed_bytes(Kernels::Auto).unwrap();
        assert!(need >= r.num_ops() * std::mem::size_of::<octet_runtime::PreparedOp>() + packed);
        for offset in 0..4 {
            let mut m = parsed(bytes);
            let mut buffer = vec![0xa5u8; need + offset];
            assert_eq!(prepare(&mut m, &mut buffer[offset..]), OctetStatus::Ok);
            assert_eq!(unsafe { octet_model_arena_bytes(&m, 3) }, arena_len);
            let mut got = vec![0i8; n_out];
            assert_eq!(run(&m, &pixels, &mut arena, &mut got), OctetStatus::Ok);
            assert_eq!(got, want, "prepared at offset {offset}");
        }
    }
}

/// A short, NULL or overlapping buffer and an unparsed handle are refused; a refused prepare
/// leaves the handle as it was, and a prepared model's buffer may not be written by a run.
#[test]
fn prepare_checks_its_buffer_and_the_run_keeps_off_it() {
    let bytes = support::lenet(1, 9);
    let r = Model::parse(&bytes).unwrap();
    let pixels = support::images(1, r.input_len(), 1);
    let mut m = parsed(&bytes);
    let need = unsafe { octet_model_prepared_bytes(&m) };
    unsafe {
        assert_eq!(octet_model_prepared_bytes(ptr::null()), 0);
        assert_eq!(octet_model_prepared_bytes(&unparsed()), 0);
        assert_eq!(
            octet_model_prepare(ptr::null_mut(), ptr::null_mut(), 0),
            OctetStatus::NullPointer
        );
        assert_eq!(
            octet_model_prepare(&mut m, ptr::null_mut(), need),
            OctetStatus::NullPointer
        );
        let mut u = unparsed();
        let mut buffer = vec![0u8; need];
        assert_eq!(prepare(&mut u, &mut buffer), OctetStatus::BadHandle);
    }
    let mut short = vec![0u8; need - 1];
    assert_eq!(prepare(&mut m, &mut short), OctetStatus::PrepareTooSmall);
    // Still the parsed model, unprepared: it runs, with any arena.
    let mut arena = vec![0u8; r.arena_bytes(Kernels::Auto)];
    let mut want = [0i8; 10];
    assert_eq!(run(&m, &pixels, &mut arena, &mut want), OctetStatus::Ok);

    // The arena and the logits lie apart from the prepare buffer.
    let arena_len = arena.len();
    let mut shared = vec![0u8; need + arena_len];
    assert_eq!(prepare(&mut m, &mut shared[..need]), OctetStatus::Ok);
    let mut logits = [0i8; 10];
    let overlapping = unsafe {
        octet_model_run(
            &m,
            pixels.as_ptr(),
            pixels.len(),
            shared.as_mut_ptr().add(need - 1),
            arena_len,
            logits.as_mut_ptr(),
            logits.len(),
        )
    };
    assert_eq!(overlapping, OctetStatus::BuffersOverlap);
    let logits_over = unsafe {
        octet_model_run(
            &m,
            pixels.as_ptr(),
            pixels.len(),
            arena.as_mut_ptr(),
            arena_len,
            shared.as_mut_ptr().cast::<i8>(),
            10,
        )
    };
    assert_eq!(logits_over, OctetStatus::BuffersOverlap);
    assert_eq!(
        run(&m, &pixels, &mut shared[need..], &mut logits),
        OctetStatus::Ok
    );
    assert_eq!(logits, want);
}

/// `octet_model_prepare_image` with Rust slices.
fn prepare_image(m: &mut OctetModel, buffer: &mut [u8], image: &[u8]) -> OctetStatus {
    unsafe {
        octet_model_prepare_image(
            m,
            buffer.as_mut_ptr(),
            buffer.len(),
            image.as_ptr(),
            image.len(),
        )
    }
}

/// A packed image (as `octet pack` writes it) is checked whole before anything else: a
/// damaged, another model's or misplaced one is refused with `BadPackedImage`, the handle
/// unchanged; a good one, where the Cortex-M kernels cannot run (here), with
/// `ImageKernelsUnavailable`. NULL pointers, short or overlapping buffers are refused as for
/// `octet_model_prepare`. (The firmware example prepares from one on a Cortex-M4 under QEMU:
/// `capi/run_examples.sh`.)
#[test]
fn prepare_image_checks_the_image_and_its_buffer() {
    let bytes = support::lenet(1, 9);
    let r = Model::parse(&bytes).unwrap();
    let n = r.packed_image_bytes(Kernels::CortexM).unwrap();
    let mut store = vec![0u8; n + 64 + 1];
    let at = store.as_ptr().align_offset(64);
    r.write_packed_image(Kernels::CortexM, &mut store[at..at + n])
        .unwrap();
    let image = store[at..at + n].to_vec();
    let mut m = parsed(&bytes);
    let need = unsafe { octet_model_prepared_table_bytes(&m) };
    assert!(need >= r.num_ops() * std::mem::size_of::<octet_runtime::PreparedOp>());
    unsafe {
        assert_eq!(octet_model_prepared_table_bytes(ptr::null()), 0);
        assert_eq!(octet_model_prepared_table_bytes(&unparsed()), 0);
        assert_eq!(
            octet_model_prepare_image(&mut m, ptr::null_mut(), need, ptr::null(), 0),
            OctetStatus::NullPointer
        );
    }
    let mut buffer = vec![0u8; need];
    let mut u = unparsed();
    assert_eq!(
        prepare_image(&mut u, &mut buffer, &image),
        OctetStatus::BadHandle
    );
    assert_eq!(
        prepare_image(&mut m, &mut buffer[..need - 1], &store[at..at + n]),
        OctetStatus::PrepareTooSmall
    );
    let mut damaged = image.clone();
    damaged[n - 1] ^= 1;
    for (what, img) in [("damaged", &damaged[..]), ("truncated", &image[..n - 1])] {
        let s = prepare_image(&mut m, &mut buffer, img);
        assert_eq!(s, OctetStatus::BadPackedImage, "{what}");
    }
    // Misaligned: the image's bytes one byte further.
    store[at + 1..at + 1 + n].copy_from_slice(&image);
    assert_eq!(
        prepare_image(&mut m, &mut buffer, &store[at + 1..at + 1 + n]),
        OctetStatus::BadPackedImage
    );
    store[at..at + n].copy_from_slice(&image);
    let other = support::lenet(1, 10);
    let mut o = parsed(&other);
    assert_eq!(
        prepare_image(&mut o, &mut buffer, &store[at..at + n]),
        OctetStatus::BadPackedImage
    );
    // The buffer may not lie over the image.
    let s = unsafe {
        octet_model_prepare_image(
            &mut m,
            store.as_mut_ptr().add(at),
            need,
            store.as_ptr().add(at),
            n,
        )
    };
    assert_eq!(s, OctetStatus::BuffersOverlap);
    // A good image: every check passes; this CPU has no Cortex-M kernels.
    assert_eq!(
        prepare_image(&mut m, &mut buffer, &store[at..at + n]),
        OctetStatus::ImageKernelsUnavailable
    );
    // Refused every time: the handle is still the parsed model, which runs.
    let pixels = support::images(1, r.input_len(), 1);
    let mut arena = vec![0u8; r.arena_bytes(Kernels::Auto)];
    let mut logits = [0i8; 10];
    assert_eq!(run(&m, &pixels, &mut arena, &mut logits), OctetStatus::Ok);
}
