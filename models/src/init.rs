use candle_core::{Device, Result, Tensor};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Seeded weight initialisation on the host, so a seed gives the same model on CPU and GPU.
pub(crate) struct Init {
    rng: ChaCha8Rng,
}

impl Init {
    pub fn new(seed: u64) -> Self {
        Self {
            rng: ChaCha8Rng::seed_from_u64(seed),
        }
    }

    /// U(−1/√fan_in, 1/√fan_in): PyTorch's default for conv and linear weights
    /// (kaiming_uniform with a = √5) and biases.
    pub fn uniform_fan_in(
        &mut self,
        shape: &[usize],
        fan_in: usize,
        dev: &Device,
    ) -> Result<Tensor> {
        let bound = 1.0 / (fan_in as f32).sqrt();
        let n = shape.iter().product();
        let v: Vec<f32> = (0..n)
            .map(|_| self.rng.random_range(-bound..bound))
            .collect();
        Tensor::from_vec(v, shape, dev)
    }
}
