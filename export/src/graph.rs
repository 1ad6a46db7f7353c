//! The folded float graph: the quantizable ops the runtime executes, with float weights.
//!
//! Shapes are per image (C, H, W). Weights keep PyTorch's conv layout `[C_out][C_in][kh][kw]`
//! (a depthwise conv's `[C_out][1][kh][kw]`, output channel o reading input channel o / D)
//! (the writer transposes to the runtime's `[C_out][kh][kw][C_in]`); fully connected weights are
//! `[N][K]` with K already in the runtime's HWC order.

use octet_runtime::format;
use serde::Serialize;

/// Per-image shape of an activation tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Shape3 {
    pub c: usize,
    pub h: usize,
    pub w: usize,
}

impl Shape3 {
    pub fn new(c: usize, h: usize, w: usize) -> Self {
        Self { c, h, w }
    }

    pub fn len(&self) -> usize {
        self.c * self.h * self.w
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl std::fmt::Display for Shape3 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}×{}×{}", self.c, self.h, self.w)
    }
}

/// An activation tensor of the graph.
#[derive(Debug, Clone, Serialize)]
pub struct TensorInfo {
    pub name: String,
    pub shape: Shape3,
}

/// What an op computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum OpKind {
    Conv2d {
        kh: usize,
        kw: usize,
        stride: usize,
        pad: usize,
    },
    /// Each input channel convolved on its own into C_out / C_in outputs.
    DepthwiseConv2d {
        kh: usize,
        kw: usize,
        stride: usize,
        pad: usize,
    },
    FullyConnected,
    MaxPool {
        k: usize,
        stride: usize,
    },
    AvgPool {
        k: usize,
        stride: usize,
    },
    Add,
}

impl OpKind {
    /// The kind byte of the op record (FORMAT.md).
    pub fn code(&self) -> u8 {
        match self {
            OpKind::Conv2d { .. } => format::OP_CONV2D,
            OpKind::DepthwiseConv2d { .. } => format::OP_DEPTHWISE_CONV2D,
            OpKind::FullyConnected => format::OP_FULLY_CONNECTED,
            OpKind::MaxPool { .. } => format::OP_MAX_POOL,
            OpKind::AvgPool { .. } => format::OP_AVG_POOL,
            OpKind::Add => format::OP_ADD,
        }
    }

    /// (kernel_h, kernel_w, stride, pad) as the op record stores them: 0 where they do not
    /// apply.
    pub fn window(&self) -> (usize, usize, usize, usize) {
        match *self {
            OpKind::Conv2d {
                kh,
                kw,
                stride,
                pad,
            }
            | OpKind::DepthwiseConv2d {
                kh,
                kw,
                stride,
                pad,
            } => (kh, kw, stride, pad),
            OpKind::MaxPool { k, stride } | OpKind::AvgPool { k, stride } => (k, k, stride, 0),
            OpKind::FullyConnected | OpKind::Add => (0, 0, 0, 0),
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            OpKind::Conv2d { .. } => "conv2d",
            OpKind::DepthwiseConv2d { .. } => "depthwise_conv2d",
            OpKind::FullyConnected => "fully_connected",
            OpKind::MaxPool { .. } => "max_pool",
            OpKind::AvgPool { .. } => "avg_pool",
            OpKind::Add => "add",
        }
    }

    /// Whether the op carries weights and bias.
    pub fn has_weights(&self) -> bool {
        matches!(
            self,
            OpKind::Conv2d { .. } | OpKind::DepthwiseConv2d { .. } | OpKind::FullyConnected
        )
    }
}

/// One op of the folded graph.
#[derive(Debug, Clone)]
pub struct FloatOp {
    /// The layer's name in the checkpoint (e.g. `layer2.0.conv1`), for reports and errors.
    pub name: String,
    pub kind: OpKind,
    pub inputs: Vec<usize>,
    pub output: usize,
    /// Conv `[C_out][C_in][kh][kw]`, fc `[N][K]` (K in HWC order); empty for ops without weights.
    pub weight: Vec<f32>,
    /// One per output channel; empty for ops without weights.
    pub bias: Vec<f32>,
    /// ReLU fused into the output.
    pub relu: bool,
    /// With `relu`: ReLU6, the output clamped to [0, 6] too.
    pub relu6: bool,
    /// Real value of each input channel's padding (the first conv pads with the data set's mean,
    /// which is what PyTorch's zero padding of the normalised image means); `None`: pad with 0.
    pub pad_values: Option<Vec<f32>>,
}

impl FloatOp {
    /// Products summed per output value (the accumulator bound of FORMAT.md).
    pub fn k(&self, graph: &Graph) -> usize {
        let cin = graph.tensors[self.inputs[0]].shape.c;
        match self.kind {
            OpKind::Conv2d { kh, kw, .. } => kh * kw * cin,
            OpKind::DepthwiseConv2d { kh, kw, .. } => kh * kw,
            OpKind::FullyConnected => graph.tensors[self.inputs[0]].shape.len(),
            _ => 0,
        }
    }

    /// Output channels (conv, fc), else 0.
    pub fn out_channels(&self) -> usize {
        self.bias.len()
    }
}

/// Ops in execution order over a list of tensors; tensor `input` holds `pixel/255`.
#[derive(Debug, Clone)]
pub struct Graph {
    pub tensors: Vec<TensorInfo>,
    pub ops: Vec<FloatOp>,
    pub input: usize,
    pub output: usize,
}

impl Graph {
    /// Index of the op producing tensor `t`, `None` for the input.
    pub fn producer(&self, t: usize) -> Option<usize> {
        self.ops.iter().position(|o| o.output == t)
    }
}
