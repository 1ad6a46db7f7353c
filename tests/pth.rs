//! PyTorch `.pth` state_dicts: the files in `tests/data/`, written by PyTorch itself
//! (`tests/data/make_lenet_pth.py`), read through octet's one checkpoint loader and used by
//! `octet eval`, `octet export` and `octet train --init`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{Device, Tensor};
use octet_models::ModelKind;
use octet_trainer::checkpoint::{self, Checkpoint};
use octet_trainer::data::{self, DataSource, DataSplit};
use octet_trainer::eval::evaluate;
use octet_trainer::Normalizer;

mod octet_cmd;
use octet_cmd::{octet, octet_json, text};

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

/// What PyTorch computed with `lenet.pth` (`lenet_logits.json`).
struct Reference {
    mean: Vec<f32>,
    std: Vec<f32>,
    logits: Vec<Vec<f32>>,
    labels: Vec<u8>,
    test_images: usize,
    test_correct: usize,
    test_loss: f64,
}

fn reference() -> Reference {
    let text = std::fs::read_to_string(data("lenet_logits.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let floats = |v: &serde_json::Value| -> Vec<f32> {
        let a = v.as_array().unwrap();
        a.iter().map(|x| x.as_f64().unwrap() as f32).collect()
    };
    Reference {
        mean: floats(&v["normalization"]["mean"]),
        std: floats(&v["normalization"]["std"]),
        logits: v["logits"].as_array().unwrap().iter().map(floats).collect(),
        labels: floats(&v["labels"]).iter().map(|&x| x as u8).collect(),
        test_images: v["test_images"].as_u64().unwrap() as usize,
        test_correct: v["test_correct"].as_u64().unwrap() as usize,
        test_loss: v["test_loss"].as_f64().unwrap(),
    }
}

fn bundled() -> DataSplit {
    data::load(&"bundled".parse::<DataSource>().unwrap()).unwrap()
}

/// `lenet.pth` in octet's LeNet, in eval mode.
fn lenet(path: &Path) -> Box<dyn octet_models::Network> {
    let ck = checkpoint::load_checked(path).unwrap();
    assert!(ck.meta.is_none());
    ck.check_model(ModelKind::LENET).unwrap();
    let (c, classes) = ck.io_shape(ModelKind::LENET).unwrap();
    let model = octet_models::build(ModelKind::LENET, c, classes, 0, &Device::Cpu).unwrap();
    ck.restore_model(model.params()).unwrap();
    model
}

/// Images whose class a float rounding can change: PyTorch and octet sum in different orders.
const NEAR_TIES: usize = 1;

#[test]
fn a_pytorch_lenet_gives_pytorchs_logits_in_octet() {
    let r = reference();
    let split = bundled();
    // The script normalised as octet does for this data set, and saw the same images.
    assert_eq!(
        (r.mean.clone(), r.std.clone()),
        (split.norm.mean.clone(), split.norm.std.clone())
    );
    let n = r.logits.len();
    assert_eq!(&split.test.labels[..n], r.labels.as_slice());

    let model = lenet(&data("lenet.pth"));
    let norm = Normalizer::new(&split.norm, &Device::Cpu).unwrap();
    let pixels = &split.test.images[..n * split.test.image_len()];
    let x = Tensor::from_slice(pixels, (n, 1, 32, 32), &Device::Cpu).unwrap();
    let got = model
        .forward(&norm.apply(&x).unwrap(), false)
        .unwrap()
        .to_vec2::<f32>()
        .unwrap();
    for (i, (g, want)) in got.iter().zip(&r.logits).enumerate() {
        for (a, b) in g.iter().zip(want) {
            assert!(
                (a - b).abs() < 1e-4,
                "image {i}: octet {g:?}, PyTorch {want:?}"
            );
        }
    }

    // The whole test split: the same accuracy and loss as PyTorch's.
    let e = evaluate(model.as_ref(), &split.test, &norm, 500, &Device::Cpu).unwrap();
    assert_eq!(e.images, r.test_images);
    assert!(
        e.correct.abs_diff(r.test_correct) <= NEAR_TIES,
        "{} vs {}",
        e.correct,
        r.test_correct
    );
    assert!(
        (e.loss - r.test_loss).abs() < 1e-4,
        "{} vs {}",
        e.loss,
        r.test_loss
    );
}

/// The float tensors of the checkpoint at `path`, as numbers.
fn tensors(path: &Path) -> HashMap<String, Vec<f32>> {
    let mut out = HashMap::new();
    for (name, t) in checkpoint::load(path).unwrap().tensors {
        if t.dtype().is_float() {
            out.insert(name, t.flatten_all().unwrap().to_vec1().unwrap());
        }
    }
    out
}

/// A training checkpoint dict from a DDP model (`state_dict` key, `module.` names), its
/// tensors in f64, bf16 and f16, the conv weights channels_last, with a `num_batches_tracked`:
/// the same LeNet, each tensor as close to `lenet.pth`'s as its dtype holds.
#[test]
fn checkpoint_dicts_wrapped_names_and_other_dtypes_load() {
    let plain = tensors(&data("lenet.pth"));
    let ck = checkpoint::load_checked(&data("lenet_checkpoint.pth")).unwrap();
    ck.check_model(ModelKind::LENET).unwrap();
    assert!(ck.tensors.contains_key("bn.num_batches_tracked"));
    let wrapped = tensors(&data("lenet_checkpoint.pth"));
    assert_eq!(wrapped.len(), plain.len());
    for (name, want) in &plain {
        // Relative precision of what the script stored: f64 holds f32 exactly.
        let eps = match name.split('.').next().unwrap() {
            "conv1" => 0.0,
            "conv2" => 1.0 / 256.0,
            "fc1" => 1.0 / 2048.0,
            _ => 0.0,
        };
        let got = &wrapped[name];
        for (a, b) in got.iter().zip(want) {
            // f16 flushes what is below its smallest subnormal.
            assert!((a - b).abs() <= eps * b.abs() + 6e-8, "{name}: {a} vs {b}");
        }
    }
}

fn refused(path: &Path, expected: &str) {
    match checkpoint::load_checked(path) {
        Ok(_) => panic!("{} was accepted", path.display()),
        Err(e) => {
            let e = e.to_string();
            assert!(
                e.contains(expected) && e.contains(&path.display().to_string()),
                "{e}"
            );
        }
    }
}

#[test]
fn damaged_and_foreign_files_are_refused_with_a_reason() {
    refused(&data("legacy.pth"), "legacy (pre-1.6, non-zip) format");
    refused(&data("not_a_state_dict.pth"), "holds no tensors");

    let dir = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(data("lenet.pth")).unwrap();
    let p = dir.path().join("x.pth");
    for len in [0, 3, 4, 100, bytes.len() / 2, bytes.len() - 1] {
        std::fs::write(&p, &bytes[..len]).unwrap();
        refused(&p, "truncated");
    }
    std::fs::write(&p, b"not a checkpoint at all\n").unwrap();
    refused(&p, "nor a PyTorch .pth");

    // Damage anywhere in the file: an error or (in tensor data the zip does not check) a
    // loaded file, never a panic.
    for i in (0..2048).chain((2048..bytes.len()).step_by(997)) {
        let mut b = bytes.clone();
        b[i] ^= 0x5a;
        std::fs::write(&p, &b).unwrap();
        let _ = checkpoint::load_checked(&p);
    }
}

/// The first tensor that is missing, mis-shaped or foreign is named.
#[test]
fn tensors_are_checked_against_the_architecture() {
    let ck = checkpoint::load(&data("lenet.pth")).unwrap();
    let with = |edit: &dyn Fn(&mut HashMap<String, Tensor>)| {
        let mut tensors = ck.tensors.clone();
        edit(&mut tensors);
        let c = Checkpoint {
            path: ck.path.clone(),
            tensors,
            meta: None,
        };
        c.check_model(ModelKind::LENET).unwrap_err().to_string()
    };
    let e = with(&|t| {
        t.remove("fc2.bias");
    });
    assert!(e.contains("'fc2.bias' is missing"), "{e}");
    let e = with(&|t| {
        t.insert(
            "fc2.bias".into(),
            Tensor::zeros(83, candle_core::DType::F32, &Device::Cpu).unwrap(),
        );
    });
    assert!(e.contains("'fc2.bias' has shape [83]"), "{e}");
    let e = with(&|t| {
        t.insert(
            "fc4.weight".into(),
            Tensor::zeros(3, candle_core::DType::F32, &Device::Cpu).unwrap(),
        );
    });
    assert!(e.contains("'fc4.weight' is not part of the model"), "{e}");
    let e = with(&|t| {
        let b = t.remove("fc2.bias").unwrap();
        t.insert("fc_2.bias".into(), b);
    });
    assert!(
        e.contains("'fc2.bias' is missing") && e.contains("such as 'fc_2.bias'"),
        "{e}"
    );
    let e = ck.check_model(ModelKind::RESNET18).unwrap_err().to_string();
    assert!(e.contains("is this a resnet18 checkpoint?"), "{e}");
}

#[test]
fn eval_and_export_read_a_pth_given_the_architecture() {
    let pth = data("lenet.pth");
    let pth = pth.to_str().unwrap();
    let o = octet(&["eval", pth, "--data", "bundled"]);
    assert!(
        !o.status.success() && text(&o).contains("--model"),
        "{}",
        text(&o)
    );

    let r = reference();
    let v = octet_json(&[
        "eval", pth, "--model", "lenet", "--data", "bundled", "--json",
    ]);
    assert_eq!(v["images"], r.test_images);
    let correct = v["correct"].as_u64().unwrap() as usize;
    assert!(correct.abs_diff(r.test_correct) <= NEAR_TIES, "{v}");

    let dir = tempfile::tempdir().unwrap();
    let o8 = dir.path().join("lenet.o8");
    let v = octet_json(&[
        "export",
        pth,
        "--model",
        "lenet",
        "--data",
        "bundled",
        "--out",
        o8.to_str().unwrap(),
        "--calibration-images",
        "64",
        "--test-images",
        "200",
        "--no-plots",
        "--json",
    ]);
    let rows = v["ablation"]["rows"].as_array().unwrap();
    assert_eq!(rows[0]["total"], 200, "{v}");
    // The float row is PyTorch's model on those 200 images; int8 stays close to it.
    let float = rows[0]["accuracy"].as_f64().unwrap();
    let int8 = rows[3]["accuracy"].as_f64().unwrap();
    assert!(float > 0.6 && (float - int8).abs() < 0.05, "{v}");
    assert!(std::fs::metadata(&o8).unwrap().len() > 0);
}

/// `--init` starts from the file's weights: with a learning rate too small to move them, the
/// first epoch evaluates PyTorch's model and the checkpoint holds its weights unchanged.
#[test]
fn train_init_starts_from_a_pth() {
    let pth = data("lenet.pth");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let mut args = vec![
        "train",
        "--init",
        pth.to_str().unwrap(),
        "--data",
        "bundled",
        "--epochs",
        "1",
        "--lr",
        "1e-30",
        "--momentum",
        "0",
        "--weight-decay",
        "0",
        "--out",
        out.to_str().unwrap(),
        "--json",
    ];
    let o = octet(&args);
    assert!(
        !o.status.success() && text(&o).contains("--model"),
        "{}",
        text(&o)
    );
    args.extend(["--model", "lenet"]);
    let o = octet(&args);
    assert!(o.status.success(), "{}", text(&o));
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.last().unwrap()["event"], "done", "{lines:?}");
    let r = reference();
    let acc = lines[0]["test_accuracy"].as_f64().unwrap();
    let correct = (acc * r.test_images as f64).round() as usize;
    assert!(correct.abs_diff(r.test_correct) <= NEAR_TIES, "{lines:?}");

    let saved = tensors(&out.join("last.safetensors"));
    for (name, want) in tensors(&pth) {
        assert_eq!(saved[&name], want, "{name}");
    }

    // Another architecture than the file's: refused before training, the tensor named.
    let o = octet(&[
        "train",
        "--init",
        pth.to_str().unwrap(),
        "--model",
        "resnet18",
        "--data",
        "bundled",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(
        !o.status.success() && text(&o).contains("tensor '"),
        "{}",
        text(&o)
    );
}
