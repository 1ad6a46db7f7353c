//! The custom ops on the CPU: the public functions are candle's ops bit for bit, and the
//! fused batch norm's own arithmetic and autograd wiring match candle's within rounding.

mod common;

use candle_core::{Device, Result, Tensor, Var};
use common::{bn_dispatch, bn_errors, bn_inputs, bn_parts, bn_run, same_bits, uniform};
use octet_models::OpsConfig;
use octet_train_ops::{batch_norm_train_fused, batch_norm_train_reference, Conv2dOp};

/// The CPU tests take the first five of the shared cases (the GPU tests all).
const CPU_CASES: usize = 5;

/// Output, input gradient and weight gradient of `f(x, w)` under loss Σ y·r.
fn conv_run(
    f: impl Fn(&Tensor, &Tensor) -> Result<Tensor>,
    x: &Tensor,
    w: &Tensor,
    seed: u64,
) -> Result<[Tensor; 3]> {
    let (xv, wv) = (Var::from_tensor(x)?, Var::from_tensor(w)?);
    let y = f(xv.as_tensor(), wv.as_tensor())?;
    let r = uniform(y.dims(), -1.0, 1.0, seed, x.device())?;
    let grads = (&y * &r)?.sum_all()?.backward()?;
    let gx = grads.get(xv.as_tensor()).expect("input gradient").clone();
    let gw = grads.get(wv.as_tensor()).expect("weight gradient").clone();
    Ok([y, gx, gw])
}

#[test]
fn conv2d_on_cpu_is_candles_conv2d_bit_for_bit() -> Result<()> {
    let dev = Device::Cpu;
    for (i, &(n, ci, co, s, k, st, p)) in common::CONV_CASES[..CPU_CASES].iter().enumerate() {
        let seed = 100 * i as u64;
        let x = uniform(&[n, ci, s, s], -1.0, 1.0, seed, &dev)?;
        let w = uniform(&[co, ci, k, k], -0.5, 0.5, seed + 1, &dev)?;
        let reference = conv_run(|x, w| x.conv2d(w, p, st, 1, 1), &x, &w, seed + 2)?;
        let ops = OpsConfig::default();
        let public = conv_run(|x, w| ops.conv2d(x, w, p, st), &x, &w, seed + 2)?;
        // The custom op itself (and its two backward ops) on the CPU runs candle's formulas.
        let custom = conv_run(
            |x, w| {
                x.apply_op2(
                    w,
                    Conv2dOp {
                        padding: p,
                        stride: st,
                        channels_last: false,
                        tf32: false,
                    },
                )
            },
            &x,
            &w,
            seed + 2,
        )?;
        for (j, r) in reference.iter().enumerate() {
            assert!(
                same_bits(&public[j], r)?,
                "case {i}, output {j}: public conv2d"
            );
            assert!(same_bits(&custom[j], r)?, "case {i}, output {j}: Conv2dOp");
        }
    }
    Ok(())
}

/// Grouped and depthwise convolutions: the public op and the custom op (its grouped backward
/// included) give candle's grouped conv2d (one convolution per group) bit for bit.
#[test]
fn grouped_conv2d_on_cpu_is_candles_bit_for_bit() -> Result<()> {
    let dev = Device::Cpu;
    for (i, &(n, ci, co, s, k, st, p, g)) in common::GROUPED_CASES.iter().enumerate() {
        let seed = 700 + 100 * i as u64;
        let x = uniform(&[n, ci, s, s], -1.0, 1.0, seed, &dev)?;
        let w = uniform(&[co, ci / g, k, k], -0.5, 0.5, seed + 1, &dev)?;
        let reference = conv_run(|x, w| x.conv2d(w, p, st, 1, g), &x, &w, seed + 2)?;
        let ops = OpsConfig::default();
        let public = conv_run(|x, w| ops.conv2d(x, w, p, st), &x, &w, seed + 2)?;
        let op = Conv2dOp {
            padding: p,
            stride: st,
            channels_last: false,
            tf32: false,
        };
        let custom = conv_run(|x, w| x.apply_op2(w, op), &x, &w, seed + 2)?;
        for (j, r) in reference.iter().enumerate() {
            assert!(same_bits(&public[j], r)?, "case {i}, output {j}: public");
            assert!(same_bits(&custom[j], r)?, "case {i}, output {j}: Conv2dOp");
        }
    }
    // Channels that do not divide into groups are refused.
    let x = Tensor::zeros((1, 6, 5, 5), candle_core::DType::F32, &dev)?;
    let w = Tensor::zeros((4, 4, 3, 3), candle_core::DType::F32, &dev)?;
    assert!(OpsConfig::default().conv2d(&x, &w, 1, 1).is_err());
    let w = Tensor::zeros((5, 2, 3, 3), candle_core::DType::F32, &dev)?;
    assert!(OpsConfig::default().conv2d(&x, &w, 1, 1).is_err());
    Ok(())
}

/// Batch norm `f` and the reference on each CPU case's inputs: `(case, f's, reference's)`.
fn against_reference(f: common::BnFn) -> Result<Vec<(usize, common::BnOut, common::BnOut)>> {
    let dev = Device::Cpu;
    let mut out = Vec::new();
    for (i, &(n, c, h, w)) in common::BN_CASES[..CPU_CASES].iter().enumerate() {
        let inputs = bn_inputs(n, c, h, w, 10 * i as u64)?;
        let a = bn_run(f, &inputs, 7, &dev)?;
        let b = bn_run(batch_norm_train_reference, &inputs, 7, &dev)?;
        out.push((i, a, b));
    }
    Ok(out)
}

#[test]
fn batch_norm_on_cpu_is_the_reference_bit_for_bit() -> Result<()> {
    for (i, a, b) in against_reference(bn_dispatch)? {
        for (what, got, want) in bn_parts(&a, &b) {
            assert!(same_bits(got, want)?, "case {i}: {what}");
        }
    }
    Ok(())
}

#[test]
fn fused_batch_norm_matches_the_reference_on_cpu() -> Result<()> {
    for (i, a, b) in against_reference(batch_norm_train_fused)? {
        let (y, grads, running) = bn_errors(&a, &b)?;
        assert!(
            y < 1e-5 && grads.iter().all(|&e| e < 1e-4) && running.iter().all(|&e| e < 1e-5),
            "case {i}: output, gradients, running statistics off by {y}, {grads:?}, {running:?}"
        );
    }
    Ok(())
}
