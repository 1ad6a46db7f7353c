//! Issue 19 through the command line: hostile files and arguments get a clear error before any
//! work (exit 1, `error: …`, or clap's exit 2), never a crash, a hang, an abort or a file the
//! project's own readers reject. A sample of crafted `.o8` files and checkpoints (the
//! generators of `runtime/tests/crafted.rs` and `trainer/tests/hostile.rs`, which run
//! thousands in-process) goes through `inspect`, `run`, `eval` and `train --resume`, each
//! process limited to 4 GiB of address space and 120 s.

use octet_testkit as common;
#[path = "../trainer/tests/mutate_ckpt/mod.rs"]
mod mutate_ckpt;
#[path = "../runtime/tests/mutate_o8/mod.rs"]
mod mutate_o8;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Address space of every `octet` started here: a larger allocation fails (and must be
/// reported as an error, not abort the process).
const ADDRESS_SPACE: u64 = 4 << 30;

/// Runs `octet` with the address-space limit and a 120 s deadline (killed and reported as a
/// hang past it).
/// `OCTET_BIN` runs another build instead (e.g. one from before the fixes, to see these
/// tests fail).
fn octet(args: &[&str]) -> Output {
    let bin = std::env::var_os("OCTET_BIN").unwrap_or(env!("CARGO_BIN_EXE_octet").into());
    let mut cmd = Command::new(bin);
    cmd.args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        // SAFETY: only setrlimit, async-signal-safe, between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                let lim = libc::rlimit {
                    rlim_cur: ADDRESS_SPACE,
                    rlim_max: ADDRESS_SPACE,
                };
                libc::setrlimit(libc::RLIMIT_AS, &lim);
                Ok(())
            });
        }
    }
    let mut child = cmd.spawn().expect("start octet");
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let o = child.wait_with_output().unwrap();
            panic!("octet {args:?} hung (killed after 120 s): {}", text(&o));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Success, or a clean refusal: exit 1 with `error: …` (or clap's exit 2); never a signal, a
/// panic or an allocation failure.
fn clean(o: &Output, what: &str) -> Result<bool, String> {
    let t = text(o);
    let bad = t.contains("panicked")
        || t.contains("memory allocation of")
        || t.contains("RUST_BACKTRACE")
        || t.contains("internal error");
    match o.status.code() {
        Some(0) if !bad => Ok(true),
        Some(1) if !bad && String::from_utf8_lossy(&o.stderr).contains("error: ") => Ok(false),
        Some(2) if !bad && t.contains("invalid value") => Ok(false),
        _ => Err(format!("{what}: {:?}\n{t}", o.status)),
    }
}

/// Asserts a refusal (exit 1 or 2) whose message contains every one of `says`.
fn refused(o: &Output, says: &[&str]) {
    let t = text(o);
    assert!(
        matches!(o.status.code(), Some(1 | 2)) && says.iter().all(|s| t.contains(s)),
        "expected a refusal saying {says:?}, got {:?}:\n{t}",
        o.status
    );
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A trained LeNet checkpoint (1 of 3 epochs, synthetic 3×32×32 data): its path.
fn trained(dir: &Path) -> PathBuf {
    let out = dir.join("base");
    let o = octet(&[
        "train",
        "--data",
        "synthetic:64:16",
        "--epochs",
        "3",
        "--stop-after",
        "1",
        "--batch-size",
        "32",
        "--out",
        s(&out),
        "--json",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    out.join("last.safetensors")
}

/// Defect 1: a model whose (exact, valid) arena is 4.2 GB: `run` on 2 threads would need
/// 2 × 8 images × 4.2 GB and aborted allocating it; now a clear error. `inspect` shows it.
#[test]
fn a_huge_arena_is_an_error_not_an_abort() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = common::Builder::new(1, 32, 32, 3);
    // 1×1 conv to 65,535 channels padded by 111: a 65535×254×254 output, 4.23 GB.
    let x = b.conv(0, 65535, 1, 1, 111, true);
    let x = b.max_pool(x, 254, 1);
    b.fc(x, 10, false);
    let f = dir.path().join("huge.o8");
    std::fs::write(&f, b.encode()).unwrap();
    let o = octet(&["inspect", s(&f)]);
    assert!(o.status.success(), "{}", text(&o));
    let o = octet(&[
        "run",
        s(&f),
        "--data",
        "bundled",
        "--images",
        "64",
        "--threads",
        "2",
    ]);
    clean(&o, "run huge").unwrap();
    refused(&o, &["bytes of arena", "--threads 1"]);
    // The header's arena field alone cannot ask for memory: 0xFFFFFFFF is refused by parse.
    let mut lenet = common::lenet(1).encode();
    lenet[20..24].copy_from_slice(&u32::MAX.to_le_bytes());
    common::fix_crc(&mut lenet);
    std::fs::write(&f, &lenet).unwrap();
    refused(&octet(&["inspect", s(&f)]), &["arena_bytes"]);
    refused(
        &octet(&["run", s(&f), "--data", "bundled"]),
        &["arena_bytes"],
    );
}

/// How the command lines given crafted files ended: succeeded, refused cleanly, or not clean.
#[derive(Default)]
struct Tally {
    ok: usize,
    refusals: usize,
    failures: Vec<String>,
}

impl Tally {
    /// Counts `o` (see `clean`), `what` naming it in a failure.
    fn record(&mut self, o: &Output, what: &str) {
        match clean(o, what) {
            Ok(true) => self.ok += 1,
            Ok(false) => self.refusals += 1,
            Err(e) => self.failures.push(e),
        }
    }
}

/// The sample of crafted `.o8` files through `inspect` and `run` (2 threads, 20 images).
#[test]
fn crafted_o8_files_through_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let base = common::lenet(21).encode();
    let mut rng = common::Rng::new(190);
    let mut t = Tally::default();
    let n = 60;
    for i in 0..n {
        let (bytes, what) = mutate_o8::mutate(&base, &mut rng);
        let f = dir.path().join(format!("m{i}.o8"));
        std::fs::write(&f, &bytes).unwrap();
        for args in [
            vec!["inspect", s(&f)],
            vec![
                "run",
                s(&f),
                "--data",
                "bundled",
                "--images",
                "20",
                "--threads",
                "2",
            ],
        ] {
            t.record(&octet(&args), &format!("mutant {i} ({what}), {}", args[0]));
        }
    }
    eprintln!(
        "crafted .o8 through the CLI: {n} files, {} runs succeeded, {} refused",
        t.ok, t.refusals
    );
    assert!(t.failures.is_empty(), "{}", t.failures.join("\n\n"));
    assert!(t.ok > 0 && t.refusals > 0);
}

/// The sample of crafted checkpoints through `eval`, `inspect` and `train --resume`.
#[test]
fn crafted_checkpoints_through_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let good = std::fs::read(trained(dir.path())).unwrap();
    let mut rng = mutate_ckpt::Rng::new(191);
    let mut t = Tally::default();
    let n = 16;
    for i in 0..n {
        let (bytes, what) = mutate_ckpt::mutate(&good, &mut rng);
        let run = dir.path().join(format!("r{i}"));
        std::fs::create_dir_all(&run).unwrap();
        let f = run.join("last.safetensors");
        std::fs::write(&f, &bytes).unwrap();
        for args in [
            vec!["eval", s(&f), "--batch-size", "8"],
            vec!["inspect", s(&f)],
            vec![
                "train",
                "--resume",
                s(&f),
                "--stop-after",
                "1",
                "--data",
                "synthetic:64:16",
                "--json",
            ],
        ] {
            t.record(&octet(&args), &format!("mutant {i} ({what}), {}", args[0]));
        }
        // Whatever a resume wrote, the project's own reader accepts.
        if std::fs::read(&f).unwrap() != bytes {
            let o = octet(&["eval", s(&f), "--batch-size", "8"]);
            if !o.status.success() {
                t.failures.push(format!(
                    "mutant {i}: resume wrote a checkpoint eval refuses"
                ));
            }
        }
    }
    eprintln!(
        "crafted checkpoints through the CLI: {n} files, {} commands succeeded, {} refused",
        t.ok, t.refusals
    );
    assert!(t.failures.is_empty(), "{}", t.failures.join("\n\n"));
    assert!(t.refusals > 0);
}

/// Defects 2, 3, 6 and 7 (training): bad settings are refused before the first epoch; stale
/// temporaries of the run directory are removed; a finished or impossible resume says so.
#[test]
fn train_refuses_bad_settings_before_any_work() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let out = d.join("gamma");
    let tiny = [
        "--data",
        "synthetic:64:16",
        "--epochs",
        "2",
        "--batch-size",
        "32",
    ];
    let train = |extra: &[&str]| octet(&[&["train"][..], &tiny[..], extra].concat());
    for (gamma, every) in [("inf", "30"), ("nan", "1"), ("0", "1")] {
        let o = train(&[
            "--schedule",
            "step",
            "--gamma",
            gamma,
            "--step-every",
            every,
            "--out",
            s(&out),
        ]);
        refused(&o, &["--gamma"]);
        assert!(!out.exists(), "--gamma {gamma}: wrote {}", out.display());
    }
    refused(
        &train(&["--schedule", "step", "--step-every", "0", "--out", s(&out)]),
        &["--step-every", "at least 1"],
    );
    refused(
        &train(&["--stop-after", "0", "--out", s(&out)]),
        &["--stop-after"],
    );
    // --out naming a file: refused at once (it failed after a whole epoch).
    let file = d.join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let o = train(&["--out", s(&file)]);
    refused(&o, &["--out", "a-file", "directory"]);
    assert!(!text(&o).contains("epoch "), "{}", text(&o));

    // A stale temporary of an interrupted checkpoint write is removed, nothing else.
    let run = d.join("run");
    std::fs::create_dir_all(&run).unwrap();
    let stale = run.join("last.safetensors.999999999.tmp");
    let other = run.join("notes.tmp");
    std::fs::write(&stale, b"half a checkpoint").unwrap();
    std::fs::write(&other, b"mine").unwrap();
    let o = train(&["--stop-after", "1", "--out", s(&run), "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(!stale.exists() && other.exists(), "{}", text(&o));
    assert!(text(&o).contains("last.safetensors.999999999.tmp"));

    // Resuming a finished run, or one past its --epochs, has nothing to do: an error.
    let ck = run.join("last.safetensors");
    let o = octet(&["train", "--resume", s(&ck), "--epochs", "1"]);
    refused(&o, &["nothing to train", "--epochs"]);
    let bytes = mutate_ckpt::edit_meta(&std::fs::read(&ck).unwrap(), |m| {
        m["epoch"] = 1_000_000.into();
    });
    let far = d.join("far.safetensors");
    std::fs::write(&far, bytes).unwrap();
    let o = octet(&["train", "--resume", s(&far), "--epochs", "9"]);
    refused(&o, &["nothing to train", "1000000"]);
}

/// Defects 4, 5 and 7 (checkpoints): NaN weights, unusable normalisation and a model name
/// that disagrees with the tensors are refused by eval, export and --resume alike.
#[test]
fn eval_export_and_resume_refuse_bad_checkpoints() {
    let dir = tempfile::tempdir().unwrap();
    let good = std::fs::read(trained(dir.path())).unwrap();
    let write = |name: &str, bytes: &[u8]| {
        let p = dir.path().join(name);
        std::fs::write(&p, bytes).unwrap();
        p
    };
    let nan = write(
        "nan.safetensors",
        &mutate_ckpt::set_f32(&good, "conv1.weight", 0, f32::NAN),
    );
    let zero_std = write(
        "std0.safetensors",
        &mutate_ckpt::edit_meta(&good, |m| {
            m["normalization"]["std"] = serde_json::json!([0.0, 0.2, 0.2])
        }),
    );
    let empty = write(
        "empty.safetensors",
        &mutate_ckpt::edit_meta(&good, |m| {
            m["normalization"] = serde_json::json!({"mean": [], "std": []})
        }),
    );
    let other = write(
        "other.safetensors",
        &mutate_ckpt::edit_meta(&good, |m| m["model"] = "resnet18".into()),
    );
    for (f, says) in [
        (&nan, &["conv1.weight", "NaN"][..]),
        (&zero_std, &["normalisation std 0"][..]),
        (&empty, &["normalisation has 0 mean(s)"][..]),
        (&other, &["resnet18", "lenet"][..]),
    ] {
        refused(&octet(&["eval", s(f)]), says);
        refused(
            &octet(&[
                "export",
                s(f),
                "--out",
                s(&dir.path().join("x.o8")),
                "--no-plots",
            ]),
            says,
        );
        let o = octet(&[
            "train",
            "--resume",
            s(f),
            "--out",
            s(&dir.path().join("resumed")),
            "--json",
        ]);
        refused(&o, says);
        assert!(!text(&o).contains("\"event\":\"epoch\""), "{}", text(&o));
    }
    refused(
        &octet(&[
            "eval",
            s(&dir.path().join("base/last.safetensors")),
            "--batch-size",
            "0",
        ]),
        &["--batch-size", "at least 1"],
    );
    refused(
        &octet(&[
            "export",
            s(&dir.path().join("base/last.safetensors")),
            "--calibration-images",
            "0",
        ]),
        &["--calibration-images", "at least 1"],
    );
}

/// Defect 7: `run --threads 0` printed "0 thread(s)"; OS and gzip errors printed their text
/// twice; a 5-byte .o8 was "not a readable safetensors file"; gzip trailing garbage was
/// accepted.
#[test]
fn small_argument_and_message_defects() {
    let dir = tempfile::tempdir().unwrap();
    let o8 = dir.path().join("l.o8");
    std::fs::write(&o8, common::lenet(1).encode()).unwrap();
    refused(
        &octet(&["run", s(&o8), "--data", "bundled", "--threads", "0"]),
        &["--threads", "at least 1"],
    );
    let o = octet(&["eval", "/nonexistent/x.safetensors"]);
    refused(&o, &["/nonexistent/x.safetensors", "(os error 2)"]);
    assert_eq!(text(&o).matches("os error 2").count(), 1, "{}", text(&o));

    let short = dir.path().join("short.o8");
    std::fs::write(&short, b"OCTET").unwrap();
    refused(
        &octet(&["inspect", s(&short)]),
        &["truncated", "needs 80 bytes, has 5"],
    );

    // A Fashion-MNIST directory with a corrupt, then a garbage-tailed, gzip file.
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/fashion-mnist-subset");
    let fm = dir.path().join("fm");
    std::fs::create_dir_all(&fm).unwrap();
    for f in [
        "train-images-idx3-ubyte.gz",
        "train-labels-idx1-ubyte.gz",
        "t10k-images-idx3-ubyte.gz",
        "t10k-labels-idx1-ubyte.gz",
    ] {
        std::fs::copy(src.join(f), fm.join(f)).unwrap();
    }
    let spec = format!("fashion-mnist:{}", fm.display());
    let labels = fm.join("t10k-labels-idx1-ubyte.gz");
    let mut bytes = std::fs::read(&labels).unwrap();
    let good = bytes.clone();
    bytes.extend_from_slice(b"trailing garbage");
    std::fs::write(&labels, &bytes).unwrap();
    refused(
        &octet(&["run", s(&o8), "--data", &spec]),
        &["t10k-labels-idx1-ubyte.gz", "trailing data"],
    );
    let mid = good.len() / 2;
    let mut bad = good.clone();
    for b in &mut bad[mid..mid + 8] {
        *b ^= 0x5a;
    }
    std::fs::write(&labels, &bad).unwrap();
    let o = octet(&["run", s(&o8), "--data", &spec]);
    refused(&o, &["t10k-labels-idx1-ubyte.gz"]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    let message = stderr.trim().rsplit(": ").next().unwrap_or_default();
    assert_eq!(
        stderr.matches(message).count(),
        1,
        "printed twice: {stderr}"
    );
}

/// `octet pack` writes a model's packed image and `inspect` reads it back (the model's CRC,
/// which `inspect` of the model shows too); a truncated, damaged or foreign image is refused
/// with what was wrong, and `pack` never writes over its model.
#[test]
fn packed_images_through_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("m.o8");
    std::fs::write(&model, common::lenet(1).encode()).unwrap();
    let o = octet(&["pack", s(&model)]);
    assert!(o.status.success(), "{}", text(&o));
    let image = dir.path().join("m.o8pk");
    let bytes = std::fs::read(&image).unwrap();
    let o = octet(&["inspect", s(&model)]);
    let crc = text(&o)
        .split("CRC-32 ")
        .nth(1)
        .and_then(|t| t.get(..10))
        .map(str::to_owned)
        .unwrap_or_else(|| panic!("no CRC in {}", text(&o)));
    let o = octet(&["inspect", s(&image)]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains(&crc) && text(&o).contains("cortex-m-dsp"),
        "{}",
        text(&o)
    );
    let bad = dir.path().join("bad.o8pk");
    std::fs::write(&bad, &bytes[..bytes.len() - 1]).unwrap();
    refused(&octet(&["inspect", s(&bad)]), &["truncated", "octet pack"]);
    let mut damaged = bytes.clone();
    *damaged.last_mut().unwrap() ^= 1;
    std::fs::write(&bad, &damaged).unwrap();
    refused(&octet(&["inspect", s(&bad)]), &["CRC"]);
    let o = octet(&["pack", s(&model), "-o", s(&model)]);
    refused(&o, &["is the model itself"]);
    assert_eq!(std::fs::read(&model).unwrap(), common::lenet(1).encode());
}
