//! The `.tflite` that `octet convert` writes, run by TensorFlow Lite Micro and TensorFlow Lite
//! (`bench/tflite_check.py`) on 300 images of the bundled Fashion-MNIST subset, against octet's
//! own logits (`octet run --logits`): a LeNet like the demo's, a model with every op kind and one
//! whose first conv frames its input with its pad value.
//!
//! Without the Python packages (tflite-micro, ai-edge-litert) the test prints a SKIP line and
//! passes, unless OCTET_REQUIRE_TFLITE=1 (CI sets it): then it fails.
//!
//! The models record TensorFlow Lite's double rounding (the exporter's default) and use TFLite's
//! add, so stock TFLite Micro gives octet's bytes exactly: 0 differing bytes. TFLite's other
//! kernels may differ by a step or two where they round otherwise (the reference
//! FULLY_CONNECTED rounds once, XNNPACK in float; see bench/NOTES_tflite.md); a conversion error
//! (a wrong bias, zero point, padding or layout) moves logits by far more.

mod octet_cmd;
use octet_testkit::exported as tflite_models;

use std::path::Path;
use std::process::Command;

use octet_cmd::{octet, octet_ok};

const IMAGES: usize = 300;
/// The largest logit difference the rounding variants explain in these models.
const ROUNDING_STEPS: i64 = 2;
/// `bench/tflite_check.py`'s exit status when a package is missing.
const MISSING_PACKAGE: i32 = 3;

/// Converts `o8`, runs the check on [`IMAGES`] images; `None` when skipped for a missing
/// package.
fn check(name: &str, o8: &[u8], dir: &Path) -> Option<serde_json::Value> {
    check_images(name, o8, dir, IMAGES)
}

/// [`check`] on the first `images` images.
fn check_images(name: &str, o8: &[u8], dir: &Path, images: usize) -> Option<serde_json::Value> {
    let (o8_path, tfl) = (
        dir.join(format!("{name}.o8")),
        dir.join(format!("{name}.tflite")),
    );
    std::fs::write(&o8_path, o8).unwrap();
    octet_ok(&[
        "convert",
        o8_path.to_str().unwrap(),
        "-o",
        tfl.to_str().unwrap(),
    ]);
    let root = env!("CARGO_MANIFEST_DIR");
    let data = Path::new(root).join("data/fashion-mnist-subset");
    let out = Command::new("python3")
        .arg(Path::new(root).join("bench/tflite_check.py"))
        .arg(&tfl)
        .args(["--o8", o8_path.to_str().unwrap()])
        .args(["--octet", env!("CARGO_BIN_EXE_octet")])
        .args(["--data", data.to_str().unwrap()])
        .args(["--images", &images.to_string(), "--jobs", "2"])
        .output();
    let required = std::env::var("OCTET_REQUIRE_TFLITE").is_ok_and(|v| v == "1");
    let out = match out {
        Ok(o) => o,
        Err(e) if !required => {
            println!("SKIP tflite_equivalence: cannot start python3 ({e})");
            return None;
        }
        Err(e) => panic!("python3 cannot start ({e}) and OCTET_REQUIRE_TFLITE=1"),
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.code() == Some(MISSING_PACKAGE) {
        assert!(!required, "OCTET_REQUIRE_TFLITE=1 but {stderr}");
        println!("tflite_equivalence: {}", stderr.trim());
        return None;
    }
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "tflite_check.py failed: {stderr}"
    );
    eprintln!("{name}: {stderr}");
    Some(serde_json::from_slice(&out.stdout).expect("the check's JSON"))
}

/// TFLite Micro byte for byte; the other interpreters within their rounding.
fn assert_within_rounding(name: &str, report: &serde_json::Value) {
    assert_within_rounding_on(name, report, IMAGES)
}

/// [`assert_within_rounding`] for a check on `images` images.
fn assert_within_rounding_on(name: &str, report: &serde_json::Value, images: usize) {
    let interpreters = report["interpreters"].as_object().unwrap();
    assert_eq!(interpreters.len(), 3, "{report}");
    for (kind, r) in interpreters {
        assert_eq!(r["images"], images, "{name} {kind}");
        let steps = if kind == "tflm" { 0 } else { ROUNDING_STEPS };
        assert!(
            r["max_abs_difference"].as_i64().unwrap() <= steps,
            "{name}: {kind} differs from octet by more than {steps}: {r}"
        );
    }
}

#[test]
fn lenet_matches_tflite_micro_and_tflite() {
    let dir = tempfile::tempdir().unwrap();
    if let Some(r) = check("lenet", &tflite_models::lenet(11), dir.path()) {
        assert_within_rounding("lenet", &r);
    }
}

#[test]
fn every_op_kind_matches_tflite_micro_and_tflite() {
    let dir = tempfile::tempdir().unwrap();
    if let Some(r) = check("all_ops", &tflite_models::all_ops(13), dir.path()) {
        assert_within_rounding("all_ops", &r);
    }
}

#[test]
fn framed_input_matches_tflite_micro_and_tflite() {
    let dir = tempfile::tempdir().unwrap();
    if let Some(r) = check("framed", &tflite_models::framed(17), dir.path()) {
        assert_within_rounding("framed", &r);
    }
}

fn octet_fails(args: &[&str], expected: &str) {
    let out = octet(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "octet {args:?}: {err}");
    assert!(err.contains(expected), "octet {args:?}: {err}");
}

/// `export --format` writes the .o8, the .tflite or both, the .tflite being `convert`'s bytes
/// for that .o8; `convert` refuses what is not a model and writes nothing then.
#[test]
fn export_format_and_convert_write_the_same_tflite() {
    let dir = tempfile::tempdir().unwrap();
    let d = |n: &str| dir.path().join(n).to_str().unwrap().to_string();
    let data = "synthetic:256:64";
    octet_ok(&[
        "train",
        "--model",
        "lenet",
        "--data",
        data,
        "--epochs",
        "1",
        "--out",
        &d("run"),
    ]);
    let ck = d("run/last.safetensors");
    let export = |format: &str, out: &str| {
        octet_ok(&[
            "export",
            &ck,
            "--data",
            data,
            "--out",
            out,
            "--format",
            format,
            "--calibration-images",
            "32",
            "--test-images",
            "16",
            "--no-plots",
        ]);
    };
    export("both", &d("both.o8"));
    let tfl = std::fs::read(d("both.tflite")).unwrap();
    assert_eq!(&tfl[4..8], b"TFL3", "the TFLite file identifier");
    octet_ok(&["convert", &d("both.o8"), "-o", &d("converted.tflite")]);
    assert_eq!(std::fs::read(d("converted.tflite")).unwrap(), tfl);
    export("tflite", &d("only.o8"));
    assert!(std::path::Path::new(&d("only.tflite")).exists());
    assert!(!std::path::Path::new(&d("only.o8")).exists());
    // The report names the files written, and only those.
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(d("only.o8.report/report.json")).unwrap()).unwrap();
    assert!(report["o8"].is_null(), "{}", report["o8"]);
    assert_eq!(report["tflite"], d("only.tflite").as_str());

    std::fs::write(d("junk.o8"), b"not a model").unwrap();
    octet_fails(
        &["convert", &d("junk.o8"), "-o", &d("junk.tflite")],
        "not a valid .o8",
    );
    assert!(!std::path::Path::new(&d("junk.tflite")).exists());
}

/// `run --logits` writes images × classes raw int8 logits, row by row, whose argmax is the
/// prediction `--predictions` writes.
#[test]
fn run_writes_raw_logits() {
    let dir = tempfile::tempdir().unwrap();
    let (o8, logits, preds) = (
        dir.path().join("m.o8"),
        dir.path().join("logits.bin"),
        dir.path().join("preds.txt"),
    );
    std::fs::write(&o8, tflite_models::lenet(21)).unwrap();
    octet_ok(&[
        "run",
        "--logits",
        logits.to_str().unwrap(),
        "--predictions",
        preds.to_str().unwrap(),
        o8.to_str().unwrap(),
        "--images",
        "40",
        "--data",
        "bundled",
    ]);
    let raw = std::fs::read(&logits).unwrap();
    assert_eq!(raw.len(), 40 * 10);
    let preds: Vec<usize> = std::fs::read_to_string(&preds)
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    for (row, &p) in raw.chunks(10).zip(&preds) {
        let row: Vec<i8> = row.iter().map(|&b| b as i8).collect();
        let max = *row.iter().max().unwrap();
        assert_eq!(row[p], max, "{row:?}");
    }
}

/// Every built-in network as the exporter writes it (random weights calibrated on random
/// images): MobileNets' depthwise convs, ReLU6 and adds without a ReLU, ResNets' shortcuts,
/// DS-CNN, LeNet; byte for byte in TFLite Micro. ResNet-18 on fewer images: the Python TFLite
/// Micro takes about a second an image for it.
#[test]
fn every_built_in_network_matches_tflite_micro_and_tflite() {
    use octet_models::ModelKind;
    let dir = tempfile::tempdir().unwrap();
    let calibration: Vec<u8> = (0..16 * 1024u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    for &kind in ModelKind::all() {
        let (_, o8) =
            octet_export::speed_model_normalized(kind, &[0.286], &[0.353], 5, &calibration)
                .unwrap();
        let name = kind.to_string();
        let images = if kind == ModelKind::RESNET18 {
            20
        } else {
            IMAGES
        };
        if let Some(r) = check_images(&name, &o8, dir.path(), images) {
            assert_within_rounding_on(&name, &r, images);
        }
    }
}
