//! Helpers shared by the ops tests.
#![allow(dead_code)]

use candle_core::{Device, Result, Tensor, Var};
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
    let a: Vec<u32> = a
        .flatten_all()?
        .to_vec1::<f32>()?
        .iter()
        .map(|v| v.to_bits())
        .collect();
    let b: Vec<u32> = b
        .flatten_all()?
        .to_vec1::<f32>()?
        .iter()
        .map(|v| v.to_bits())
        .collect();
    Ok(a == b)
}

/// A fresh variable holding `t` on `dev`.
pub fn var_on(t: &Tensor, dev: &Device) -> Result<Var> {
    Var::from_tensor(&t.to_device(dev)?)
}

pub struct BnOut {
    pub y: Tensor,
    pub grads: [Tensor; 3],
    pub running: [Tensor; 2],
}

pub type BnFn = fn(&Tensor, &Tensor, &Tensor, &Var, &Var, f64, f64) -> Result<Tensor>;

/// Runs one training-mode batch norm under loss Σ y·r from the given inputs.
pub fn bn_run(f: BnFn, inputs: &[Tensor; 5], seed: u64, dev: &Device) -> Result<BnOut> {
    let vars = inputs
        .iter()
        .map(|t| var_on(t, dev))
        .collect::<Result<Vec<_>>>()?;
    let (x, g, b, rm, rv) = (&vars[0], &vars[1], &vars[2], &vars[3], &vars[4]);
    let y = f(
        x.as_tensor(),
        g.as_tensor(),
        b.as_tensor(),
        rm,
        rv,
        0.1,
        1e-5,
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
