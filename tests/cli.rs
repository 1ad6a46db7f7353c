//! End-to-end: the `octet` binary as a user runs it.

use std::path::Path;
mod octet_cmd;

use std::process::{Command, Output};

use octet_cmd::{octet, octet_json, text};

/// Runs `octet` with a `--json` command that must succeed; its stdout as JSON.
/// Runs `octet`, which must succeed and print every one of `expected`; its output.
fn succeeds(args: &[&str], expected: &[&str]) -> String {
    let o = octet(args);
    let s = text(&o);
    assert!(o.status.success(), "{s}");
    for e in expected {
        assert!(s.contains(e), "no {e:?} in:\n{s}");
    }
    s
}

/// Checks that `o` failed and printed `expected`.
fn failed_with(o: &Output, expected: &str) {
    let s = text(o);
    assert!(!o.status.success() && s.contains(expected), "{s}");
}

/// Runs `octet`, which must fail and print `expected`.
fn fails(args: &[&str], expected: &str) {
    failed_with(&octet(args), expected);
}

#[test]
fn demo_trains_then_inspect_and_eval_read_its_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("demo");
    succeeds(
        &["demo", "--epochs", "1", "--out", out.to_str().unwrap()],
        &["LeNet float test accuracy"],
    );

    let ck = out.join("last.safetensors");
    succeeds(
        &["inspect", ck.to_str().unwrap()],
        &["model lenet", "conv1.weight", "optim.momentum.fc3.bias"],
    );

    let v = octet_json(&["eval", ck.to_str().unwrap(), "--json"]);
    assert_eq!(v["images"], 2000);
    let acc = v["accuracy"].as_f64().unwrap();
    assert!(acc > 0.3, "{v}");
    // The CSV holds the same test accuracy as the checkpoint evaluates to.
    let csv = std::fs::read_to_string(out.join("metrics.csv")).unwrap();
    let row: Vec<&str> = csv.lines().nth(1).unwrap().split(',').collect();
    let csv_acc: f64 = row[6].parse().unwrap();
    assert!((csv_acc - acc).abs() < 1e-6, "{csv_acc} vs {acc}");
}

#[test]
fn train_json_emits_one_line_per_epoch_on_synthetic_data() {
    let dir = tempfile::tempdir().unwrap();
    let o = octet(&[
        "train",
        "--model",
        "lenet",
        "--data",
        "synthetic:512:128",
        "--epochs",
        "2",
        "--batch-size",
        "64",
        "--json",
        "--out",
        dir.path().to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[0]["event"], "epoch");
    assert_eq!(lines[1]["epoch"], 2);
    assert_eq!(lines[1]["images"], 512);
    assert!(lines[1]["times"]["compute_s"].as_f64().unwrap() > 0.0);
    assert_eq!(lines[2]["event"], "done");
    assert!(Path::new(lines[2]["checkpoint"].as_str().unwrap()).exists());
}

#[test]
fn resume_continues_where_the_run_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let common = [
        "--model",
        "lenet",
        "--data",
        "synthetic:256:64",
        "--epochs",
        "3",
        "--batch-size",
        "64",
        "--json",
    ];
    let o = octet(&[&["train", "--out", d, "--stop-after", "1"][..], &common[..]].concat());
    assert!(o.status.success(), "{}", text(&o));
    let ck = dir.path().join("last.safetensors");
    let o = octet(&["train", "--resume", ck.to_str().unwrap(), "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let epochs: Vec<i64> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok()?["epoch"].as_i64())
        .collect();
    assert_eq!(epochs, [2, 3]);
}

#[test]
fn user_errors_are_clear() {
    // Values clap can check are usage errors (exit code 2) listing what is accepted.
    let o = octet(&["train", "--model", "vgg16", "--data", "synthetic:64:0"]);
    failed_with(&o, "invalid value 'vgg16' for '--model <MODEL>'");
    failed_with(&o, "[possible values: lenet, resnet18, resnet8");
    assert_eq!(o.status.code(), Some(2));

    let dir = tempfile::tempdir().unwrap();
    let spec = format!("cifar10:{}", dir.path().display());
    fails(&["train", "--data", &spec], "data_batch_1.bin");

    fails(
        &["train", "--data", "synthetic:64:0", "--device", "tpu"],
        "[possible values: cpu, cuda, gpu]",
    );
    fails(
        &["train", "--data", "synthetic:64:0", "--device", "cuda:one"],
        "cpu, cuda or cuda:N",
    );

    fails(
        &["eval", "/nonexistent/x.safetensors"],
        "/nonexistent/x.safetensors",
    );

    succeeds(&["--help"], &["demo", "train", "inspect"]);
}

/// Writes what PyTorch's `save_file(model.state_dict(), path)` writes for `kind` with random
/// weights: the lab's tensor names, an int64 `num_batches_tracked` beside every batch norm
/// (and one stray for LeNet, which has none), no octet metadata.
fn save_pytorch_state_dict(kind: octet_models::ModelKind, channels: usize, path: &Path) {
    use candle_core::{Device, Tensor};
    let m = octet_models::build(kind, channels, 10, 5, &Device::Cpu).unwrap();
    let mut list: Vec<(String, Tensor)> = m
        .params()
        .iter()
        .map(|p| (p.name.clone(), p.var.as_tensor().clone()))
        .collect();
    let mut counters: Vec<String> = m
        .params()
        .iter()
        .filter_map(|p| {
            p.name
                .strip_suffix("running_var")
                .map(|b| format!("{b}num_batches_tracked"))
        })
        .collect();
    if counters.is_empty() {
        counters.push("bn.num_batches_tracked".into());
    }
    for name in counters {
        list.push((name, Tensor::new(100i64, &Device::Cpu).unwrap()));
    }
    safetensors::serialize_to_file(list.iter().map(|(n, t)| (n.as_str(), t)), None, path).unwrap();
}

/// A PyTorch LeNet state_dict evaluates once the architecture is named.
#[test]
fn pytorch_layout_checkpoint_evaluates_with_model_flag() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("torch.safetensors");
    save_pytorch_state_dict(octet_models::ModelKind::LENET, 1, &p);
    fails(
        &["eval", p.to_str().unwrap(), "--data", "bundled"],
        "--model",
    );
    let v = octet_json(&[
        "eval",
        p.to_str().unwrap(),
        "--data",
        "bundled",
        "--model",
        "lenet",
        "--json",
    ]);
    assert_eq!(v["images"], 2000);
}

/// A PyTorch-layout ResNet-18 checkpoint (lab names, `num_batches_tracked`, no octet
/// metadata) exports to int8 with --model, and `octet run` and `octet inspect` read the result.
#[test]
fn pytorch_resnet18_checkpoint_exports_and_runs() {
    let dir = tempfile::tempdir().unwrap();
    let ck = dir.path().join("torch_resnet.safetensors");
    save_pytorch_state_dict(octet_models::ModelKind::RESNET18, 1, &ck);
    let o8 = dir.path().join("r.o8");
    let v = octet_json(&[
        "export",
        ck.to_str().unwrap(),
        "--model",
        "resnet18",
        "--data",
        "bundled",
        "--out",
        o8.to_str().unwrap(),
        "--calibration-images",
        "32",
        "--test-images",
        "40",
        "--no-plots",
        "--json",
    ]);
    let rows = v["ablation"]["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 5, "{v}");
    assert_eq!(rows[3]["engine"], "runtime");
    assert_eq!(rows[3]["total"], 40);
    assert!(dir.path().join("r.o8.report").join("report.md").exists());

    let r = octet_json(&[
        "run",
        o8.to_str().unwrap(),
        "--data",
        "bundled",
        "--images",
        "40",
        "--json",
    ]);
    assert_eq!(r["images"], 40);
    // The runtime's accuracy in `run` is the ablation's runtime row: same bytes, same images.
    assert_eq!(r["accuracy"].as_f64(), rows[3]["accuracy"].as_f64());

    succeeds(
        &["inspect", o8.to_str().unwrap()],
        &["int8 model", "tflite_add", "avg_pool", "double rounding"],
    );

    // A corrupted model is refused with a reason, not a panic.
    let mut bytes = std::fs::read(&o8).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x55;
    std::fs::write(&o8, &bytes).unwrap();
    fails(
        &[
            "run",
            o8.to_str().unwrap(),
            "--data",
            "bundled",
            "--images",
            "4",
        ],
        "CRC",
    );
}

#[test]
fn bench_infer_on_cpu_writes_rows_for_int8_and_float() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().to_str().unwrap();
    let o = octet(&[
        "bench",
        "infer",
        "--device",
        "none",
        "--models",
        "lenet",
        "--cpu-batch-sizes",
        "1,8",
        "--iters",
        "2",
        "--out",
        out,
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("report.json")).unwrap()).unwrap();
    let rows = v["rows"].as_array().unwrap();
    let engines: Vec<(&str, u64)> = rows
        .iter()
        .map(|r| (r["engine"].as_str().unwrap(), r["batch"].as_u64().unwrap()))
        .collect();
    assert_eq!(
        engines,
        [
            ("int8-cpu", 1),
            ("f32-cpu", 1),
            ("int8-cpu", 8),
            ("f32-cpu", 8)
        ]
    );
    assert!(rows.iter().all(|r| r["img_per_s"].as_f64().unwrap() > 0.0));
    assert!(dir.path().join("throughput.png").exists() && dir.path().join("report.md").exists());
}

#[test]
fn multi_rank_commands_explain_what_they_need() {
    // bench allreduce outside a launched job names the launcher.
    fails(
        &["bench", "allreduce"],
        "octet launch --gpus N -- bench allreduce",
    );
    // A data-parallel environment without a GPU device says what to add.
    let o = Command::new(env!("CARGO_BIN_EXE_octet"))
        .args(["train", "--data", "synthetic:64:0", "--epochs", "1"])
        .env("WORLD_SIZE", "2")
        .env("RANK", "0")
        .output()
        .unwrap();
    failed_with(&o, "add --device cuda");
}

/// `--device` of `run` and `export` is checked by clap (a bad value exits 2 naming the
/// choices); `cuda` in a build without CUDA names the build flag, before anything is read.
#[test]
fn device_flag_of_run_and_export_is_checked() {
    for cmd in ["run", "export"] {
        let o = octet(&[cmd, "/nonexistent/m", "--device", "tpu"]);
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        assert!(
            text(&o).contains("[possible values: cpu, cuda, gpu]"),
            "{}",
            text(&o)
        );
    }
    #[cfg(not(feature = "cuda"))]
    for cmd in ["run", "export"] {
        fails(
            &[cmd, "/nonexistent/m", "--device", "cuda:1"],
            "rebuild with `cargo build --release --features cuda`",
        );
    }
}

/// On a GPU: `export --device cuda` writes a `.o8` of the same layout whose activation
/// parameters are those of the CPU export up to the float rounding of the GPU's convolutions
/// (calibrated on the GPU: its float activations differ from the CPU's in the last bits, and
/// so do the observed ranges; bench/gpu_export.sh counts the bytes that differ); `run --device
/// cuda` predicts exactly what `run --device cpu` predicts. Without a GPU, the CUDA commands
/// fail with the driver's reason, which the assertions print.
#[cfg(feature = "cuda")]
#[test]
#[ignore = "needs a CUDA GPU: run with --features cuda -- --include-ignored"]
fn run_and_export_on_cuda_match_the_cpu() {
    let dir = tempfile::tempdir().unwrap();
    let ck = dir.path().join("torch_resnet.safetensors");
    save_pytorch_state_dict(octet_models::ModelKind::RESNET18, 1, &ck);
    let path = |n: &str| dir.path().join(n).to_str().unwrap().to_string();
    let export = |device: &str| {
        octet_json(&[
            "export",
            &path("torch_resnet.safetensors"),
            "--model",
            "resnet18",
            "--data",
            "bundled",
            "--out",
            &path(&format!("{device}.o8")),
            "--calibration-images",
            "64",
            "--test-images",
            "200",
            "--no-plots",
            "--json",
            "--device",
            device,
        ])
    };
    let (cpu, gpu) = (export("cpu"), export("cuda"));
    let o8 = |d: &str| std::fs::read(path(&format!("{d}.o8"))).unwrap();
    let (bc, bg) = (o8("cpu"), o8("cuda"));
    let (mc, mg) = (
        octet_runtime::Model::parse(&bc).unwrap(),
        octet_runtime::Model::parse(&bg).unwrap(),
    );
    assert_eq!(bc.len(), bg.len(), "the layout differs");
    // Activation scales follow ranges observed in float: equal up to the GPU's rounding (and
    // the histogram bin that rounding may move a percentile into).
    for (tc, tg) in mc.tensors().zip(mg.tensors()) {
        assert_eq!((tc.c, tc.h, tc.w, tc.offset), (tg.c, tg.h, tg.w, tg.offset));
        let rel = ((tc.scale - tg.scale) / tc.scale).abs();
        assert!(
            rel < 5e-3,
            "tensor {}: scale {} on the CPU, {} on the GPU",
            tc.id,
            tc.scale,
            tg.scale
        );
        assert!(
            (tc.zero_point - tg.zero_point).abs() <= 1,
            "tensor {}",
            tc.id
        );
    }
    // The weights depend on the checkpoint alone: the same bytes.
    for (oc, og) in mc.ops().zip(mg.ops()) {
        assert_eq!(oc.weights, og.weights, "op {}", oc.index);
    }
    let rows = |v: &serde_json::Value| v["ablation"]["rows"].as_array().unwrap().clone();
    // The int8 rows of two near-identical models: within 2% of the images of each other.
    for i in [3, 4] {
        let (c, g) = (
            rows(&cpu)[i]["correct"].as_i64().unwrap(),
            rows(&gpu)[i]["correct"].as_i64().unwrap(),
        );
        assert!(
            (c - g).abs() <= 4,
            "row {i}: {c} correct on the CPU, {g} on the GPU"
        );
    }
    let run = |device: &str| {
        let pred = path(&format!("pred_{device}.txt"));
        let v = octet_json(&[
            "run",
            &path("cpu.o8"),
            "--data",
            "bundled",
            "--device",
            device,
            "--predictions",
            &pred,
            "--json",
        ]);
        (v, std::fs::read(pred).unwrap())
    };
    let ((vc, pc), (vg, pg)) = (run("cpu"), run("cuda"));
    assert_eq!(pc, pg, "predictions differ between the CPU and the GPU");
    assert_eq!(vc["accuracy"], vg["accuracy"]);
    assert_eq!(vg["device"], "cuda:0");
}
