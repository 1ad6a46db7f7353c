//! The TFLite model being built, before it is encoded: tensors (with their quantization and
//! constant data) and operators in execution order, in TFLite's own terms (NHWC shapes, builtin
//! operators and their options). `lower` fills it from a `.o8`; `encode` writes it as a
//! flatbuffer.

use super::schema::{ActivationFunctionType, BuiltinOperator, Padding, TensorType};

/// Quantization of a tensor: real = scale · (q − zero_point), one pair per slice along
/// `dimension` (per-channel weights) or one pair for the whole tensor.
#[derive(Debug, Clone, PartialEq)]
pub struct Quant {
    pub scales: Vec<f32>,
    pub zero_points: Vec<i64>,
    /// TFLite's `quantized_dimension` (0 for conv/fc weights, 3 for depthwise weights).
    pub dimension: i32,
}

impl Quant {
    /// One scale and zero point for the whole tensor.
    pub fn per_tensor(scale: f32, zero_point: i32) -> Self {
        Quant {
            scales: vec![scale],
            zero_points: vec![zero_point as i64],
            dimension: 0,
        }
    }

    /// Symmetric per-channel scales (zero points 0) along `dimension`.
    pub fn per_channel(scales: Vec<f32>, dimension: i32) -> Self {
        Quant {
            zero_points: vec![0; scales.len()],
            scales,
            dimension,
        }
    }
}

/// A tensor: an activation (no data) or a constant (little-endian bytes).
#[derive(Debug, Clone, PartialEq)]
pub struct Tensor {
    pub name: String,
    pub shape: Vec<i32>,
    pub dtype: TensorType,
    pub quant: Option<Quant>,
    pub data: Option<Vec<u8>>,
}

/// An operator's builtin options (only those the converter emits).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Options {
    Conv {
        padding: Padding,
        stride: i32,
        act: ActivationFunctionType,
    },
    /// Depthwise conv.
    Depthwise {
        padding: Padding,
        stride: i32,
        multiplier: i32,
        act: ActivationFunctionType,
    },
    FullyConnected {
        act: ActivationFunctionType,
    },
    /// Max pooling, VALID.
    MaxPool {
        kernel: (i32, i32),
        stride: i32,
        act: ActivationFunctionType,
    },
    Add {
        act: ActivationFunctionType,
    },
    Pad,
    /// Concatenation along `axis`, no activation.
    Concatenation {
        axis: i32,
    },
    Quantize,
}

impl Options {
    /// The builtin operator these options belong to.
    pub fn operator(&self) -> BuiltinOperator {
        match self {
            Options::Conv { .. } => BuiltinOperator::CONV_2D,
            Options::Depthwise { .. } => BuiltinOperator::DEPTHWISE_CONV_2D,
            Options::FullyConnected { .. } => BuiltinOperator::FULLY_CONNECTED,
            Options::MaxPool { .. } => BuiltinOperator::MAX_POOL_2D,
            Options::Add { .. } => BuiltinOperator::ADD,
            Options::Pad => BuiltinOperator::PAD,
            Options::Concatenation { .. } => BuiltinOperator::CONCATENATION,
            Options::Quantize => BuiltinOperator::QUANTIZE,
        }
    }
}

/// An operator: options, input and output tensor indices.
#[derive(Debug, Clone, PartialEq)]
pub struct Operator {
    pub options: Options,
    pub inputs: Vec<i32>,
    pub outputs: Vec<i32>,
}

/// A one-subgraph TFLite model.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Graph {
    pub tensors: Vec<Tensor>,
    pub operators: Vec<Operator>,
    pub inputs: Vec<i32>,
    pub outputs: Vec<i32>,
}

impl Graph {
    /// Appends `t`; returns its index.
    pub fn add_tensor(&mut self, t: Tensor) -> i32 {
        self.tensors.push(t);
        (self.tensors.len() - 1) as i32
    }

    /// Appends an int8 activation tensor.
    pub fn activation(
        &mut self,
        name: String,
        shape: Vec<i32>,
        scale: f32,
        zero_point: i32,
    ) -> i32 {
        self.add_tensor(Tensor {
            name,
            shape,
            dtype: TensorType::INT8,
            quant: Some(Quant::per_tensor(scale, zero_point)),
            data: None,
        })
    }

    /// Appends a constant tensor of `dtype` with the little-endian bytes `data`.
    pub fn constant(
        &mut self,
        name: String,
        shape: Vec<i32>,
        dtype: TensorType,
        quant: Option<Quant>,
        data: Vec<u8>,
    ) -> i32 {
        self.add_tensor(Tensor {
            name,
            shape,
            dtype,
            quant,
            data: Some(data),
        })
    }

    /// Appends an operator.
    pub fn op(&mut self, options: Options, inputs: Vec<i32>, outputs: Vec<i32>) {
        self.operators.push(Operator {
            options,
            inputs,
            outputs,
        });
    }
}
