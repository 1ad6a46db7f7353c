//! Checkpoint tensors → the folded float [`Graph`] of LeNet or ResNet-18.

use std::collections::HashMap;

use candle_core::{DType, Tensor};
use octet_models::ModelKind;

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
            .ok_or_else(|| ExportError::MissingTensor { name: name.into() })?;
        if t.dims() != dims {
            return Err(ExportError::ShapeMismatch {
                name: name.into(),
                expected: dims.into(),
                found: t.shape().clone(),
            });
        }
        let wrap = |source| ExportError::Tensor {
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

    /// conv (+ optional bias, + optional BN) (+ ReLU) named `name`; output tensor `out_name`.
    #[allow(clippy::too_many_arguments)]
    fn conv(
        &mut self,
        x: usize,
        name: &str,
        cout: usize,
        k: usize,
        stride: usize,
        pad: usize,
        has_bias: bool,
        bn: Option<&str>,
        relu: bool,
        out_name: &str,
    ) -> Result<usize> {
        let s = self.shape(x);
        let mut weight = self.get(&format!("{name}.weight"), &[cout, s.c, k, k])?;
        let mut bias = if has_bias {
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
        Ok(self.push(op, out_name, out))
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
    let x = b.conv(0, "conv1", 6, 5, 1, 0, true, None, true, "conv1")?;
    let x = b.pool(x, true, 2, "pool1")?;
    let x = b.conv(x, "conv2", 16, 5, 1, 0, true, None, true, "conv2")?;
    let x = b.pool(x, true, 2, "pool2")?;
    let x = b.fc(x, "fc1", 120, true)?;
    let x = b.fc(x, "fc2", 84, true)?;
    b.fc(x, "fc3", b.input.classes, false)?;
    Ok(())
}

fn resnet18(b: &mut Builder) -> Result<()> {
    let mut x = b.conv(0, "conv1", 64, 3, 1, 1, false, Some("bn1"), true, "conv1")?;
    let mut cin = 64;
    for (stage, (cout, stride)) in [(64, 1), (128, 2), (256, 2), (512, 2)]
        .into_iter()
        .enumerate()
    {
        for (i, s) in [stride, 1].into_iter().enumerate() {
            let n = format!("layer{}.{i}", stage + 1);
            // The shortcut runs first: it is smaller than the block input it replaces, so the
            // input dies earlier and the arena is smaller.
            let short = if s != 1 || cin != cout {
                let sc = format!("{n}.shortcut.0");
                b.conv(
                    x,
                    &sc,
                    cout,
                    1,
                    s,
                    0,
                    false,
                    Some(&format!("{n}.shortcut.1")),
                    false,
                    &format!("{n}.shortcut"),
                )?
            } else {
                x
            };
            let y = b.conv(
                x,
                &format!("{n}.conv1"),
                cout,
                3,
                s,
                1,
                false,
                Some(&format!("{n}.bn1")),
                true,
                &format!("{n}.conv1"),
            )?;
            let y = b.conv(
                y,
                &format!("{n}.conv2"),
                cout,
                3,
                1,
                1,
                false,
                Some(&format!("{n}.bn2")),
                false,
                &format!("{n}.conv2"),
            )?;
            x = b.add(y, short, &format!("{n}.add"))?;
            cin = cout;
        }
    }
    let x = b.pool(x, false, 4, "avgpool")?;
    b.fc(x, "linear", b.input.classes, false)?;
    Ok(())
}
