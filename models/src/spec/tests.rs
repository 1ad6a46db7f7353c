use super::*;
use crate::ModelKind;

const TINY: &str = r#"
# conv → BN → ReLU, a residual add, global pooling, classifier
[[layer]]
name = "stem"
op = "conv"
out = 8
kernel = 3
padding = 1
bias = false

[[layer]]
name = "stem_bn"
op = "batch_norm"

[[layer]]
name = "stem_relu"
op = "relu"

[[layer]]
name = "conv"
op = "conv"
out = 8
kernel = 3
padding = 1

[[layer]]
name = "sum"
op = "add"
with = "stem_relu"

[[layer]]
name = "pool"
op = "global_avg_pool"

[[layer]]
name = "flat"
op = "flatten"

[[layer]]
name = "head"
op = "linear"
"#;

#[test]
fn every_builtin_network_resolves() {
    for &kind in ModelKind::all() {
        for c in [1, 3] {
            let r = kind.spec().resolve((c, 32, 32), 10).unwrap();
            assert_eq!(*r.shapes.last().unwrap(), Dims::Flat(10), "{kind}");
        }
    }
}

#[test]
fn toml_description_reads_and_resolves() {
    let spec = from_toml(TINY).unwrap();
    assert_eq!(spec.layers.len(), 8);
    assert_eq!(spec.layers[0].line, Some(3));
    let r = spec.resolve((1, 28, 28), 4).unwrap();
    assert_eq!(r.shapes[4], Dims::Map { c: 8, h: 28, w: 28 });
    assert_eq!(r.sources[4], [Source::Layer(3), Source::Layer(2)]);
    assert_eq!(r.shapes[7], Dims::Flat(4));
    assert_eq!(spec.stem(), Some("stem"));
    assert_eq!(spec.classifier(), Some("head"));
}

#[test]
fn json_round_trips_every_builtin_network() {
    for &kind in ModelKind::all() {
        let spec = kind.spec();
        let json = serde_json::to_string_pretty(&spec).unwrap();
        assert_eq!(from_json(&json).unwrap(), spec, "{kind}");
    }
}

/// `text` with `from` replaced by `to` fails, naming `line` and containing `needle`.
fn fails(from: &str, to: &str, line: usize, needle: &str) {
    assert!(TINY.contains(from), "{from}");
    let text = TINY.replacen(from, to, 1);
    let err = from_toml(&text)
        .and_then(|s| s.resolve((1, 28, 28), 4).map(|_| ()))
        .unwrap_err();
    assert_eq!(err.line, Some(line), "{err}");
    let msg = err.to_string();
    assert!(msg.contains(needle), "{msg}");
}

#[test]
fn bad_descriptions_name_the_line_and_layer() {
    // Errors point at the layer's `[[layer]]` line.
    fails("op = \"relu\"", "op = \"gelu\"", 15, "gelu");
    fails("op = \"relu\"", "op = \"dropout\"\np = 1.5", 15, "[0, 1)");
    fails("op = \"relu\"", "op = \"dropout\"", 15, "missing field `p`");
    fails(
        "kernel = 3\npadding = 1\nbias",
        "kernal = 3\npadding = 1\nbias",
        3,
        "kernal",
    );
    fails(
        "with = \"stem_relu\"",
        "with = \"pool\"",
        26,
        "'sum': reads 'pool'",
    );
    fails(
        "with = \"stem_relu\"",
        "with = \"input\"",
        26,
        "shapes differ",
    );
    fails("op = \"flatten\"", "op = \"relu\"", 39, "flat input");
    let big_kernel = "out = 8\nkernel = 31\npadding = 1\n\n";
    fails(
        "out = 8\nkernel = 3\npadding = 1\n\n",
        big_kernel,
        19,
        "window",
    );
    fails(
        "name = \"sum\"",
        "name = \"conv\"",
        26,
        "has this name already",
    );
}

#[test]
fn the_output_must_be_the_classes() {
    let mut spec = from_toml(TINY).unwrap();
    spec.layers[7].layer = Layer::Linear { out: Some(5) };
    let err = spec.resolve((1, 28, 28), 4).unwrap_err().to_string();
    assert!(
        err.contains("'head'") && err.contains("one value per class"),
        "{err}"
    );
    assert!(NetSpec::new(vec![]).resolve((1, 2, 2), 2).is_err());
}
