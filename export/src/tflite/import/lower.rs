//! The TFLite graph → octet's `.o8` model ([`O8Model`]): each TFLite int8 op as the `.o8` op of
//! the same integer arithmetic, its fixed-point parameters derived from the file's float scales
//! exactly as TensorFlow Lite Micro derives them when it prepares the op (so the bytes are the
//! same), the input zero point folded into the biases as octet's format wants it.

use std::collections::HashMap;

use octet_runtime::format::{InputEncoding, Window};
use octet_runtime::requant::quantize_multiplier_tflite;
use octet_runtime::{OpKind, Rounding};

use super::super::schema::{ActivationFunctionType, BuiltinOperator as B, Padding, TensorType};
use super::read::{OpView, TensorView, TfliteFile};
use super::{ImportError, ImportedOp};
use crate::graph::Shape3;
use crate::quantize::{softmax_params, tflite_add_multipliers, TFLITE_ADD_LEFT_SHIFT};
use crate::write::{O8Model, O8Op, O8Tensor};

/// The TFLite builtins octet imports, as `--help` and errors list them.
pub const SUPPORTED: &str = "CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED, AVERAGE_POOL_2D, \
     MAX_POOL_2D, ADD, SOFTMAX, RESHAPE, SQUEEZE, PAD, PADV2, and QUANTIZE from a uint8 input";

type Result<T> = std::result::Result<T, ImportError>;

/// The walk over the graph: the `.o8` model being built and where each TFLite tensor went.
pub(super) struct Lowering<'f, 'a> {
    file: &'f TfliteFile<'a>,
    rounding: Rounding,
    tensors: Vec<O8Tensor>,
    ops: Vec<O8Op>,
    /// TFLite tensor index → `.o8` tensor id.
    ids: HashMap<usize, usize>,
    /// TFLite tensor index → the builtin codes of the operators reading it.
    readers: HashMap<usize, Vec<B>>,
    pub(super) report: Vec<ImportedOp>,
}

impl<'f, 'a> Lowering<'f, 'a> {
    pub fn new(file: &'f TfliteFile<'a>, rounding: Rounding) -> Self {
        Lowering {
            file,
            rounding,
            tensors: Vec::new(),
            ops: Vec::new(),
            ids: HashMap::new(),
            readers: HashMap::new(),
            report: Vec::new(),
        }
    }

    /// The whole model: its one input, every operator in order, its one output.
    pub fn run(mut self) -> Result<(O8Model, Vec<ImportedOp>)> {
        let (inputs, outputs) = self.file.io();
        let ([input], [output]) = (inputs.as_slice(), outputs.as_slice()) else {
            return Err(ImportError::Unsupported(format!(
                "{} inputs and {} outputs: octet runs models of one input and one output",
                inputs.len(),
                outputs.len()
            )));
        };
        let ops = self.file.operators()?;
        for op in &ops {
            for &t in op.inputs.iter().filter(|&&t| t >= 0) {
                self.readers.entry(t as usize).or_default().push(op.code);
            }
        }
        let (encoding, skip) = self.input(*input, &ops)?;
        for op in ops.iter().skip(skip) {
            let octet = self.op(op)?;
            self.report.push(ImportedOp {
                index: op.index,
                tflite: op.name(),
                octet,
            });
        }
        let out_tensor = self.file.tensor(*output, "the model output")?;
        if out_tensor.dtype != TensorType::INT8 {
            return Err(ImportError::Unsupported(format!(
                "the output tensor '{}' is {:?}: octet's models end in int8 (drop the final \
                 DEQUANTIZE; callers dequantize with the output's scale and zero point)",
                out_tensor.name,
                out_tensor.dtype.variant_name().unwrap_or("?")
            )));
        }
        let out = self.id(*output, "the model output")?;
        if self.ops.last().map(|o| o.output) != Some(out) {
            return Err(ImportError::Unsupported(
                "the model's output is not what its last operator writes".into(),
            ));
        }
        let input = self.id(*input, "the model input")?;
        let model = O8Model {
            tensors: self.tensors,
            ops: self.ops,
            input,
            output: out,
            input_encoding: encoding,
            rounding: self.rounding,
        };
        Ok((model, self.report))
    }

    /// The model input: an int8 tensor, or a uint8 one whose first operator is the QUANTIZE
    /// that only moves its zero point by 128 (q = u − 128). Returns the encoding and the
    /// operators consumed.
    fn input(&mut self, input: i32, ops: &[OpView]) -> Result<(InputEncoding, usize)> {
        let t = self.file.tensor(input, "the model input")?;
        if t.dtype == TensorType::INT8 {
            self.activation(&t, "the model input")?;
            return Ok((InputEncoding::I8Hwc, 0));
        }
        let quantize = ops.first().filter(|op| {
            op.code == B::QUANTIZE && op.inputs.first() == Some(&input) && op.outputs.len() == 1
        });
        if let (TensorType::UINT8, Some(q)) = (t.dtype, quantize) {
            let y = self.file.tensor(q.outputs[0], "QUANTIZE's output")?;
            let (s_u, z_u) = t.per_tensor().ok_or_else(|| not_per_tensor(&t))?;
            let (s_i, z_i) = y.per_tensor().ok_or_else(|| not_per_tensor(&y))?;
            if y.dtype == TensorType::INT8 && s_u == s_i && z_u - z_i == 128 {
                let id = self.activation(&y, "QUANTIZE's output")?;
                self.ids.insert(input as usize, id);
                self.report.push(ImportedOp {
                    index: q.index,
                    tflite: q.name(),
                    octet: "the input (u8, q = u − 128)".into(),
                });
                return Ok((InputEncoding::U8Hwc, 1));
            }
        }
        Err(ImportError::Unsupported(format!(
            "the input tensor '{}' is {}: octet takes an int8 input, or a uint8 one followed by \
             a QUANTIZE to int8 of the same scale and the zero point moved by 128",
            t.name,
            t.dtype.variant_name().unwrap_or("?")
        )))
    }

    /// `.o8` tensor id of TFLite tensor `t`, which an earlier op (or the input) wrote.
    fn id(&self, t: i32, what: &str) -> Result<usize> {
        usize::try_from(t)
            .ok()
            .and_then(|t| self.ids.get(&t).copied())
            .ok_or_else(|| {
                ImportError::Malformed(format!("{what}: tensor {t} is read before it is written"))
            })
    }

    /// A new `.o8` activation tensor for TFLite's int8 tensor `t`.
    fn activation(&mut self, t: &TensorView, what: &str) -> Result<usize> {
        if t.dtype != TensorType::INT8 {
            return Err(ImportError::Unsupported(format!(
                "{what}: tensor '{}' is {}: octet's activations are int8",
                t.name,
                t.dtype.variant_name().unwrap_or("?")
            )));
        }
        let (scale, zero_point) = t.per_tensor().ok_or_else(|| not_per_tensor(t))?;
        if !(scale.is_finite() && scale > 0.0 && (-128..=127).contains(&zero_point)) {
            return Err(ImportError::Unsupported(format!(
                "{what}: tensor '{}' has scale {scale} and zero point {zero_point}",
                t.name
            )));
        }
        let shape = chw(&t.shape).ok_or_else(|| {
            ImportError::Unsupported(format!(
                "{what}: tensor '{}' has shape {:?}: octet's tensors are one image (batch 1) \
                 of at most 4 dimensions, each under 65 535",
                t.name, t.shape
            ))
        })?;
        self.tensors.push(O8Tensor {
            shape,
            scale,
            zero_point,
        });
        let id = self.tensors.len() - 1;
        self.ids.insert(t.index, id);
        Ok(id)
    }

    /// Operator `op` as `.o8` ops; returns what it became, for the report.
    fn op(&mut self, op: &OpView) -> Result<String> {
        let at = format!("operator {} ({})", op.index, op.name());
        let out = match op.code {
            B::CONV_2D => self.conv(op, &at, false)?,
            B::DEPTHWISE_CONV_2D => self.conv(op, &at, true)?,
            B::FULLY_CONNECTED => self.fully_connected(op, &at)?,
            B::AVERAGE_POOL_2D | B::MAX_POOL_2D => self.pool(op, &at)?,
            B::ADD => self.add(op, &at)?,
            B::SOFTMAX => self.softmax(op, &at)?,
            B::RESHAPE | B::SQUEEZE => return self.reshape(op, &at),
            B::PAD | B::PADV2 => self.pad(op, &at)?,
            _ => {
                return Err(ImportError::Unsupported(format!(
                    "{at}: not in octet's op set ({SUPPORTED})"
                )))
            }
        };
        Ok(out.name().to_string())
    }

    /// The operator's input `i` (a TFLite tensor), or the error naming it.
    fn input_tensor(&self, op: &OpView, i: usize, at: &str) -> Result<TensorView<'a>> {
        let t = *op
            .inputs
            .get(i)
            .filter(|&&t| t >= 0)
            .ok_or_else(|| ImportError::Malformed(format!("{at}: input {i} is missing")))?;
        self.file.tensor(t, at)
    }

    /// The operator's one output as a new `.o8` tensor, with its TFLite view.
    fn output(&mut self, op: &OpView, at: &str) -> Result<(usize, TensorView<'a>)> {
        let [t] = op.outputs.as_slice() else {
            return Err(ImportError::Unsupported(format!(
                "{at}: {} outputs (one expected)",
                op.outputs.len()
            )));
        };
        let v = self.file.tensor(*t, at)?;
        let id = self.activation(&v, at)?;
        Ok((id, v))
    }

    /// CONV_2D / DEPTHWISE_CONV_2D: weights, per-channel multipliers from the scales, the
    /// bias with the input zero point folded in, the window from TFLite's padding.
    fn conv(&mut self, op: &OpView, at: &str, depthwise: bool) -> Result<OpKind> {
        let x = self.input_tensor(op, 0, at)?;
        let w = self.input_tensor(op, 1, at)?;
        let xid = self.id(x.index as i32, at)?;
        let (s_in, z_in) = (self.tensors[xid].scale, self.tensors[xid].zero_point);
        let (yid, _) = self.output(op, at)?;
        let (si, so) = (self.tensors[xid].shape, self.tensors[yid].shape);
        let (stride, dilation, padding, act, dm) = if depthwise {
            let o = op.op.builtin_options_as_depthwise_conv_2doptions();
            let o = o.ok_or_else(|| missing_options(at))?;
            let s = (o.stride_h(), o.stride_w());
            let d = (o.dilation_h_factor(), o.dilation_w_factor());
            (
                s,
                d,
                o.padding(),
                o.fused_activation_function(),
                o.depth_multiplier(),
            )
        } else {
            let o = op.op.builtin_options_as_conv_2doptions();
            let o = o.ok_or_else(|| missing_options(at))?;
            let s = (o.stride_h(), o.stride_w());
            let d = (o.dilation_h_factor(), o.dilation_w_factor());
            (s, d, o.padding(), o.fused_activation_function(), 1)
        };
        // Weights: conv [C_out][kh][kw][C_in]; depthwise [1][kh][kw][C_out].
        let (kh, kw, cout) = match (depthwise, w.shape.as_slice()) {
            (false, &[o, h, ww, i]) if i as usize == si.c => (h, ww, o),
            (true, &[1, h, ww, o]) => (h, ww, o),
            _ => {
                return Err(ImportError::Unsupported(format!(
                    "{at}: weights of shape {:?} for an input of {} channels",
                    w.shape, si.c
                )))
            }
        };
        if cout as usize != so.c || (depthwise && cout as usize != si.c * dm.max(1) as usize) {
            return Err(ImportError::Malformed(format!(
                "{at}: {cout} output channels for an output of {} (depth multiplier {dm})",
                so.c
            )));
        }
        let window = window(at, (si, so), (kh, kw), stride, dilation, padding)?;
        let weights = int8_data(&w, at)?;
        let n = so.c;
        let per_channel = weights.len() / n.max(1);
        // Σw per output channel: conv rows are contiguous; depthwise channels are strided.
        let sum_w = |c: usize| -> i64 {
            if depthwise {
                (0..per_channel).map(|t| weights[t * n + c] as i64).sum()
            } else {
                weights[c * per_channel..][..per_channel]
                    .iter()
                    .map(|&v| v as i64)
                    .sum()
            }
        };
        let axis = if depthwise { 3 } else { 0 };
        let scales = weight_scales(&w, n, axis, at)?;
        let bias = self.bias(op, n, at)?;
        let so_scale = self.tensors[yid].scale;
        let mut o8 = O8Op::new(
            if depthwise {
                OpKind::DepthwiseConv2d
            } else {
                OpKind::Conv2d
            },
            vec![xid],
            yid,
        );
        for c in 0..n {
            let (m, s) = multiplier(s_in, scales[c], so_scale, at)?;
            o8.multipliers.push(m);
            o8.shifts.push(s);
            o8.bias.push(fold_bias(bias[c], z_in, sum_w(c), at, c)?);
        }
        o8.window = window;
        o8.act = self.activation_range(act, yid, at)?;
        o8.weights = weights.to_vec();
        let kind = o8.kind;
        self.ops.push(o8);
        Ok(kind)
    }

    /// FULLY_CONNECTED over any input shape (K = its elements), weights `[N][K]`.
    fn fully_connected(&mut self, op: &OpView, at: &str) -> Result<OpKind> {
        let x = self.input_tensor(op, 0, at)?;
        let w = self.input_tensor(op, 1, at)?;
        let xid = self.id(x.index as i32, at)?;
        let (s_in, z_in) = (self.tensors[xid].scale, self.tensors[xid].zero_point);
        let o = op.op.builtin_options_as_fully_connected_options();
        let act = o.map_or(ActivationFunctionType::NONE, |o| {
            o.fused_activation_function()
        });
        if o.is_some_and(|o| o.weights_format().0 != 0) {
            return Err(ImportError::Unsupported(format!(
                "{at}: shuffled weights (only the default format)"
            )));
        }
        let (yid, _) = self.output(op, at)?;
        let k = self.tensors[xid].shape.len();
        let n = self.tensors[yid].shape.len();
        if w.shape != [n as i32, k as i32] {
            return Err(ImportError::Unsupported(format!(
                "{at}: weights of shape {:?} for {k} inputs and {n} outputs (one row per \
                 output; batch 1)",
                w.shape
            )));
        }
        let weights = int8_data(&w, at)?;
        let scales = weight_scales(&w, n, 0, at)?;
        let bias = self.bias(op, n, at)?;
        let so = self.tensors[yid].scale;
        let mut o8 = O8Op::new(OpKind::FullyConnected, vec![xid], yid);
        for c in 0..n {
            let (m, s) = multiplier(s_in, scales[c], so, at)?;
            o8.multipliers.push(m);
            o8.shifts.push(s);
            let sum: i64 = weights[c * k..][..k].iter().map(|&v| v as i64).sum();
            o8.bias.push(fold_bias(bias[c], z_in, sum, at, c)?);
        }
        o8.act = self.activation_range(act, yid, at)?;
        o8.weights = weights.to_vec();
        self.ops.push(o8);
        Ok(OpKind::FullyConnected)
    }

    /// AVERAGE_POOL_2D (TFLite's, same quantization in and out) and MAX_POOL_2D.
    fn pool(&mut self, op: &OpView, at: &str) -> Result<OpKind> {
        let x = self.input_tensor(op, 0, at)?;
        let xid = self.id(x.index as i32, at)?;
        let o = op.op.builtin_options_as_pool_2doptions();
        let o = o.ok_or_else(|| missing_options(at))?;
        let (yid, _) = self.output(op, at)?;
        self.same_quant(xid, yid, at)?;
        let (si, so) = (self.tensors[xid].shape, self.tensors[yid].shape);
        let kernel = (o.filter_height(), o.filter_width());
        let stride = (o.stride_h(), o.stride_w());
        let kind = if op.code == B::MAX_POOL_2D {
            OpKind::MaxPool
        } else {
            OpKind::TfliteAvgPool
        };
        let mut o8 = O8Op::new(kind, vec![xid], yid);
        o8.window = window(at, (si, so), kernel, stride, (1, 1), o.padding())?;
        o8.act = self.activation_range(o.fused_activation_function(), yid, at)?;
        self.ops.push(o8);
        Ok(kind)
    }

    /// ADD of two tensors of one shape: TFLite's three multipliers from the scales.
    fn add(&mut self, op: &OpView, at: &str) -> Result<OpKind> {
        let a = self.input_tensor(op, 0, at)?;
        let b = self.input_tensor(op, 1, at)?;
        let (aid, bid) = (self.id(a.index as i32, at)?, self.id(b.index as i32, at)?);
        let act = op
            .op
            .builtin_options_as_add_options()
            .map_or(ActivationFunctionType::NONE, |o| {
                o.fused_activation_function()
            });
        let (yid, _) = self.output(op, at)?;
        let shape = self.tensors[yid].shape;
        if self.tensors[aid].shape != shape || self.tensors[bid].shape != shape {
            return Err(ImportError::Unsupported(format!(
                "{at}: inputs of shapes {:?} and {:?}: octet adds tensors of one shape (no \
                 broadcasting)",
                a.shape, b.shape
            )));
        }
        let s = |t: usize| self.tensors[t].scale;
        let pairs = tflite_add_multipliers(s(aid), s(bid), s(yid)).ok_or_else(|| {
            ImportError::Unsupported(format!("{at}: a multiplier outside [2^−32, 2^30)"))
        })?;
        let mut o8 = O8Op::new(OpKind::TfliteAdd, vec![aid, bid], yid);
        o8.multipliers = pairs.iter().map(|p| p.0).collect();
        o8.shifts = pairs.iter().map(|p| p.1).collect();
        o8.param = TFLITE_ADD_LEFT_SHIFT;
        o8.act = self.activation_range(act, yid, at)?;
        self.ops.push(o8);
        Ok(OpKind::TfliteAdd)
    }

    /// SOFTMAX over the last dimension: TFLite's integer parameters from β and the input scale.
    fn softmax(&mut self, op: &OpView, at: &str) -> Result<OpKind> {
        let x = self.input_tensor(op, 0, at)?;
        let xid = self.id(x.index as i32, at)?;
        let beta = op
            .op
            .builtin_options_as_softmax_options()
            .map_or(1.0, |o| o.beta());
        let (yid, y) = self.output(op, at)?;
        if self.tensors[xid].shape != self.tensors[yid].shape || x.shape.last() != y.shape.last() {
            return Err(ImportError::Malformed(format!(
                "{at}: output shape {:?} for an input of {:?}",
                y.shape, x.shape
            )));
        }
        let (m, shift, diff_min) = softmax_params(beta, self.tensors[xid].scale, self.rounding)
            .ok_or_else(|| {
                ImportError::Unsupported(format!(
                    "{at}: β·input scale = {} gives a multiplier outside octet's range",
                    beta * self.tensors[xid].scale
                ))
            })?;
        let mut o8 = O8Op::new(OpKind::Softmax, vec![xid], yid);
        o8.multipliers = vec![m];
        o8.shifts = vec![shift];
        o8.param = diff_min;
        self.ops.push(o8);
        Ok(OpKind::Softmax)
    }

    /// RESHAPE / SQUEEZE: the same bytes. A view (no op: readers take the input tensor) when
    /// every reader of the output reads it flat (fully connected) or the `.o8` shape does not
    /// change; else a copy into a tensor of the new shape.
    fn reshape(&mut self, op: &OpView, at: &str) -> Result<String> {
        let x = self.input_tensor(op, 0, at)?;
        let xid = self.id(x.index as i32, at)?;
        let [out] = op.outputs.as_slice() else {
            return Err(ImportError::Malformed(format!("{at}: not one output")));
        };
        let y = self.file.tensor(*out, at)?;
        if y.elements() != self.tensors[xid].shape.len() {
            return Err(ImportError::Malformed(format!(
                "{at}: {} elements reshaped to {:?}",
                self.tensors[xid].shape.len(),
                y.shape
            )));
        }
        let same_shape = chw(&y.shape) == Some(self.tensors[xid].shape);
        let flat_readers = self
            .readers
            .get(&(*out as usize))
            .is_some_and(|r| r.iter().all(|&code| code == B::FULLY_CONNECTED));
        if same_shape || flat_readers {
            let (s, z) = y.per_tensor().ok_or_else(|| not_per_tensor(&y))?;
            let t = &self.tensors[xid];
            if (s, z) != (t.scale, t.zero_point) {
                return Err(ImportError::Unsupported(format!(
                    "{at}: the output's quantization differs from the input's"
                )));
            }
            self.ids.insert(*out as usize, xid);
            return Ok("view (no op)".into());
        }
        let (yid, _) = self.output(op, at)?;
        self.same_quant(xid, yid, at)?;
        self.ops.push(O8Op::new(OpKind::Reshape, vec![xid], yid));
        Ok(OpKind::Reshape.name().into())
    }

    /// PAD / PADV2 of height and width: the paddings constant, the value the output zero point
    /// (PAD) or the constant input (PADV2).
    fn pad(&mut self, op: &OpView, at: &str) -> Result<OpKind> {
        let x = self.input_tensor(op, 0, at)?;
        let xid = self.id(x.index as i32, at)?;
        let p = self.input_tensor(op, 1, at)?;
        let (yid, _) = self.output(op, at)?;
        self.same_quant(xid, yid, at)?;
        let pads = int32_data(&p, at)?;
        // [[batch], [height], [width], [channels]] × (before, after), for a 4-D input.
        let hw = match (x.shape.len(), pads.as_slice()) {
            (4, &[0, 0, t, b, l, r, 0, 0]) => [t, l, b, r],
            _ => {
                return Err(ImportError::Unsupported(format!(
                    "{at}: paddings {pads:?} for an input of shape {:?}: octet pads the height \
                     and width of a 4-D tensor",
                    x.shape
                )))
            }
        };
        let value = if op.code == B::PADV2 {
            let v = self.input_tensor(op, 2, at)?;
            match int8_data(&v, at)? {
                [v] => *v as i32,
                _ => {
                    return Err(ImportError::Malformed(format!(
                        "{at}: a pad value of {} elements",
                        v.elements()
                    )))
                }
            }
        } else {
            self.tensors[yid].zero_point
        };
        let byte = |v: i32| {
            u8::try_from(v).map_err(|_| {
                ImportError::Unsupported(format!("{at}: a padding of {v} (at most 255)"))
            })
        };
        let mut o8 = O8Op::new(OpKind::Pad, vec![xid], yid);
        o8.window = Window {
            pad_top: byte(hw[0])?,
            pad_left: byte(hw[1])?,
            pad_bottom: byte(hw[2])?,
            pad_right: byte(hw[3])?,
            ..Window::default()
        };
        o8.param = value;
        self.ops.push(o8);
        Ok(OpKind::Pad)
    }

    /// The bias of an op of `n` outputs (its input 2; zeros when absent), int32.
    fn bias(&self, op: &OpView, n: usize, at: &str) -> Result<Vec<i32>> {
        match op.inputs.get(2) {
            Some(&t) if t >= 0 => {
                let b = self.file.tensor(t, at)?;
                let v = int32_data(&b, at)?;
                if v.len() != n {
                    return Err(ImportError::Malformed(format!(
                        "{at}: {} biases for {n} outputs",
                        v.len()
                    )));
                }
                Ok(v)
            }
            _ => Ok(vec![0; n]),
        }
    }

    /// Two `.o8` tensors of one quantization, or the error.
    fn same_quant(&self, a: usize, b: usize, at: &str) -> Result<()> {
        let (x, y) = (&self.tensors[a], &self.tensors[b]);
        if x.scale.to_bits() != y.scale.to_bits() || x.zero_point != y.zero_point {
            return Err(ImportError::Unsupported(format!(
                "{at}: output quantization ({}, {}) differs from the input's ({}, {}): this op \
                 keeps it",
                y.scale, y.zero_point, x.scale, x.zero_point
            )));
        }
        Ok(())
    }

    /// The clamp of a fused activation on `.o8` tensor `out` (TFLite's
    /// `CalculateActivationRangeQuantized`: q = z + round(f / scale) in f32, rounding half away
    /// from zero).
    fn activation_range(
        &self,
        act: ActivationFunctionType,
        out: usize,
        at: &str,
    ) -> Result<(i32, i32)> {
        let t = &self.tensors[out];
        let q = |f: f32| t.zero_point as i64 + (f / t.scale).round() as i64;
        let lo = |f: f32| q(f).max(-128) as i32;
        let hi = |f: f32| q(f).min(127) as i32;
        let range = match act {
            ActivationFunctionType::NONE => (-128, 127),
            ActivationFunctionType::RELU => (lo(0.0), 127),
            ActivationFunctionType::RELU6 => (lo(0.0), hi(6.0)),
            ActivationFunctionType::RELU_N1_TO_1 => (lo(-1.0), hi(1.0)),
            other => {
                return Err(ImportError::Unsupported(format!(
                    "{at}: fused activation {} (octet fuses NONE, RELU, RELU6, RELU_N1_TO_1)",
                    other.variant_name().unwrap_or("?")
                )))
            }
        };
        if range.0 > range.1 {
            return Err(ImportError::Unsupported(format!(
                "{at}: the activation's range is empty in the output's quantization"
            )));
        }
        Ok(range)
    }
}

/// TFLite's shape of one image as `.o8`'s (c, h, w): [n] and [1, n] are n channels, [1, a, b]
/// is a × 1 pixels of b, [1, h, w, c] itself.
fn chw(shape: &[i32]) -> Option<Shape3> {
    let d = |v: i32| {
        usize::try_from(v)
            .ok()
            .filter(|&v| (1..65_535).contains(&v))
    };
    let (c, h, w) = match *shape {
        [n] | [1, n] => (d(n)?, 1, 1),
        [1, a, b] => (d(b)?, d(a)?, 1),
        [1, h, w, c] => (d(c)?, d(h)?, d(w)?),
        _ => return None,
    };
    Some(Shape3 { c, h, w })
}

/// The window of a conv or pool: kernel, strides, dilations, and TFLite's padding (SAME: the
/// total `max((out − 1)·s + e − in, 0)` split with the odd row after; VALID: none), checked
/// against the output's shape.
fn window(
    at: &str,
    (si, so): (Shape3, Shape3),
    (kh, kw): (i32, i32),
    (sh, sw): (i32, i32),
    (dh, dw): (i32, i32),
    padding: Padding,
) -> Result<Window> {
    let byte = |v: i32, what: &str| {
        u8::try_from(v)
            .ok()
            .filter(|&b| b >= 1)
            .ok_or_else(|| ImportError::Unsupported(format!("{at}: {what} {v} (1 to 255)")))
    };
    let axis = |n: usize, out: usize, k: i32, s: i32, d: i32| -> Result<(u8, u8)> {
        let e = (k as i64 - 1) * d as i64 + 1;
        let (n, out) = (n as i64, out as i64);
        let want = match padding {
            Padding::SAME => (n + s as i64 - 1) / s as i64,
            _ => (n - e + s as i64) / s as i64,
        };
        if want != out || out < 1 {
            return Err(ImportError::Malformed(format!(
                "{at}: output size {out} where TFLite's padding gives {want}"
            )));
        }
        let total = if padding == Padding::SAME {
            ((out - 1) * s as i64 + e - n).max(0)
        } else {
            0
        };
        let (before, after) = (total / 2, total - total / 2);
        let b = |v: i64| {
            u8::try_from(v).map_err(|_| {
                ImportError::Unsupported(format!("{at}: a padding of {v} (at most 255)"))
            })
        };
        Ok((b(before)?, b(after)?))
    };
    let (kh8, kw8) = (byte(kh, "kernel height")?, byte(kw, "kernel width")?);
    let (sh8, sw8) = (byte(sh, "stride")?, byte(sw, "stride")?);
    let (dh8, dw8) = (byte(dh, "dilation")?, byte(dw, "dilation")?);
    let (pt, pb) = axis(si.h, so.h, kh, sh, dh)?;
    let (pl, pr) = axis(si.w, so.w, kw, sw, dw)?;
    Ok(Window {
        kernel_h: kh8,
        kernel_w: kw8,
        stride_h: sh8,
        stride_w: sw8,
        pad_top: pt,
        pad_left: pl,
        pad_bottom: pb,
        pad_right: pr,
        dilation_h: dh8,
        dilation_w: dw8,
    })
}

/// TFLite's multiplier for input, weight and output scales: `QuantizeMultiplier(s_in · s_w /
/// s_out)` in double (kernel_util.cc, PopulateConvolutionQuantizationParams).
fn multiplier(s_in: f32, s_w: f32, s_out: f32, at: &str) -> Result<(i32, i32)> {
    let m = s_in as f64 * s_w as f64 / s_out as f64;
    quantize_multiplier_tflite(m).ok_or_else(|| {
        ImportError::Unsupported(format!(
            "{at}: multiplier {m:e} (octet's range is below 2^30)"
        ))
    })
}

/// The weights' scales, one per output channel (`n`) along `axis`, zero points all 0.
fn weight_scales(w: &TensorView, n: usize, axis: i32, at: &str) -> Result<Vec<f32>> {
    if w.zero_points.iter().any(|&z| z != 0) {
        return Err(ImportError::Unsupported(format!(
            "{at}: weights with a non-zero zero point (TFLite's int8 weights are symmetric)"
        )));
    }
    match w.scales.len() {
        1 => Ok(vec![w.scales[0]; n]),
        len if len == n && w.quantized_dimension == axis => Ok(w.scales.clone()),
        len => Err(ImportError::Unsupported(format!(
            "{at}: {len} weight scales along dimension {} for {n} output channels",
            w.quantized_dimension
        ))),
    }
}

/// bias − z_in·Σw (octet folds the input zero point into the bias), within int32.
fn fold_bias(bias: i32, z_in: i32, sum_w: i64, at: &str, c: usize) -> Result<i32> {
    let b = bias as i64 - z_in as i64 * sum_w;
    i32::try_from(b).map_err(|_| {
        ImportError::Unsupported(format!(
            "{at}: channel {c}'s bias with the input zero point folded in, {b}, exceeds int32"
        ))
    })
}

/// The int8 data of a constant tensor of its shape's size.
fn int8_data<'a>(t: &TensorView<'a>, at: &str) -> Result<&'a [i8]> {
    if t.dtype != TensorType::INT8 {
        return Err(ImportError::Unsupported(format!(
            "{at}: constant '{}' is {} (int8 expected)",
            t.name,
            t.dtype.variant_name().unwrap_or("?")
        )));
    }
    let d = constant(t, 1, at)?;
    // SAFETY: u8 and i8 have the same size, alignment and validity.
    Ok(unsafe { std::slice::from_raw_parts(d.as_ptr().cast::<i8>(), d.len()) })
}

/// The int32 data of a constant tensor of its shape's size (little-endian).
fn int32_data(t: &TensorView, at: &str) -> Result<Vec<i32>> {
    if t.dtype != TensorType::INT32 {
        return Err(ImportError::Unsupported(format!(
            "{at}: constant '{}' is {} (int32 expected)",
            t.name,
            t.dtype.variant_name().unwrap_or("?")
        )));
    }
    let d = constant(t, 4, at)?;
    Ok(d.chunks_exact(4)
        .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

/// A constant tensor's bytes: exactly its elements × `size` of them.
fn constant<'a>(t: &TensorView<'a>, size: usize, at: &str) -> Result<&'a [u8]> {
    let d = t.data.ok_or_else(|| {
        ImportError::Unsupported(format!(
            "{at}: tensor '{}' should be a constant (octet's weights, biases and paddings are)",
            t.name
        ))
    })?;
    if d.len() != t.elements() * size {
        return Err(ImportError::Malformed(format!(
            "{at}: constant '{}' holds {} bytes for shape {:?}",
            t.name,
            d.len(),
            t.shape
        )));
    }
    Ok(d)
}

fn not_per_tensor(t: &TensorView) -> ImportError {
    ImportError::Unsupported(format!(
        "tensor '{}' is not quantized per tensor ({} scales, {} zero points)",
        t.name,
        t.scales.len(),
        t.zero_points.len()
    ))
}

fn missing_options(at: &str) -> ImportError {
    ImportError::Malformed(format!("{at}: its options are missing"))
}
