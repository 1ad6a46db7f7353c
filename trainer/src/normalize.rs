use candle_core::{DType, Device, Result, Tensor};

use crate::data::Normalization;

/// u8 pixels → normalised f32 on the device: (x/255 − mean)/std as one multiply-add per
/// channel, so only bytes cross the bus.
#[derive(Debug, Clone)]
pub struct Normalizer {
    scale: Tensor,
    shift: Tensor,
}

impl Normalizer {
    pub fn new(norm: &Normalization, dev: &Device) -> Result<Self> {
        let c = norm.mean.len();
        let scale: Vec<f32> = norm.std.iter().map(|s| 1.0 / (255.0 * s)).collect();
        let shift: Vec<f32> = norm
            .mean
            .iter()
            .zip(&norm.std)
            .map(|(m, s)| -m / s)
            .collect();
        Ok(Self {
            scale: Tensor::from_vec(scale, (1, c, 1, 1), dev)?,
            shift: Tensor::from_vec(shift, (1, c, 1, 1), dev)?,
        })
    }

    pub fn apply(&self, pixels: &Tensor) -> Result<Tensor> {
        pixels
            .to_dtype(DType::F32)?
            .broadcast_mul(&self.scale)?
            .broadcast_add(&self.shift)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_formula() -> Result<()> {
        let n = Normalization {
            mean: vec![0.5, 0.25],
            std: vec![0.5, 0.125],
        };
        let x = Tensor::from_vec(vec![0u8, 255, 51, 102], (1, 2, 1, 2), &Device::Cpu)?;
        let y = Normalizer::new(&n, &Device::Cpu)?
            .apply(&x)?
            .flatten_all()?
            .to_vec1::<f32>()?;
        let want = [-1.0, 1.0, (0.2 - 0.25) / 0.125, (0.4 - 0.25) / 0.125];
        for (a, b) in y.iter().zip(want) {
            assert!((a - b).abs() < 1e-5, "{y:?}");
        }
        Ok(())
    }
}
