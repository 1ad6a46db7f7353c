//! Helpers shared by the ops tests.
#![allow(dead_code)]

use candle_core::{Device, Result, Tensor, Var};
use octet_models::OpsConfig;
use octet_train_ops::{batch_norm_train_reference, Activation, BnConfig, BnLayout, BnParams};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Uniform values in [lo, hi) from a seeded generator.
pub fn uniform(shape: &[usize], lo: f32, hi: f32, seed: u64, dev: &Device) -> Result<Tensor> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let n = shape.iter().product();
    let v: Vec<f32> = (0..n).map(|_| rng.random_range(lo..hi)).collect();
    Tensor::from_vec(v, shape, dev)
}

/// max |a − b| / max |b|, both taken to f32 on the CPU: the error relative to the
/// reference tensor's scale (elements near zero do not blow it up).
pub fn rel_err(a: &Tensor, reference: &Tensor) -> Result<f32> {
    assert_eq!(a.dims(), reference.dims(), "shapes differ");
    let a = a
        .to_dtype(candle_core::DType::F32)?
        .to_device(&Device::Cpu)?;
    let b = reference
        .to_dtype(candle_core::DType::F32)?
        .to_device(&Device::Cpu)?;
    let diff = (a - &b)?.abs()?.flatten_all()?.max(0)?.to_scalar::<f32>()?;
    let scale = b.abs()?.flatten_all()?.max(0)?.to_scalar::<f32>()?;
    Ok(if scale == 0.0 { diff } else { diff / scale })
}

/// Bit-for-bit equality of two f32 tensors.
pub fn same_bits(a: &Tensor, b: &Tensor) -> Result<bool> {
    let bits = |t: &Tensor| -> Result<Vec<u32>> {
        Ok(t.flatten_all()?
            .to_vec1::<f32>()?
            .iter()
            .map(|v| v.to_bits())
            .collect())
    };
    Ok(bits(a)? == bits(b)?)
}

/// Convolution cases `(n, c_in, c_out, size, kernel, stride, padding)` of the NCHW tests:
/// the CPU tests take the first five, the GPU tests all.
pub const CONV_CASES: [(usize, usize, usize, usize, usize, usize, usize); 8] = [
    (1, 3, 5, 7, 3, 1, 1),
    (2, 4, 6, 8, 3, 2, 1),
    (3, 5, 3, 9, 1, 2, 0),
    (2, 3, 4, 10, 5, 1, 0),
    (4, 1, 2, 6, 5, 1, 1),
    (8, 7, 9, 11, 3, 2, 0),
    (5, 16, 8, 8, 1, 1, 0),
    (8, 32, 64, 16, 3, 1, 1),
];

/// A grouped convolution `(n, c_in, c_out, size, kernel, stride, padding, groups)`.
pub type GroupedCase = (usize, usize, usize, usize, usize, usize, usize, usize);

/// Grouped convolutions `(n, c_in, c_out, size, kernel, stride, padding, groups)`: depthwise
/// (groups = c_in) with depth multipliers 1 and 2, strides 1 and 2, MobileNet's and DS-CNN's
/// shapes, and two groups of several channels.
pub const GROUPED_CASES: [GroupedCase; 5] = [
    (2, 8, 8, 9, 3, 1, 1, 8),
    (2, 6, 12, 10, 3, 2, 1, 6),
    (1, 4, 6, 7, 3, 1, 0, 2),
    (4, 32, 32, 16, 3, 2, 1, 32),
    (2, 16, 16, 12, 3, 1, 1, 16),
];

/// Batch-norm shapes `(n, c, h, w)` of the NCHW tests: the CPU tests take the first five, the
/// GPU tests all (one value a channel, and ResNet-18's first layer at batch 16).
pub const BN_CASES: [(usize, usize, usize, usize); 7] = [
    (1, 3, 5, 5),
    (2, 7, 4, 4),
    (8, 16, 6, 6),
    (4, 5, 1, 1),
    (3, 2, 3, 7),
    (1, 1, 1, 1),
    (16, 64, 32, 32),
];

/// A fresh variable holding `t` on `dev`.
pub fn var_on(t: &Tensor, dev: &Device) -> Result<Var> {
    Var::from_tensor(&t.to_device(dev)?)
}

pub struct BnOut {
    pub y: Tensor,
    pub grads: [Tensor; 3],
    pub running: [Tensor; 2],
}

/// A batch norm under test: the dispatching one, the fused ops or the reference.
pub type BnFn = fn(&Tensor, &BnParams, &BnConfig) -> Result<Tensor>;

/// [`OpsConfig::batch_norm_train`] with the default (fast) ops, as a [`BnFn`].
pub fn bn_dispatch(x: &Tensor, p: &BnParams, cfg: &BnConfig) -> Result<Tensor> {
    OpsConfig::default().batch_norm_train(x, p, cfg)
}

/// The parameters of a batch norm from its four variables.
pub fn bn_params<'a>(g: &'a Var, b: &'a Var, rm: &'a Var, rv: &'a Var) -> BnParams<'a> {
    BnParams {
        gamma: g.as_tensor(),
        beta: b.as_tensor(),
        running_mean: rm,
        running_var: rv,
    }
}

/// Runs one training-mode batch norm under loss Σ y·r from the given inputs.
pub fn bn_run(f: BnFn, inputs: &[Tensor; 5], seed: u64, dev: &Device) -> Result<BnOut> {
    let vars = inputs
        .iter()
        .map(|t| var_on(t, dev))
        .collect::<Result<Vec<_>>>()?;
    let (x, g, b, rm, rv) = (&vars[0], &vars[1], &vars[2], &vars[3], &vars[4]);
    let y = f(
        x.as_tensor(),
        &bn_params(g, b, rm, rv),
        &BnConfig::default(),
    )?;
    // In the inputs' dtype: an f64 reference run gets the same (exactly widened) values.
    let r = uniform(y.dims(), -1.0, 1.0, seed, dev)?.to_dtype(y.dtype())?;
    let grads = (&y * &r)?.sum_all()?.backward()?;
    let grad = |v: &Var| grads.get(v.as_tensor()).expect("gradient").clone();
    Ok(BnOut {
        grads: [grad(x), grad(g), grad(b)],
        running: [rm.as_tensor().copy()?, rv.as_tensor().copy()?],
        y,
    })
}

pub fn bn_inputs(n: usize, c: usize, h: usize, w: usize, seed: u64) -> Result<[Tensor; 5]> {
    let dev = Device::Cpu;
    Ok([
        (uniform(&[n, c, h, w], -2.0, 2.0, seed, &dev)? + 0.5)?,
        uniform(&[c], 0.5, 1.5, seed + 1, &dev)?,
        uniform(&[c], -0.5, 0.5, seed + 2, &dev)?,
        uniform(&[c], -0.2, 0.2, seed + 3, &dev)?,
        uniform(&[c], 0.5, 1.5, seed + 4, &dev)?,
    ])
}

/// `t` rounded to `dtype` and back to f32: the values a `dtype` run actually sees.
pub fn rounded(t: &Tensor, dtype: candle_core::DType) -> Result<Tensor> {
    t.to_dtype(dtype)?.to_dtype(candle_core::DType::F32)
}

pub use octet_train_ops::permute::{nchw, nhwc};

/// The rectifiers a batch norm runs with: none, ReLU, ReLU6.
pub const BN_ACTS: [Option<Activation>; 3] =
    [None, Some(Activation::Relu), Some(Activation::Relu6)];

/// `inputs` for a run with `act`: for ReLU6 gamma ×4, so that outputs pass 6 and its clip and
/// mask are exercised.
pub fn bn_inputs_for(inputs: &[Tensor; 5], act: Option<Activation>) -> Result<[Tensor; 5]> {
    let mut i = inputs.clone();
    if act == Some(Activation::Relu6) {
        i[1] = (&i[1] * 4.0)?;
    }
    Ok(i)
}

/// Runs a channels-last batch norm (then the rectifier `act`) on `dev` with activations in
/// `dtype`, and candle's f32 NCHW reference on the CPU on the same (rounded) values, under
/// loss Σ y·r. Returns (under test, reference), both NCHW f32 on the CPU.
pub fn bn_cl_pair(
    f: BnFn,
    inputs: &[Tensor; 5],
    act: Option<Activation>,
    dtype: candle_core::DType,
    dev: &Device,
) -> Result<(BnOut, BnOut)> {
    use candle_core::DType;
    let x = rounded(&inputs[0], dtype)?;
    let r = rounded(&uniform(x.dims(), -1.0, 1.0, 99, &Device::Cpu)?, dtype)?;
    // `mask`: the reference's rectifier passes where the output under test is inside its
    // linear range (and is 6 where that is 6). Where the normalised value is within rounding
    // of 0 (or 6) the two runs may otherwise disagree on the side, and one flipped element
    // moves the gradients by a whole dy.
    let run = |cl: bool, dev: &Device, mask: Option<&(Tensor, Tensor)>| -> Result<BnOut> {
        let xin = if cl {
            nhwc(&x)?.to_dtype(dtype)?
        } else {
            x.clone()
        };
        let xv = var_on(&xin, dev)?;
        let v = |t: &Tensor| var_on(t, dev);
        let (g, b, rm, rv) = (
            v(&inputs[1])?,
            v(&inputs[2])?,
            v(&inputs[3])?,
            v(&inputs[4])?,
        );
        let p = bn_params(&g, &b, &rm, &rv);
        let y = if cl {
            let cfg = BnConfig {
                layout: BnLayout::ChannelsLast,
                act,
                ..BnConfig::default()
            };
            f(xv.as_tensor(), &p, &cfg)?
        } else {
            let y = batch_norm_train_reference(xv.as_tensor(), &p, &BnConfig::default())?;
            match (mask, act) {
                (Some((pass, sat)), Some(_)) => ((y * pass)? + (sat * 6.0)?)?,
                (None, Some(_)) => unreachable!("the reference runs with the mask"),
                (_, None) => y,
            }
        };
        let rr = if cl {
            nhwc(&r)?.to_dtype(dtype)?
        } else {
            r.clone()
        };
        let grads = (&y * rr.to_device(dev)?)?
            .to_dtype(DType::F32)?
            .sum_all()?
            .backward()?;
        let back = |t: &Tensor| -> Result<Tensor> {
            let t = t.to_dtype(DType::F32)?.to_device(&Device::Cpu)?;
            if cl && t.rank() == 4 {
                nchw(&t)
            } else {
                Ok(t)
            }
        };
        let grad = |t: &Tensor| back(grads.get(t).expect("gradient"));
        Ok(BnOut {
            grads: [
                grad(xv.as_tensor())?,
                grad(g.as_tensor())?,
                grad(b.as_tensor())?,
            ],
            running: [back(rm.as_tensor())?, back(rv.as_tensor())?],
            y: back(&y)?,
        })
    };
    let got = run(true, dev, None)?;
    let top = if act == Some(Activation::Relu6) {
        6f32
    } else {
        f32::INFINITY
    };
    let pass = (got.y.gt(0f32)?.to_dtype(DType::F32)? * got.y.lt(top)?.to_dtype(DType::F32)?)?;
    let sat = got.y.ge(top)?.to_dtype(DType::F32)?;
    let reference = run(false, &Device::Cpu, Some(&(pass, sat)))?;
    Ok((got, reference))
}

/// The parts of two batch-norm results side by side, named: output, the gradients of x,
/// gamma and beta, the running mean and variance.
pub fn bn_parts<'a>(a: &'a BnOut, b: &'a BnOut) -> Vec<(&'static str, &'a Tensor, &'a Tensor)> {
    vec![
        ("output", &a.y, &b.y),
        ("x gradient", &a.grads[0], &b.grads[0]),
        ("gamma gradient", &a.grads[1], &b.grads[1]),
        ("beta gradient", &a.grads[2], &b.grads[2]),
        ("running mean", &a.running[0], &b.running[0]),
        ("running var", &a.running[1], &b.running[1]),
    ]
}

/// Largest relative error of each part of a batch-norm result: (output, [x, gamma, beta]
/// gradients, [running mean, running var]).
pub fn bn_errors(got: &BnOut, reference: &BnOut) -> Result<(f32, [f32; 3], [f32; 2])> {
    Ok((
        rel_err(&got.y, &reference.y)?,
        [
            rel_err(&got.grads[0], &reference.grads[0])?,
            rel_err(&got.grads[1], &reference.grads[1])?,
            rel_err(&got.grads[2], &reference.grads[2])?,
        ],
        [
            rel_err(&got.running[0], &reference.running[0])?,
            rel_err(&got.running[1], &reference.running[1])?,
        ],
    ))
}

/// The GPU tests of one binary run one at a time (they share the device's memory).
static GPU: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The CUDA device for a GPU test, held by the test until the guard drops. The GPU tests
/// are `#[ignore]`d (run them with `--features cuda -- --include-ignored`); forced to run
/// without a GPU, they fail here, saying so.
pub fn gpu() -> (std::sync::MutexGuard<'static, ()>, Device) {
    let lock = GPU.lock().unwrap_or_else(|e| e.into_inner());
    let dev = Device::new_cuda(0).unwrap_or_else(|e| {
        panic!("this test needs a CUDA GPU and a build with --features cuda: {e}")
    });
    (lock, dev)
}

/// A network's logits and, per named tensor, its gradient (a buffer: its updated value) on
/// the CPU: one training step of `kind` built as `cfg` (seed 42, 3 input channels, 10
/// classes) on `dev`, loss cross-entropy. Gradients of f32 weights are f32 in every format.
pub fn train_step(
    kind: octet_models::ModelKind,
    cfg: &octet_models::NetworkConfig,
    (x, labels): (&Tensor, &Tensor),
    dev: &Device,
) -> Result<(Tensor, Vec<(String, Tensor)>)> {
    let m =
        octet_models::build_with(kind, 3, 10, 42, dev, cfg).map_err(candle_core::Error::wrap)?;
    let logits = m.forward(&x.to_device(dev)?, true)?;
    let loss = candle_nn::loss::cross_entropy(&logits, &labels.to_device(dev)?)?;
    let grads = loss.backward()?;
    let mut out = Vec::new();
    for p in m.params().iter() {
        let t = match grads.get(p.var.as_tensor()) {
            Some(g) => g.clone(),
            None => p.var.as_tensor().clone(), // buffers: the updated running statistics
        };
        assert_eq!(t.dtype(), candle_core::DType::F32, "{}", p.name);
        out.push((p.name.clone(), t.to_device(&Device::Cpu)?));
    }
    Ok((logits.to_device(&Device::Cpu)?, out))
}
