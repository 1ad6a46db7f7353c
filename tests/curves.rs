//! `octet train` draws `curves.png` beside `metrics.csv`, and `--no-plots` turns it off.

use std::path::Path;
use std::process::Command;

/// Trains LeNet for 2 epochs on synthetic data into `out`; the `done` event.
fn train(out: &Path, extra: &[&str]) -> serde_json::Value {
    let o = Command::new(env!("CARGO_BIN_EXE_octet"))
        .args(
            "train --model lenet --data synthetic:256:64 --epochs 2 --batch-size 64 --json"
                .split(' '),
        )
        .arg("--out")
        .arg(out)
        .args(extra)
        .output()
        .expect("run octet");
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_str(stdout.lines().last().unwrap()).unwrap()
}

/// Width and height from a PNG's header (its first chunk, IHDR).
fn png_size(bytes: &[u8]) -> (u32, u32) {
    assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n") && &bytes[12..16] == b"IHDR");
    let word = |i: usize| u32::from_be_bytes(bytes[i..i + 4].try_into().unwrap());
    (word(16), word(20))
}

#[test]
fn training_draws_curves_beside_the_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let done = train(dir.path(), &[]);
    let png = dir.path().join("curves.png");
    assert_eq!(
        done["curves_png"].as_str().map(Path::new),
        Some(png.as_path())
    );
    // One process, so two charts (loss, accuracy) of 400 × 900 pixels.
    assert_eq!(png_size(&std::fs::read(&png).unwrap()), (900, 800));
    let csv = std::fs::read_to_string(dir.path().join("metrics.csv")).unwrap();
    assert_eq!(csv.lines().count(), 3, "{csv}");
    // Nothing but the run's files: no temporary left by the drawing.
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["curves.png", "last.safetensors", "metrics.csv"]);

    let dir = tempfile::tempdir().unwrap();
    let done = train(dir.path(), &["--no-plots"]);
    assert!(done["curves_png"].is_null(), "{done}");
    assert!(!dir.path().join("curves.png").exists());
    assert!(dir.path().join("metrics.csv").exists());
}
