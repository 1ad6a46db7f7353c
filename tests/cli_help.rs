//! The command line as a newcomer meets it: `--help` lists the choices with their defaults; a
//! bad value or flag is a usage error (exit code 2) naming what is accepted, with "did you
//! mean" for a near miss; good values still parse.

mod octet_cmd;

use octet_cmd::{octet, text};

/// `args` is refused by clap (exit code 2) with every one of `says` in the message, before
/// any work (no file is read: the checkpoint paths given do not exist).
fn usage_error(args: &[&str], says: &[&str]) {
    let o = octet(args);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(2), "{args:?}:\n{t}");
    for s in says {
        assert!(t.contains(s), "{args:?}: no {s:?} in:\n{t}");
    }
}

/// Each flag with a fixed set of values, a bad value for it and (part of) the list it prints.
const CHOICES: &[(&[&str], &str, &str)] = &[
    (&["train"], "--model", "lenet, resnet18"),
    (&["train"], "--schedule", "constant, step, cosine, onecycle"),
    (&["train"], "--bn", "local, broadcast, sync"),
    (&["train"], "--lr-scaling", "none, linear"),
    (&["train"], "--precision", "f32, bf16"),
    (&["train"], "--device", "cpu, cuda, gpu"),
    (
        &["train"],
        "--data",
        "auto, bundled, fashion-mnist, cifar10, synthetic",
    ),
    (&["eval", "x.safetensors"], "--model", "lenet, resnet18"),
    (&["eval", "x.safetensors"], "--device", "cpu, cuda, gpu"),
    (
        &["export", "x.safetensors"],
        "--calibration",
        "minmax, percentile, mse, entropy, best",
    ),
    (
        &["export", "x.safetensors"],
        "--weights",
        "per-channel, per-tensor",
    ),
    (&["export", "x.safetensors"], "--model", "lenet, resnet18"),
    (
        &["run", "x.o8"],
        "--kernels",
        "scalar, avx2, avx-vnni, avx512-vnni",
    ),
    (&["run", "x.o8"], "--data", "auto, bundled"),
    (&["demo"], "--device", "cpu, cuda, gpu"),
    (&["bench", "train"], "--models", "lenet, resnet18"),
    (&["bench", "train"], "--precision", "f32, bf16"),
    (&["bench", "infer"], "--models", "lenet, resnet18"),
    (&["bench", "infer"], "--device", "cuda, none"),
    (&["bench", "scaling"], "--model", "lenet, resnet18"),
];

#[test]
fn a_bad_choice_exits_2_and_lists_the_values() {
    for (cmd, flag, values) in CHOICES {
        let args = [cmd, &[*flag, "zzz"][..]].concat();
        usage_error(
            &args,
            &[
                &format!("invalid value 'zzz' for '{flag}"),
                &format!("[possible values: {values}"),
            ],
        );
    }
}

#[test]
fn a_near_miss_gets_did_you_mean() {
    let similar = "a similar value exists";
    usage_error(&["train", "--model", "lent"], &[similar, "'lenet'"]);
    usage_error(&["train", "--schedule", "cosin"], &[similar, "'cosine'"]);
    usage_error(&["train", "--data", "bundld"], &[similar, "'bundled'"]);
    usage_error(&["train", "--device", "cudda"], &[similar, "'cuda'"]);
    usage_error(
        &["export", "x", "--calibration", "entropi"],
        &[similar, "'entropy'"],
    );
    usage_error(
        &["run", "x.o8", "--kernels", "avx512vnni"],
        &[similar, "'avx512-vnni'"],
    );
    usage_error(
        &["train", "--schedul", "cosine"],
        &["a similar argument exists", "'--schedule'"],
    );
    usage_error(&["trian"], &["a similar subcommand exists", "'train'"]);
}

/// Values with a parameter: a bad parameter names the accepted forms; numbers out of range
/// are usage errors too, before any work.
#[test]
fn bad_parameters_and_numbers_are_usage_errors() {
    usage_error(&["train", "--device", "cuda:x"], &["cpu, cuda or cuda:N"]);
    usage_error(&["train", "--data", "synthetic:x"], &["synthetic:N:M"]);
    usage_error(
        &["export", "x", "--calibration", "percentile:30"],
        &["50 < P ≤ 100"],
    );
    for (flag, value) in [
        ("--lr", "0"),
        ("--lr", "nan"),
        ("--momentum", "1"),
        ("--weight-decay", "-1e-4"),
        ("--warmup-epochs", "inf"),
        ("--gamma", "0"),
        ("--bucket-mb", "0"),
        ("--epochs", "0"),
        ("--batch-size", "0"),
        ("--eval-batch-size", "0"),
        ("--accumulate", "0"),
        ("--base-batch", "0"),
    ] {
        // `--flag=VALUE`: clap would take a negative number for a flag.
        usage_error(
            &["train", &format!("{flag}={value}")],
            &[&format!("invalid value '{value}' for '{flag}")],
        );
    }
    usage_error(
        &["launch", "--gpus", "2", "--grace=-1", "--", "x"],
        &["--grace"],
    );
}

/// Good values in the forms and cases the old string parsers took still parse: `--help` of
/// the same command line succeeds (clap checks every value before it prints the help).
#[test]
fn good_values_still_parse() {
    for args in [
        &[
            "train",
            "--model",
            "ResNet-18",
            "--bn",
            "SYNC",
            "--precision",
            "BF16",
        ][..],
        &[
            "train",
            "--lr-scaling",
            "Linear",
            "--schedule",
            "one-cycle",
            "--device",
            "cuda:1",
        ],
        &[
            "train",
            "--data",
            "fashion-mnist:/tmp/x",
            "--device",
            "gpu",
            "--precision",
            "fp32",
        ],
        &[
            "export",
            "x",
            "--calibration",
            "percentile:99.9",
            "--weights",
            "per-tensor",
        ],
        &[
            "run",
            "x.o8",
            "--kernels",
            "scalar",
            "--data",
            "synthetic:8:8:3",
        ],
        &[
            "bench",
            "train",
            "--models",
            "lenet,resnet18",
            "--precision",
            "f32,bf16",
        ],
        &["bench", "infer", "--device", "none", "--models", "lenet"],
    ] {
        let o = octet(&[args, &["--help"][..]].concat());
        assert!(o.status.success(), "{args:?}:\n{}", text(&o));
    }
}

/// `--help` shows the defaults and the values with their help.
#[test]
fn help_lists_values_and_defaults() {
    let o = octet(&["train", "-h"]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    for s in [
        "Peak learning rate [default: 0.1]",
        "Images per optimiser step [default: 128]",
        "[default: 0.9]",
        "[default: 15; 10 for resnet18]",
        "[default: cosine] [possible values: constant, step, cosine, onecycle]",
    ] {
        assert!(t.contains(s), "no {s:?} in:\n{t}");
    }
    let t = text(&octet(&["train", "--help"]));
    for s in [
        "Peak learning rate\n          \n          [default: 0.1]",
        "- resnet18:",
        "- sync:",
        "- bf16:",
        "- onecycle:",
    ] {
        assert!(t.contains(s), "no {s:?} in:\n{t}");
    }
    let o = octet(&["export", "--help"]);
    let t = text(&o);
    for s in [
        "[default: percentile]",
        "[default: per-channel]",
        "- per-tensor:",
    ] {
        assert!(t.contains(s), "no {s:?} in:\n{t}");
    }
    let t = text(&octet(&["run", "--help"]));
    assert!(
        t.contains("[default: auto]") && t.contains("- avx2:"),
        "{t}"
    );
}
