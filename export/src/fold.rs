//! Offline folding: batch norm into the preceding conv, the input normalisation into the first
//! layer. Both are exact in real arithmetic; computed in f64 so f32 rounding happens once.

/// PyTorch's BatchNorm2d epsilon.
pub const BN_EPS: f64 = 1e-5;

/// Batch-norm statistics and affine parameters of one layer, one value per channel.
#[derive(Debug, Clone)]
pub struct BatchNorm {
    pub gamma: Vec<f32>,
    pub beta: Vec<f32>,
    pub mean: Vec<f32>,
    pub var: Vec<f32>,
}

/// `bn(conv(x))` → `conv'(x)`: w' = w·γ/√(var+ε), b' = (b − μ)·γ/√(var+ε) + β.
///
/// `weight` is `[C_out][...]` with `bias.len() == C_out` rows of equal length.
pub fn fold_batch_norm(weight: &mut [f32], bias: &mut [f32], bn: &BatchNorm) {
    let cout = bias.len();
    let per = weight.len() / cout.max(1);
    for o in 0..cout {
        let s = bn.gamma[o] as f64 / (bn.var[o] as f64 + BN_EPS).sqrt();
        for w in &mut weight[o * per..(o + 1) * per] {
            *w = (*w as f64 * s) as f32;
        }
        bias[o] = ((bias[o] as f64 - bn.mean[o] as f64) * s + bn.beta[o] as f64) as f32;
    }
}

/// Makes a conv that consumes `x = pixel/255` compute what it computed on `(x − mean)/std`.
///
/// `weight` is `[C_out][C_in][k]` (k = kh·kw). w' = w/std_c, b' = b − Σ w·mean_c/std_c. Returns
/// the real pad value per input channel, `mean_c`: the pixel whose normalised value is the 0
/// that PyTorch pads with, so padded taps contribute nothing, as before.
pub fn fold_input_normalization(
    weight: &mut [f32],
    bias: &mut [f32],
    mean: &[f32],
    std: &[f32],
) -> Vec<f32> {
    let cout = bias.len();
    let cin = mean.len();
    let k = weight.len() / (cout * cin).max(1);
    for o in 0..cout {
        let mut shift = 0f64;
        for c in 0..cin {
            let inv = 1.0 / std[c] as f64;
            for w in &mut weight[(o * cin + c) * k..(o * cin + c + 1) * k] {
                let w64 = *w as f64;
                shift += w64 * mean[c] as f64 * inv;
                *w = (w64 * inv) as f32;
            }
        }
        bias[o] = (bias[o] as f64 - shift) as f32;
    }
    mean.to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_norm_folding_is_exact_on_a_dot_product() {
        // One output channel, 3 inputs: bn(w·x + b) == w'·x + b'.
        let w = [0.5f32, -1.25, 2.0];
        let b = [0.3f32];
        let bn = BatchNorm {
            gamma: vec![1.7],
            beta: vec![-0.4],
            mean: vec![0.9],
            var: vec![2.5],
        };
        let (mut wf, mut bf) = (w, b);
        fold_batch_norm(&mut wf, &mut bf, &bn);
        for x in [[1.0f32, 2.0, 3.0], [-0.5, 0.25, 8.0], [0.0, 0.0, 0.0]] {
            let y: f64 = w.iter().zip(&x).map(|(a, b)| (a * b) as f64).sum::<f64>() + b[0] as f64;
            let want = (y - 0.9) / (2.5f64 + BN_EPS).sqrt() * 1.7 - 0.4;
            let got: f64 =
                wf.iter().zip(&x).map(|(a, b)| (a * b) as f64).sum::<f64>() + bf[0] as f64;
            assert!((got - want).abs() < 1e-5, "{got} vs {want}");
        }
    }

    #[test]
    fn input_normalization_folding_matches_normalised_input() {
        // Two input channels, one tap each, one output.
        let w = [0.7f32, -0.2];
        let b = [0.05f32];
        let (mean, std) = ([0.49f32, 0.2], [0.25f32, 0.5]);
        let (mut wf, mut bf) = (w, b);
        let pad = fold_input_normalization(&mut wf, &mut bf, &mean, &std);
        for x in [[0.0f32, 1.0], [0.3, 0.6], [1.0, 0.0]] {
            let want: f32 = (0..2)
                .map(|c| w[c] * (x[c] - mean[c]) / std[c])
                .sum::<f32>()
                + b[0];
            let got: f32 = (0..2).map(|c| wf[c] * x[c]).sum::<f32>() + bf[0];
            assert!((got - want).abs() < 1e-5);
        }
        // Padding with `pad` reproduces zero padding of the normalised image: output = bias.
        let padded: f32 = (0..2).map(|c| wf[c] * pad[c]).sum::<f32>() + bf[0];
        assert!((padded - b[0]).abs() < 1e-6);
    }
}
