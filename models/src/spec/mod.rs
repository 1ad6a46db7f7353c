//! A network as data: an ordered list of named layers and their wiring. Everything else
//! derives from it — the candle modules ([`crate::SpecNetwork`]), the PyTorch `state_dict`
//! names (`{layer}.weight`), the exporter's int8 graph and the test writers — so a network is
//! defined once, in a description (built in: [`crate::zoo`]; a user's: [`file`]).
//!
//! Layers are listed in PyTorch's registration order (which is also the order parameters are
//! initialised in); each reads the previous layer's output unless it names its `input`.

mod file;
mod layer;

pub use file::{from_json, from_toml, read_file};
pub use layer::Layer;

use serde::{Deserialize, Serialize};

/// The name that refers to the network's input in `input` and `with`.
pub const INPUT: &str = "input";

/// One named layer and where it reads from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Node {
    /// The layer's name: its parameters are `{name}.weight` and so on, as in PyTorch.
    pub name: String,
    /// The layer whose output this one reads (or [`INPUT`]); `None`: the previous layer's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<String>,
    #[serde(flatten)]
    pub layer: Layer,
    /// Where the layer is in its description file, for errors.
    #[serde(skip)]
    pub line: Option<usize>,
}

impl Node {
    pub fn new(name: impl Into<String>, layer: Layer) -> Self {
        Self {
            name: name.into(),
            input: None,
            layer,
            line: None,
        }
    }

    /// The same layer reading `input` instead of the previous layer's output.
    pub fn from(mut self, input: impl Into<String>) -> Self {
        self.input = Some(input.into());
        self
    }
}

/// A network description: its layers in order; the last one's output is the logits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NetSpec {
    #[serde(rename = "layer")]
    pub layers: Vec<Node>,
}

/// Where a layer reads from: the network's input or an earlier layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Source {
    Input,
    Layer(usize),
}

/// The per-image shape of a layer's output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dims {
    /// Feature maps: channels, height, width.
    Map { c: usize, h: usize, w: usize },
    /// A flat vector (after `flatten` or `linear`).
    Flat(usize),
}

impl Dims {
    pub fn len(self) -> usize {
        match self {
            Dims::Map { c, h, w } => c * h * w,
            Dims::Flat(n) => n,
        }
    }

    pub fn is_empty(self) -> bool {
        self.len() == 0
    }

    /// Channels of a feature map; a flat vector's length.
    pub fn channels(self) -> usize {
        match self {
            Dims::Map { c, .. } => c,
            Dims::Flat(n) => n,
        }
    }
}

impl std::fmt::Display for Dims {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Dims::Map { c, h, w } => write!(f, "{c}×{h}×{w}"),
            Dims::Flat(n) => write!(f, "{n} values"),
        }
    }
}

/// A description that cannot be built, naming the layer (and its line) at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{message}", where_(.layer, .line))]
pub struct SpecError {
    /// The layer's position (from 1) and name.
    pub layer: Option<(usize, String)>,
    pub line: Option<usize>,
    pub message: String,
}

fn where_(layer: &Option<(usize, String)>, line: &Option<usize>) -> String {
    match (layer, line) {
        (Some((i, name)), Some(l)) => format!("line {l}, layer {i} '{name}': "),
        (Some((i, name)), None) => format!("layer {i} '{name}': "),
        (None, Some(l)) => format!("line {l}: "),
        (None, None) => String::new(),
    }
}

impl SpecError {
    pub(crate) fn whole(message: impl Into<String>) -> Self {
        Self {
            layer: None,
            line: None,
            message: message.into(),
        }
    }
}

/// A description checked against an input shape and a class count: every layer's sources and
/// output shape, in the order of [`NetSpec::layers`].
#[derive(Debug, Clone, PartialEq)]
pub struct Resolved {
    pub input: Dims,
    /// What each layer reads: its input, then (for `add`) the other operand.
    pub sources: Vec<Vec<Source>>,
    pub shapes: Vec<Dims>,
}

impl Resolved {
    pub fn shape_of(&self, s: Source) -> Dims {
        match s {
            Source::Input => self.input,
            Source::Layer(i) => self.shapes[i],
        }
    }

    /// The layers reading each layer's output.
    pub fn consumers(&self) -> Vec<Vec<usize>> {
        let mut c = vec![Vec::new(); self.shapes.len()];
        for (i, srcs) in self.sources.iter().enumerate() {
            for s in srcs {
                if let Source::Layer(j) = s {
                    c[*j].push(i);
                }
            }
        }
        c
    }
}

impl NetSpec {
    pub fn new(layers: Vec<Node>) -> Self {
        Self { layers }
    }

    /// Checks the wiring and every layer's settings for `channels`×`height`×`width` images and
    /// `classes` classes, and infers each layer's output shape.
    pub fn resolve(
        &self,
        (channels, height, width): (usize, usize, usize),
        classes: usize,
    ) -> Result<Resolved, SpecError> {
        if self.layers.is_empty() {
            return Err(SpecError::whole("the network has no layers"));
        }
        if channels == 0 || height == 0 || width == 0 || classes == 0 {
            return Err(SpecError::whole(format!(
                "input {channels}×{height}×{width} with {classes} classes: every size must be \
                 positive"
            )));
        }
        let input = Dims::Map {
            c: channels,
            h: height,
            w: width,
        };
        let mut r = Resolved {
            input,
            sources: Vec::new(),
            shapes: Vec::new(),
        };
        let mut names = std::collections::HashMap::new();
        for (i, node) in self.layers.iter().enumerate() {
            let err = |message: String| SpecError {
                layer: Some((i + 1, node.name.clone())),
                line: node.line,
                message,
            };
            if node.name.is_empty() || node.name == INPUT || node.name.contains(char::is_whitespace)
            {
                return Err(err(format!(
                    "'{}' cannot name a layer: use a non-empty name without spaces, other than \
                     '{INPUT}'",
                    node.name
                )));
            }
            let find = |name: &str| -> Result<Source, SpecError> {
                if name == INPUT {
                    return Ok(Source::Input);
                }
                names.get(name).map(|&j| Source::Layer(j)).ok_or_else(|| {
                    err(format!(
                        "reads '{name}', which is not an earlier layer (layers may only read \
                         '{INPUT}' or layers listed before them)"
                    ))
                })
            };
            let first = match &node.input {
                Some(name) => find(name)?,
                None if i == 0 => Source::Input,
                None => Source::Layer(i - 1),
            };
            let mut sources = vec![first];
            if let Layer::Add { with } = &node.layer {
                sources.push(find(with)?);
            }
            let x = r.shape_of(first);
            let shape = output_shape(&node.layer, x, &sources, &r, classes).map_err(err)?;
            if names.insert(node.name.clone(), i).is_some() {
                return Err(err("another layer has this name already".into()));
            }
            r.sources.push(sources);
            r.shapes.push(shape);
        }
        let last = self.layers.len() - 1;
        match r.shapes[last] {
            Dims::Flat(n) if n == classes => Ok(r),
            out => Err(SpecError {
                layer: Some((last + 1, self.layers[last].name.clone())),
                line: self.layers[last].line,
                message: format!(
                    "the last layer gives {out}, but the network's output must be one value per \
                     class ({classes}): end with a linear layer without `out`"
                ),
            }),
        }
    }

    /// The name of the last linear layer: its weight's rows are the classes.
    pub fn classifier(&self) -> Option<&str> {
        self.layers
            .iter()
            .rev()
            .find(|n| matches!(n.layer, Layer::Linear { .. }))
            .map(|n| n.name.as_str())
    }

    /// The first layer with weights, which reads the input channels.
    pub fn stem(&self) -> Option<&str> {
        self.layers
            .iter()
            .find(|n| n.layer.has_weights())
            .map(|n| n.name.as_str())
    }
}

/// A layer's output shape for input `x`, or why the layer cannot read it.
fn output_shape(
    layer: &Layer,
    x: Dims,
    sources: &[Source],
    r: &Resolved,
    classes: usize,
) -> Result<Dims, String> {
    let map = |what: &str| match x {
        Dims::Map { c, h, w } => Ok((c, h, w)),
        Dims::Flat(_) => Err(format!(
            "{what} needs feature maps, but its input is already flat ({x})"
        )),
    };
    let window = |h: usize, w: usize, k: usize, s: usize, p: usize| {
        if k == 0 || s == 0 {
            return Err(format!("kernel {k} and stride {s} must be positive"));
        }
        if h + 2 * p < k || w + 2 * p < k {
            return Err(format!(
                "its input {}×{h}×{w} (padding {p}) is smaller than its {k}×{k} window",
                x.channels()
            ));
        }
        Ok(((h + 2 * p - k) / s + 1, (w + 2 * p - k) / s + 1))
    };
    Ok(match layer {
        Layer::Conv {
            out,
            kernel,
            stride,
            padding,
            ..
        } => {
            let (_, h, w) = map("conv")?;
            if *out == 0 {
                return Err("out must be positive".into());
            }
            let (h, w) = window(h, w, *kernel, *stride, *padding)?;
            Dims::Map { c: *out, h, w }
        }
        Layer::DepthwiseConv {
            multiplier,
            kernel,
            stride,
            padding,
            ..
        } => {
            let (c, h, w) = map("depthwise_conv")?;
            if *multiplier == 0 {
                return Err("multiplier must be positive".into());
            }
            let (h, w) = window(h, w, *kernel, *stride, *padding)?;
            Dims::Map {
                c: c * multiplier,
                h,
                w,
            }
        }
        Layer::BatchNorm => {
            map("batch_norm")?;
            x
        }
        Layer::Relu | Layer::Relu6 => x,
        Layer::Dropout { p } => {
            if !(0.0..1.0).contains(p) {
                return Err(format!("p is {p}; it must be in [0, 1)"));
            }
            x
        }
        Layer::MaxPool { kernel, stride } | Layer::AvgPool { kernel, stride } => {
            let (c, h, w) = map(layer.op())?;
            let (h, w) = window(h, w, *kernel, stride.unwrap_or(*kernel), 0)?;
            Dims::Map { c, h, w }
        }
        Layer::GlobalAvgPool => {
            let (c, ..) = map("global_avg_pool")?;
            Dims::Map { c, h: 1, w: 1 }
        }
        Layer::Add { with } => {
            let other = r.shape_of(sources[1]);
            if other != x {
                return Err(format!(
                    "adds {x} and {other} ('{with}'): the shapes differ"
                ));
            }
            x
        }
        Layer::Flatten => {
            map("flatten")?;
            Dims::Flat(x.len())
        }
        Layer::Linear { out } => {
            if let Dims::Map { .. } = x {
                return Err(format!(
                    "linear needs a flat input, but gets {x}: put a flatten (or \
                     global_avg_pool, flatten) layer before it"
                ));
            }
            match out {
                Some(0) => return Err("out must be positive".into()),
                Some(n) => Dims::Flat(*n),
                None => Dims::Flat(classes),
            }
        }
    })
}

#[cfg(test)]
mod tests;
