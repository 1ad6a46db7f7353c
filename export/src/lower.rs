//! Checkpoint tensors → the folded float [`Graph`] of LeNet or ResNet-18.

use std::collections::HashMap;

use candle_core::{DType, Tensor};
use octet_models::{ModelError, ModelKind};

use crate::fold::{fold_batch_norm, fold_input_normalization, BatchNorm};
use crate::graph::{FloatOp, Graph, OpKind, Shape3, TensorInfo};
use crate::{ExportError, Result};

/// What the exporter needs to know about a float model.
#[derive(Debug, Clone, Copy)]
pub struct Input<'a> {
    pub kind: ModelKind,
    /// Named float tensors (PyTorch `state_dict` names) on the CPU; extra keys are ignored.
    pub tensors: &'a HashMap<String, Tensor>,
    /// The data set's normalisation, one value per channel, applied to `pixel/255`.
    pub mean: &'a [f32],
    pub std: &'a [f32],
    pub channels: usize,
    pub height: usize,
    pub width: usize,
    pub classes: usize,
}

impl Input<'_> {
    pub fn image_len(&self) -> usize {
        self.channels * self.height * self.width
    }
}

/// Builds the folded graph: BN into convs, normalisation into the first conv, ReLU fused,
/// the classifier's columns permuted to HWC order.
pub fn lower(input: &Input) -> Result<Graph> {
    let c = input.channels;
    if c == 0 || input.height == 0 || input.width == 0 || input.classes == 0 {
        return Err(ExportError::BadInput(format!(
            "input shape {}×{}×{} with {} classes",
            c, input.height, input.width, input.classes
        )));
    }
    if input.mean.len() != c || input.std.len() != c {
        return Err(ExportError::BadInput(format!(
            "normalisation has {} means and {} stds for {c} channels",
            input.mean.len(),
            input.std.len()
        )));
    }
    if input.std.iter().any(|s| !(s.is_finite() && *s > 0.0))
        || input.mean.iter().any(|m| !m.is_finite())
    {
        return Err(ExportError::BadInput(format!(
            "normalisation mean {:?} std {:?}: std must be finite and positive",
            input.mean, input.std
        )));
    }
    if c > u16::MAX as usize || input.height > u16::MAX as usize || input.width > u16::MAX as usize
    {
        return Err(ExportError::BadInput("input dimensions exceed u16".into()));
    }
    let mut b = Builder::new(input);
    match input.kind {
        ModelKind::LeNet => lenet(&mut b)?,
        ModelKind::ResNet18 => resnet18(&mut b)?,
    }
    Ok(b.finish())
}

/// A conv layer's options beside its name, width and kernel (candle-nn's `Conv2dConfig`).
#[derive(Debug, Clone)]
struct ConvConfig {
    stride: usize,
    pad: usize,
    /// The layer has its own bias (`{name}.bias`); else 0, or the folded batch norm's.
    bias: bool,
    /// The batch norm folded in (its checkpoint prefix).
    bn: Option<String>,
    relu: bool,
    /// The output tensor's name; `None`: the layer's.
    output: Option<String>,
}

impl Default for ConvConfig {
    fn default() -> Self {
        Self {
            stride: 1,
            pad: 0,
            bias: false,
            bn: None,
            relu: false,
            output: None,
        }
    }
}

struct Builder<'a> {
    input: &'a Input<'a>,
    g: Graph,
    /// The first weighted op gets the input normalisation.
    first: bool,
}

impl<'a> Builder<'a> {
    fn new(input: &'a Input<'a>) -> Self {
        let shape = Shape3::new(input.channels, input.height, input.width);
        Self {
            input,
            g: Graph {
                tensors: vec![TensorInfo {
                    name: "input".into(),
                    shape,
                }],
                ops: Vec::new(),
                input: 0,
                output: 0,
            },
            first: true,
        }
    }

    fn finish(mut self) -> Graph {
        self.g.output = self.g.ops.last().map(|o| o.output).unwrap_or(0);
        self.g
    }

    /// Fetches `name` as f32 and checks its shape.
    fn get(&self, name: &str, dims: &[usize]) -> Result<Vec<f32>> {
        let t = self
            .input
            .tensors
            .get(name)
            .ok_or_else(|| ModelError::MissingTensor { name: name.into() })?;
        if t.dims() != dims {
            return Err(ModelError::ShapeMismatch {
                name: name.into(),
                expected: dims.into(),
                found: t.shape().clone(),
            }
            .into());
        }
        let wrap = |source| ModelError::Tensor {
            name: name.into(),
            source,
        };
        let v = t
            .to_dtype(DType::F32)
            .and_then(|t| t.flatten_all())
            .and_then(|t| t.to_vec1::<f32>())
            .map_err(wrap)?;
        if let Some(bad) = v.iter().position(|x| !x.is_finite()) {
            return Err(ExportError::BadInput(format!(
                "tensor '{name}' holds a non-finite value at index {bad}"
            )));
        }
        Ok(v)
    }

    fn bn(&self, name: &str, c: usize) -> Result<BatchNorm> {
        Ok(BatchNorm {
            gamma: self.get(&format!("{name}.weight"), &[c])?,
            beta: self.get(&format!("{name}.bias"), &[c])?,
            mean: self.get(&format!("{name}.running_mean"), &[c])?,
            var: self.get(&format!("{name}.running_var"), &[c])?,
        })
    }

    fn shape(&self, t: usize) -> Shape3 {
        self.g.tensors[t].shape
    }

    fn push(&mut self, op: FloatOp, name: &str, shape: Shape3) -> usize {
        let id = self.g.tensors.len();
        self.g.tensors.push(TensorInfo {
            name: name.into(),
            shape,
        });
        self.g.ops.push(FloatOp { output: id, ..op });
        id
    }

    /// conv (+ bias or folded BN, as `cfg` says) (+ ReLU) named `name`, `cout` output channels,
    /// `k`×`k` kernel.
    fn conv(
        &mut self,
        x: usize,
        name: &str,
        cout: usize,
        k: usize,
        cfg: &ConvConfig,
    ) -> Result<usize> {
        let ConvConfig {
            stride,
            pad,
            bias: has_bias,
            bn,
            relu,
            output,
        } = cfg;
        let (stride, pad, relu) = (*stride, *pad, *relu);
        let s = self.shape(x);
        let mut weight = self.get(&format!("{name}.weight"), &[cout, s.c, k, k])?;
        let mut bias = if *has_bias {
            self.get(&format!("{name}.bias"), &[cout])?
        } else {
            vec![0.0; cout]
        };
        if let Some(bn) = bn {
            let bn = self.bn(bn, cout)?;
            fold_batch_norm(&mut weight, &mut bias, &bn);
        }
        let pad_values = self.fold_first(&mut weight, &mut bias, pad > 0);
        if s.h + 2 * pad < k || s.w + 2 * pad < k {
            return Err(ExportError::BadInput(format!(
                "layer '{name}': input {s} is smaller than its {k}×{k} kernel"
            )));
        }
        let out = Shape3::new(
            cout,
            (s.h + 2 * pad - k) / stride + 1,
            (s.w + 2 * pad - k) / stride + 1,
        );
        let op = FloatOp {
            name: name.into(),
            kind: OpKind::Conv2d {
                kh: k,
                kw: k,
                stride,
                pad,
            },
            inputs: vec![x],
            output: 0,
            weight,
            bias,
            relu,
            pad_values,
        };
        Ok(self.push(op, output.as_deref().unwrap_or(name), out))
    }

    /// Folds the input normalisation into the first weighted layer.
    fn fold_first(
        &mut self,
        weight: &mut [f32],
        bias: &mut [f32],
        padded: bool,
    ) -> Option<Vec<f32>> {
        if !std::mem::take(&mut self.first) {
            return None;
        }
        let pad = fold_input_normalization(weight, bias, self.input.mean, self.input.std);
        padded.then_some(pad)
    }

    /// Fully connected; a spatial input is flattened in HWC order, so PyTorch's CHW columns are
    /// permuted here.
    fn fc(&mut self, x: usize, name: &str, n: usize, relu: bool) -> Result<usize> {
        let s = self.shape(x);
        let k = s.len();
        let chw = self.get(&format!("{name}.weight"), &[n, k])?;
        let bias = self.get(&format!("{name}.bias"), &[n])?;
        let hw = s.h * s.w;
        let mut weight = vec![0f32; n * k];
        for o in 0..n {
            for c in 0..s.c {
                for p in 0..hw {
                    weight[o * k + p * s.c + c] = chw[o * k + c * hw + p];
                }
            }
        }
        if self.first {
            // Never the case for LeNet/ResNet; a model starting with fc would need this.
            return Err(ExportError::BadInput(format!(
                "layer '{name}': a model must start with a conv"
            )));
        }
        let op = FloatOp {
            name: name.into(),
            kind: OpKind::FullyConnected,
            inputs: vec![x],
            output: 0,
            weight,
            bias,
            relu,
            pad_values: None,
        };
        Ok(self.push(op, name, Shape3::new(n, 1, 1)))
    }

    fn pool(&mut self, x: usize, max: bool, k: usize, name: &str) -> Result<usize> {
        let s = self.shape(x);
        if s.h < k || s.w < k {
            return Err(ExportError::BadInput(format!(
                "'{name}': input {s} is smaller than the {k}×{k} window"
            )));
        }
        let kind = if max {
            OpKind::MaxPool { k, stride: k }
        } else {
            OpKind::AvgPool { k, stride: k }
        };
        let op = FloatOp {
            name: name.into(),
            kind,
            inputs: vec![x],
            output: 0,
            weight: Vec::new(),
            bias: Vec::new(),
            relu: false,
            pad_values: None,
        };
        Ok(self.push(
            op,
            name,
            Shape3::new(s.c, (s.h - k) / k + 1, (s.w - k) / k + 1),
        ))
    }

    fn add(&mut self, a: usize, b: usize, name: &str) -> Result<usize> {
        let shape = self.shape(a);
        if shape != self.shape(b) {
            return Err(ExportError::BadInput(format!(
                "'{name}': adding {} and {}",
                shape,
                self.shape(b)
            )));
        }
        let op = FloatOp {
            name: name.into(),
            kind: OpKind::Add,
            inputs: vec![a, b],
            output: 0,
            weight: Vec::new(),
            bias: Vec::new(),
            relu: true,
            pad_values: None,
        };
        Ok(self.push(op, name, shape))
    }
}

fn lenet(b: &mut Builder) -> Result<()> {
    let conv = ConvConfig {
        bias: true,
        relu: true,
        ..Default::default()
    };
    let x = b.conv(0, "conv1", 6, 5, &conv)?;
    let x = b.pool(x, true, 2, "pool1")?;
    let x = b.conv(x, "conv2", 16, 5, &conv)?;
    let x = b.pool(x, true, 2, "pool2")?;
    let x = b.fc(x, "fc1", 120, true)?;
    let x = b.fc(x, "fc2", 84, true)?;
    b.fc(x, "fc3", b.input.classes, false)?;
    Ok(())
}

/// The basic block `name` (two 3×3 convs and the residual add); the 1×1 projection shortcut
/// where the shape changes.
fn basic_block(
    b: &mut Builder,
    x: usize,
    name: &str,
    (cin, cout, stride): (usize, usize, usize),
) -> Result<usize> {
    // The shortcut runs first: it is smaller than the block input it replaces, so the input
    // dies earlier and the arena is smaller.
    let short = if stride != 1 || cin != cout {
        let cfg = ConvConfig {
            stride,
            bn: Some(format!("{name}.shortcut.1")),
            output: Some(format!("{name}.shortcut")),
            ..Default::default()
        };
        b.conv(x, &format!("{name}.shortcut.0"), cout, 1, &cfg)?
    } else {
        x
    };
    // 3×3 conv `{name}.conv{i}` with batch norm `{name}.bn{i}` folded in.
    let conv_bn = |b: &mut Builder, x, i: usize, stride, relu| {
        let cfg = ConvConfig {
            stride,
            pad: 1,
            bn: Some(format!("{name}.bn{i}")),
            relu,
            ..Default::default()
        };
        b.conv(x, &format!("{name}.conv{i}"), cout, 3, &cfg)
    };
    let y = conv_bn(b, x, 1, stride, true)?;
    let y = conv_bn(b, y, 2, 1, false)?;
    b.add(y, short, &format!("{name}.add"))
}

fn resnet18(b: &mut Builder) -> Result<()> {
    let stem = ConvConfig {
        pad: 1,
        bn: Some("bn1".into()),
        relu: true,
        ..Default::default()
    };
    let mut x = b.conv(0, "conv1", 64, 3, &stem)?;
    let mut cin = 64;
    for (stage, (cout, stride)) in [(64, 1), (128, 2), (256, 2), (512, 2)]
        .into_iter()
        .enumerate()
    {
        for (i, s) in [stride, 1].into_iter().enumerate() {
            let name = format!("layer{}.{i}", stage + 1);
            x = basic_block(b, x, &name, (cin, cout, s))?;
            cin = cout;
        }
    }
    let x = b.pool(x, false, 4, "avgpool")?;
    b.fc(x, "linear", b.input.classes, false)?;
    Ok(())
}
