//! `.o8` models for the TFLite tests, built with [`crate::models`]' writer: a LeNet like the
//! demo's and a small model with every op kind of octet's exports, both over 1×32×32 pixels
//! (Fashion-MNIST's shape), both as the exporter makes them in what TFLite can express:
//! multipliers derived from f32 scales by TFLite's formula, the first conv padding with one
//! value for its channel, the others with their input's zero point, the rounding TFLite's
//! (double) and the residual adds TFLite's.

use crate::models::{Builder, OpSpec};
use octet_runtime::format::{OP_ADD, OP_AVG_POOL, OP_CONV2D, OP_FULLY_CONNECTED, OP_TFLITE_ADD};
use octet_runtime::quantize_multiplier;

/// LeNet as the demo trains it (conv 5×5→6, max-pool 2, conv 5×5→16, max-pool 2,
/// fc 400→120→84→10), random weights from `seed`.
pub fn lenet(seed: u64) -> Vec<u8> {
    let mut b = crate::models::lenet(seed);
    as_exported(&mut b);
    b.encode()
}

/// Every op kind: a padded 3×3 stem (TFLite SAME), max-pool, an identity residual block (add
/// with ReLU), a downsampling block (a stride-2 3×3 conv with pad 1, which TFLite's SAME places
/// differently: an explicit PAD; a 1×1 stride-2 shortcut), a 3×3 average pool (a divisor that is
/// not a power of two) and a fully connected classifier without ReLU.
pub fn all_ops(seed: u64) -> Vec<u8> {
    let mut b = Builder::new(1, 32, 32, seed);
    let s = b.conv(0, 8, 3, 1, 1, true);
    let s = b.max_pool(s, 2, 2);
    let s = b.block(s, 8, 1);
    let s = b.block(s, 16, 2);
    let p = b.avg_pool(s, 3, 2);
    b.fc(p, 10, false);
    as_exported(&mut b);
    b.encode()
}

/// A stem padding with its own value while a max pool also reads the input: the input keeps its
/// zero point (−128) and the stem frames it with CONCATENATION (the path a model with a pad value
/// per channel, a CIFAR model, takes), then a fully connected classifier.
pub fn framed(seed: u64) -> Vec<u8> {
    let mut b = Builder::new(1, 32, 32, seed);
    b.max_pool(0, 2, 2);
    let s = b.conv(0, 4, 3, 2, 1, true);
    b.fc(s, 10, false);
    as_exported(&mut b);
    b.encode()
}

/// Rewrites `b` as the exporter writes it by default: the double rounding, its multipliers as
/// the exporter computes them, `quantize_multiplier(s_in·s_w / s_out)` over f32 scales (the
/// writer draws them at random), its adds as TFLite's (the multipliers TFLite derives from the
/// scales), and its pad values (the first conv: one value, the others: none).
pub fn as_exported(b: &mut Builder) {
    let scales: Vec<f32> = b.tensors.iter().map(|t| t.scale).collect();
    let input = b.input_tensor;
    b.rounding = 2;
    for i in 0..b.ops.len() {
        if b.ops[i].kind == OP_ADD {
            let op = &b.ops[i];
            let s = |t: u16| scales[t as usize];
            let pairs = crate::models::tflite_add_pairs(s(op.in0), s(op.in1), s(op.out));
            let op = &mut b.ops[i];
            op.kind = OP_TFLITE_ADD;
            op.mult = pairs.iter().map(|p| p.0).collect();
            op.shift = pairs.iter().map(|p| p.1).collect();
            op.param = 20;
        }
        let pad_value = b.rng.range(-128, 127) as i8;
        let op: &mut OpSpec = &mut b.ops[i];
        let (s_in, s_out) = (scales[op.in0 as usize], scales[op.out as usize]);
        if matches!(op.kind, OP_CONV2D | OP_FULLY_CONNECTED | OP_AVG_POOL) {
            for c in 0..op.mult.len() {
                let m = op.mult[c] as f64 * 2f64.powi(op.shift[c] - 31);
                let s_w = (m * s_out as f64 / s_in as f64) as f32;
                let (m0, shift) = quantize_multiplier(s_in as f64 * s_w as f64 / s_out as f64)
                    .expect("an encodable multiplier");
                op.mult[c] = m0;
                op.shift[c] = shift;
            }
        }
        op.pad_values = if op.kind == OP_CONV2D && op.window[4] > 0 && op.in0 == input {
            let c = b.input.0 as usize;
            vec![pad_value; c]
        } else {
            Vec::new()
        };
    }
}
