//! The `.tflite` that `octet convert` writes, run by TensorFlow Lite Micro and TensorFlow Lite
//! (`bench/tflite_check.py`) on 300 images of the bundled Fashion-MNIST subset, against octet's
//! own logits (`octet run --logits`): a LeNet like the demo's and a model with every op kind.
//!
//! Without the Python packages (tflite-micro, ai-edge-litert) the test prints a SKIP line and
//! passes, unless OCTET_REQUIRE_TFLITE=1 (CI sets it): then it fails.
//!
//! The logits may differ by a step or two where TFLite's requantization rounds differently from
//! octet's (TFLite Micro and TFLite's reference CONV_2D round twice, octet once: one step per
//! layer at most, which can add up over a few layers; see bench/results/tflite_equivalence.json);
//! a conversion error (a wrong bias, zero point, padding or layout) moves logits by far more.

#[path = "../runtime/tests/common/mod.rs"]
mod common;
#[path = "tflite_models/mod.rs"]
mod tflite_models;

use std::path::Path;
use std::process::Command;

const IMAGES: usize = 300;
/// The largest logit difference the rounding variants explain in these models.
const ROUNDING_STEPS: i64 = 2;
/// `bench/tflite_check.py`'s exit status when a package is missing.
const MISSING_PACKAGE: i32 = 3;

fn octet(args: &[&str]) {
    let out = Command::new(env!("CARGO_BIN_EXE_octet"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "octet {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Converts `o8`, runs the check; `None` when skipped for a missing package.
fn check(name: &str, o8: &[u8], dir: &Path) -> Option<serde_json::Value> {
    let (o8_path, tfl) = (
        dir.join(format!("{name}.o8")),
        dir.join(format!("{name}.tflite")),
    );
    std::fs::write(&o8_path, o8).unwrap();
    octet(&[
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
        .args(["--images", &IMAGES.to_string(), "--jobs", "2"])
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
        println!("SKIP tflite_equivalence: {}", stderr.trim());
        return None;
    }
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "tflite_check.py failed: {stderr}"
    );
    eprintln!("{name}: {stderr}");
    Some(serde_json::from_slice(&out.stdout).expect("the check's JSON"))
}

fn assert_within_rounding(name: &str, report: &serde_json::Value) {
    let interpreters = report["interpreters"].as_object().unwrap();
    assert_eq!(interpreters.len(), 3, "{report}");
    for (kind, r) in interpreters {
        assert_eq!(r["images"], IMAGES, "{name} {kind}");
        assert!(
            r["max_abs_difference"].as_i64().unwrap() <= ROUNDING_STEPS,
            "{name}: {kind} differs from octet by more than the rounding: {r}"
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
