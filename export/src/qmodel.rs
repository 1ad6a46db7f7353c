//! The int8 model: the folded graph with every tensor's quantization parameters and every op's
//! integer constants, exactly what the writer serialises.

use serde::Serialize;

use octet_runtime::format::MAX_ACCUMULATION;
use octet_runtime::{quantize_multiplier, Rounding};

use crate::graph::{FloatOp, Graph, OpKind, Shape3};
use crate::quantize::{
    add_multipliers, quantize_weights, tflite_add_multipliers, QParams, QuantizedWeights,
    WeightScheme,
};
use crate::{ExportError, Result};

/// An int8 activation tensor.
#[derive(Debug, Clone, Serialize)]
pub struct QTensor {
    pub name: String,
    pub shape: Shape3,
    pub qparams: QParams,
}

/// One int8 op with its constants.
#[derive(Debug, Clone)]
pub struct QOp {
    pub name: String,
    pub kind: OpKind,
    pub inputs: Vec<usize>,
    pub output: usize,
    /// Conv `[C_out][C_in][kh][kw]` (the graph's layout), fc `[N][K]`; empty without weights.
    pub weights: Option<QuantizedWeights>,
    /// int32, scale s_in·s_w[c], −z_in·Σw folded in.
    pub bias: Vec<i32>,
    /// The real bias the int32 bias stands for (before the zero-point fold), for simulation.
    pub bias_real: Vec<f32>,
    pub multipliers: Vec<i32>,
    pub shifts: Vec<i32>,
    /// The real multipliers the integers encode (report).
    pub effective: Vec<f64>,
    pub act_min: i32,
    pub act_max: i32,
    /// Per input channel (the first conv); empty: pad with the input zero point.
    pub pad_values: Vec<i8>,
}

/// Tensors and ops of the int8 model, in execution order, and how its requantizations round.
#[derive(Debug, Clone)]
pub struct QModel {
    pub tensors: Vec<QTensor>,
    pub ops: Vec<QOp>,
    pub input: usize,
    pub output: usize,
    pub rounding: Rounding,
}

impl QModel {
    /// Per op, the dequantized weights (fake-quantization of the float graph).
    pub fn dequantized_weights(&self, graph: &Graph) -> Vec<Vec<f32>> {
        self.ops
            .iter()
            .zip(&graph.ops)
            .map(|(q, f)| {
                q.weights
                    .as_ref()
                    .map_or_else(|| f.weight.clone(), |w| w.dequantize())
            })
            .collect()
    }

    /// Per op, the real value of the int32 bias.
    pub fn dequantized_biases(&self) -> Vec<Vec<f32>> {
        self.ops.iter().map(|q| q.bias_real.clone()).collect()
    }

    pub fn qparams(&self) -> Vec<QParams> {
        self.tensors.iter().map(|t| t.qparams).collect()
    }
}

/// Quantizes `graph` given each tensor's activation parameters (`acts[graph.input]` is
/// replaced by the fixed input parameters, max-pool outputs inherit their input's), its
/// requantizations to be rounded as `rounding` says (the residual adds follow it: octet's add
/// for the single rounding, TensorFlow Lite's for the double).
pub fn quantize_model(
    graph: &Graph,
    acts: &[QParams],
    scheme: WeightScheme,
    rounding: Rounding,
) -> Result<QModel> {
    let qp = tensor_params(graph, acts)?;
    let ops = graph
        .ops
        .iter()
        .map(|op| quantize_op(graph, op, &qp, scheme, rounding))
        .collect::<Result<Vec<_>>>()?;
    let tensors = graph
        .tensors
        .iter()
        .zip(&qp)
        .map(|(t, &qparams)| QTensor {
            name: t.name.clone(),
            shape: t.shape,
            qparams,
        })
        .collect();
    Ok(QModel {
        tensors,
        ops,
        input: graph.input,
        output: graph.output,
        rounding,
    })
}

/// Every tensor's parameters: `acts`, but the input's fixed ones and max pools passing their
/// input's through (the int8 max of int8 values needs no requantization).
fn tensor_params(graph: &Graph, acts: &[QParams]) -> Result<Vec<QParams>> {
    if acts.len() != graph.tensors.len() {
        return Err(ExportError::BadInput(format!(
            "{} activation parameters for {} tensors",
            acts.len(),
            graph.tensors.len()
        )));
    }
    let mut qp = acts.to_vec();
    qp[graph.input] = QParams::input();
    for op in &graph.ops {
        if let OpKind::MaxPool { .. } = op.kind {
            qp[op.output] = qp[op.inputs[0]];
        }
    }
    Ok(qp)
}

/// `op` with its integer constants, given every tensor's parameters `qp`.
fn quantize_op(
    graph: &Graph,
    op: &FloatOp,
    qp: &[QParams],
    scheme: WeightScheme,
    rounding: Rounding,
) -> Result<QOp> {
    let (sin, sout) = (qp[op.inputs[0]], qp[op.output]);
    let relu_min = if op.relu {
        sout.zero_point.max(-128)
    } else {
        -128
    };
    let mut q = QOp {
        name: op.name.clone(),
        kind: op.kind,
        inputs: op.inputs.clone(),
        output: op.output,
        weights: None,
        bias: Vec::new(),
        bias_real: Vec::new(),
        multipliers: Vec::new(),
        shifts: Vec::new(),
        effective: Vec::new(),
        act_min: relu_min,
        // ReLU6: 6 as TFLite quantizes it (CalculateActivationRangeQuantized).
        act_max: if op.relu6 {
            (sout.zero_point as i64 + (6.0 / sout.scale as f64).round() as i64).min(127) as i32
        } else {
            127
        },
        pad_values: Vec::new(),
    };
    match op.kind {
        OpKind::Conv2d { .. } | OpKind::DepthwiseConv2d { .. } | OpKind::FullyConnected => {
            quantize_weighted(graph, op, (sin, sout), scheme, &mut q)?
        }
        OpKind::MaxPool { .. } => {
            q.act_min = -128;
        }
        OpKind::AvgPool { k, .. } => {
            let m = sin.scale as f64 / (sout.scale as f64 * (k * k) as f64);
            q.push_multiplier(m)?;
            q.act_min = -128;
        }
        OpKind::Add => {
            let s1 = qp[op.inputs[1]].scale;
            let err = || ExportError::Multiplier {
                layer: op.name.clone(),
                value: sin.scale.max(s1) as f64 / sout.scale as f64,
            };
            match rounding {
                Rounding::Single => {
                    let (m, n) = add_multipliers(sin.scale as f64, s1 as f64, sout.scale as f64)
                        .ok_or_else(err)?;
                    q.multipliers.extend(m);
                    q.shifts.push(n);
                }
                Rounding::Double => {
                    let pairs =
                        tflite_add_multipliers(sin.scale, s1, sout.scale).ok_or_else(err)?;
                    q.multipliers.extend(pairs.map(|(m, _)| m));
                    q.shifts.extend(pairs.map(|(_, s)| s));
                }
            }
            q.effective.push(sin.scale as f64 / sout.scale as f64);
            q.effective.push(s1 as f64 / sout.scale as f64);
        }
    }
    Ok(q)
}

/// A conv's or fully connected layer's int8 weights, int32 biases and per-channel multipliers,
/// given its input and output parameters `(sin, sout)`.
fn quantize_weighted(
    graph: &Graph,
    op: &FloatOp,
    (sin, sout): (QParams, QParams),
    scheme: WeightScheme,
    q: &mut QOp,
) -> Result<()> {
    let k = op.k(graph);
    if k > MAX_ACCUMULATION as usize {
        return Err(ExportError::AccumulatorOverflow {
            layer: op.name.clone(),
            k,
        });
    }
    let cout = op.out_channels();
    let (s_in, s_out) = (sin.scale as f64, sout.scale as f64);
    // Floor each weight scale so m ≥ 2^−20: near-dead channels keep encodable
    // multipliers and biases that fit in int32.
    let floor = (s_out / s_in * 2f64.powi(-20)) as f32;
    let w = quantize_weights(&op.weight, cout, scheme, &vec![floor; cout]);
    let per = op.weight.len() / cout;
    // |Σ w·q| ≤ K·127·128 at every partial sum; keep bias + that inside int32.
    let bias_limit = (i32::MAX as i64 - 2 * (k as i64) * 127 * 128).max(0);
    for o in 0..cout {
        let s_acc = s_in * w.scales[o] as f64;
        let b = (op.bias[o] as f64 / s_acc)
            .round()
            .clamp(-(bias_limit as f64), bias_limit as f64) as i64;
        let sum_w: i64 = w.q[o * per..(o + 1) * per].iter().map(|&x| x as i64).sum();
        q.bias.push((b - sin.zero_point as i64 * sum_w) as i32);
        q.bias_real.push((b as f64 * s_acc) as f32);
        q.push_multiplier(s_acc / s_out)?;
    }
    if let Some(pv) = &op.pad_values {
        q.pad_values = pv.iter().map(|&v| sin.quantize(v)).collect();
    }
    q.weights = Some(w);
    Ok(())
}

impl QOp {
    /// Appends the real multiplier `m` and its encoding (M0, shift) by the runtime's
    /// `quantize_multiplier`: the one computation, so exporter and runtime cannot drift.
    fn push_multiplier(&mut self, m: f64) -> Result<()> {
        let (m0, shift) = quantize_multiplier(m).ok_or_else(|| ExportError::Multiplier {
            layer: self.name.clone(),
            value: m,
        })?;
        self.multipliers.push(m0);
        self.shifts.push(shift);
        self.effective.push(m);
        Ok(())
    }
}
