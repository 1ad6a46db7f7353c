//! The fused CUDA SGD step against the CPU path (candle's ops): several steps of LeNet's
//! parameters and momentum buffers agree bit for bit, for each combination of momentum and
//! weight decay. Ignored without `--include-ignored`; fails, saying so, without a CUDA device.

mod common;

use candle_core::{DType, Device, Result, Tensor};
use octet_models::{build, ModelKind, Network};
use octet_trainer::optim::Sgd;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn bits(t: &Tensor) -> Result<Vec<u32>> {
    let v = t.to_device(&Device::Cpu)?.flatten_all()?.to_vec1::<f32>()?;
    Ok(v.iter().map(|x| x.to_bits()).collect())
}

/// Gradients equal to fixed random tensors: the loss Σ p·r has gradient r, exactly, on
/// every device.
fn step(m: &dyn Network, opt: &mut Sgd, r: &[Tensor], lr: f64) -> Result<()> {
    let dev = m.params().device().clone();
    let mut loss = Tensor::zeros((), DType::F32, &dev)?;
    for (p, r) in m.params().trainable().zip(r) {
        loss = (loss + (p.var.as_tensor() * r.to_device(&dev)?)?.sum_all()?)?;
    }
    opt.step(&loss.backward()?, lr)
}

#[test]
#[ignore = "needs a CUDA GPU: run with --features cuda -- --include-ignored"]
fn fused_sgd_matches_cpu_bit_for_bit() -> Result<()> {
    let dev = common::cuda();
    for (momentum, wd) in [(0.9, 5e-4), (0.0, 0.0), (0.9, 0.0), (0.0, 5e-4)] {
        let cpu =
            build(ModelKind::LENET, 1, 10, 3, &Device::Cpu).map_err(candle_core::Error::wrap)?;
        let gpu = build(ModelKind::LENET, 1, 10, 3, &dev).map_err(candle_core::Error::wrap)?;
        gpu.params()
            .load(|name| cpu.params().get(name).map(|p| p.var.as_tensor().clone()))
            .map_err(candle_core::Error::wrap)?;
        let (mut ocpu, mut ogpu) = (
            Sgd::new(cpu.params(), momentum, wd)?,
            Sgd::new(gpu.params(), momentum, wd)?,
        );
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        // Several steps: the first (zero momentum buffer, b = d) and ones that carry momentum.
        for (i, lr) in [0.1, 0.1, 0.05, 0.01, 0.2].into_iter().enumerate() {
            let r = cpu
                .params()
                .trainable()
                .map(|p| {
                    let v: Vec<f32> = (0..p.var.elem_count())
                        .map(|_| rng.random_range(-1.0f32..1.0))
                        .collect();
                    Tensor::from_vec(v, p.var.shape(), &Device::Cpu)
                })
                .collect::<Result<Vec<_>>>()?;
            step(cpu.as_ref(), &mut ocpu, &r, lr)?;
            step(gpu.as_ref(), &mut ogpu, &r, lr)?;
            let what = format!("momentum {momentum}, weight decay {wd}, step {i}");
            for (a, b) in cpu.params().trainable().zip(gpu.params().trainable()) {
                assert!(
                    bits(a.var.as_tensor())? == bits(b.var.as_tensor())?,
                    "{what}: parameter {} differs",
                    a.name
                );
            }
            for ((name, a), (_, b)) in ocpu.state().zip(ogpu.state()) {
                assert!(bits(a)? == bits(b)?, "{what}: {name} differs");
            }
        }
    }
    Ok(())
}
