use candle_core::backprop::GradStore;
use candle_core::{Result, Tensor, Var};
use octet_models::Params;

/// SGD with momentum and PyTorch-style (coupled) weight decay, as `torch.optim.SGD`:
/// d = g + λ·p; b = μ·b + d; p = p − lr·b. candle's own SGD has neither momentum nor decay.
pub struct Sgd {
    momentum: f64,
    weight_decay: f64,
    slots: Vec<Slot>,
}

struct Slot {
    name: String,
    param: Var,
    velocity: Var,
}

/// Prefix of the momentum tensors in a checkpoint: `optim.momentum.<parameter name>`.
pub const MOMENTUM_PREFIX: &str = "optim.momentum.";

impl Sgd {
    /// Momentum buffers start at zero, which makes the first step PyTorch's `b = d`.
    pub fn new(params: &Params, momentum: f64, weight_decay: f64) -> Result<Self> {
        let slots = params
            .trainable()
            .map(|p| {
                Ok(Slot {
                    name: p.name.clone(),
                    param: p.var.clone(),
                    velocity: Var::zeros(p.var.shape(), p.var.dtype(), p.var.device())?,
                })
            })
            .collect::<Result<_>>()?;
        Ok(Self {
            momentum,
            weight_decay,
            slots,
        })
    }

    pub fn step(&mut self, grads: &GradStore, lr: f64) -> Result<()> {
        // On CUDA one kernel launch updates every parameter in place, rounded exactly as below.
        #[cfg(feature = "cuda")]
        let mut fused = Vec::new();
        for s in &self.slots {
            let Some(g) = grads.get(s.param.as_tensor()) else {
                continue;
            };
            #[cfg(feature = "cuda")]
            if super::fused_sgd::supports(s.param.as_tensor(), s.velocity.as_tensor(), g) {
                fused.push(super::fused_sgd::Update {
                    param: s.param.as_tensor(),
                    velocity: s.velocity.as_tensor(),
                    grad: g,
                });
                continue;
            }
            let p = s.param.as_tensor().detach();
            let d = if self.weight_decay != 0.0 {
                (g + (&p * self.weight_decay)?)?
            } else {
                g.clone()
            };
            let update = if self.momentum != 0.0 {
                let b = ((s.velocity.as_tensor() * self.momentum)? + d)?;
                s.velocity.set(&b)?;
                b
            } else {
                d
            };
            s.param.set(&(p - (update * lr)?)?)?;
        }
        #[cfg(feature = "cuda")]
        super::fused_sgd::step(&fused, lr, self.momentum, self.weight_decay)?;
        Ok(())
    }

    /// (checkpoint name, momentum buffer) pairs.
    pub fn state(&self) -> impl Iterator<Item = (String, &Tensor)> {
        self.slots.iter().map(|s| {
            (
                format!("{MOMENTUM_PREFIX}{}", s.name),
                s.velocity.as_tensor(),
            )
        })
    }

    /// Restores the momentum buffers; `None` from `lookup` names the missing tensor.
    pub fn load_state(
        &self,
        lookup: impl Fn(&str) -> Option<Tensor>,
    ) -> std::result::Result<(), String> {
        let mut staged = Vec::new();
        for s in &self.slots {
            let name = format!("{MOMENTUM_PREFIX}{}", s.name);
            let t = lookup(&name).ok_or_else(|| format!("optimizer tensor '{name}' is missing"))?;
            if t.shape() != s.velocity.shape() {
                return Err(format!(
                    "optimizer tensor '{name}' has shape {:?}, expected {:?}",
                    t.shape(),
                    s.velocity.shape()
                ));
            }
            staged.push(
                t.to_device(s.velocity.device())
                    .map_err(|e| e.to_string())?,
            );
        }
        for (s, t) in self.slots.iter().zip(staged) {
            s.velocity.set(&t).map_err(|e| e.to_string())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;
    use octet_models::{build, ModelKind};

    /// Three steps against the update rule written out by hand for one scalar.
    #[test]
    fn follows_torch_sgd() -> Result<()> {
        let m = build(ModelKind::LENET, 1, 10, 0, &Device::Cpu).unwrap();
        let p = &m.params().get("fc3.bias").unwrap().var;
        let mut opt = Sgd::new(m.params(), 0.9, 5e-4)?;
        let (mut w, mut b) = (p.to_vec1::<f32>()?[0] as f64, 0.0f64);
        for (i, lr) in [0.1, 0.05, 0.01].into_iter().enumerate() {
            // loss = Σ bias·k, so the gradient is k for every element.
            let k = (i + 1) as f64;
            let grads = (p.as_tensor() * k)?.sum_all()?.backward()?;
            opt.step(&grads, lr)?;
            let d = k + 5e-4 * w;
            b = 0.9 * b + d;
            w -= lr * b;
        }
        let got = p.to_vec1::<f32>()?[0] as f64;
        assert!((got - w).abs() < 1e-6, "{got} vs {w}");
        Ok(())
    }
}
