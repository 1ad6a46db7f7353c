//! `octet bench scaling` without a GPU: `--render` of a made-up report with f32 and bf16 runs
//! and of reports written before precision was recorded, and `--reuse` of a finished sweep
//! (nothing left to measure) matched with a peer file's f32 and bf16 rows.

mod octet_cmd;

use std::path::Path;

use octet_cmd::{octet, text};
use serde_json::{json, Value};

/// A finished timing run: epoch `s` seconds, the peer's `peer` (null for none).
fn timing(g: usize, b: usize, precision: &str, s: f64, peer: Value) -> Value {
    json!({
        "gpus": g, "batch": b, "precision": precision, "images": 50000,
        "epoch_s": s, "img_per_s": 50000.0 / s, "steps": 50000 / (b * g),
        "compute_s": 0.9 * s, "comm_s": 0.05 * s, "wait_s": 0.05 * s, "exposed_s": 0.05 * s, "data_s": 0.001,
        "busbw_gbs": if g > 1 { json!(150.0) } else { Value::Null },
        "oom": false, "error": null, "peer_epoch_s": peer,
    })
}

fn report(commit: &str, images: usize, timings: Vec<Value>) -> Value {
    json!({
        "commit": commit, "command": "octet bench scaling", "model": "resnet18",
        "images": images, "protocol": "made up", "peak_busbw_gbs": { "2": 300.0 },
        "timings": timings, "accuracy": [],
    })
}

/// Runs `octet bench scaling ARGS --out DIR`, which must succeed; DIR's report.md.
fn scaling(dir: &Path, args: &[&str]) -> String {
    let out = dir.join("out");
    let mut all = vec!["bench", "scaling"];
    all.extend(args);
    all.extend(["--out", out.to_str().unwrap()]);
    let o = octet(&all);
    assert!(o.status.success(), "{}", text(&o));
    std::fs::read_to_string(out.join("report.md")).unwrap()
}

fn render(dir: &Path, report: &Value) -> String {
    let file = dir.join("report.json");
    std::fs::write(&file, report.to_string()).unwrap();
    let md = scaling(dir, &["--render", file.to_str().unwrap()]);
    assert!(dir.join("out/epoch_time.png").is_file() && dir.join("out/speedup.png").is_file());
    md
}

#[test]
fn render_shows_f32_and_bf16_each_against_its_own_peer_row() {
    let dir = tempfile::tempdir().unwrap();
    let md = render(
        dir.path(),
        &report(
            "c",
            50000,
            vec![
                timing(1, 128, "f32", 3.0, json!(3.3)),
                timing(2, 128, "f32", 1.6, json!(2.0)),
                timing(1, 512, "f32", 2.0, json!(2.2)),
                timing(2, 512, "f32", 1.0, json!(1.25)),
                timing(1, 128, "bf16", 2.0, json!(1.6)),
                timing(2, 128, "bf16", 1.25, json!(1.0)),
                timing(1, 512, "bf16", 1.0, json!(0.8)),
                timing(2, 512, "bf16", 0.52, json!(0.5)),
            ],
        ),
    );
    for row in [
        // 1 GPU: octet s, img/s, PyTorch s, octet / PyTorch
        "| f32 | 128 | 3.000 | 16667 | 3.300 | 0.91 |",
        "| bf16 | 128 | 2.000 | 25000 | 1.600 | 1.25 |",
        "| bf16 | 512 | 1.000 | 50000 | 0.800 | 1.25 |",
        // speed-up over the same precision's 1 GPU: 2/1.25 = 1.60, 80%
        "| bf16 | 128 | 2 | 1.250 | 1.60 | 80% |",
        "| f32 | 512 | 2 | 1.000 | 2.00 | 100% |",
        // bf16 b512: 1/0.52 = 1.92 (96%); PyTorch 0.8/0.5 = 1.60; ratio 0.52/0.5 = 1.04
        "| bf16 | 512 | 2 | 0.520 | 1.92 | 96% |",
        "| 0.500 | 1.60 | 1.04 |",
        // compute vs communication: half the all-reduce and wait exposed, with the ratio
        "| f32 | 512 | 2 | 0.900 | 0.050 | 5.0% | 0.050 | 0.050 | 50% | 0.001 | 0.80 |",
        // bandwidth: 150 of 300 GB/s
        "| bf16 | 512 | 2 | 150.0 | 300.0 | 50% |",
    ] {
        assert!(md.contains(row), "no {row:?} in:\n{md}");
    }
}

/// Reports from before `precision` was recorded: every run is f32.
#[test]
fn reports_without_precision_render_as_f32() {
    let dir = tempfile::tempdir().unwrap();
    // scaling_h200x2.json's structure, two of its runs.
    let mut old = report(
        "9b84f5c25fee-dirty",
        50000,
        vec![
            timing(1, 512, "", 1.944832874, json!(2.272)),
            timing(2, 512, "", 0.9948747158050536, json!(1.166)),
        ],
    );
    for t in old["timings"].as_array_mut().unwrap() {
        t.as_object_mut().unwrap().remove("precision");
    }
    old["accuracy"] = json!([{
        "name": "small batch", "gpus": 2, "batch_per_gpu": 64, "global_batch": 128,
        "lr": 0.1, "warmup_epochs": 0.0, "epochs": 5, "test_accuracy": 0.9172,
        "train_s": 46.7, "error": null,
    }]);
    let md = render(dir.path(), &old);
    assert!(
        md.contains("| f32 | 512 | 1.945 | 25709 | 2.272 | 0.86 |"),
        "{md}"
    );
    assert!(
        md.contains("| f32 | 512 | 2 | 0.995 | 1.95 | 98% |"),
        "{md}"
    );
    assert!(md.contains("91.72%") && !md.contains("bf16"), "{md}");

    // And the committed reports themselves (some wrap the report in "octet", beside the GPU
    // and the peer's results).
    let results = Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/results");
    for name in ["scaling_h200x2.json", "scaling_h200x4.json"] {
        let Ok(bytes) = std::fs::read(results.join(name)) else {
            continue;
        };
        let v: Value = serde_json::from_slice(&bytes).unwrap();
        let md = render(dir.path(), v.get("octet").unwrap_or(&v));
        assert!(md.contains("| f32 | 512 |"), "{name}:\n{md}");
    }
}

/// `--reuse` of a report that holds every run asked for measures nothing (no GPU needed) and
/// matches each run with the peer file's row of its precision.
#[test]
fn reuse_keeps_finished_runs_and_matches_peer_rows_by_precision() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    let done = report(
        env!("OCTET_COMMIT"),
        1000,
        vec![
            timing(1, 128, "f32", 4.0, Value::Null),
            timing(1, 128, "bf16", 2.0, Value::Null),
        ],
    );
    std::fs::write(out.join("report.json"), done.to_string()).unwrap();
    let row = |amp: bool, s: f64| {
        json!({ "model": "resnet18", "gpus": 1, "batch_per_gpu": 128, "amp_bf16": amp,
                "channels_last": amp, "epoch2_s": s })
    };
    let peer = dir.path().join("peer_torch_1gpu.json");
    let rows = json!({ "rows": [row(false, 5.0), row(true, 1.0)] });
    std::fs::write(&peer, rows.to_string()).unwrap();
    let md = scaling(
        dir.path(),
        &[
            "--gpus",
            "1",
            "--batch-sizes",
            "128",
            "--images",
            "1000",
            "--precisions",
            "f32,bf16",
            "--reuse",
            "--peer",
            peer.to_str().unwrap(),
        ],
    );
    assert!(
        md.contains("| f32 | 128 | 4.000 | 12500 | 5.000 | 0.80 |"),
        "{md}"
    );
    assert!(
        md.contains("| bf16 | 128 | 2.000 | 25000 | 1.000 | 2.00 |"),
        "{md}"
    );
}
