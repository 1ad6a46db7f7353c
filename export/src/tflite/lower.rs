//! A validated `.o8` [`Model`] → the TFLite [`Graph`] of the same integer arithmetic.
//!
//! - Input: a uint8 NHWC tensor of raw pixels and a QUANTIZE to int8 with the same scale (TFLite
//!   derives the multiplier 1 exactly, so q = pixel − zp_u8 + zp_i8 = pixel − 128 as octet's
//!   interpreter computes it).
//! - conv2d / fully_connected: CONV_2D / FULLY_CONNECTED with OHWI int8 weights, per-channel
//!   scales (dimension 0) chosen so that TFLite derives the `.o8`'s (M0, shift)
//!   ([`super::scales`]), and int32 biases with the input zero point taken out again (the `.o8`
//!   folds −z_in·Σw into them; TFLite subtracts z_in from every input value itself).
//! - Padding: SAME where TFLite's SAME places the window as octet's symmetric pad does, else an
//!   explicit PAD (which fills with the input zero point, as octet does) and VALID. The first
//!   layer pads with the pixel whose normalised value is 0 rather than with z_in = −128: with one
//!   channel (or one value for all), the int8 input tensor gets that pad value as its zero point
//!   (the uint8 zero point moves with it, so q is unchanged) and the bias absorbs the
//!   difference; with a value per channel, CONCATENATION frames the input with them.
//! - depthwise_conv2d: DEPTHWISE_CONV_2D with the `.o8`'s `[1][kh][kw][C_out]` weights,
//!   per-channel scales along dimension 3, the depth multiplier C_out / C_in.
//! - max_pool: MAX_POOL_2D (VALID). avg_pool: a DEPTHWISE_CONV_2D of weights 1 and bias 0, so
//!   acc = Σ(q − z_in) and the requantization are octet's; TFLite's AVERAGE_POOL_2D divides with
//!   its own rounding and cannot change the scale.
//! - add: ADD (TFLite derives its own fixed-point parameters from the three scales).
//! - Output clamps: NONE for [−128, 127], RELU for [max(z_out, −128), 127], RELU6 for that
//!   with the top at z_out + round(6 / s_out).

use octet_runtime::{Model, OpInfo, OpKind, TensorInfo};
use serde::Serialize;

use super::graph::{Graph, Options, Quant};
use super::scales::{bias_scale, derived_multiplier, weight_scale};
use super::schema::{ActivationFunctionType, Padding, TensorType};
use crate::{ExportError, Result};

/// How many (M0, shift) pairs TFLite derives exactly from the written scales.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct MultiplierCheck {
    /// Requantization pairs (one per output channel of conv and fc, one per avg_pool).
    pub pairs: usize,
    /// Pairs no f32 weight scale reproduces: TFLite derives a neighbouring M0.
    pub inexact: usize,
    /// The first few inexact pairs.
    pub examples: Vec<InexactMultiplier>,
    /// Residual adds: TFLite computes their parameters its own way (see the report).
    pub adds: usize,
}

/// One requantization pair TFLite derives differently.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InexactMultiplier {
    pub op: u32,
    pub channel: usize,
    /// The `.o8`'s (M0, shift).
    pub stored: (i32, i32),
    /// What TFLite derives from the written scales.
    pub derived: (i32, i32),
}

/// Examples kept in [`MultiplierCheck::examples`].
const EXAMPLES: usize = 8;

/// Lowers `model` to a TFLite graph; the check of its requantization multipliers beside it.
pub fn lower(model: &Model) -> Result<(Graph, MultiplierCheck)> {
    let mut l = Lowering {
        model,
        g: Graph::default(),
        ids: vec![None; model.num_tensors()],
        zero_points: model.tensors().map(|t| t.zero_point).collect(),
        check: MultiplierCheck::default(),
    };
    if model.input_encoding() != octet_runtime::format::InputEncoding::PixelsU8Chw {
        return Err(unsupported(format!(
            "the model's input is {} (an imported model): convert writes octet's exports, whose \
             input is raw u8 pixels",
            model.input_encoding().name()
        )));
    }
    l.input()?;
    for op in model.ops() {
        match op.kind {
            OpKind::Conv2d | OpKind::DepthwiseConv2d | OpKind::FullyConnected => l.weighted(&op)?,
            OpKind::MaxPool => l.max_pool(&op)?,
            OpKind::AvgPool => l.avg_pool(&op)?,
            OpKind::Add | OpKind::TfliteAdd => l.add(&op)?,
            other => {
                return Err(unsupported(format!(
                    "op {} is {}: convert writes the ops of octet's exports (conv2d, \
                     depthwise_conv2d, fully_connected, max_pool, avg_pool, add, tflite_add)",
                    op.index,
                    other.name()
                )))
            }
        }
    }
    let out = l.id(model.output_tensor())?;
    l.g.outputs = vec![out];
    Ok((l.g, l.check))
}

fn unsupported(what: String) -> ExportError {
    ExportError::Tflite(what)
}

struct Lowering<'a, 'm> {
    model: &'a Model<'m>,
    g: Graph,
    /// `.o8` tensor id → TFLite tensor index, once written.
    ids: Vec<Option<i32>>,
    /// The zero point each `.o8` tensor has in TFLite (the input's may differ, see above).
    zero_points: Vec<i32>,
    check: MultiplierCheck,
}

impl Lowering<'_, '_> {
    fn tensor(&self, id: u16) -> Result<TensorInfo> {
        self.model
            .tensor(id)
            .ok_or_else(|| unsupported(format!("tensor {id} is missing")))
    }

    fn id(&self, id: u16) -> Result<i32> {
        self.ids
            .get(id as usize)
            .copied()
            .flatten()
            .ok_or_else(|| unsupported(format!("tensor {id} is read before it is written")))
    }

    /// The uint8 pixels, the QUANTIZE op, and the int8 input tensor.
    fn input(&mut self) -> Result<()> {
        let id = self.model.input_tensor();
        let t = self.tensor(id)?;
        let z = input_zero_point(self.model, &t);
        self.zero_points[id as usize] = z;
        let pixels = self.g.add_tensor(super::graph::Tensor {
            name: "pixels".into(),
            shape: nhwc(&t),
            dtype: TensorType::UINT8,
            // q_i8 = pixel − zp_u8 + z = pixel − 128.
            quant: Some(Quant::per_tensor(t.scale, z + 128)),
            data: None,
        });
        let input = self.g.activation("input".into(), nhwc(&t), t.scale, z);
        self.g.op(Options::Quantize, vec![pixels], vec![input]);
        self.g.inputs = vec![pixels];
        self.ids[id as usize] = Some(input);
        Ok(())
    }

    /// The output activation tensor of `op`, registered under its `.o8` id.
    fn output(&mut self, op: &OpInfo, shape: Vec<i32>) -> Result<i32> {
        let t = self.tensor(op.output)?;
        let name = format!("{}_{}", op.kind.name(), op.index);
        let y = self.g.activation(name, shape, t.scale, t.zero_point);
        self.ids[op.output as usize] = Some(y);
        Ok(y)
    }

    /// conv2d → CONV_2D (with PAD where needed); fully_connected → FULLY_CONNECTED.
    fn weighted(&mut self, op: &OpInfo) -> Result<()> {
        let (tin, tout) = (self.tensor(op.input0)?, self.tensor(op.output)?);
        let z_in = self.zero_points[op.input0 as usize];
        let act = fused_activation(op, &tout)?;
        let cout = tout.c as usize;
        let per = op.weights.len() / cout.max(1);
        let mut scales = Vec::with_capacity(cout);
        let mut bias = Vec::with_capacity(cout * 4);
        for c in 0..cout {
            let (m0, shift) = (op.multipliers.get(c), op.shifts.get(c));
            let s_w = self.weight_scale(op, c, (tin.scale, tout.scale), (m0, shift));
            scales.push(s_w);
            // The .o8 bias holds −z_in·Σw (DESIGN.md); TFLite subtracts z_in itself.
            let sum_w: i64 = if op.kind == OpKind::DepthwiseConv2d {
                // [kh][kw][C_out]: channel c's weights are every C_out-th.
                op.weights
                    .iter()
                    .skip(c)
                    .step_by(cout)
                    .map(|&w| w as i64)
                    .sum()
            } else {
                let row = &op.weights[c * per..(c + 1) * per];
                row.iter().map(|&w| w as i64).sum()
            };
            let b = op.bias.get(c) as i64 + z_in as i64 * sum_w;
            let b = i32::try_from(b).map_err(|_| {
                unsupported(format!(
                    "op {} channel {c}: the bias without the input zero point, {b}, exceeds int32",
                    op.index
                ))
            })?;
            bias.extend_from_slice(&b.to_le_bytes());
        }
        let name = format!("{}_{}", op.kind.name(), op.index);
        let b_scales = scales.iter().map(|&s| bias_scale(tin.scale, s)).collect();
        let b = self.g.constant(
            format!("{name}/bias"),
            vec![cout as i32],
            TensorType::INT32,
            Some(Quant::per_channel(b_scales, 0)),
            bias,
        );
        let w_shape = match op.kind {
            OpKind::DepthwiseConv2d => vec![
                1,
                op.window.kernel_h as i32,
                op.window.kernel_w as i32,
                cout as i32,
            ],
            OpKind::Conv2d => vec![
                cout as i32,
                op.window.kernel_h as i32,
                op.window.kernel_w as i32,
                tin.c as i32,
            ],
            _ => vec![cout as i32, per as i32],
        };
        // Per-channel scales along the output channels: TFLite's dimension 3 for depthwise.
        let axis = if op.kind == OpKind::DepthwiseConv2d {
            3
        } else {
            0
        };
        let w = self.g.constant(
            format!("{name}/weights"),
            w_shape,
            TensorType::INT8,
            Some(Quant::per_channel(scales, axis)),
            op.weights.iter().map(|&v| v as u8).collect(),
        );
        let x = self.id(op.input0)?;
        if op.kind == OpKind::FullyConnected {
            let y = self.output(op, vec![1, cout as i32])?;
            self.g
                .op(Options::FullyConnected { act }, vec![x, w, b], vec![y]);
            return Ok(());
        }
        let (x, padding) = self.padded(op, &tin, z_in, x)?;
        let y = self.output(op, nhwc(&tout))?;
        let stride = uniform(op)?.1 as i32;
        let options = if op.kind == OpKind::DepthwiseConv2d {
            Options::Depthwise {
                padding,
                stride,
                multiplier: (cout / tin.c as usize) as i32,
                act,
            }
        } else {
            Options::Conv {
                padding,
                stride,
                act,
            }
        };
        self.g.op(options, vec![x, w, b], vec![y]);
        Ok(())
    }

    /// The weight scale TFLite derives (M0, shift) from, counted in the check.
    fn weight_scale(
        &mut self,
        op: &OpInfo,
        c: usize,
        (s_in, s_out): (f32, f32),
        pair: (i32, i32),
    ) -> f32 {
        let (s_w, exact) = weight_scale(s_in, s_out, pair.0, pair.1);
        self.check.pairs += 1;
        if !exact {
            self.check.inexact += 1;
            if self.check.examples.len() < EXAMPLES {
                self.check.examples.push(InexactMultiplier {
                    op: op.index,
                    channel: c,
                    stored: pair,
                    derived: derived_multiplier(s_in, s_w, s_out).unwrap_or((0, 0)),
                });
            }
        }
        s_w
    }

    /// The conv's input as TFLite reads it and the padding mode: `x` itself with VALID (no
    /// pad) or SAME (where it places the window as octet does), else a PAD op's output.
    fn padded(
        &mut self,
        op: &OpInfo,
        tin: &TensorInfo,
        z_in: i32,
        x: i32,
    ) -> Result<(i32, Padding)> {
        let (k, s, pad) = uniform(op)?;
        if pad == 0 {
            return Ok((x, Padding::VALID));
        }
        if op.pad_values.iter().any(|&v| v as i32 != z_in) {
            return Ok((self.bordered(op, tin, z_in, x)?, Padding::VALID));
        }
        if op.window.kernel_w as usize == k
            && same_places_like(tin.h as usize, k, s, pad)
            && same_places_like(tin.w as usize, k, s, pad)
        {
            return Ok((x, Padding::SAME));
        }
        let p = pad as i32;
        let paddings: Vec<u8> = [0, 0, p, p, p, p, 0, 0]
            .iter()
            .flat_map(|v: &i32| v.to_le_bytes())
            .collect();
        let name = format!("{}_{}/pad", op.kind.name(), op.index);
        let paddings = self.g.constant(
            format!("{name}/paddings"),
            vec![4, 2],
            TensorType::INT32,
            None,
            paddings,
        );
        let shape = vec![1, tin.h as i32 + 2 * p, tin.w as i32 + 2 * p, tin.c as i32];
        let y = self.g.activation(name, shape, tin.scale, z_in);
        self.g.op(Options::Pad, vec![x, paddings], vec![y]);
        Ok((y, Padding::VALID))
    }

    /// `x` framed by `op`'s pad values, each channel its own: CONCATENATION of constant columns,
    /// then rows (TFLite's PAD fills every channel with the one zero point).
    fn bordered(&mut self, op: &OpInfo, tin: &TensorInfo, z_in: i32, x: i32) -> Result<i32> {
        let p = uniform(op)?.2 as i32;
        let (h, w, c) = (tin.h as i32, tin.w as i32, tin.c as i32);
        let name = format!("{}_{}/border", op.kind.name(), op.index);
        let quant = Some(Quant::per_tensor(tin.scale, z_in));
        let fill = |pixels: i32| -> Vec<u8> {
            let one: Vec<u8> = op.pad_values.iter().map(|&v| v as u8).collect();
            one.repeat(pixels as usize)
        };
        let side = self.g.constant(
            format!("{name}/columns"),
            vec![1, h, p, c],
            TensorType::INT8,
            quant.clone(),
            fill(h * p),
        );
        let widened = vec![1, h, w + 2 * p, c];
        let rows = self
            .g
            .activation(format!("{name}/wide"), widened, tin.scale, z_in);
        self.g.op(
            Options::Concatenation { axis: 2 },
            vec![side, x, side],
            vec![rows],
        );
        let cap = self.g.constant(
            format!("{name}/rows"),
            vec![1, p, w + 2 * p, c],
            TensorType::INT8,
            quant,
            fill(p * (w + 2 * p)),
        );
        let shape = vec![1, h + 2 * p, w + 2 * p, c];
        let y = self.g.activation(name, shape, tin.scale, z_in);
        self.g.op(
            Options::Concatenation { axis: 1 },
            vec![cap, rows, cap],
            vec![y],
        );
        Ok(y)
    }

    fn max_pool(&mut self, op: &OpInfo) -> Result<()> {
        let tout = self.tensor(op.output)?;
        let act = fused_activation(op, &tout)?;
        let x = self.id(op.input0)?;
        let y = self.output(op, nhwc(&tout))?;
        let (_, stride, _) = uniform(op)?;
        let options = Options::MaxPool {
            kernel: (op.window.kernel_h as i32, op.window.kernel_w as i32),
            stride: stride as i32,
            act,
        };
        self.g.op(options, vec![x], vec![y]);
        Ok(())
    }

    /// avg_pool → DEPTHWISE_CONV_2D with weights 1, bias 0 and the pool's multiplier.
    fn avg_pool(&mut self, op: &OpInfo) -> Result<()> {
        let (tin, tout) = (self.tensor(op.input0)?, self.tensor(op.output)?);
        let act = fused_activation(op, &tout)?;
        let pair = (op.multipliers.get(0), op.shifts.get(0));
        let s_w = self.weight_scale(op, 0, (tin.scale, tout.scale), pair);
        let c = tin.c as usize;
        let (kh, kw) = (op.window.kernel_h as usize, op.window.kernel_w as usize);
        let (_, stride, _) = uniform(op)?;
        let name = format!("{}_{}", op.kind.name(), op.index);
        let w = self.g.constant(
            format!("{name}/weights"),
            vec![1, kh as i32, kw as i32, c as i32],
            TensorType::INT8,
            Some(Quant::per_channel(vec![s_w; c], 3)),
            vec![1u8; kh * kw * c],
        );
        let b = self.g.constant(
            format!("{name}/bias"),
            vec![c as i32],
            TensorType::INT32,
            Some(Quant::per_channel(vec![bias_scale(tin.scale, s_w); c], 0)),
            vec![0u8; 4 * c],
        );
        let x = self.id(op.input0)?;
        let y = self.output(op, nhwc(&tout))?;
        let options = Options::Depthwise {
            padding: Padding::VALID,
            stride: stride as i32,
            multiplier: 1,
            act,
        };
        self.g.op(options, vec![x, w, b], vec![y]);
        Ok(())
    }

    fn add(&mut self, op: &OpInfo) -> Result<()> {
        let tout = self.tensor(op.output)?;
        let act = fused_activation(op, &tout)?;
        let in1 = op
            .input1
            .ok_or_else(|| unsupported(format!("add {} has one input", op.index)))?;
        let (x0, x1) = (self.id(op.input0)?, self.id(in1)?);
        let y = self.output(op, nhwc(&tout))?;
        self.g.op(Options::Add { act }, vec![x0, x1], vec![y]);
        // TFLite's add derives its parameters from the scales as the .o8's tflite_add did;
        // octet's own add computes its own (see the report).
        if op.kind == OpKind::Add {
            self.check.adds += 1;
        }
        Ok(())
    }
}

/// Op `op`'s window as octet's exports write it: (kernel height, stride, padding), one stride,
/// the same padding on every side, no dilation; an error for any other.
fn uniform(op: &OpInfo) -> Result<(usize, usize, usize)> {
    let w = &op.window;
    let same_pad = w.pad_top == w.pad_left && w.pad_top == w.pad_bottom && w.pad_top == w.pad_right;
    if w.stride_h != w.stride_w || !same_pad || w.dilation_h != 1 || w.dilation_w != 1 {
        return Err(unsupported(format!(
            "op {} ({}) has a window octet's exports do not write ({w:?})",
            op.index,
            op.kind.name()
        )));
    }
    Ok((w.kernel_h as usize, w.stride_h as usize, w.pad_top as usize))
}

/// `[1, h, w, c]`.
fn nhwc(t: &TensorInfo) -> Vec<i32> {
    vec![1, t.h as i32, t.w as i32, t.c as i32]
}

/// Whether TFLite's SAME padding along a dimension of `n` (kernel `k`, stride `s`) gives octet's
/// output size (n + 2·pad − k)/s + 1 with `pad` before the first row.
fn same_places_like(n: usize, k: usize, s: usize, pad: usize) -> bool {
    let ours = (n + 2 * pad - k) / s + 1;
    let same = n.div_ceil(s);
    let total = ((same - 1) * s + k).saturating_sub(n);
    ours == same && total / 2 == pad
}

/// The fused activation whose clamp TFLite derives from the output tensor equal to op's
/// (act_min, act_max): NONE for [−128, 127], RELU for [max(z_out, −128), 127], RELU6 for
/// [max(z_out, −128), min(z_out + round(6 / s_out), 127)].
fn fused_activation(op: &OpInfo, tout: &TensorInfo) -> Result<ActivationFunctionType> {
    let z_out = tout.zero_point;
    let six = (z_out as i64 + (6.0 / tout.scale as f64).round() as i64).min(127) as i32;
    match (op.act_min, op.act_max) {
        (-128, 127) => Ok(ActivationFunctionType::NONE),
        (lo, 127) if lo == z_out.max(-128) => Ok(ActivationFunctionType::RELU),
        (lo, hi) if lo == z_out.max(-128) && hi == six => Ok(ActivationFunctionType::RELU6),
        (lo, hi) => Err(unsupported(format!(
            "op {} clamps to [{lo}, {hi}] with output zero point {z_out}: neither no activation, \
             ReLU nor ReLU6",
            op.index
        ))),
    }
}

/// The zero point the int8 input tensor gets in TFLite: the `.o8`'s (−128), or the one value
/// every padding reader of the input pads with, where all its readers are convs or fcs (whose
/// biases absorb the change): then TFLite's own padding is octet's. Otherwise convs that pad with
/// other values frame their input themselves (`bordered`).
fn input_zero_point(model: &Model, input: &TensorInfo) -> i32 {
    let z = input.zero_point;
    let readers: Vec<OpInfo> = model
        .ops()
        .filter(|op| op.input0 == input.id || op.input1 == Some(input.id))
        .collect();
    // A conv without pad values pads with z itself.
    let mut values = readers
        .iter()
        .filter(|op| op.window.pad_top > 0)
        .flat_map(|op| {
            let own = op.pad_values.iter().map(|&v| v as i32);
            own.chain(op.pad_values.is_empty().then_some(z))
        });
    let Some(first) = values.next() else { return z };
    let weighted = |op: &OpInfo| matches!(op.kind, OpKind::Conv2d | OpKind::FullyConnected);
    if values.all(|v| v == first) && readers.iter().all(weighted) {
        first
    } else {
        z
    }
}
