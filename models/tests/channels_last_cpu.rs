//! The channels-last (`--precision bf16`) wiring on the CPU, where CI runs: the channels-last
//! networks in f32 give the NCHW networks' logits, gradients and running statistics; the
//! channels-last custom ops (their CPU versions) follow candle's NCHW reference; the weight
//! cast and the bf16 ReLU are exact (property tests).

mod common;

use candle_core::{DType, Device, Result, Tensor};
use common::{bn_cl_pair, bn_dispatch, bn_errors, bn_parts, uniform};
use octet_models::{Activations, ModelKind, NetworkConfig, OpsConfig};
use octet_train_ops::{self as ops, BnConfig, BnLayout};
use proptest::prelude::*;

/// One training step of `kind` in both formats from the same seed; returns the worst
/// relative error of the logits and of any parameter's gradient or buffer.
fn step_difference(kind: ModelKind, act: Activations, n: usize) -> Result<(f32, f32, String)> {
    let x = uniform(&[n, 3, 32, 32], -2.0, 2.0, 11, &Device::Cpu)?;
    let labels = Tensor::new(&[1u32, 7, 3, 9][..n], &Device::Cpu)?;
    let step = |act: Activations| -> Result<(Tensor, Vec<(String, Tensor)>)> {
        let cfg = NetworkConfig {
            activations: act,
            ..NetworkConfig::default()
        };
        let m = octet_models::build_with(kind, 3, 10, 42, &Device::Cpu, &cfg)
            .map_err(candle_core::Error::wrap)?;
        assert_eq!(m.activations(), act);
        let logits = m.forward(&x, true)?;
        assert_eq!(logits.dtype(), DType::F32, "logits are f32 in every format");
        let grads = candle_nn::loss::cross_entropy(&logits, &labels)?.backward()?;
        let mut out = Vec::new();
        for p in m.params().iter() {
            let t = match grads.get(p.var.as_tensor()) {
                Some(g) => {
                    assert_eq!(g.dtype(), DType::F32, "{}: f32 gradient", p.name);
                    assert_eq!(g.dims(), p.var.dims(), "{}: gradient shape", p.name);
                    g.clone()
                }
                None => p.var.as_tensor().clone(),
            };
            out.push((p.name.clone(), t));
        }
        Ok((logits, out))
    };
    let (l0, g0) = step(Activations::Nchw)?;
    let (l1, g1) = step(act)?;
    let logits = common::rel_err(&l1, &l0)?;
    let (mut worst, mut name) = (0f32, String::new());
    for ((n0, a), (_, b)) in g0.iter().zip(&g1) {
        let e = common::rel_err(b, a)?;
        if e > worst {
            (worst, name) = (e, n0.clone());
        }
    }
    Ok((logits, worst, name))
}

/// In f32, channels-last differs from NCHW only in the order batch norm sums its channels.
#[test]
fn channels_last_f32_networks_match_nchw() -> Result<()> {
    for kind in [ModelKind::LENET, ModelKind::RESNET18] {
        let (logits, grads, name) =
            step_difference(kind, Activations::ChannelsLast(DType::F32), 2)?;
        println!("{kind}: logits {logits:.2e}, worst gradient/buffer {grads:.2e} ({name})");
        assert!(logits <= 1e-4, "{kind}: logits off by {logits}");
        assert!(grads <= 1e-3, "{kind}: {name} off by {grads}");
    }
    Ok(())
}

/// bf16 activations need CUDA (candle has no bf16 matmul on the CPU): building such a
/// network on the CPU says so instead of failing inside the first convolution.
#[test]
fn bf16_on_cpu_is_a_clear_error() {
    let err = octet_models::build_with(
        ModelKind::LENET,
        3,
        10,
        0,
        &Device::Cpu,
        &NetworkConfig {
            activations: Activations::ChannelsLast(DType::BF16),
            ..NetworkConfig::default()
        },
    )
    .err()
    .expect("bf16 on the CPU is refused")
    .to_string();
    assert!(
        err.contains("CUDA") && err.contains("--precision f32"),
        "{err}"
    );
}

/// (n, c, h, w)
const BN_CASES: [(usize, usize, usize, usize); 4] =
    [(2, 8, 4, 4), (3, 5, 3, 7), (8, 16, 6, 6), (4, 3, 1, 1)];

/// The fused channels-last ops' CPU versions against candle's NCHW reference, f32 and bf16,
/// with no rectifier, the fused ReLU and the fused ReLU6.
#[test]
fn fused_channels_last_batch_norm_matches_reference_on_cpu() -> Result<()> {
    for (dtype, tol_y, tol_g) in [(DType::F32, 1e-5, 1e-4), (DType::BF16, 1e-2, 2e-2)] {
        for (i, &(n, c, h, w)) in BN_CASES.iter().enumerate() {
            for act in common::BN_ACTS {
                let inputs = common::bn_inputs(n, c, h, w, 40 + i as u64)?;
                let inputs = common::bn_inputs_for(&inputs, act)?;
                let (got, reference) = bn_cl_pair(
                    ops::batch_norm_train_fused,
                    &inputs,
                    act,
                    dtype,
                    &Device::Cpu,
                )?;
                let (y, g, r) = bn_errors(&got, &reference)?;
                let case = format!("{dtype:?} case {i} {act:?}");
                assert!(y <= tol_y, "{case}: output off by {y}");
                for (e, what) in g.iter().zip(["x", "gamma", "beta"]) {
                    assert!(*e <= tol_g, "{case}: gradient of {what} off by {e}");
                }
                for (e, what) in r.iter().zip(["mean", "var"]) {
                    assert!(*e <= 1e-5, "{case}: running {what} off by {e}");
                }
            }
        }
    }
    Ok(())
}

/// The public channels-last batch norm on the CPU is the reference (candle's ops).
#[test]
fn channels_last_batch_norm_on_cpu_is_the_reference() -> Result<()> {
    let inputs = common::bn_inputs(4, 6, 5, 5, 3)?;
    for act in common::BN_ACTS {
        let inputs = common::bn_inputs_for(&inputs, act)?;
        let (a, _) = bn_cl_pair(bn_dispatch, &inputs, act, DType::F32, &Device::Cpu)?;
        let (b, _) = bn_cl_pair(
            ops::batch_norm_train_reference,
            &inputs,
            act,
            DType::F32,
            &Device::Cpu,
        )?;
        for (what, got, want) in bn_parts(&a, &b) {
            assert!(common::same_bits(got, want)?, "{act:?}: {what}");
        }
    }
    Ok(())
}

/// The channels-last convolution on the CPU (candle on NCHW views) and the custom op's CPU
/// version agree with candle's NCHW conv2d bit for bit, gradients included.
#[test]
fn channels_last_conv_matches_nchw_on_cpu() -> Result<()> {
    use candle_core::Var;
    for (i, &(n, ci, co, s, k, st, p)) in [
        (2, 3, 4, 7, 3, 1, 1),
        (3, 5, 2, 9, 1, 2, 0),
        (1, 2, 3, 8, 5, 2, 2),
    ]
    .iter()
    .enumerate()
    {
        let x = uniform(&[n, ci, s, s], -1.0, 1.0, 3 * i as u64, &Device::Cpu)?;
        let w = uniform(&[co, ci, k, k], -0.5, 0.5, 3 * i as u64 + 1, &Device::Cpu)?;
        let (xv, wv) = (Var::from_tensor(&x)?, Var::from_tensor(&w)?);
        let y = x.conv2d(&w, p, st, 1, 1)?;
        let r = uniform(y.dims(), -1.0, 1.0, 7, &Device::Cpu)?;
        let g = (&xv.as_tensor().conv2d(wv.as_tensor(), p, st, 1, 1)? * &r)?
            .sum_all()?
            .backward()?;
        let (gx, gw) = (
            g.get(xv.as_tensor()).unwrap(),
            g.get(wv.as_tensor()).unwrap(),
        );
        for custom in [false, true] {
            let (xc, wc) = (Var::from_tensor(&x)?, Var::from_tensor(&w)?);
            let xn = common::nhwc(xc.as_tensor())?;
            let wn = OpsConfig::default().weight_channels_last(wc.as_tensor(), DType::F32)?;
            let yc = if custom {
                xn.apply_op2(
                    &wn,
                    ops::Conv2dOp {
                        padding: p,
                        stride: st,
                        channels_last: true,
                        tf32: false,
                    },
                )?
            } else {
                OpsConfig::default().conv2d_channels_last(&xn, &wn, p, st)?
            };
            let gc = (&yc * common::nhwc(&r)?)?.sum_all()?.backward()?;
            let what = format!("case {i}, custom op {custom}");
            assert!(
                common::same_bits(&common::nchw(&yc)?, &y)?,
                "{what}: output"
            );
            assert!(
                common::same_bits(gc.get(xc.as_tensor()).unwrap(), gx)?,
                "{what}: dx"
            );
            assert!(
                common::same_bits(gc.get(wc.as_tensor()).unwrap(), gw)?,
                "{what}: dw"
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// The weight cast op (f32 (k,c,r,s) → bf16 (k,r,s,c) and its gradient back) is candle's
    /// permute + cast bit for bit, any shape and values (NaN, infinities and subnormals
    /// included through arbitrary bit patterns).
    #[test]
    fn weight_channels_last_is_permute_and_cast(
        k in 1usize..5, c in 1usize..6, r in 1usize..4, s in 1usize..4,
        bits in proptest::collection::vec(any::<u32>(), 4 * 5 * 3 * 3),
    ) {
        let n = k * c * r * s;
        let v: Vec<f32> = bits[..n].iter().map(|&b| f32::from_bits(b)).collect();
        let w = Tensor::from_vec(v, (k, c, r, s), &Device::Cpu).unwrap();
        let ours = ops::weight_channels_last_fused(&w, DType::BF16).unwrap();
        let theirs = w.permute((0, 2, 3, 1)).unwrap().to_dtype(DType::BF16).unwrap();
        let a: Vec<u16> = ours.flatten_all().unwrap().to_vec1::<half::bf16>().unwrap().iter().map(|v| v.to_bits()).collect();
        let b: Vec<u16> = theirs.flatten_all().unwrap().to_vec1::<half::bf16>().unwrap().iter().map(|v| v.to_bits()).collect();
        prop_assert_eq!(a, b);
    }

    /// The fused ReLU on bf16 (CPU version) is candle's relu and gradient bit for bit.
    #[test]
    fn bf16_relu_is_candles(
        vals in proptest::collection::vec(prop_oneof![Just(0f32), Just(-0f32), Just(f32::NAN), -4f32..4.0], 1..200),
    ) {
        use candle_core::Var;
        let n = vals.len();
        let x = Var::from_tensor(&Tensor::from_vec(vals, n, &Device::Cpu).unwrap().to_dtype(DType::BF16).unwrap()).unwrap();
        let r = (Tensor::arange(0f32, n as f32, &Device::Cpu).unwrap() - (n / 2) as f64).unwrap().to_dtype(DType::BF16).unwrap();
        let ours = ops::relu_fused(x.as_tensor()).unwrap();
        let theirs = x.as_tensor().relu().unwrap();
        // Equal as numbers (candle's gradient is dy·0, which is -0 for negative dy).
        let bits = |t: &Tensor| -> Vec<f32> { t.to_dtype(DType::F32).unwrap().to_vec1::<f32>().unwrap() };
        prop_assert_eq!(bits(&ours), bits(&theirs));
        let ga = (ours * &r).unwrap().sum_all().unwrap().backward().unwrap();
        let gb = (theirs * &r).unwrap().sum_all().unwrap().backward().unwrap();
        prop_assert_eq!(bits(ga.get(x.as_tensor()).unwrap()), bits(gb.get(x.as_tensor()).unwrap()));
    }
}

/// An input nothing upstream needs a gradient for (the network's first layer) gets none, and
/// the weight gradient is unchanged.
#[test]
fn conv_skips_the_input_gradient_of_an_untracked_input() -> Result<()> {
    use candle_core::Var;
    let x = uniform(&[2, 3, 6, 6], -1.0, 1.0, 1, &Device::Cpu)?;
    let w = Var::from_tensor(&uniform(&[4, 3, 3, 3], -0.5, 0.5, 2, &Device::Cpu)?)?;
    let op = ops::Conv2dOp {
        padding: 1,
        stride: 1,
        channels_last: false,
        tf32: false,
    };
    let y = x.apply_op2(w.as_tensor(), op)?;
    let g = y.sqr()?.sum_all()?.backward()?;
    assert!(g.get(&x).is_none(), "no gradient for an untracked input");
    let reference = x
        .conv2d(w.as_tensor(), 1, 1, 1, 1)?
        .sqr()?
        .sum_all()?
        .backward()?;
    assert!(common::same_bits(
        g.get(w.as_tensor()).expect("weight gradient"),
        reference.get(w.as_tensor()).expect("weight gradient"),
    )?);
    Ok(())
}

/// One rank's "sum over ranks": the identity, which makes synchronised batch norm the
/// single-device one.
struct OneRank;

impl octet_models::StatsSync for OneRank {
    fn sum(&self, t: &Tensor) -> Result<Tensor> {
        Ok(t.clone())
    }
}

/// `--bn sync` in bf16 runs synchronised batch norm over channels-last axes: on one rank it
/// gives the NCHW synchronised result, in f32 and (through an f32 computation) in bf16.
#[test]
fn synced_batch_norm_over_channels_last_matches_nchw() -> Result<()> {
    use candle_core::Var;
    let inputs = common::bn_inputs(4, 8, 5, 5, 21)?;
    for (dtype, tol) in [(DType::F32, 1e-5), (DType::BF16, 1e-2)] {
        let x = common::rounded(&inputs[0], dtype)?;
        let run = |cl: bool| -> Result<(Tensor, Tensor, Tensor)> {
            let xin = if cl {
                common::nhwc(&x)?.to_dtype(dtype)?
            } else {
                x.clone()
            };
            let xv = Var::from_tensor(&xin)?;
            let (g, b) = (Var::from_tensor(&inputs[1])?, Var::from_tensor(&inputs[2])?);
            let (rm, rv) = (Var::from_tensor(&inputs[3])?, Var::from_tensor(&inputs[4])?);
            let cfg = BnConfig {
                layout: if cl {
                    BnLayout::ChannelsLast
                } else {
                    BnLayout::Nchw
                },
                ..BnConfig::default()
            };
            let p = common::bn_params(&g, &b, &rm, &rv);
            let y = ops::batch_norm_train_synced(xv.as_tensor(), &p, &cfg, &OneRank)?;
            assert_eq!(y.dtype(), xin.dtype(), "the output keeps the input's dtype");
            let y = y.to_dtype(DType::F32)?;
            let y = if cl { common::nchw(&y)? } else { y };
            let grads = y.sqr()?.sum_all()?.backward()?;
            let gg = grads.get(g.as_tensor()).expect("gamma gradient").clone();
            Ok((y, gg, rv.as_tensor().copy()?))
        };
        let (a, b) = (run(true)?, run(false)?);
        let e = [
            common::rel_err(&a.0, &b.0)?,
            common::rel_err(&a.1, &b.1)?,
            common::rel_err(&a.2, &b.2)?,
        ];
        assert!(
            e.iter().all(|&e| e <= tol),
            "{dtype:?}: output, gamma gradient, running var off by {e:?}"
        );
    }
    Ok(())
}
