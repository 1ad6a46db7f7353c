//! The custom ops on a CUDA device against candle's ops on the CPU (exact f32 arithmetic):
//! outputs, gradients of a random linear functional of the output, and batch norm's running
//! statistics. Ignored without `--include-ignored`; run without a CUDA device, they fail saying so.

mod common;

use candle_core::{DType, Device, Result, Tensor, Var};
use common::{bn_dispatch, bn_inputs, bn_parts, bn_run, rel_err, uniform, BN_CASES};
use octet_models::{NetworkConfig, OpsConfig};
use octet_train_ops::{self as ops, BnConfig};

/// Relative tolerance for f32 results: cuDNN's algorithms sum in another order than
/// candle's CPU kernels.
const F32_TOL: f32 = 1e-4;

/// Output, input gradient and weight gradient of `OpsConfig::conv2d` under loss Σ y·r, on
/// `dev` in `dtype`, returned as f32 on the CPU.
fn conv_run(
    ops: &OpsConfig,
    x: &Tensor,
    w: &Tensor,
    r: &Tensor,
    (p, st): (usize, usize),
    dev: &Device,
    dtype: DType,
) -> Result<[Tensor; 3]> {
    let xv = Var::from_tensor(&x.to_device(dev)?.to_dtype(dtype)?)?;
    let wv = Var::from_tensor(&w.to_device(dev)?.to_dtype(dtype)?)?;
    let y = ops.conv2d(xv.as_tensor(), wv.as_tensor(), p, st)?;
    let r = r.to_device(dev)?.to_dtype(dtype)?;
    let loss = (&y * &r)?.to_dtype(DType::F32)?.sum_all()?;
    let grads = loss.backward()?;
    let back = |t: &Tensor| t.to_dtype(DType::F32)?.to_device(&Device::Cpu);
    Ok([
        back(&y)?,
        back(grads.get(xv.as_tensor()).expect("input gradient"))?,
        back(grads.get(wv.as_tensor()).expect("weight gradient"))?,
    ])
}

fn conv_check(dev: &Device, ops: &OpsConfig, dtype: DType, tol: f32, what: &str) -> Result<()> {
    // Ungrouped cases, then grouped and depthwise ones.
    let cases = (common::CONV_CASES.iter())
        .map(|&(n, ci, co, s, k, st, p)| (n, ci, co, s, k, st, p, 1))
        .chain(common::GROUPED_CASES);
    for (i, (n, ci, co, s, k, st, p, g)) in cases.enumerate() {
        let seed = 100 * i as u64;
        let x = uniform(&[n, ci, s, s], -1.0, 1.0, seed, &Device::Cpu)?;
        let w = uniform(&[co, ci / g, k, k], -0.5, 0.5, seed + 1, &Device::Cpu)?;
        let oh = (s + 2 * p - k) / st + 1;
        let r = uniform(&[n, co, oh, oh], -1.0, 1.0, seed + 2, &Device::Cpu)?;
        let reference = conv_run(ops, &x, &w, &r, (p, st), &Device::Cpu, DType::F32)?;
        // Twice: the second call runs on the cached descriptors, algorithms and workspace.
        for round in 0..2 {
            let got = conv_run(ops, &x, &w, &r, (p, st), dev, dtype)?;
            for (j, name) in ["output", "input gradient", "weight gradient"]
                .iter()
                .enumerate()
            {
                let e = rel_err(&got[j], &reference[j])?;
                assert!(
                    e <= tol,
                    "{what}, case {i} {:?}, round {round}: {name} off by {e} (tolerance {tol})",
                    (n, ci, co, s, k, st, p, g)
                );
            }
        }
    }
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU: run with --features cuda -- --include-ignored"]
fn conv2d_matches_candle_on_cpu() -> Result<()> {
    let (_gpu, dev) = common::gpu();
    let exact = OpsConfig {
        tf32: false,
        ..OpsConfig::default()
    };
    conv_check(&dev, &exact, DType::F32, F32_TOL, "f32")?;
    // TF32 (10-bit mantissa products) and bf16 (8-bit storage) only need to be close.
    conv_check(
        &dev,
        &OpsConfig::default(),
        DType::F32,
        1e-2,
        "f32 with TF32",
    )?;
    conv_check(&dev, &exact, DType::BF16, 3e-2, "bf16")
}

#[test]
#[ignore = "needs a CUDA GPU: run with --features cuda -- --include-ignored"]
fn conv2d_rejects_mismatched_channels() -> Result<()> {
    let (_gpu, dev) = common::gpu();
    let x = Tensor::zeros((1, 3, 5, 5), DType::F32, &dev)?;
    let w = Tensor::zeros((4, 2, 3, 3), DType::F32, &dev)?;
    assert!(OpsConfig::default().conv2d(&x, &w, 1, 1).is_err());
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU: run with --features cuda -- --include-ignored"]
fn batch_norm_matches_candle_on_cpu() -> Result<()> {
    let (_gpu, dev) = common::gpu();
    for (i, &(n, c, h, w)) in BN_CASES.iter().enumerate() {
        let inputs = bn_inputs(n, c, h, w, 10 * i as u64)?;
        let reference = bn_run(ops::batch_norm_train_reference, &inputs, 7, &Device::Cpu)?;
        for (f, name) in [
            (bn_dispatch as common::BnFn, "batch_norm_train"),
            (ops::batch_norm_train_fused, "batch_norm_train_fused"),
        ] {
            let got = bn_run(f, &inputs, 7, &dev)?;
            bn_check(
                &got,
                &reference,
                &format!("{name}, case {i} {:?}", BN_CASES[i]),
            )?;
        }
    }
    Ok(())
}

/// One training step of ResNet-18 on the GPU against the same step on the CPU: the ops
/// wired into the model give the same logits, gradients and running statistics.
#[test]
#[ignore = "needs a CUDA GPU: run with --features cuda -- --include-ignored"]
fn resnet18_step_matches_cpu() -> Result<()> {
    let (_gpu, dev) = common::gpu();
    let x = uniform(&[4, 3, 32, 32], -2.0, 2.0, 5, &Device::Cpu)?;
    let labels = Tensor::new(&[1u32, 7, 3, 9], &Device::Cpu)?;
    let cfg = NetworkConfig {
        ops: OpsConfig {
            tf32: false,
            ..OpsConfig::default()
        },
        ..NetworkConfig::default()
    };
    let step =
        |d: &Device| common::train_step(octet_models::ModelKind::RESNET18, &cfg, (&x, &labels), d);
    let (ref_logits, ref_grads) = step(&Device::Cpu)?;
    let (logits, grads) = step(&dev)?;
    // Twenty layers deep at batch 4: rounding differences compound through every batch norm
    // on the way back (seen on an H100: 1.3e-3 for conv1's weight gradient, the deepest),
    // hence a looser tolerance than the single-op tests' 1e-4.
    let e = rel_err(&logits, &ref_logits)?;
    assert!(e <= 1e-3, "logits off by {e}");
    for ((name, g), (_, r)) in grads.iter().zip(&ref_grads) {
        let e = rel_err(g, r)?;
        assert!(e <= 3e-3, "{name} off by {e}");
    }
    Ok(())
}

/// (n, c, h, w) for the reductions cut into several blocks a channel.
const BN_SPLIT_CASES: [(usize, usize, usize, usize); 4] = [
    (512, 64, 32, 32), // ResNet-18's first layer at batch 512: 16 float4 blocks a channel
    (3, 5, 7, 7),      // hw not a multiple of 4: float loads, one block a channel
    (64, 3, 7, 7),     // float loads, 4 blocks a channel starting mid-plane
    (4, 8, 50, 50),    // float4 loads, 3 blocks a channel starting mid-plane
];

/// The inputs in f64: at half a million values a channel, candle's f32 sums on the CPU are
/// themselves off by about 1e-5, so the reference is computed in f64.
fn wide(inputs: &[Tensor; 5]) -> Result<[Tensor; 5]> {
    let w = |t: &Tensor| t.to_dtype(DType::F64);
    Ok([
        w(&inputs[0])?,
        w(&inputs[1])?,
        w(&inputs[2])?,
        w(&inputs[3])?,
        w(&inputs[4])?,
    ])
}

fn bn_check(got: &common::BnOut, reference: &common::BnOut, case: &str) -> Result<()> {
    let e = rel_err(&got.y, &reference.y)?;
    assert!(e <= F32_TOL, "{case}: output off by {e}");
    for (j, g) in ["x", "gamma", "beta"].iter().enumerate() {
        let e = rel_err(&got.grads[j], &reference.grads[j])?;
        assert!(e <= F32_TOL, "{case}: gradient of {g} off by {e}");
    }
    for (j, s) in ["mean", "var"].iter().enumerate() {
        let e = rel_err(&got.running[j], &reference.running[j])?;
        assert!(e <= 1e-5, "{case}: running {s} off by {e}");
    }
    Ok(())
}

fn same_bits_on_cpu(a: &Tensor, b: &Tensor) -> Result<bool> {
    common::same_bits(&a.to_device(&Device::Cpu)?, &b.to_device(&Device::Cpu)?)
}

#[test]
#[ignore = "needs a CUDA GPU: run with --features cuda -- --include-ignored"]
fn batch_norm_multi_block_is_accurate_and_deterministic() -> Result<()> {
    let (_gpu, dev) = common::gpu();
    for (i, &(n, c, h, w)) in BN_SPLIT_CASES.iter().enumerate() {
        let inputs = bn_inputs(n, c, h, w, 1000 + 10 * i as u64)?;
        let reference = bn_run(
            ops::batch_norm_train_reference,
            &wide(&inputs)?,
            7,
            &Device::Cpu,
        )?;
        let case = format!("case {i} {:?}", BN_SPLIT_CASES[i]);
        let first = bn_run(ops::batch_norm_train_fused, &inputs, 7, &dev)?;
        bn_check(&first, &reference, &case)?;
        // Partial results combine in a fixed order, never by atomics: a second run gives
        // the same bits.
        let second = bn_run(ops::batch_norm_train_fused, &inputs, 7, &dev)?;
        for (what, a, b) in bn_parts(&first, &second) {
            assert!(
                same_bits_on_cpu(a, b)?,
                "{case}: {what} differs between runs"
            );
        }
    }
    Ok(())
}

/// An input starting one float into its buffer cannot be read as float4s: the kernels fall
/// back to float loads and still match.
#[test]
#[ignore = "needs a CUDA GPU: run with --features cuda -- --include-ignored"]
fn batch_norm_unaligned_input_matches() -> Result<()> {
    let (_gpu, dev) = common::gpu();
    let (n, c, h, w) = (16, 8, 8, 8);
    let inputs = bn_inputs(n, c, h, w, 77)?;
    let reference = bn_run(
        ops::batch_norm_train_reference,
        &wide(&inputs)?,
        7,
        &Device::Cpu,
    )?;
    let total = inputs[0].elem_count();
    let flat = inputs[0].flatten_all()?;
    // x is a view one float into a variable (a fresh variable would be copied to offset 0).
    let padded =
        Var::from_tensor(&Tensor::cat(&[&flat.narrow(0, 0, 1)?, &flat], 0)?.to_device(&dev)?)?;
    let x = padded
        .as_tensor()
        .narrow(0, 1, total)?
        .reshape((n, c, h, w))?;
    assert_eq!(
        x.layout().start_offset(),
        1,
        "the input should start mid-float4"
    );
    let v = |t: &Tensor| common::var_on(t, &dev);
    let (g, b, rm, rv) = (
        v(&inputs[1])?,
        v(&inputs[2])?,
        v(&inputs[3])?,
        v(&inputs[4])?,
    );
    let p = common::bn_params(&g, &b, &rm, &rv);
    let y = ops::batch_norm_train_fused(&x, &p, &BnConfig::default())?;
    let r = uniform(y.dims(), -1.0, 1.0, 7, &dev)?;
    let grads = (&y * &r)?.sum_all()?.backward()?;
    let grad = |t: &Tensor| grads.get(t).expect("gradient").clone();
    let gx = grad(padded.as_tensor())
        .narrow(0, 1, total)?
        .reshape((n, c, h, w))?;
    let got = common::BnOut {
        grads: [gx, grad(g.as_tensor()), grad(b.as_tensor())],
        running: [rm.as_tensor().copy()?, rv.as_tensor().copy()?],
        y,
    };
    bn_check(&got, &reference, "unaligned input")
}

/// The one-kernel ReLU on the GPU gives candle's CPU ReLU and gradient bit for bit, zeros and
/// both float4 and scalar paths (odd length) included.
#[test]
#[ignore = "needs a CUDA GPU: run with --features cuda -- --include-ignored"]
fn relu_matches_candle_on_cpu() -> Result<()> {
    let (_gpu, dev) = common::gpu();
    for (shape, seed) in [(vec![4, 8, 16, 16], 7u64), (vec![3, 5, 7], 8)] {
        let x = uniform(&shape, -1.0, 1.0, seed, &Device::Cpu)?;
        // Exact zeros and negative zeros take the x >= 0 branch, as in candle.
        let x = x.abs()?.ge(0.1)?.where_cond(&x, &x.zeros_like()?)?;
        let r = uniform(&shape, -1.0, 1.0, seed + 1, &Device::Cpu)?;
        let run = |dev: &Device| -> Result<(Vec<f32>, Vec<f32>)> {
            let xv = Var::from_tensor(&x.to_device(dev)?)?;
            let y = OpsConfig::default().relu(xv.as_tensor())?;
            let g = (&y * &r.to_device(dev)?)?.sum_all()?.backward()?;
            let dx = g.get(xv.as_tensor()).expect("input gradient");
            Ok((y.flatten_all()?.to_vec1()?, dx.flatten_all()?.to_vec1()?))
        };
        assert_eq!(run(&dev)?, run(&Device::Cpu)?, "shape {shape:?}");
    }
    Ok(())
}

/// The one-kernel ReLU6 on the GPU gives its CPU version's output and gradient bit for bit,
/// in f32 and bf16, with values at 0, 6 and past it, both vector and scalar paths (odd
/// length).
#[test]
#[ignore = "needs a CUDA GPU: run with --features cuda -- --include-ignored"]
fn relu6_matches_its_cpu_version() -> Result<()> {
    let (_gpu, dev) = common::gpu();
    for (shape, seed) in [(vec![4, 8, 16, 16], 9u64), (vec![3, 5, 7], 10)] {
        let x = (uniform(&shape, -2.0, 2.0, seed, &Device::Cpu)? * 5.0)?;
        // Exact 0 and 6 where the value is near them: the gradient stops at both.
        let x = x.abs()?.ge(0.5)?.where_cond(&x, &x.zeros_like()?)?;
        let x = ((&x - 6.0)?.abs()?.ge(0.5)?).where_cond(&x, &(x.ones_like()? * 6.0)?)?;
        let r = uniform(&shape, -1.0, 1.0, seed + 1, &Device::Cpu)?;
        for dtype in [DType::F32, DType::BF16] {
            let run = |dev: &Device, fused: bool| -> Result<(Vec<f32>, Vec<f32>)> {
                let xv = Var::from_tensor(&x.to_dtype(dtype)?.to_device(dev)?)?;
                let y = match fused {
                    true => ops::relu6_fused(xv.as_tensor())?,
                    false => OpsConfig::default().relu6(xv.as_tensor())?,
                };
                let g = (&y * &r.to_dtype(dtype)?.to_device(dev)?)?
                    .sum_all()?
                    .backward()?;
                let dx = g.get(xv.as_tensor()).expect("input gradient");
                let f = |t: &Tensor| t.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>();
                Ok((f(&y)?, f(dx)?))
            };
            let (gpu, cpu) = (run(&dev, false)?, run(&Device::Cpu, true)?);
            assert_eq!(gpu, cpu, "shape {shape:?} {dtype:?}");
        }
    }
    Ok(())
}

/// Inference on bf16 inputs (f32 weights cast per layer, cuDNN bf16 convolutions) gives the
/// f32 logits up to bf16 rounding.
#[test]
#[ignore = "needs a CUDA GPU: run with --features cuda -- --include-ignored"]
fn bf16_inference_follows_f32() -> Result<()> {
    let (_gpu, dev) = common::gpu();
    for kind in [
        octet_models::ModelKind::LENET,
        octet_models::ModelKind::RESNET18,
    ] {
        let net = octet_models::build(kind, 3, 10, 4, &dev).map_err(candle_core::Error::wrap)?;
        let x = uniform(&[8, 3, 32, 32], -1.0, 1.0, 9, &dev)?;
        let f = net.forward(&x, false)?.flatten_all()?.to_vec1::<f32>()?;
        let b = net
            .forward(&x.to_dtype(DType::BF16)?, false)?
            .to_dtype(DType::F32)?
            .flatten_all()?
            .to_vec1::<f32>()?;
        let scale = f.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-6);
        let worst = f
            .iter()
            .zip(&b)
            .fold(0f32, |m, (a, c)| m.max((a - c).abs() / scale));
        assert!(
            worst < 5e-2,
            "{kind}: bf16 logits off by {worst} of the largest"
        );
    }
    Ok(())
}
