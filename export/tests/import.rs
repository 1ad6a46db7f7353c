//! `.tflite` → `.o8`: the MLPerf Tiny reference models (tests/data/mlperf_tiny) import with the
//! ops they hold, run to the same bytes on every kernel set here, and hostile or unsupported
//! files are errors that say why, never panics.

use std::path::PathBuf;

use octet_export::tflite::import::{import, ImportError, ImportOptions};
use octet_runtime::format::InputEncoding;
use octet_runtime::{Kernels, Model, OpKind, Rounding};
use octet_testkit::Rng;

/// (file, length, CRC-32, the .o8 op kinds in order, input (c, h, w), outputs).
type Case = (
    &'static str,
    usize,
    u32,
    &'static [OpKind],
    (usize, usize, usize),
    usize,
);

use OpKind::{
    Conv2d as C, DepthwiseConv2d as D, FullyConnected as F, Softmax as S, TfliteAdd as A,
    TfliteAvgPool as P,
};

const CASES: [Case; 4] = [
    (
        "pretrainedResnet_quant.tflite",
        98_496,
        0x2500_f37c,
        &[C, C, C, A, C, C, C, A, C, C, C, A, P, F, S],
        (3, 32, 32),
        10,
    ),
    (
        "kws_ref_model.tflite",
        53_936,
        0x33a6_6a7c,
        &[C, D, C, D, C, D, C, D, C, P, F, S],
        (1, 49, 10),
        12,
    ),
    (
        "ad01_int8.tflite",
        276_976,
        0xbd24_982a,
        &[F; 10],
        (640, 1, 1),
        640,
    ),
    (
        "vww_96_int8.tflite",
        333_288,
        0xec70_2c3b,
        &[
            C, D, C, D, C, D, C, D, C, D, C, D, C, D, C, D, C, D, C, D, C, D, C, D, C, D, C, P, F,
            S,
        ],
        (3, 96, 96),
        2,
    ),
];

fn model_file(name: &str) -> Vec<u8> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/data/mlperf_tiny")
        .join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Each model: the committed file unchanged, its ops, int8 in and out, both roundings recorded.
#[test]
fn mlperf_tiny_models_import() {
    for (name, len, crc, kinds, chw, outputs) in CASES {
        let tflite = model_file(name);
        assert_eq!(
            (tflite.len(), octet_runtime::format::crc32(&tflite)),
            (len, crc),
            "{name} is not the committed file (tests/data/mlperf_tiny/README.md)"
        );
        for rounding in Rounding::ALL {
            let im = import(&tflite, &ImportOptions { rounding }).unwrap();
            let m = Model::parse(&im.bytes).unwrap();
            let got: Vec<OpKind> = m.ops().map(|o| o.kind).collect();
            assert_eq!(got, kinds, "{name}");
            assert_eq!(m.input_shape(), chw, "{name}");
            assert_eq!(m.input_encoding(), InputEncoding::I8Hwc, "{name}");
            assert_eq!(m.output_len(), outputs, "{name}");
            assert_eq!(m.rounding(), rounding, "{name}");
            // One report line per TFLite op; the RESHAPE before the classifier is a view.
            assert_eq!(
                im.ops.len(),
                kinds.len() + (name != "ad01_int8.tflite") as usize
            );
            assert!(im
                .ops
                .iter()
                .all(|o| o.tflite != "RESHAPE" || o.octet == "view (no op)"));
        }
    }
}

/// Every kernel set here gives the scalar reference's bytes on the imported models, on
/// seeded random inputs, in both roundings.
#[test]
fn every_kernel_set_runs_the_imported_models_alike() {
    for (name, ..) in CASES {
        let tflite = model_file(name);
        for rounding in Rounding::ALL {
            let bytes = import(&tflite, &ImportOptions { rounding }).unwrap().bytes;
            let m = Model::parse(&bytes).unwrap();
            let inputs = Rng::new(7).bytes(3 * m.input_len());
            let run = |k: Kernels| {
                let mut arena = vec![0u8; m.arena_bytes_for(k, 3)];
                m.run_with(k, &inputs, &mut arena).unwrap().to_vec()
            };
            let reference = run(Kernels::Scalar);
            for k in Kernels::available() {
                assert_eq!(run(k), reference, "{name} {rounding:?} {k:?}");
            }
        }
    }
}

/// Truncations and byte mutations of a real model: an error (or a valid model) every time,
/// never a panic; flatbuffer faults say the file is not a valid or a malformed .tflite.
#[test]
fn hostile_tflite_never_panics() {
    let base = model_file("kws_ref_model.tflite");
    let opts = ImportOptions::default();
    for n in (0..base.len())
        .step_by(97)
        .chain([0, 3, 7, 8, base.len() - 1])
    {
        assert!(
            import(&base[..n], &opts).is_err(),
            "a truncation to {n} bytes imported"
        );
    }
    let mut rng = Rng::new(11);
    let (mut refused, mut accepted) = (0, 0);
    for i in 0..1500 {
        let mut f = base.clone();
        // Mostly the flatbuffer's tables (the first few KiB, before the weight buffers).
        let limit = if i % 3 == 0 { f.len() } else { 4096 };
        for _ in 0..1 + i % 4 {
            let at = rng.range(0, limit as i64 - 1) as usize;
            f[at] = match i % 3 {
                0 => rng.next() as u8,
                1 => f[at] ^ (1 << (rng.next() % 8)),
                _ => [0, 1, 0x7f, 0x80, 0xff][i % 5],
            };
        }
        match import(&f, &opts) {
            Ok(im) => {
                accepted += 1;
                Model::parse(&im.bytes).expect("an imported model parses");
            }
            Err(e) => {
                refused += 1;
                assert!(!e.to_string().is_empty());
            }
        }
    }
    assert!(
        refused > 0 && accepted > 0,
        "{refused} refused, {accepted} accepted"
    );
    // Not a flatbuffer at all.
    assert!(matches!(
        import(b"OCTET8\r\n not a tflite", &opts),
        Err(ImportError::NotTflite(_))
    ));
}

/// octet's own `.tflite` exports import back (uint8 input with the QUANTIZE that shifts it by
/// 128) to a model giving the `.o8`'s bytes.
#[test]
fn octet_exports_import_back() {
    for (name, o8) in [
        ("lenet", octet_testkit::exported::lenet(3)),
        ("all_ops", octet_testkit::exported::all_ops(4)),
    ] {
        let t = octet_export::tflite::to_tflite(&o8).unwrap();
        let back = import(&t.bytes, &ImportOptions::default()).unwrap();
        let (a, b) = (
            Model::parse(&o8).unwrap(),
            Model::parse(&back.bytes).unwrap(),
        );
        assert_eq!(b.input_encoding(), InputEncoding::U8Hwc, "{name}");
        let pixels = Rng::new(5).bytes(4 * a.input_len());
        let run = |m: &Model| {
            let mut arena = vec![0u8; m.arena_bytes_for(Kernels::Auto, 4)];
            m.run(&pixels, &mut arena).unwrap().to_vec()
        };
        assert_eq!(run(&b), run(&a), "{name}");
    }
}

/// An op outside octet's set is refused with its index, its TFLite name and the set: the
/// CONCATENATION that frames a per-channel-padded input in octet's own export of such a model.
#[test]
fn an_unsupported_op_is_named() {
    let o8 = octet_testkit::exported::framed(2);
    let t = octet_export::tflite::to_tflite(&o8).unwrap();
    let err = import(&t.bytes, &ImportOptions::default()).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, ImportError::Unsupported(_)), "{msg}");
    assert!(
        msg.contains("(CONCATENATION): not in octet's op set (CONV_2D"),
        "{msg}"
    );
    assert!(msg.contains("operator "), "{msg}");
}
