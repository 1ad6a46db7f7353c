//! Issue 19, the trainer's side: settings and checkpoints that used to be accepted and then
//! crashed, trained on garbage or wrote files nothing could read, and a crafted-checkpoint test
//! (seeded structure and metadata mutations) through the loader `eval`, `export` and
//! `--resume` share.

#[path = "../../runtime/tests/guard/mod.rs"]
mod guard;
mod mutate_ckpt;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use candle_core::{DType, Device, Tensor};
use octet_models::ModelKind;
use octet_trainer::checkpoint::{self, Checkpoint};
use octet_trainer::data::{self, DataSource, DataSplit, Dataset, Normalization};
use octet_trainer::eval::evaluate;
use octet_trainer::optim::Schedule;
use octet_trainer::train::{RunOptions, TrainConfig, Trainer};
use octet_trainer::Normalizer;
use serde_json::json;

#[global_allocator]
static ALLOC: guard::Bounded = guard::Bounded;

fn split() -> DataSplit {
    data::load(&"synthetic:64:16".parse::<DataSource>().unwrap()).unwrap()
}

fn config() -> TrainConfig {
    let mut c = TrainConfig::new(ModelKind::LENET, "synthetic:64:16");
    c.epochs = 3;
    c.batch_size = 32;
    c
}

/// A real checkpoint (LeNet, momentum, metadata) after one epoch: its path.
fn trained(dir: &Path) -> PathBuf {
    let mut t = Trainer::new(config(), split(), &Device::Cpu, None).unwrap();
    let o = RunOptions {
        out: Some(dir.to_path_buf()),
        stop_after: Some(1),
        ..RunOptions::new(Device::Cpu)
    };
    t.run(&o, &mut |_| {}).unwrap();
    dir.join("last.safetensors")
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

fn refused(p: &Path) -> String {
    match checkpoint::load_checked(p) {
        Ok(_) => panic!("{} was accepted", p.display()),
        Err(e) => e.to_string(),
    }
}

/// `--schedule step --gamma inf` (or nan) trained, then stored gamma as JSON null: every later
/// reader failed. `--step-every 0` was silently taken as 1.
#[test]
fn non_finite_or_zero_schedule_settings_are_refused_before_training() {
    for (every, gamma, says) in [
        (30, f64::INFINITY, "--gamma"),
        (1, f64::NAN, "--gamma"),
        (1, 0.0, "--gamma"),
        (1, -0.5, "--gamma"),
        (0, 0.1, "--step-every"),
        (1, 1e300, "learning rate"),
    ] {
        let mut c = config();
        c.schedule = Schedule::Step { every, gamma };
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains(says), "every {every} gamma {gamma}: {e}");
        let e = Trainer::new(c, split(), &Device::Cpu, None)
            .err()
            .expect("refused")
            .to_string();
        assert!(e.contains(says), "{e}");
    }
    let mut c = config();
    c.schedule = Schedule::Step {
        every: 1,
        gamma: 0.5,
    };
    c.validate().unwrap();
}

/// Metadata JSON cannot hold NaN or infinity: a snapshot that would not read back is refused
/// instead of written.
#[test]
fn metadata_that_would_not_read_back_is_never_written() {
    let dir = tempfile::tempdir().unwrap();
    let ck = checkpoint::load(&trained(dir.path())).unwrap();
    let mut meta = ck.meta.clone().unwrap();
    let model = octet_models::build(ModelKind::LENET, 3, 10, 0, &Device::Cpu).unwrap();
    meta.config.schedule = Schedule::Step {
        every: 1,
        gamma: f64::INFINITY,
    };
    let e = checkpoint::snapshot(model.params(), None, &meta)
        .err()
        .expect("refused")
        .to_string();
    assert!(e.contains("would not read back"), "{e}");
    let mut meta = ck.meta.unwrap();
    meta.history[0].train_loss = f64::NAN;
    assert!(checkpoint::snapshot(model.params(), None, &meta).is_err());
}

/// NaN in conv1.weight: eval gave 10.00% with exit 0 and --resume trained a full epoch on it
/// (and saved NaN weights again). Refused on load, naming the tensor; never written.
#[test]
fn non_finite_tensors_are_refused_on_load_and_never_written() {
    let dir = tempfile::tempdir().unwrap();
    let good = std::fs::read(trained(dir.path())).unwrap();
    for (name, v) in [
        ("conv1.weight", f32::NAN),
        ("fc3.bias", f32::INFINITY),
        ("optim.momentum.conv2.weight", f32::NEG_INFINITY),
    ] {
        let p = write(
            dir.path(),
            "nan.safetensors",
            &mutate_ckpt::set_f32(&good, name, 3, v),
        );
        let e = refused(&p);
        assert!(
            e.contains(name) && e.contains("nan.safetensors") && e.contains("element 3"),
            "{e}"
        );
        let ck = checkpoint::load(&p).unwrap();
        let e = Trainer::new(config(), split(), &Device::Cpu, Some(&ck))
            .err()
            .expect("resume refused")
            .to_string();
        assert!(e.contains(name), "{e}");
    }
    // The writer: a snapshot with a NaN weight is not written, the old file stays.
    let ck = checkpoint::load(&dir.path().join("last.safetensors")).unwrap();
    let model = octet_models::build(ModelKind::LENET, 3, 10, 0, &Device::Cpu).unwrap();
    let w = model.params().get("fc1.bias").unwrap();
    let mut v = w.var.as_tensor().to_vec1::<f32>().unwrap();
    v[0] = f32::NAN;
    w.var.set(&Tensor::new(v, &Device::Cpu).unwrap()).unwrap();
    let snap = checkpoint::snapshot(model.params(), None, ck.meta.as_ref().unwrap()).unwrap();
    let target = dir.path().join("last.safetensors");
    let e = snap.write(&target).unwrap_err().to_string();
    assert!(e.contains("fc1.bias") && e.contains("not written"), "{e}");
    assert_eq!(std::fs::read(&target).unwrap(), good);
}

/// Normalisation std [0.0] evaluated to 10.00% with exit 0; an empty one ended in a candle
/// error about in_channel. Metadata naming another model than its tensors and configuration
/// was refused by eval but trained by --resume.
#[test]
fn metadata_is_checked_against_the_tensors() {
    let dir = tempfile::tempdir().unwrap();
    let good = std::fs::read(trained(dir.path())).unwrap();
    let cases: Vec<(serde_json::Value, serde_json::Value, &str)> = vec![
        (
            json!("normalization"),
            json!({"mean": [0.5, 0.5, 0.5], "std": [0.0, 0.2, 0.2]}),
            "std",
        ),
        (
            json!("normalization"),
            json!({"mean": [], "std": []}),
            "0 mean(s)",
        ),
        (
            json!("normalization"),
            json!({"mean": [0.5], "std": [0.2]}),
            "3-channel",
        ),
        (json!("model"), json!("resnet18"), "resnet18"),
        (json!("model"), json!("vgg16"), "vgg16"),
        (json!("in_channels"), json!(1), "input channel"),
        (json!("classes"), json!(7), "classes"),
    ];
    for (key, value, says) in cases {
        let bytes = mutate_ckpt::edit_meta(&good, |m| m[key.as_str().unwrap()] = value.clone());
        let p = write(dir.path(), "meta.safetensors", &bytes);
        let e = refused(&p);
        assert!(e.contains(says), "{key} = {value}: {e}");
        let ck = checkpoint::load(&p).unwrap();
        assert!(
            Trainer::new(config(), split(), &Device::Cpu, Some(&ck)).is_err(),
            "{key} = {value}: resumed"
        );
    }
}

#[derive(Default, Debug)]
struct Tally {
    tried: usize,
    refused_on_load: usize,
    refused_later: usize,
    evaluated: usize,
    resumable: usize,
}

impl std::fmt::Display for Tally {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} mutants tried: {} refused on load, {} refused when restored, {} evaluated, {} \
             resumable",
            self.tried, self.refused_on_load, self.refused_later, self.evaluated, self.resumable
        )
    }
}

/// The loader's path for a mutant, as `eval` and `--resume` take it; `Err`: what went wrong.
fn exercise(path: &Path, t: &mut Tally) -> Result<(), String> {
    let name = path.file_name().unwrap().to_str().unwrap();
    let ck: Checkpoint = match checkpoint::load_checked(path) {
        Err(e) => {
            let e = e.to_string();
            if !e.contains(name) {
                return Err(format!("refusal does not name the file: {e}"));
            }
            t.refused_on_load += 1;
            return Ok(());
        }
        Ok(ck) => ck,
    };
    // eval: architecture from the metadata (or named), shapes from the tensors.
    let later = |t: &mut Tally| {
        t.refused_later += 1;
        Ok(())
    };
    let Ok(kind) = ck.model(Some(&ModelKind::LENET.into())) else {
        return later(t);
    };
    let Ok((c, classes)) = ck.io_shape(&kind) else {
        return later(t);
    };
    let norm = ck
        .meta
        .as_ref()
        .map(|m| m.normalization.clone())
        .unwrap_or(Normalization {
            mean: vec![0.5; c],
            std: vec![0.25; c],
        });
    if c == 0 || c > 64 || classes == 0 || classes > 1 << 20 {
        return later(t);
    }
    let dev = Device::Cpu;
    let Ok(model) = octet_models::build(&kind, c, classes, 0, &dev) else {
        return later(t);
    };
    if let Err(e) = ck.restore_model(model.params()) {
        let e = e.to_string();
        if !e.contains(name) {
            return Err(format!("restore error does not name the file: {e}"));
        }
        return later(t);
    }
    let ds = Dataset::new(vec![128; 4 * c * 32 * 32], vec![0; 4], c, 32, 32, classes)
        .map_err(|e| e.to_string())?;
    let r = Normalizer::new(&norm, &dev)
        .and_then(|n| {
            evaluate(model.as_ref(), &ds, &n, 2, &dev)
                .map_err(|e| candle_core::Error::Msg(e.to_string()))
        })
        .map_err(|e| format!("accepted, but evaluation fails: {e}"))?;
    if !(0.0..=1.0).contains(&r.accuracy) {
        return Err(format!("accuracy {}", r.accuracy));
    }
    t.evaluated += 1;
    // --resume: the run's configuration and a data set of the checkpoint's shape.
    if let Some(m) = &ck.meta {
        let mut s = split();
        if c != 3 || classes != 10 {
            return Ok(());
        }
        s.test = s.train.clone();
        if Trainer::new(m.config.clone(), s, &dev, Some(&ck)).is_ok() {
            t.resumable += 1;
        }
    }
    Ok(())
}

/// Thousands of mutants (3,000; `OCTET_CRAFTED_CASES=N` makes it N/10) through the loader;
/// fails on a panic, an allocation above 256 MiB, a case over 60 s, a refusal that does not
/// name the file, or a checkpoint accepted that then fails to evaluate. Prints its counts.
#[test]
fn crafted_checkpoints_never_crash_or_overallocate() {
    let cases: usize = std::env::var("OCTET_CRAFTED_CASES")
        .ok()
        .and_then(|s| s.parse::<usize>().ok())
        .map(|n| n / 10)
        .unwrap_or(3000);
    let dir = tempfile::tempdir().unwrap();
    let good = std::fs::read(trained(dir.path())).unwrap();
    guard::arm(256 << 20, Duration::from_secs(60));
    let start = Instant::now();
    let mut rng = mutate_ckpt::Rng::new(19);
    let mut t = Tally::default();
    let mut failures = Vec::new();
    let path = dir.path().join("crafted.safetensors");
    for i in 0..cases {
        let (bytes, what) = mutate_ckpt::mutate(&good, &mut rng);
        std::fs::write(&path, &bytes).unwrap();
        guard::case(i as u64);
        t.tried += 1;
        let r = catch_unwind(AssertUnwindSafe(|| exercise(&path, &mut t)));
        guard::idle();
        match r {
            Ok(Ok(())) => {}
            Ok(Err(e)) => failures.push(format!("case {i} ({what}): {e}")),
            Err(p) => failures.push(format!(
                "case {i} ({what}): panic: {}",
                p.downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default()
            )),
        }
    }
    guard::report(&format!(
        "crafted checkpoints: {t} in {:.1} s; largest allocation {} bytes",
        start.elapsed().as_secs_f64(),
        guard::largest()
    ));
    assert_eq!(guard::refused(), 0, "allocations above the bound");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(t.evaluated > 0 && t.refused_on_load > t.tried / 3, "{t:?}");
}

/// Float tensors only: the i64 counter of a PyTorch batch norm is not checked for NaN.
#[test]
fn integer_tensors_pass_the_finiteness_check() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("ints.safetensors");
    let t = Tensor::new(&[1i64, 2, 3], &Device::Cpu).unwrap();
    let f = Tensor::new(&[1f32, 2.0], &Device::Cpu)
        .unwrap()
        .to_dtype(DType::BF16)
        .unwrap();
    safetensors::serialize_to_file([("n", &t), ("b", &f)], None, &p).unwrap();
    checkpoint::load_checked(&p).unwrap();
}
