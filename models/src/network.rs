//! A network built from its description: the candle layers of every [`Layer`] with weights,
//! and a forward pass that walks the description. It runs the fused ops the hand-written
//! networks ran: batch norm + ReLU (or ReLU6) in one kernel on channels-last activations,
//! add + ReLU in one everywhere, pooling before the classifier in f32.

use candle_core::{Result, Tensor};
use octet_train_ops::permute::{nchw, nhwc};
use octet_train_ops::Activation;

use crate::activations::nchw_f32;
use crate::builder::LayerBuilder;
use crate::dropout::DropoutKey;
use crate::spec::{Dims, Layer, NetSpec, Resolved, Source};
use crate::{BatchNorm2d, Conv2d, Conv2dConfig, Linear, Network, NetworkParts};

/// The candle module of one layer (none for those without parameters).
#[derive(Debug, Clone)]
enum Module {
    Conv(Conv2d),
    BatchNorm(BatchNorm2d),
    Linear(Linear),
    None,
}

/// A [`NetSpec`] as a trainable candle network; `candle_nn::ModuleT` and [`Network`].
pub struct SpecNetwork {
    spec: NetSpec,
    resolved: Resolved,
    modules: Vec<Module>,
    /// Layer `i` runs with the rectifier after it fused in (that layer, `i + 1`, is skipped).
    fused: Vec<Option<Activation>>,
    /// Layer `i` (a pooling) feeds only the classifier head, so it pools in f32 NCHW.
    head: Vec<bool>,
    /// The last layer reading each layer's output, after which it is dropped.
    last_use: Vec<usize>,
    dropout: DropoutKey,
    parts: NetworkParts,
}

impl SpecNetwork {
    /// `spec` for `(channels, height, width)` images and `classes` classes, its layers
    /// registered (and initialised) in the description's order.
    pub(crate) fn new(
        mut lb: LayerBuilder,
        spec: &NetSpec,
        image: (usize, usize, usize),
        classes: usize,
    ) -> crate::Result<Self> {
        let resolved = spec.resolve(image, classes)?;
        let b = &mut lb;
        let mut modules = Vec::with_capacity(spec.layers.len());
        for (i, node) in spec.layers.iter().enumerate() {
            let x = resolved.shape_of(resolved.sources[i][0]);
            let name = node.name.as_str();
            modules.push(match node.layer {
                Layer::Conv {
                    out,
                    kernel,
                    stride,
                    padding,
                    bias,
                } => {
                    let cfg = Conv2dConfig {
                        stride,
                        padding,
                        bias,
                        groups: 1,
                    };
                    Module::Conv(Conv2d::new(b, name, (x.channels(), out), kernel, cfg)?)
                }
                Layer::DepthwiseConv {
                    multiplier,
                    kernel,
                    stride,
                    padding,
                    bias,
                } => {
                    let c = x.channels();
                    let cfg = Conv2dConfig {
                        stride,
                        padding,
                        bias,
                        groups: c,
                    };
                    Module::Conv(Conv2d::new(b, name, (c, c * multiplier), kernel, cfg)?)
                }
                Layer::BatchNorm => Module::BatchNorm(BatchNorm2d::new(b, name, x.channels())?),
                Layer::Linear { .. } => {
                    let out = resolved.shapes[i].len();
                    Module::Linear(Linear::new(b, name, x.len(), out)?)
                }
                _ => Module::None,
            });
        }
        let consumers = resolved.consumers();
        let channels_last = lb.params_activations().channels_last();
        let n = spec.layers.len();
        // The rectifier that alone reads layer i's output, directly after it.
        let sole_act_after = |i: usize| {
            let sole = i + 1 < n
                && consumers[i] == [i + 1]
                && resolved.sources[i + 1] == [Source::Layer(i)];
            match spec.layers.get(i + 1).map(|l| &l.layer) {
                Some(Layer::Relu) if sole => Some(Activation::Relu),
                Some(Layer::Relu6) if sole => Some(Activation::Relu6),
                _ => None,
            }
        };
        let fused = (0..n)
            .map(|i| match spec.layers[i].layer {
                Layer::Add { .. } => sole_act_after(i).filter(|&a| a == Activation::Relu),
                // NCHW batch norm keeps its separate one-kernel rectifier, as before.
                Layer::BatchNorm if channels_last => sole_act_after(i),
                _ => None,
            })
            .collect();
        let head = (0..n)
            .map(|i| {
                !consumers[i].is_empty()
                    && consumers[i].iter().all(|&c| {
                        matches!(spec.layers[c].layer, Layer::Flatten | Layer::Linear { .. })
                    })
            })
            .collect();
        let last_use = (0..n)
            .map(|i| consumers[i].iter().copied().max().unwrap_or(n))
            .collect();
        Ok(Self {
            spec: spec.clone(),
            resolved,
            modules,
            fused,
            head,
            last_use,
            dropout: DropoutKey::default(),
            parts: lb.finish(),
        })
    }

    /// The description the network was built from.
    pub fn spec(&self) -> &NetSpec {
        &self.spec
    }

    /// Every layer's output shape per image.
    pub fn shapes(&self) -> &[Dims] {
        &self.resolved.shapes
    }
}

/// An activation and whether it is channels-last.
type Value = (Tensor, bool);

impl SpecNetwork {
    fn layer(&self, i: usize, x: &Value, vals: &[Option<Value>], train: bool) -> Result<Value> {
        let ops = &self.parts.ops;
        let (t, cl) = (&x.0, x.1);
        let act = self.fused[i];
        let pool = |f: &dyn Fn(&Tensor) -> Result<Tensor>| -> Result<Value> {
            match (cl, self.head[i]) {
                (false, _) => Ok((f(t)?, false)),
                // The pooled maps feed the f32 classifier: leave channels-last first.
                (true, true) => Ok((f(&nchw_f32(t)?)?, false)),
                (true, false) => Ok((nhwc(&f(&nchw(t)?)?)?, true)),
            }
        };
        Ok(match (&self.spec.layers[i].layer, &self.modules[i]) {
            (_, Module::Conv(c)) if cl => (c.forward_channels_last(t)?, true),
            (_, Module::Conv(c)) => (c.forward(t)?, false),
            (Layer::BatchNorm, Module::BatchNorm(bn)) if cl => {
                (bn.forward_channels_last(t, train, act)?, true)
            }
            (Layer::BatchNorm, Module::BatchNorm(bn)) => (bn.forward(t, train)?, false),
            (Layer::Relu, _) => (ops.relu(t)?, cl),
            (Layer::Relu6, _) => (ops.relu6(t)?, cl),
            (Layer::Dropout { p }, _) if train => (self.dropout.apply(t, *p, i)?, cl),
            (Layer::Dropout { .. }, _) => x.clone(),
            (Layer::MaxPool { kernel, stride }, _) => {
                let s = stride.unwrap_or(*kernel);
                pool(&|t| t.max_pool2d_with_stride(*kernel, s))?
            }
            (Layer::AvgPool { kernel, stride }, _) => {
                let s = stride.unwrap_or(*kernel);
                pool(&|t| t.avg_pool2d_with_stride(*kernel, s))?
            }
            (Layer::GlobalAvgPool, _) => {
                let Dims::Map { h, w, .. } = self.resolved.shape_of(self.resolved.sources[i][0])
                else {
                    unreachable!("resolve() checks global_avg_pool reads feature maps")
                };
                pool(&|t| t.avg_pool2d((h, w)))?
            }
            (Layer::Add { .. }, _) => {
                let other = value(vals, self.resolved.sources[i][1]);
                let other = match (&other, cl) {
                    (Some((o, ocl)), _) if *ocl == cl => o.clone(),
                    _ => candle_core::bail!("add: operands in different layouts"),
                };
                let y = if act.is_some() {
                    ops.add_relu(t, &other)?
                } else {
                    (t + &other)?
                };
                (y, cl)
            }
            (Layer::Flatten, _) => {
                let t = if cl { nchw_f32(t)? } else { t.clone() };
                (t.flatten_from(1)?, false)
            }
            (Layer::Linear { .. }, Module::Linear(l)) => (l.forward(t)?, false),
            (layer, _) => unreachable!("layer {layer:?} built without its module"),
        })
    }
}

fn value(vals: &[Option<Value>], s: Source) -> Option<Value> {
    match s {
        Source::Input => vals.last().cloned().flatten(),
        Source::Layer(j) => vals[j].clone(),
    }
}

impl Network for SpecNetwork {
    fn forward(&self, x: &Tensor, train: bool) -> Result<Tensor> {
        let n = self.spec.layers.len();
        let acts = self.parts.activations;
        // vals[n] holds the network input.
        let mut vals: Vec<Option<Value>> = vec![None; n + 1];
        vals[n] = Some((acts.enter(x)?, acts.channels_last()));
        let mut i = 0;
        while i < n {
            let x = value(&vals, self.resolved.sources[i][0])
                .ok_or_else(|| candle_core::Error::Msg("input dropped before use".into()))?;
            let y = self.layer(i, &x, &vals, train)?;
            for s in &self.resolved.sources[i] {
                if let Source::Layer(j) = *s {
                    if self.last_use[j] <= i {
                        vals[j] = None;
                    }
                }
            }
            if self.fused[i].is_some() {
                // The rectifier after it ran fused: it holds the same value.
                vals[i + 1] = Some(y);
                i += 2;
            } else {
                vals[i] = Some(y);
                i += 1;
            }
        }
        Ok(vals[n - 1].take().expect("the last layer's output").0)
    }

    fn parts(&self) -> &NetworkParts {
        &self.parts
    }

    fn set_dropout_key(&self, key: u64) {
        self.dropout.set(key);
    }
}

impl candle_nn::ModuleT for SpecNetwork {
    fn forward_t(&self, xs: &Tensor, train: bool) -> Result<Tensor> {
        Network::forward(self, xs, train)
    }
}
