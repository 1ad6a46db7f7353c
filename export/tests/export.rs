//! End-to-end tests of the exporter on random-weight LeNet and ResNet-18 (nothing is trained).

mod common;

use std::collections::HashMap;

use candle_core::{DType, Device, Tensor};
use common::*;
use octet_export::*;
use octet_models::{ModelError, ModelKind};

fn input<'a>(
    kind: ModelKind,
    tensors: &'a HashMap<String, Tensor>,
    mean: &'a [f32],
    std: &'a [f32],
    classes: usize,
) -> Input<'a> {
    // Tests build a handful of inputs: leaking each model keeps the helper's signature small.
    let model: &'static octet_models::Model = Box::leak(Box::new(kind.into()));
    Input {
        model,
        tensors,
        mean,
        std,
        channels: mean.len(),
        height: 32,
        width: 32,
        classes,
    }
}

/// Normalised f32 images, as the trainer feeds the candle model.
fn normalised(pixels: &[u8], n: usize, mean: &[f32], std: &[f32]) -> Tensor {
    let c = mean.len();
    let hw = 32 * 32;
    let v: Vec<f32> = pixels
        .iter()
        .enumerate()
        .map(|(i, &p)| {
            let ch = (i / hw) % c;
            (p as f32 / 255.0 - mean[ch]) / std[ch]
        })
        .collect();
    Tensor::from_vec(v, (n, c, 32, 32), &Device::Cpu).unwrap()
}

fn check_folded_matches_model(kind: ModelKind, mean: &[f32], std: &[f32], n: usize) {
    let (net, tensors) = random_model(kind, mean.len(), 10, 7);
    let inp = input(kind, &tensors, mean, std, 10);
    let graph = lower(&inp).unwrap();
    let pixels = random_pixels(n, inp.image_len(), 11);
    let want = net
        .forward(&normalised(&pixels, n, mean, std), false)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1::<f32>()
        .unwrap();
    let got = Executor::new(&graph, &FakeQuant::default())
        .unwrap()
        .run_all(&pixels, 3, &mut |_, _| Ok(()))
        .unwrap();
    assert_eq!(got.len(), want.len());
    let peak = want.iter().fold(0f32, |m, x| m.max(x.abs()));
    let err = got
        .iter()
        .zip(&want)
        .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    assert!(err <= 1e-4 * peak, "{kind}: max error {err} vs peak {peak}");
}

#[test]
fn folded_lenet_matches_the_candle_model() {
    check_folded_matches_model(ModelKind::LENET, &FASHION_MEAN, &FASHION_STD, 8);
    check_folded_matches_model(ModelKind::LENET, &CIFAR_MEAN, &CIFAR_STD, 8);
}

#[test]
fn folded_resnet18_matches_the_candle_model() {
    check_folded_matches_model(ModelKind::RESNET18, &CIFAR_MEAN, &CIFAR_STD, 4);
}

/// A checkpoint as PyTorch's `save_file(model.state_dict())` writes it, plus octet's extras.
fn pytorch_checkpoint(
    kind: ModelKind,
    cin: usize,
    dir: &std::path::Path,
) -> HashMap<String, Tensor> {
    let (_, tensors) = random_model(kind, cin, 10, 3);
    let mut all: Vec<(String, Tensor)> = tensors.into_iter().collect();
    let bns: Vec<String> = all
        .iter()
        .filter_map(|(n, _)| n.strip_suffix(".running_mean").map(str::to_string))
        .collect();
    for bn in bns {
        all.push((
            format!("{bn}.num_batches_tracked"),
            Tensor::new(391i64, &Device::Cpu).unwrap(),
        ));
    }
    let stem = format!("{}.weight", kind.spec().stem().unwrap());
    let w = all.iter().find(|(n, _)| *n == stem).unwrap().1.clone();
    all.push((format!("optim.momentum.{stem}"), w.zeros_like().unwrap()));
    // Half precision on disk: the exporter converts.
    let all: Vec<(String, Tensor)> = all
        .into_iter()
        .map(|(n, t)| {
            let t = if t.dtype() == DType::F32 && n.ends_with("fc2.weight") {
                t.to_dtype(DType::BF16).unwrap()
            } else {
                t
            };
            (n, t)
        })
        .collect();
    let bytes = safetensors::serialize(all.iter().map(|(n, t)| (n.as_str(), t)), None).unwrap();
    let path = dir.join(format!("{kind}.safetensors"));
    std::fs::write(&path, bytes).unwrap();
    candle_core::safetensors::load(&path, &Device::Cpu).unwrap()
}

#[test]
fn pytorch_layout_checkpoints_export_to_valid_files() {
    let dir = tempfile::tempdir().unwrap();
    // Every built-in network, alternately on 1- and 3-channel images.
    for (i, &kind) in ModelKind::all().iter().enumerate() {
        let (mean, std) = match i % 2 {
            0 => (&FASHION_MEAN[..], &FASHION_STD[..]),
            _ => (&CIFAR_MEAN[..], &CIFAR_STD[..]),
        };
        let tensors = pytorch_checkpoint(kind, mean.len(), dir.path());
        assert!(
            tensors.keys().any(|k| k.ends_with("num_batches_tracked")) || kind == ModelKind::LENET
        );
        let inp = input(kind, &tensors, mean, std, 10);
        let pixels = random_pixels(8, inp.image_len(), 5);
        let opts = ExportOptions {
            calibration_images: 8,
            sqnr_images: 4,
            ..Default::default()
        };
        let ex = export(&inp, &pixels, &opts).unwrap();
        let p = check_o8(&ex.bytes);
        assert_eq!(p.input, (mean.len(), 32, 32));
        assert_eq!(p.arena_bytes, ex.plan.arena_bytes);
        // Without reuse the arena would hold every tensor side by side.
        let sum: usize = p.tensors.iter().map(|t| t.6).sum::<usize>();
        assert!(
            p.arena_bytes < sum,
            "{kind}: arena {} should reuse memory (sum {sum})",
            p.arena_bytes
        );
        match kind.name() {
            "lenet" => assert_eq!(p.kinds, [1, 3, 1, 3, 2, 2, 2]),
            "resnet18" => {
                // stem + 8 blocks × (2 convs + add) + 3 shortcuts + avgpool + linear
                assert_eq!(p.n_ops, 1 + 8 * 3 + 3 + 2);
                // The adds are TFLite's with the default (double) rounding.
                assert_eq!(p.kinds.iter().filter(|&&k| k == 11).count(), 8);
            }
            "resnet8" => {
                // stem + 3 blocks × (2 convs + add) + 2 shortcuts + global pool + linear
                assert_eq!(p.n_ops, 1 + 3 * 3 + 2 + 2);
                assert_eq!(p.kinds.iter().filter(|&&k| k == 11).count(), 3);
            }
            "mobilenet-v1" => {
                // stem + 13 × (depthwise + pointwise) + global pool + linear
                assert_eq!(p.n_ops, 1 + 13 * 2 + 2);
                assert_eq!(p.kinds.iter().filter(|&&k| k == 6).count(), 13);
            }
            "mobilenet-v2" => {
                // stem + block 1 (depthwise, projection) + 16 × (expansion, depthwise,
                // projection) + 11 residual adds (10 within stages; at width 0.35 the 8-channel
                // floor gives the second stage's first block the shape of its input too) + last
                // conv + global pool + linear
                assert_eq!(p.n_ops, 1 + 2 + 16 * 3 + 11 + 1 + 2);
                assert_eq!(p.kinds.iter().filter(|&&k| k == 6).count(), 17);
                assert_eq!(p.kinds.iter().filter(|&&k| k == 11).count(), 11);
            }
            "ds-cnn" => {
                assert_eq!(p.n_ops, 1 + 4 * 2 + 2);
                assert_eq!(p.kinds.iter().filter(|&&k| k == 6).count(), 4);
            }
            _ => {}
        }
        assert_eq!(ex.report.layers.len(), p.n_ops);
        check_records_and_multipliers(&ex);
        let md = ex.report.to_markdown();
        let stem = kind.spec().stem().unwrap().to_string();
        assert!(md.contains(&stem) && md.contains("SQNR"), "{md}");
        serde_json::to_string(&ex.report).unwrap();
    }
}

fn sqnr_db(reference: &[f32], test: &[f32]) -> f64 {
    let s: f64 = reference.iter().map(|&x| (x as f64).powi(2)).sum();
    let n: f64 = reference
        .iter()
        .zip(test)
        .map(|(&a, &b)| (a as f64 - b as f64).powi(2))
        .sum();
    10.0 * (s / n).log10()
}

#[test]
fn lenet_int8_tracks_float_on_fashion_mnist() {
    let (net_tensors, classes) = (random_model(ModelKind::LENET, 1, 10, 21).1, 10);
    let inp = input(
        ModelKind::LENET,
        &net_tensors,
        &FASHION_MEAN,
        &FASHION_STD,
        classes,
    );
    let (pixels, labels) = fashion_test(400);
    let (calib, test) = pixels.split_at(200 * 1024);
    let ex = export(&inp, calib, &ExportOptions::default()).unwrap();
    check_o8(&ex.bytes);
    for l in &ex.report.layers {
        assert!(
            l.sqnr_db > 15.0,
            "{}: {} dB\n{}",
            l.name,
            l.sqnr_db,
            ex.report.to_markdown()
        );
    }
    let n = test.len() / 1024;
    let float = Executor::new(&ex.graph, &FakeQuant::default())
        .unwrap()
        .run_all(test, 64, &mut |_, _| Ok(()))
        .unwrap();
    let q = run_int8(&ex.model, &ex.plan, test, n).unwrap();
    let out = ex.model.tensors[ex.model.output].qparams;
    let deq: Vec<f32> = q.iter().map(|&x| out.dequantize(x)).collect();
    let db = sqnr_db(&float, &deq);
    assert!(db > 20.0, "logit SQNR {db} dB");
    let agree = argmax_rows(&float, classes)
        .iter()
        .zip(argmax_rows(&q, classes))
        .filter(|(a, b)| **a == *b)
        .count();
    assert!(
        agree as f64 >= 0.85 * n as f64,
        "{agree}/{n} predictions agree"
    );

    // The integer interpreter and the fake-quantized float graph compute the same thing up to
    // rounding: logits within a few output steps.
    let sim = Executor::new(
        &ex.graph,
        &FakeQuant {
            weights: Some(ex.model.dequantized_weights(&ex.graph)),
            biases: Some(ex.model.dequantized_biases()),
            activations: Some(ex.model.qparams()),
        },
    )
    .unwrap()
    .run_all(test, 64, &mut |_, _| Ok(()))
    .unwrap();
    let far = sim
        .iter()
        .zip(&deq)
        .filter(|(a, b)| (*a - *b).abs() > 2.5 * out.scale)
        .count();
    assert!(
        far * 100 <= sim.len(),
        "{far} of {} logits differ by more than 2 steps",
        sim.len()
    );

    let ab = ablation(&ex, &[], test, &labels[200..], 64, &mut |_| {}).unwrap();
    assert_eq!(ab.rows.len(), 4);
    assert_eq!(ab.rows[0].agreement_with_float, 1.0);
    assert!(ab
        .rows
        .iter()
        .all(|r| r.total == n && (0.0..=1.0).contains(&r.accuracy)));
    assert!(
        ab.rows[3].agreement_with_float >= 0.85,
        "{}",
        ab.to_markdown()
    );
    eprintln!(
        "{}\n{}\nlogit SQNR {db:.1} dB",
        ex.report.to_markdown(),
        ab.to_markdown()
    );

    let dir = tempfile::tempdir().unwrap();
    let pngs = write_histograms(&ex, dir.path()).unwrap();
    // 5 weighted layers + 7 op outputs.
    assert_eq!(pngs.len(), 12, "{pngs:?}");
    for p in &pngs {
        let b = std::fs::read(p).unwrap();
        assert!(
            b.starts_with(b"\x89PNG\r\n\x1a\n") && b.len() > 5000,
            "{}",
            p.display()
        );
    }
    if let Ok(keep) = std::env::var("OCTET_KEEP_PLOTS") {
        for p in &pngs {
            std::fs::copy(p, std::path::Path::new(&keep).join(p.file_name().unwrap())).unwrap();
        }
    }
}

/// A random-weight ResNet-18 (CIFAR-10 shapes) exported after calibrating on `calib_images`
/// random images.
fn exported_resnet18(calib_images: usize, sqnr_images: usize) -> Exported {
    let (_, tensors) = random_model(ModelKind::RESNET18, 3, 10, 5);
    let inp = input(ModelKind::RESNET18, &tensors, &CIFAR_MEAN, &CIFAR_STD, 10);
    let calib = random_pixels(calib_images, inp.image_len(), 1);
    let opts = ExportOptions {
        sqnr_images,
        ..Default::default()
    };
    export(&inp, &calib, &opts).unwrap()
}

const CIFAR_IMAGE: usize = 3 * 32 * 32;

#[test]
fn resnet18_int8_tracks_float() {
    let ex = exported_resnet18(32, 8);
    check_o8(&ex.bytes);
    let test = random_pixels(3, CIFAR_IMAGE, 2);
    let float = Executor::new(&ex.graph, &FakeQuant::default())
        .unwrap()
        .run_all(&test, 3, &mut |_, _| Ok(()))
        .unwrap();
    let q = run_int8(&ex.model, &ex.plan, &test, 3).unwrap();
    let out = ex.model.tensors[ex.model.output].qparams;
    let deq: Vec<f32> = q.iter().map(|&x| out.dequantize(x)).collect();
    let db = sqnr_db(&float, &deq);
    assert!(db > 10.0, "logit SQNR {db} dB\n{}", ex.report.to_markdown());
    eprintln!("{}\nlogit SQNR {db:.1} dB", ex.report.to_markdown());
}

#[test]
fn every_option_exports_a_valid_file() {
    let (_, tensors) = random_model(ModelKind::LENET, 1, 10, 9);
    let inp = input(ModelKind::LENET, &tensors, &FASHION_MEAN, &FASHION_STD, 10);
    let (pixels, _) = fashion_test(64);
    for calibration in [
        Calibration::MinMax,
        Calibration::Percentile(99.9),
        Calibration::Mse,
        Calibration::Entropy,
    ] {
        for weights in [WeightScheme::PerChannel, WeightScheme::PerTensor] {
            for symmetric_activations in [false, true] {
                let opts = ExportOptions {
                    calibration,
                    weights,
                    symmetric_activations,
                    ..Default::default()
                };
                let ex = export(&inp, &pixels, &opts).unwrap();
                let p = check_o8(&ex.bytes);
                if symmetric_activations {
                    assert!(p.tensors.iter().skip(1).all(|t| t.4 == 0));
                }
                for l in &ex.report.layers {
                    assert!(
                        l.sqnr_db > 8.0,
                        "{calibration} {weights:?} {symmetric_activations}: {} {} dB",
                        l.name,
                        l.sqnr_db
                    );
                }
            }
        }
    }
}

#[test]
fn bad_inputs_are_errors_that_name_the_culprit() {
    let (_, mut tensors) = random_model(ModelKind::RESNET18, 3, 10, 1);
    let pixels = random_pixels(2, 3 * 32 * 32, 1);
    let opts = ExportOptions::default();
    tensors.remove("layer2.0.shortcut.1.running_var");
    let err = export(
        &input(ModelKind::RESNET18, &tensors, &CIFAR_MEAN, &CIFAR_STD, 10),
        &pixels,
        &opts,
    )
    .unwrap_err();
    assert!(
        matches!(&err, ExportError::Checkpoint(ModelError::MissingTensor { name }) if name == "layer2.0.shortcut.1.running_var"),
        "{err}"
    );

    let (_, mut tensors) = random_model(ModelKind::LENET, 1, 10, 1);
    tensors.insert(
        "fc1.weight".into(),
        Tensor::zeros((120, 401), DType::F32, &Device::Cpu).unwrap(),
    );
    let err = lower(&input(
        ModelKind::LENET,
        &tensors,
        &FASHION_MEAN,
        &FASHION_STD,
        10,
    ))
    .unwrap_err();
    assert!(err.to_string().contains("fc1.weight"), "{err}");

    let (_, tensors) = random_model(ModelKind::LENET, 1, 10, 1);
    let inp = input(ModelKind::LENET, &tensors, &FASHION_MEAN, &FASHION_STD, 10);
    assert!(matches!(
        export(&inp, &[0u8; 1000], &opts),
        Err(ExportError::BadInput(_))
    ));
    assert!(matches!(
        export(&inp, &[], &opts),
        Err(ExportError::BadInput(_))
    ));
    // Wrong channel count for the checkpoint: a shape error, not a panic.
    let err = lower(&input(
        ModelKind::LENET,
        &tensors,
        &CIFAR_MEAN,
        &CIFAR_STD,
        10,
    ))
    .unwrap_err();
    assert!(err.to_string().contains("conv1.weight"), "{err}");
    // Bad normalisation.
    let err = lower(&input(
        ModelKind::LENET,
        &tensors,
        &FASHION_MEAN,
        &[0.0],
        10,
    ))
    .unwrap_err();
    assert!(matches!(err, ExportError::BadInput(_)));
    // Mismatched labels in the ablation.
    let (px, _) = fashion_test(8);
    let ex = export(&inp, &px, &opts).unwrap();
    assert!(ablation(&ex, &[], &px, &[0u8; 3], 4, &mut |_| {}).is_err());
}

/// Throughput of the float executor on ResNet-18 (run by hand: `--ignored --nocapture`).
#[test]
#[ignore]
fn resnet18_reference_throughput() {
    let (_, tensors) = random_model(ModelKind::RESNET18, 3, 10, 5);
    let inp = input(ModelKind::RESNET18, &tensors, &CIFAR_MEAN, &CIFAR_STD, 10);
    let graph = lower(&inp).unwrap();
    let px = random_pixels(256, inp.image_len(), 1);
    let t = std::time::Instant::now();
    Executor::new(&graph, &FakeQuant::default())
        .unwrap()
        .run_all(&px, 64, &mut |_, _| Ok(()))
        .unwrap();
    let s = t.elapsed().as_secs_f64();
    eprintln!("256 images in {s:.2} s: {:.0} images/s", 256.0 / s);
}

/// The runtime and the exporter's own integer interpreter both follow FORMAT.md: the same
/// bytes, for LeNet on Fashion-MNIST and ResNet-18 on random pixels.
#[test]
fn runtime_matches_the_exporters_integer_interpreter() {
    let (_, tensors) = random_model(ModelKind::LENET, 1, 10, 21);
    let inp = input(ModelKind::LENET, &tensors, &FASHION_MEAN, &FASHION_STD, 10);
    let (pixels, _) = fashion_test(300);
    let (calib, test) = pixels.split_at(200 * 1024);
    let ex = export(&inp, calib, &ExportOptions::default()).unwrap();
    let ours = run_int8(&ex.model, &ex.plan, test, test.len() / 1024).unwrap();
    let theirs = runtime_logits(&ex.bytes, test, 16).unwrap();
    assert_eq!(ours, theirs, "LeNet");

    let ex = exported_resnet18(16, 4);
    let test = random_pixels(2, CIFAR_IMAGE, 2);
    let ours = run_int8(&ex.model, &ex.plan, &test, 2).unwrap();
    let theirs = runtime_logits(&ex.bytes, &test, 2).unwrap();
    assert_eq!(ours, theirs, "ResNet-18");

    // Depthwise convs (multiplier 1), ReLU6 clamps, residual adds without a ReLU.
    let (pixels, _) = fashion_test(48);
    let (calib, test) = pixels.split_at(32 * 1024);
    let opts = ExportOptions {
        calibration_images: 32,
        sqnr_images: 4,
        ..ExportOptions::default()
    };
    for kind in [ModelKind::MOBILENET_V2, ModelKind::DS_CNN] {
        let (_, tensors) = random_model(kind, 1, 10, 4);
        let inp = input(kind, &tensors, &FASHION_MEAN, &FASHION_STD, 10);
        let ex = export(&inp, calib, &opts).unwrap();
        let ours = run_int8(&ex.model, &ex.plan, test, 16).unwrap();
        let theirs = runtime_logits(&ex.bytes, test, 16).unwrap();
        assert_eq!(ours, theirs, "{kind}");
    }
}

/// The runtime's `format` views read back, field by field, what the model and plan hold; and
/// there is one multiplier computation: every per-channel (M0, shift) stored is
/// `octet_runtime::quantize_multiplier` of the real multiplier the exporter computed.
fn check_records_and_multipliers(ex: &Exported) {
    use octet_runtime::format::{
        le_i32, Header, OpRecord, TensorRecord, HEADER_LEN, NO_TENSOR, OP_LEN, TENSOR_LEN,
    };
    let b = &ex.bytes;
    let (model, plan) = (&ex.model, &ex.plan);
    let h = Header::new(b).unwrap().fields();
    assert_eq!(h.file_len as usize, b.len());
    assert_eq!(h.arena_bytes as usize, plan.arena_bytes);
    assert_eq!(
        (h.input_tensor as usize, h.output_tensor as usize),
        (model.input, model.output)
    );
    assert_eq!(
        (h.n_tensors as usize, h.n_ops as usize),
        (model.tensors.len(), model.ops.len())
    );
    let out = model.tensors[model.output].qparams;
    assert_eq!(
        (h.output_scale, h.output_zero_point),
        (out.scale, out.zero_point)
    );
    for (i, t) in model.tensors.iter().enumerate() {
        let r = TensorRecord::new(&b[HEADER_LEN + i * TENSOR_LEN..][..TENSOR_LEN])
            .unwrap()
            .fields();
        let chw = (r.chw.0 as usize, r.chw.1 as usize, r.chw.2 as usize);
        assert_eq!(chw, (t.shape.c, t.shape.h, t.shape.w), "tensor {i}");
        assert_eq!(
            (r.scale, r.zero_point),
            (t.qparams.scale, t.qparams.zero_point)
        );
        assert_eq!(
            (r.offset as usize, r.bytes as usize),
            (plan.tensor_offsets[i], t.shape.len())
        );
    }
    let data = &b[h.data_offset as usize..];
    let i32s = |(off, len): (u32, u32)| -> Vec<i32> {
        (0..len as usize / 4)
            .map(|k| le_i32(data, off as usize + 4 * k))
            .collect()
    };
    for (i, op) in model.ops.iter().enumerate() {
        let r = OpRecord::new(&b[h.op_table as usize + i * OP_LEN..][..OP_LEN])
            .unwrap()
            .fields();
        let kind = match (op.kind, model.rounding) {
            (OpKind::Add, octet_runtime::Rounding::Double) => octet_runtime::format::OP_TFLITE_ADD,
            _ => op.kind.code(),
        };
        assert_eq!(r.kind, kind, "{}", op.name);
        assert_eq!(r.input0 as usize, op.inputs[0]);
        let input1 = op.inputs.get(1).map_or(NO_TENSOR, |&t| t as u16);
        assert_eq!((r.input1, r.output as usize), (input1, op.output));
        let (kh, kw, stride, pad) = op.kind.window();
        let mut window = octet_runtime::format::Window::square(kh as u8, stride as u8, pad as u8);
        window.kernel_w = kw as u8;
        if kh == 0 {
            window = octet_runtime::format::Window::default();
        }
        assert_eq!((r.window, r.act), (window, (op.act_min, op.act_max)));
        assert_eq!(i32s(r.bias), op.bias, "{}", op.name);
        assert_eq!(i32s(r.multiplier), op.multipliers, "{}", op.name);
        assert_eq!(i32s(r.shift), op.shifts, "{}", op.name);
        if op.kind != OpKind::Add {
            // The add stores octet's (m0, m1, n) or TFLite's three pairs from the scales, not
            // the effective multipliers.
            let want: Vec<(i32, i32)> = op
                .effective
                .iter()
                .map(|&m| octet_runtime::quantize_multiplier(m).unwrap())
                .collect();
            let got: Vec<(i32, i32)> = op
                .multipliers
                .iter()
                .copied()
                .zip(op.shifts.iter().copied())
                .collect();
            assert_eq!(got, want, "{}", op.name);
        }
    }
}

#[test]
fn stored_records_and_multipliers_are_the_runtimes() {
    let (_, tensors) = random_model(ModelKind::LENET, 1, 10, 21);
    let inp = input(ModelKind::LENET, &tensors, &FASHION_MEAN, &FASHION_STD, 10);
    let (pixels, _) = fashion_test(64);
    for weights in [WeightScheme::PerChannel, WeightScheme::PerTensor] {
        let opts = ExportOptions {
            weights,
            sqnr_images: 4,
            ..Default::default()
        };
        check_records_and_multipliers(&export(&inp, &pixels, &opts).unwrap());
    }
    // Avg pool and add too.
    check_records_and_multipliers(&exported_resnet18(8, 2));
}

/// What a [`Progress`] listener hears, in order: (phase, images announced, images counted).
#[derive(Default)]
struct Recorder(std::cell::RefCell<Vec<(String, usize, usize)>>);

impl Progress for Recorder {
    fn phase(&self, name: &str, images: usize) {
        self.0.borrow_mut().push((name.into(), images, 0));
    }
    fn advance(&self, images: usize) {
        self.0.borrow_mut().last_mut().expect("a phase first").2 += images;
    }
}

/// One observation serves every calibration method and weight scheme (the same bytes as a
/// fresh export of each), and the progress listener hears every long phase with every image
/// counted: both calibration passes, the SQNR pass, each ablation row.
#[test]
fn calibrated_once_serves_every_option_and_reports_progress() {
    let (_, tensors) = random_model(ModelKind::LENET, 1, 10, 3);
    let inp = input(ModelKind::LENET, &tensors, &FASHION_MEAN, &FASHION_STD, 10);
    let px = random_pixels(40, inp.image_len(), 9);
    let opts = ExportOptions {
        calibration_images: 30,
        sqnr_images: 12,
        batch: 8,
        ..Default::default()
    };
    let rec = Recorder::default();
    let engine = Engine {
        device: Device::Cpu,
        progress: &rec,
    };
    let cal = Calibrated::new(&inp, &px, &opts, &engine).unwrap();
    for c in [
        Calibration::Entropy,
        Calibration::MinMax,
        Calibration::Mse,
        Calibration::Percentile(99.9),
    ] {
        for weights in [WeightScheme::PerTensor, WeightScheme::PerChannel] {
            let o = ExportOptions {
                calibration: c,
                weights,
                ..opts.clone()
            };
            assert!(
                cal.bytes(&o).unwrap() == export(&inp, &px, &o).unwrap().bytes,
                "{c}"
            );
        }
    }
    let ex = cal.export(&opts).unwrap();
    assert_eq!(ex.report.calibration_images, 30);
    let labels = [1u8; 10];
    let test = (&px[..10 * inp.image_len()], &labels[..]);
    let others = [("again", ex.bytes.as_slice())];
    let ab = ablation_on(&ex, &others, test, 4, &engine, &mut |_| {}).unwrap();
    assert_eq!(ab.rows[3].correct, ab.rows[4].correct);
    let heard = rec.0.borrow().clone();
    let want: Vec<(String, usize, usize)> = [
        ("calibration pass 1 (ranges)", 30),
        ("calibration pass 2 (histograms)", 30),
        ("SQNR per layer", 12),
        ("float", 10),
        ("int8 weights", 10),
        ("int8 weights + activations", 10),
        ("int8 weights + activations + bias", 10),
        ("again", 10),
    ]
    .iter()
    .map(|&(n, i)| (n.to_string(), i, i))
    .collect();
    assert_eq!(heard, want);
}
