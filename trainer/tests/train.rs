//! The training loop on real data: resume is bit-identical, a NaN loss leaves the last
//! checkpoint intact, bad checkpoints are refused with the tensor named.

mod common;

use std::collections::HashMap;

use candle_core::{Device, Tensor};
use octet_models::spec::{Layer, Node};
use octet_models::{Model, ModelKind};
use octet_trainer::checkpoint;
use octet_trainer::data::DataSplit;
use octet_trainer::train::{RunOptions, TrainConfig, Trainer};
use octet_trainer::TrainError;

/// 1,024 training and 500 test images of the bundled Fashion-MNIST subset.
fn small_split() -> DataSplit {
    common::bundled_subset(1024, 5, 500)
}

fn config() -> TrainConfig {
    config_of(ModelKind::LENET.into())
}

fn config_of(model: Model) -> TrainConfig {
    let mut c = TrainConfig::new(model, "bundled");
    c.epochs = 2;
    c.batch_size = 64;
    c.lr = 0.05;
    c.seed = 11;
    c
}

fn opts(dir: &std::path::Path) -> RunOptions {
    RunOptions {
        out: Some(dir.to_path_buf()),
        ..RunOptions::new(Device::Cpu)
    }
}

fn tensors(path: &std::path::Path) -> HashMap<String, Vec<f32>> {
    let ck = checkpoint::load(path).unwrap();
    ck.tensors
        .iter()
        .map(|(k, t)| {
            (
                k.clone(),
                t.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
            )
        })
        .collect()
}

#[test]
fn resume_is_bit_identical_to_an_uninterrupted_run() {
    resume_matches_straight_run(config());
}

/// With dropout before each of LeNet's linear layers too: a resumed run draws the masks the
/// uninterrupted one drew.
#[test]
fn resume_with_dropout_is_bit_identical() {
    let mut spec = ModelKind::LENET.spec();
    let linears: Vec<usize> = (spec.layers.iter().enumerate())
        .filter(|(_, n)| matches!(n.layer, Layer::Linear { .. }))
        .map(|(i, _)| i)
        .collect();
    for (k, i) in linears.into_iter().enumerate().rev() {
        let node = Node::new(format!("drop{k}"), Layer::Dropout { p: 0.3 });
        spec.layers.insert(i, node);
    }
    let name = "lenet-dropout".to_string();
    resume_matches_straight_run(config_of(Model::Described { name, spec }));
}

fn resume_matches_straight_run(config: TrainConfig) {
    let config = || config.clone();
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut straight = Trainer::new(config(), small_split(), &Device::Cpu, None).unwrap();
    let s1 = straight.run(&opts(a.path()), &mut |_| {}).unwrap();
    assert_eq!(s1.epochs_done, 2);

    let mut first = Trainer::new(config(), small_split(), &Device::Cpu, None).unwrap();
    let o = RunOptions {
        stop_after: Some(1),
        ..opts(b.path())
    };
    assert_eq!(first.run(&o, &mut |_| {}).unwrap().epochs_done, 1);
    let ck = checkpoint::load(&b.path().join("last.safetensors")).unwrap();
    let meta = ck.meta.clone().unwrap();
    assert_eq!((meta.epoch, meta.config.clone()), (1, config()));
    let mut resumed = Trainer::new(meta.config, small_split(), &Device::Cpu, Some(&ck)).unwrap();
    let s2 = resumed.run(&opts(b.path()), &mut |_| {}).unwrap();
    assert_eq!(s2.epochs_done, 2);

    let (ta, tb) = (
        tensors(&a.path().join("last.safetensors")),
        tensors(&b.path().join("last.safetensors")),
    );
    assert_eq!(ta.len(), tb.len());
    assert!(ta.keys().any(|k| k.starts_with("optim.momentum.")));
    for (k, v) in &ta {
        assert!(v == &tb[k], "tensor {k} differs after resume");
    }
    let (ra, rb) = (&s1.records[1], &s2.records[0]);
    assert_eq!(
        (ra.train_loss, ra.test_accuracy),
        (rb.train_loss, rb.test_accuracy)
    );
    // It learned something: above the 10% of chance on Fashion-MNIST.
    assert!(ra.test_accuracy.unwrap() > 0.15, "{ra:?}");
    let csv = std::fs::read_to_string(b.path().join("metrics.csv")).unwrap();
    assert_eq!(csv.lines().count(), 3, "header + 2 epochs:\n{csv}");
}

#[test]
fn nan_loss_stops_training_and_keeps_the_last_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config();
    cfg.epochs = 1;
    Trainer::new(cfg.clone(), small_split(), &Device::Cpu, None)
        .unwrap()
        .run(&opts(dir.path()), &mut |_| {})
        .unwrap();
    let path = dir.path().join("last.safetensors");
    let before = std::fs::read(&path).unwrap();
    let ck = checkpoint::load(&path).unwrap();
    cfg.epochs = 3;
    cfg.lr = 1e12; // diverges within a few steps
    let err = Trainer::new(cfg, small_split(), &Device::Cpu, Some(&ck))
        .unwrap()
        .run(&opts(dir.path()), &mut |_| {})
        .unwrap_err();
    assert!(
        matches!(err, TrainError::NonFiniteLoss { epoch: 2, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("checkpoint"), "{err}");
    assert_eq!(std::fs::read(&path).unwrap(), before, "checkpoint changed");
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 2, "no temporary files left: {names:?}");
}

#[test]
fn bad_checkpoints_are_refused_naming_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config();
    cfg.epochs = 1;
    let split = small_split();
    let t = Trainer::new(cfg.clone(), split.clone(), &Device::Cpu, None).unwrap();
    let params = t.model().params();
    let good: Vec<(String, Tensor)> = params
        .iter()
        .map(|p| (p.name.clone(), p.var.as_tensor().clone()))
        .collect();
    let write = |name: &str, list: &[(String, Tensor)]| {
        let p = dir.path().join(name);
        safetensors::serialize_to_file(list.iter().map(|(n, t)| (n.as_str(), t)), None, &p)
            .unwrap();
        p
    };

    // Truncated file.
    let full = write("full.safetensors", &good);
    let bytes = std::fs::read(&full).unwrap();
    let cut = dir.path().join("cut.safetensors");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let e = checkpoint::load(&cut).err().unwrap().to_string();
    assert!(
        e.contains("cut.safetensors") && e.contains("truncated"),
        "{e}"
    );

    // Missing tensor: the error names it.
    let missing: Vec<_> = good
        .iter()
        .filter(|(n, _)| n != "fc2.weight")
        .cloned()
        .collect();
    let ck = checkpoint::load(&write("missing.safetensors", &missing)).unwrap();
    let e = ck.restore_model(params).unwrap_err().to_string();
    assert!(e.contains("fc2.weight") && e.contains("missing"), "{e}");

    // Mis-shaped tensor.
    let mut shaped = good.clone();
    shaped[0].1 = Tensor::zeros((6, 3, 5, 5), candle_core::DType::F32, &Device::Cpu).unwrap();
    let ck = checkpoint::load(&write("shape.safetensors", &shaped)).unwrap();
    let e = ck.restore_model(params).unwrap_err().to_string();
    assert!(
        e.contains("conv1.weight") && e.contains("[6, 3, 5, 5]"),
        "{e}"
    );

    // A plain state_dict has no momentum: resuming from it says so.
    let ck = checkpoint::load(&full).unwrap();
    assert!(ck.meta.is_none());
    match Trainer::new(cfg, split, &Device::Cpu, Some(&ck)) {
        Err(e) => assert!(e.to_string().contains("optim.momentum."), "{e}"),
        Ok(_) => panic!("resumed without optimizer state"),
    }
}

/// `--precision bf16` needs CUDA: on the CPU the trainer hands the model's refusal (which names
/// the fix, `models/tests/channels_last_cpu.rs`) up unchanged, before any work.
#[test]
fn bf16_on_cpu_is_refused_with_the_fix() {
    let mut c = config();
    c.precision = octet_trainer::Precision::Bf16;
    match Trainer::new(c, small_split(), &Device::Cpu, None) {
        Err(TrainError::Model(e)) => assert!(e.to_string().contains("--precision f32"), "{e}"),
        Err(e) => panic!("expected the model's refusal, got {e}"),
        Ok(_) => panic!("bf16 on the CPU was accepted"),
    }
}

/// The precision is part of the recorded configuration (so `--resume` keeps it); a
/// configuration written before it existed reads as f32.
#[test]
fn precision_is_recorded_and_defaults_to_f32() {
    let mut c = config();
    c.precision = octet_trainer::Precision::Bf16;
    let v = serde_json::to_value(&c).unwrap();
    assert_eq!(v["precision"], "bf16");
    let back: TrainConfig = serde_json::from_value(v.clone()).unwrap();
    assert_eq!(back, c);
    let mut old = v;
    old.as_object_mut().unwrap().remove("precision");
    let old: TrainConfig = serde_json::from_value(old).unwrap();
    assert_eq!(old.precision, octet_trainer::Precision::F32);
}
