//! Every built-in network and the README's example description, end to end as a user runs
//! them: `octet train`, `eval`, `export` (int8) and `run`, small and short.

mod octet_cmd;

use octet_cmd::{octet, octet_json, text};

/// Trains `model` for an epoch on `data`, evaluates the checkpoint, exports it to int8 and
/// runs the `.o8`; the float and int8 accuracies.
fn train_export_run(model: &str, data: &str, dir: &std::path::Path) -> (f64, f64) {
    let out = dir.join(model.replace(['/', '.'], "_"));
    let out = out.to_str().unwrap();
    let train = [
        "train",
        "--model",
        model,
        "--data",
        data,
        "--epochs",
        "1",
        "--out",
        out,
        "--no-plots",
        "--json",
    ];
    let done = octet_json(&train);
    assert_eq!(done["event"], "done", "{done}");
    let ck = format!("{out}/last.safetensors");
    let eval = octet_json(&["eval", &ck, "--json"]);
    let o8 = format!("{out}.o8");
    let export = [
        "export",
        &ck,
        "--out",
        &o8,
        "--calibration-images",
        "32",
        "--test-images",
        "32",
        "--no-plots",
        "--json",
    ];
    let ex = octet_json(&export);
    assert_eq!(ex["ablation"]["rows"][3]["engine"], "runtime", "{ex}");
    let run = octet_json(&["run", &o8, "--data", data, "--images", "200", "--json"]);
    assert_eq!(run["images"], 200, "{run}");
    (
        eval["accuracy"].as_f64().unwrap(),
        run["accuracy"].as_f64().unwrap(),
    )
}

#[test]
fn resnet8_and_the_example_description_learn_on_bundled_data_and_run_as_int8() {
    let dir = tempfile::tempdir().unwrap();
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/nets/example.toml");
    for model in ["resnet8", example] {
        let (float, int8) = train_export_run(model, "bundled", dir.path());
        // One epoch on 6,000 images: well above the 10% of chance.
        assert!(
            float > 0.3 && int8 > 0.3,
            "{model}: float {float}, int8 {int8}"
        );
    }
}

/// Every other built-in network on a few synthetic images (the CPU's grouped convolutions
/// are slow): every layer kind trains, exports and runs as int8; so does each network with a
/// width multiplier at width 0.5, which the checkpoint records as a description.
#[test]
fn every_other_builtin_network_trains_exports_and_runs() {
    let dir = tempfile::tempdir().unwrap();
    for &kind in octet_models::ModelKind::all() {
        let mut models = vec![kind.to_string()];
        models.extend(kind.width().map(|_| format!("{kind}:0.5")));
        for model in models.iter().filter(|m| *m != "resnet8") {
            train_export_run(model, "synthetic:32:200", dir.path());
        }
    }
    let o = octet(&["train", "--model", "resnet8:0.5", "--data", "bundled"]);
    assert!(
        !o.status.success() && text(&o).contains("no width"),
        "{}",
        text(&o)
    );
}

#[test]
fn a_bad_description_is_refused_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    let text_in = "[[layer]]\nname = \"c\"\nop = \"conv\"\nout = 4\nkernel = 3\n\n\
                   [[layer]]\nname = \"fc\"\nop = \"linear\"\n";
    std::fs::write(&path, text_in).unwrap();
    let o = octet(&[
        "train",
        "--model",
        path.to_str().unwrap(),
        "--data",
        "bundled",
    ]);
    let s = text(&o);
    assert!(!o.status.success(), "{s}");
    assert!(
        s.contains("line 7") && s.contains("'fc'") && s.contains("flatten"),
        "{s}"
    );
    let o = octet(&["train", "--model", "vgg16", "--data", "bundled"]);
    let s = text(&o);
    assert!(!o.status.success() && s.contains("resnet8"), "{s}");
}
