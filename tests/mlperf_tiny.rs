//! The MLPerf Tiny reference models (tests/data/mlperf_tiny) through the command line and
//! against stock TensorFlow Lite Micro (pip `tflite-micro`), byte for byte: `octet import`,
//! `octet inspect` and `octet run --inputs` on each `.tflite`, then `bench/tflite_check.py` runs
//! the same seeded random inputs through TFLite Micro and octet (which imports the `.tflite`
//! itself): 0 differing output bytes. Then the runtime's threads on each model.
//!
//! Without the Python package the comparison prints a SKIP line and passes, unless
//! OCTET_REQUIRE_TFLITE=1 (CI sets it): then it fails.

mod octet_cmd;

use std::path::{Path, PathBuf};
use std::process::Command;

use octet_cmd::{octet, octet_json, octet_ok, text};

/// Seeded random inputs per model compared with TFLite Micro.
const INPUTS: usize = 200;
/// `bench/tflite_check.py`'s exit status when a package is missing.
const MISSING_PACKAGE: i32 = 3;
/// (file, TFLite ops, `.o8` ops).
const MODELS: [(&str, usize, usize); 4] = [
    ("pretrainedResnet_quant.tflite", 16, 15),
    ("kws_ref_model.tflite", 13, 12),
    ("ad01_int8.tflite", 10, 10),
    ("vww_96_int8.tflite", 31, 30),
];

/// `octet inspect … --json` (pretty-printed over several lines).
fn inspect(path: &Path) -> serde_json::Value {
    let o = octet_ok(&["inspect", path.to_str().unwrap(), "--json"]);
    serde_json::from_slice(&o.stdout).unwrap()
}

fn model(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/mlperf_tiny")
        .join(name)
}

/// `import` writes an `.o8` that `inspect` and `run --inputs` take, as they take the `.tflite`
/// itself; a wrong input length is an error naming the input size.
#[test]
fn import_inspect_and_run_each_model() {
    let dir = tempfile::tempdir().unwrap();
    for (name, tflite_ops, o8_ops) in MODELS {
        let src = model(name);
        let o8 = dir.path().join(name).with_extension("o8");
        let j = octet_json(&[
            "import",
            src.to_str().unwrap(),
            "-o",
            o8.to_str().unwrap(),
            "--json",
        ]);
        assert_eq!(j["ops"].as_array().unwrap().len(), tflite_ops, "{name}");
        assert_eq!(j["rounding"], "double");
        assert!(j["arena_bytes"]["cortex-m-dsp"].as_u64().unwrap() > 0);
        let i = inspect(&o8);
        assert_eq!(i["ops"].as_array().unwrap().len(), o8_ops, "{name}");
        assert_eq!(i["input_encoding"], "i8-hwc");
        let it = inspect(&src);
        assert_eq!(it["arena_bytes"], i["arena_bytes"], "{name}");
        assert_eq!(
            it["imported_from_tflite"].as_array().unwrap().len(),
            tflite_ops
        );

        // Two inputs of the model's int8 input, through the .o8 and the .tflite.
        let n_in = {
            let s = i["input"].as_array().unwrap();
            s.iter()
                .map(|v| v.as_u64().unwrap() as usize)
                .product::<usize>()
        };
        let inputs = dir.path().join("inputs.bin");
        std::fs::write(&inputs, octet_testkit::Rng::new(3).bytes(2 * n_in)).unwrap();
        let outs: Vec<Vec<u8>> = [&o8, &src]
            .iter()
            .map(|m| {
                let logits = dir.path().join("logits.bin");
                let r = octet_json(&[
                    "run",
                    m.to_str().unwrap(),
                    "--inputs",
                    inputs.to_str().unwrap(),
                    "--logits",
                    logits.to_str().unwrap(),
                    "--json",
                ]);
                assert_eq!(r["inputs"], 2);
                std::fs::read(&logits).unwrap()
            })
            .collect();
        assert_eq!(outs[0], outs[1], "{name}");
        assert_eq!(outs[0].len(), 2 * i["outputs"].as_u64().unwrap() as usize);

        std::fs::write(&inputs, vec![0u8; n_in + 1]).unwrap();
        let o = octet(&[
            "run",
            o8.to_str().unwrap(),
            "--inputs",
            inputs.to_str().unwrap(),
        ]);
        assert_eq!(o.status.code(), Some(1), "{}", text(&o));
        assert!(
            text(&o).contains(&format!("{n_in}-byte inputs")),
            "{}",
            text(&o)
        );
    }
}

/// Stock TensorFlow Lite Micro and octet on the same seeded random inputs: 0 differing bytes.
#[test]
fn every_model_matches_tflite_micro() {
    let required = std::env::var("OCTET_REQUIRE_TFLITE").is_ok_and(|v| v == "1");
    for (name, ..) in MODELS {
        let out = Command::new("python3")
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/tflite_check.py"))
            .arg(model(name))
            .args(["--octet", env!("CARGO_BIN_EXE_octet")])
            .args(["--random", &INPUTS.to_string(), "--seed", "1"])
            .args(["--interpreters", "tflm", "--jobs", "2"])
            .output();
        let out = match out {
            Ok(o) => o,
            Err(e) if !required => {
                println!("SKIP mlperf_tiny: cannot start python3 ({e})");
                return;
            }
            Err(e) => panic!("python3 cannot start ({e}) and OCTET_REQUIRE_TFLITE=1"),
        };
        let stderr = String::from_utf8_lossy(&out.stderr);
        if out.status.code() == Some(MISSING_PACKAGE) {
            assert!(!required, "OCTET_REQUIRE_TFLITE=1 but {stderr}");
            println!("mlperf_tiny: {}", stderr.trim());
            return;
        }
        let r: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{name}: no JSON ({e}): {stderr}"));
        let tflm = &r["interpreters"]["tflm"];
        assert_eq!(tflm["images"], INPUTS, "{name}");
        assert_eq!(
            tflm["differing_bytes"], 0,
            "{name}: octet differs from TFLite Micro: {tflm}"
        );
        // The outputs are not a constant (a degenerate model would compare equal trivially).
        assert!(
            r["distinct_octet_outputs"].as_u64().unwrap() > 2,
            "{name}: {r}"
        );
        eprintln!("{name}: {stderr}");
    }
}

/// Each model prepared with every kernel set's packed weights (as `octet run` prepares it) and
/// run with each input split between 2 and 3 threads (every op in parts: the band and channel
/// splits of convs, packed or not, and of depthwise convs) gives the scalar reference's bytes.
#[test]
fn threads_sharing_an_input_give_the_same_bytes() {
    use octet_export::tflite::import::{import, ImportOptions};
    use octet_runtime::parallel::{arena_bytes_split, run_split_with};
    use octet_runtime::{Kernels, Model, PreparedOp};
    for (name, ..) in MODELS {
        let tflite = std::fs::read(model(name)).unwrap();
        let bytes = import(&tflite, &ImportOptions::default()).unwrap().bytes;
        let m = Model::parse(&bytes).unwrap();
        let inputs = octet_testkit::Rng::new(7).bytes(2 * m.input_len());
        let mut a = vec![0u8; m.arena_bytes_for(Kernels::Scalar, 2)];
        let want = m
            .run_with(Kernels::Scalar, &inputs, &mut a)
            .unwrap()
            .to_vec();
        for k in Kernels::available() {
            let mut table = vec![PreparedOp::EMPTY; m.num_ops()];
            let mut packed = vec![0u8; m.packed_bytes(k).unwrap()];
            let p = m.prepare_packed(&mut table, &mut packed, k).unwrap();
            for threads in [2, 3] {
                let mut a = vec![0u8; arena_bytes_split(&p, k, 2, threads)];
                let got = run_split_with(&p, k, &inputs, &mut a, threads).unwrap();
                assert_eq!(got, &want[..], "{name}, {k:?}, {threads} threads");
            }
        }
    }
}

/// Each model prepared with every kernel set's packed weights and run on a batch in groups of
/// images, on 1 and 2 threads (37 inputs: groups full and partial, the AMX set's groups of 32
/// for anomaly detection's fully connected layers on tiles, and the rest on VNNI), gives the
/// scalar reference's bytes.
#[test]
fn batches_in_groups_give_the_same_bytes() {
    use octet_export::tflite::import::{import, ImportOptions};
    use octet_runtime::parallel::{arena_bytes_parallel, run_parallel_with};
    use octet_runtime::{Kernels, Model, PreparedOp};
    const BATCH: usize = 37;
    for (name, ..) in MODELS {
        let tflite = std::fs::read(model(name)).unwrap();
        let bytes = import(&tflite, &ImportOptions::default()).unwrap().bytes;
        let m = Model::parse(&bytes).unwrap();
        let inputs = octet_testkit::Rng::new(11).bytes(BATCH * m.input_len());
        let mut a = vec![0u8; m.arena_bytes_for(Kernels::Scalar, BATCH)];
        let want = m
            .run_with(Kernels::Scalar, &inputs, &mut a)
            .unwrap()
            .to_vec();
        for k in Kernels::available().filter(|&k| k != Kernels::Scalar) {
            let mut table = vec![PreparedOp::EMPTY; m.num_ops()];
            let mut packed = vec![0u8; m.packed_bytes(k).unwrap()];
            let p = m.prepare_packed(&mut table, &mut packed, k).unwrap();
            for threads in [1, 2] {
                let mut a = vec![0u8; arena_bytes_parallel(&p, k, BATCH, threads)];
                let got = run_parallel_with(&p, k, &inputs, &mut a, threads).unwrap();
                let group = p.group_images(k);
                assert_eq!(
                    got,
                    &want[..],
                    "{name}, {k:?}, {threads} threads, groups of {group}"
                );
                if k == Kernels::Amx && name.starts_with("ad01") {
                    // The fully connected layers on tiles: an image a row.
                    assert_eq!(group, octet_runtime::kernels::AMX_GROUP_IMAGES);
                }
            }
        }
    }
}

/// An op outside the set is refused with its name and index; a file that is not a flatbuffer
/// with what it is not; nothing is written.
#[test]
fn unsupported_and_hostile_files_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("x.o8");
    let bad = dir.path().join("bad.tflite");
    let mut bytes = std::fs::read(model("kws_ref_model.tflite")).unwrap();
    bytes.truncate(4000);
    std::fs::write(&bad, &bytes).unwrap();
    let o = octet(&["import", bad.to_str().unwrap(), "-o", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o).contains("not a valid .tflite"), "{}", text(&o));
    assert!(!out.exists());
    // octet's own .o8 is not a .tflite either.
    let o8 = dir.path().join("m.o8");
    octet_ok(&[
        "import",
        model("ad01_int8.tflite").to_str().unwrap(),
        "-o",
        o8.to_str().unwrap(),
    ]);
    let o = octet(&["import", o8.to_str().unwrap(), "-o", out.to_str().unwrap()]);
    assert!(text(&o).contains("TFL3"), "{}", text(&o));
}
