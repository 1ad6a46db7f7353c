//! Checkpoint tensors → the folded float [`Graph`] of a network, walked off its description
//! ([`NetSpec`]): batch norm folded into the convolution before it, ReLU fused into the layer
//! before it, flatten a no-op (fully connected layers read HWC), input normalisation folded
//! into the first layer with weights.

use std::collections::HashMap;

use candle_core::{DType, Tensor};
use octet_models::spec::{Dims, Layer, NetSpec, Resolved, Source};
use octet_models::{Model, ModelError};

use crate::fold::{fold_batch_norm, fold_input_normalization, BatchNorm};
use crate::graph::{FloatOp, Graph, OpKind, Shape3, TensorInfo};
use crate::{ExportError, Result};

/// What the exporter needs to know about a float model.
#[derive(Debug, Clone, Copy)]
pub struct Input<'a> {
    /// The network (its description names the tensors and says how they connect).
    pub model: &'a Model,
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
    let spec = input.model.spec();
    let resolved = spec
        .resolve((c, input.height, input.width), input.classes)
        .map_err(|e| ExportError::BadInput(e.to_string()))?;
    let fusion = fuse(&spec, &resolved)?;
    let mut b = Builder::new(input);
    let mut tensor = vec![None; fusion.ops.len()];
    for op in schedule(&fusion, &resolved) {
        let id = b.emit(&spec, &resolved, &fusion, &tensor, op)?;
        tensor[op] = Some(id);
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
    act: Act,
    /// Each input channel on its own (weight `[C_out][1][k][k]`).
    depthwise: bool,
}

impl Default for ConvConfig {
    fn default() -> Self {
        Self {
            stride: 1,
            pad: 0,
            bias: false,
            bn: None,
            act: Act::None,
            depthwise: false,
        }
    }
}

/// The clamp fused into an op's output.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum Act {
    #[default]
    None,
    Relu,
    Relu6,
}

impl Act {
    /// FloatOp's (relu, relu6).
    fn flags(self) -> (bool, bool) {
        (self != Act::None, self == Act::Relu6)
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
            act,
            depthwise,
        } = cfg;
        let (stride, pad, depthwise) = (*stride, *pad, *depthwise);
        let s = self.shape(x);
        let cin = if depthwise { 1 } else { s.c };
        let mut weight = self.get(&format!("{name}.weight"), &[cout, cin, k, k])?;
        let mut bias = if *has_bias {
            self.get(&format!("{name}.bias"), &[cout])?
        } else {
            vec![0.0; cout]
        };
        if let Some(bn) = bn {
            let bn = self.bn(bn, cout)?;
            fold_batch_norm(&mut weight, &mut bias, &bn);
        }
        if depthwise && self.first {
            return Err(ExportError::BadInput(format!(
                "layer '{name}': the exporter folds the input normalisation into a first layer \
                 that is a convolution; this one is depthwise"
            )));
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
        let kind = if depthwise {
            OpKind::DepthwiseConv2d {
                kh: k,
                kw: k,
                stride,
                pad,
            }
        } else {
            OpKind::Conv2d {
                kh: k,
                kw: k,
                stride,
                pad,
            }
        };
        let (relu, relu6) = act.flags();
        let op = FloatOp {
            name: name.into(),
            kind,
            inputs: vec![x],
            output: 0,
            weight,
            bias,
            relu,
            relu6,
            pad_values,
        };
        Ok(self.push(op, name, out))
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
    fn fc(&mut self, x: usize, name: &str, n: usize, act: Act) -> Result<usize> {
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
            relu: act.flags().0,
            relu6: act.flags().1,
            pad_values: None,
        };
        Ok(self.push(op, name, Shape3::new(n, 1, 1)))
    }

    fn pool(
        &mut self,
        x: usize,
        max: bool,
        (k, stride): (usize, usize),
        name: &str,
    ) -> Result<usize> {
        let s = self.shape(x);
        if s.h < k || s.w < k {
            return Err(ExportError::BadInput(format!(
                "'{name}': input {s} is smaller than the {k}×{k} window"
            )));
        }
        let kind = if max {
            OpKind::MaxPool { k, stride }
        } else {
            OpKind::AvgPool { k, stride }
        };
        let op = FloatOp {
            name: name.into(),
            kind,
            inputs: vec![x],
            output: 0,
            weight: Vec::new(),
            bias: Vec::new(),
            relu: false,
            relu6: false,
            pad_values: None,
        };
        Ok(self.push(
            op,
            name,
            Shape3::new(s.c, (s.h - k) / stride + 1, (s.w - k) / stride + 1),
        ))
    }

    fn add(&mut self, a: usize, b: usize, name: &str, act: Act) -> Result<usize> {
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
            relu: act.flags().0,
            relu6: act.flags().1,
            pad_values: None,
        };
        Ok(self.push(op, name, shape))
    }
}

/// One op of the folded graph: a layer with weights, a pooling or an add (`head`), with the
/// batch norm and ReLU after it that fold into it.
#[derive(Debug, Clone, Default)]
struct Fused {
    head: usize,
    bn: Option<usize>,
    act: Act,
    /// The last layer of the group: its output is the op's.
    tail: usize,
}

/// Groups the description's layers into the graph's ops: `owner[i]` is the op whose output
/// layer `i`'s output is (flatten owns no op of its own).
fn fuse(spec: &NetSpec, r: &Resolved) -> Result<Fusion> {
    let consumers = r.consumers();
    let mut ops: Vec<Fused> = Vec::new();
    let mut owner = vec![usize::MAX; spec.layers.len()];
    for (i, node) in spec.layers.iter().enumerate() {
        let refuse = |why: &str| {
            Err(ExportError::BadInput(format!(
                "layer {} '{}' ({}): {why}",
                i + 1,
                node.name,
                node.layer.op()
            )))
        };
        // The op this layer would fold into: the one whose last layer it alone reads.
        let into = match r.sources[i][0] {
            Source::Layer(j) if consumers[j] == [i] && ops[owner[j]].tail == j => Some(owner[j]),
            _ => None,
        };
        match &node.layer {
            Layer::BatchNorm => match into {
                Some(o) if matches!(
                    spec.layers[ops[o].head].layer,
                    Layer::Conv { .. } | Layer::DepthwiseConv { .. }
                ) && ops[o].bn.is_none()
                    && ops[o].act == Act::None =>
                {
                    ops[o].bn = Some(i);
                    ops[o].tail = i;
                    owner[i] = o;
                }
                _ => return refuse("batch norm must follow a convolution that nothing else reads"),
            },
            Layer::Relu | Layer::Relu6 => match into {
                Some(o) if ops[o].act == Act::None
                    && !matches!(
                        spec.layers[ops[o].head].layer,
                        Layer::MaxPool { .. } | Layer::AvgPool { .. } | Layer::GlobalAvgPool
                    ) =>
                {
                    ops[o].act = if node.layer == Layer::Relu6 {
                        Act::Relu6
                    } else {
                        Act::Relu
                    };
                    ops[o].tail = i;
                    owner[i] = o;
                }
                _ => {
                    return refuse(
                        "int8 ReLU is a clamp of the layer before it: it must follow a conv,                          batch norm, linear or add layer that nothing else reads",
                    )
                }
            },
            // Flatten reshapes and dropout is the identity at inference: neither is an op.
            Layer::Flatten | Layer::Dropout { .. } => match r.sources[i][0] {
                Source::Layer(j) => owner[i] = owner[j],
                Source::Input => return refuse("the exporter needs a layer with weights first"),
            },
            _ => {
                owner[i] = ops.len();
                ops.push(Fused {
                    head: i,
                    tail: i,
                    ..Fused::default()
                });
            }
        }
    }
    Ok(Fusion { ops, owner })
}

/// The graph's ops and, per layer, the op that computes its output.
struct Fusion {
    ops: Vec<Fused>,
    owner: Vec<usize>,
}

impl Fusion {
    /// The ops an op reads: for an add, its input, then the other operand.
    fn reads(&self, r: &Resolved, op: usize) -> Vec<Option<usize>> {
        r.sources[self.ops[op].head]
            .iter()
            .map(|s| match *s {
                Source::Input => None,
                Source::Layer(j) => Some(self.owner[j]),
            })
            .collect()
    }
}

/// The order the ops run in: each after what it reads, and where two branches meet (a
/// residual add), the one with fewer ops first — it holds its output longer, but lets the
/// tensor both branches read die sooner (a ResNet's shortcut runs before its block).
fn schedule(f: &Fusion, r: &Resolved) -> Vec<usize> {
    fn pending(f: &Fusion, r: &Resolved, op: usize, done: &[bool], seen: &mut Vec<bool>) -> usize {
        if done[op] || seen[op] {
            return 0;
        }
        seen[op] = true;
        1 + f
            .reads(r, op)
            .into_iter()
            .flatten()
            .map(|d| pending(f, r, d, done, seen))
            .sum::<usize>()
    }
    fn visit(f: &Fusion, r: &Resolved, op: usize, done: &mut Vec<bool>, order: &mut Vec<usize>) {
        if done[op] {
            return;
        }
        let mut deps: Vec<(usize, usize)> = f
            .reads(r, op)
            .into_iter()
            .flatten()
            .map(|d| (pending(f, r, d, done, &mut vec![false; done.len()]), d))
            .collect();
        deps.sort_by_key(|&(n, _)| n);
        for (_, d) in deps {
            visit(f, r, d, done, order);
        }
        done[op] = true;
        order.push(op);
    }
    let mut done = vec![false; f.ops.len()];
    let mut order = Vec::new();
    let last = f.owner[f.owner.len() - 1];
    visit(f, r, last, &mut done, &mut order);
    order
}

impl Builder<'_> {
    /// Adds op `op` of `f`, reading the graph tensors its sources became.
    fn emit(
        &mut self,
        spec: &NetSpec,
        r: &Resolved,
        f: &Fusion,
        tensor: &[Option<usize>],
        op: usize,
    ) -> Result<usize> {
        let Fused { head, bn, act, .. } = f.ops[op];
        let inputs: Vec<usize> = f
            .reads(r, op)
            .into_iter()
            .map(|d| d.map_or(0, |d| tensor[d].expect("scheduled after its inputs")))
            .collect();
        let x = inputs[0];
        let name = spec.layers[head].name.as_str();
        let layer = &spec.layers[head].layer;
        match layer {
            &Layer::Conv {
                kernel,
                stride,
                padding,
                bias,
                ..
            }
            | &Layer::DepthwiseConv {
                kernel,
                stride,
                padding,
                bias,
                ..
            } => {
                let cfg = ConvConfig {
                    stride,
                    pad: padding,
                    bias,
                    bn: bn.map(|b| spec.layers[b].name.clone()),
                    act,
                    depthwise: matches!(layer, Layer::DepthwiseConv { .. }),
                };
                self.conv(x, name, r.shapes[head].channels(), kernel, &cfg)
            }
            Layer::Linear { .. } => self.fc(x, name, r.shapes[head].len(), act),
            &Layer::MaxPool { kernel, stride } => {
                self.pool(x, true, (kernel, stride.unwrap_or(kernel)), name)
            }
            &Layer::AvgPool { kernel, stride } => {
                self.pool(x, false, (kernel, stride.unwrap_or(kernel)), name)
            }
            Layer::GlobalAvgPool => match r.shape_of(r.sources[head][0]) {
                Dims::Map { h, w, .. } if h == w => self.pool(x, false, (h, h), name),
                d => Err(ExportError::BadInput(format!(
                    "layer '{name}': the int8 graph pools square windows only, and its input is \
                     {d}"
                ))),
            },
            Layer::Add { .. } => self.add(x, inputs[1], name, act),
            other => unreachable!("{other:?} folds into the op before it"),
        }
    }
}
