use candle_core::{Result, Tensor, Var};
use octet_train_ops::batch_norm::{self as bn, BnConfig, BnLayout, BnParams};
use octet_train_ops::Activation;

use crate::builder::LayerBuilder;
use crate::stats_sync::StatsSyncSlot;
use crate::{OpsConfig, Role};

/// PyTorch's BatchNorm2d: eps 1e-5, momentum 0.1 ([`BnConfig`]'s default), biased variance
/// to normalise, unbiased variance in the running estimate.
#[derive(Debug, Clone)]
pub struct BatchNorm2d {
    weight: Tensor,
    bias: Tensor,
    running_mean: Var,
    running_var: Var,
    channels: usize,
    sync: StatsSyncSlot,
    ops: OpsConfig,
}

impl BatchNorm2d {
    pub(crate) fn new(b: &mut LayerBuilder, name: &str, c: usize) -> crate::Result<Self> {
        let dev = b.params.device().clone();
        let ones = Tensor::ones(c, candle_core::DType::F32, &dev)?;
        let zeros = Tensor::zeros(c, candle_core::DType::F32, &dev)?;
        let params = &mut b.params;
        Ok(Self {
            weight: params
                .add(format!("{name}.weight"), ones.clone(), Role::Weight)?
                .as_tensor()
                .clone(),
            bias: params
                .add(format!("{name}.bias"), zeros.clone(), Role::Weight)?
                .as_tensor()
                .clone(),
            running_mean: params.add(format!("{name}.running_mean"), zeros, Role::Buffer)?,
            running_var: params.add(format!("{name}.running_var"), ones, Role::Buffer)?,
            channels: c,
            sync: params.stats_sync_slot(),
            ops: b.ops,
        })
    }

    /// Training mode uses the batch's statistics and updates the running ones (fused
    /// kernels on CUDA, candle's ops elsewhere); inference mode the running ones.
    pub fn forward(&self, x: &Tensor, train: bool) -> Result<Tensor> {
        self.forward_in(x, train, BnLayout::Nchw, None)
    }

    /// [`Self::forward`] on a channels-last `(n, h, w, c)` input, followed by the rectifier
    /// `act` (fused into the batch-norm kernels on CUDA).
    pub fn forward_channels_last(
        &self,
        x: &Tensor,
        train: bool,
        act: Option<Activation>,
    ) -> Result<Tensor> {
        self.forward_in(x, train, BnLayout::ChannelsLast, act)
    }

    fn forward_in(
        &self,
        x: &Tensor,
        train: bool,
        layout: BnLayout,
        act: Option<Activation>,
    ) -> Result<Tensor> {
        let cfg = BnConfig {
            layout,
            act,
            ..BnConfig::default()
        };
        let p = BnParams {
            gamma: &self.weight,
            beta: &self.bias,
            running_mean: &self.running_mean,
            running_var: &self.running_var,
        };
        let then_relu = |y: Tensor| match act {
            Some(a) => self.ops.rectify(&y, a),
            None => Ok(y),
        };
        if let Some(sync) = self.sync.get().filter(|_| train) {
            return then_relu(bn::batch_norm_train_synced(x, &p, &cfg, sync.as_ref())?);
        }
        if train {
            return self.ops.batch_norm_train(x, &p, &cfg);
        }
        let shape = layout.channel_shape(self.channels);
        then_relu(bn::normalize(
            x,
            self.running_mean.as_tensor().reshape(shape)?,
            self.running_var.as_tensor().reshape(shape)?,
            &self.weight,
            &self.bias,
            cfg.eps,
        )?)
    }
}

impl candle_nn::ModuleT for BatchNorm2d {
    fn forward_t(&self, xs: &Tensor, train: bool) -> Result<Tensor> {
        self.forward(xs, train)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn train_mode_normalises_and_updates_running_stats() -> crate::Result<()> {
        let dev = Device::Cpu;
        let mut init = crate::init::Init::new(0);
        let mut b = LayerBuilder::new(&dev, &mut init, &crate::NetworkConfig::default());
        let bn = BatchNorm2d::new(&mut b, "bn", 2)?;
        let params = &b.params;
        // channel 0: values 1..=8, channel 1: constant 3
        let mut v = Vec::new();
        for n in 0..2 {
            for c in 0..2 {
                for i in 0..4 {
                    v.push(if c == 0 { (n * 4 + i + 1) as f32 } else { 3.0 });
                }
            }
        }
        let x = Tensor::from_vec(v, (2, 2, 2, 2), &dev)?;
        let y = bn.forward(&x, true)?;
        let ch0 = y.narrow(1, 0, 1)?.flatten_all()?.to_vec1::<f32>()?;
        let mean: f32 = ch0.iter().sum::<f32>() / 8.0;
        let var: f32 = ch0.iter().map(|a| (a - mean) * (a - mean)).sum::<f32>() / 8.0;
        assert!(
            mean.abs() < 1e-5 && (var - 1.0).abs() < 1e-3,
            "{mean} {var}"
        );
        let rm = params
            .get("bn.running_mean")
            .unwrap()
            .var
            .to_vec1::<f32>()?;
        let rv = params.get("bn.running_var").unwrap().var.to_vec1::<f32>()?;
        // mean 4.5, unbiased var of 1..=8 = 6; momentum 0.1 from (0, 1).
        assert!(
            (rm[0] - 0.45).abs() < 1e-6 && (rm[1] - 0.3).abs() < 1e-6,
            "{rm:?}"
        );
        assert!(
            (rv[0] - (0.9 + 0.6)).abs() < 1e-5 && (rv[1] - 0.9).abs() < 1e-6,
            "{rv:?}"
        );
        Ok(())
    }
}
