//! Dropout with reproducible masks: each training forward pass draws them from a key the
//! trainer sets first ([`key`]: its seed, optimiser step and micro-batch), mixed with the
//! layer's index, so a resumed run draws exactly the masks the uninterrupted one would have.
//! On CUDA the mask is the device generator's uniform numbers, seeded by that key (one
//! kernel, no transfer); on the CPU, whose candle generator cannot be seeded, a ChaCha stream.

use std::sync::atomic::{AtomicU64, Ordering};

use candle_core::{Device, Result, Tensor};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The key of the masks of a training run's forward pass at optimiser step `step`,
/// micro-batch `micro`.
pub fn key(seed: u64, step: usize, micro: usize) -> u64 {
    mix(mix(seed, step as u64), micro as u64)
}

/// One splitmix64 round of `a` and `b`: distinct inputs give unrelated keys.
fn mix(a: u64, b: u64) -> u64 {
    let mut z = a ^ b
        .wrapping_add(0x9E37_79B9_7F4A_7C15)
        .wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The key the next training forward pass draws its masks from.
#[derive(Debug, Default)]
pub(crate) struct DropoutKey(AtomicU64);

impl DropoutKey {
    pub fn set(&self, key: u64) {
        self.0.store(key, Ordering::Relaxed);
    }

    /// `x` with each value zeroed with probability `p` and the others scaled by 1/(1 − p),
    /// the mask that of layer `layer` under the current key.
    pub fn apply(&self, x: &Tensor, p: f32, layer: usize) -> Result<Tensor> {
        if p == 0.0 {
            return Ok(x.clone());
        }
        let seed = mix(self.0.load(Ordering::Relaxed), layer as u64);
        let uniform = match x.device() {
            Device::Cpu => {
                let mut rng = ChaCha8Rng::seed_from_u64(seed);
                let v: Vec<f32> = (0..x.elem_count()).map(|_| rng.random()).collect();
                Tensor::from_vec(v, x.shape(), &Device::Cpu)?
            }
            dev => {
                dev.set_seed(seed)?;
                Tensor::rand(0f32, 1f32, x.shape(), dev)?
            }
        };
        let mask = (uniform.ge(p as f64)?.to_dtype(x.dtype())? * (1.0 / (1.0 - p as f64)))?;
        x * mask
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// About p of the values dropped, the rest scaled, the same key the same mask, another
    /// key another.
    #[test]
    fn drops_p_scales_the_rest_and_repeats_per_key() -> Result<()> {
        let x = Tensor::ones((64, 100), candle_core::DType::F32, &Device::Cpu)?;
        let k = DropoutKey::default();
        k.set(key(7, 3, 0));
        let a = k.apply(&x, 0.25, 4)?.flatten_all()?.to_vec1::<f32>()?;
        let dropped = a.iter().filter(|&&v| v == 0.0).count() as f32 / a.len() as f32;
        assert!((dropped - 0.25).abs() < 0.03, "{dropped}");
        assert!(a.iter().all(|&v| v == 0.0 || (v - 1.0 / 0.75).abs() < 1e-6));
        assert_eq!(a, k.apply(&x, 0.25, 4)?.flatten_all()?.to_vec1::<f32>()?);
        let other_layer = k.apply(&x, 0.25, 5)?.flatten_all()?.to_vec1::<f32>()?;
        k.set(key(7, 3, 1));
        let other_batch = k.apply(&x, 0.25, 4)?.flatten_all()?.to_vec1::<f32>()?;
        assert!(a != other_layer && a != other_batch);
        assert_eq!(
            k.apply(&x, 0.0, 4)?.flatten_all()?.to_vec1::<f32>()?,
            vec![1.0; 6400]
        );
        Ok(())
    }
}
