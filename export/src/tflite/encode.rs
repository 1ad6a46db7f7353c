//! [`Graph`] → TFLite flatbuffer bytes, through the code flatc generated from TensorFlow Lite's
//! `schema.fbs` (`schema_generated.rs`).
//!
//! Every constant tensor gets its own buffer (buffer 0 is the empty one the schema reserves),
//! its data aligned to 8 bytes from the start of the file, so a reader may take int32 biases in
//! place (the flatbuffers crate offers no larger alignment).

use flatbuffers::{FlatBufferBuilder, Vector, WIPOffset};

use super::graph::{Graph, Operator, Options, Tensor};
use super::schema::{self as fb, BuiltinOperator, BuiltinOptions};

/// The schema version TFLite and TFLite Micro read.
const SCHEMA_VERSION: u32 = 3;
/// Alignment of constant data from the file start (that of the u64 `encode` pushes first).
const DATA_ALIGN: usize = 8;

/// Encodes `g` with `description` (the model's provenance).
pub fn encode(g: &Graph, description: &str) -> Vec<u8> {
    let mut fbb = FlatBufferBuilder::new();
    // The whole file's length becomes a multiple of DATA_ALIGN (`finish` pads to the largest
    // alignment seen), so data placed at a multiple of it from the end is aligned from the start.
    fbb.push(0u64);
    let mut buffers = vec![fb::Buffer::create(&mut fbb, &fb::BufferArgs::default())];
    let mut tensors = Vec::with_capacity(g.tensors.len());
    for t in &g.tensors {
        let buffer = match &t.data {
            Some(data) => {
                let data = aligned_bytes(&mut fbb, data);
                buffers.push(fb::Buffer::create(
                    &mut fbb,
                    &fb::BufferArgs {
                        data: Some(data),
                        ..Default::default()
                    },
                ));
                buffers.len() as u32 - 1
            }
            None => 0,
        };
        tensors.push(tensor(&mut fbb, t, buffer));
    }
    let codes = operator_codes(g);
    let operators: Vec<_> = g
        .operators
        .iter()
        .map(|op| operator(&mut fbb, op, &codes))
        .collect();
    let subgraph = fb::SubGraphArgs {
        tensors: Some(fbb.create_vector(&tensors)),
        inputs: Some(fbb.create_vector(&g.inputs)),
        outputs: Some(fbb.create_vector(&g.outputs)),
        operators: Some(fbb.create_vector(&operators)),
        name: Some(fbb.create_string("main")),
        ..Default::default()
    };
    let subgraph = fb::SubGraph::create(&mut fbb, &subgraph);
    let codes: Vec<_> = codes
        .iter()
        .map(|&code| {
            fb::OperatorCode::create(
                &mut fbb,
                &fb::OperatorCodeArgs {
                    // Readers take the larger of the two fields; old ones only the first.
                    deprecated_builtin_code: code.0.min(127) as i8,
                    builtin_code: code,
                    version: 1,
                    custom_code: None,
                },
            )
        })
        .collect();
    let model = fb::ModelArgs {
        version: SCHEMA_VERSION,
        operator_codes: Some(fbb.create_vector(&codes)),
        subgraphs: Some(fbb.create_vector(&[subgraph])),
        description: Some(fbb.create_string(description)),
        buffers: Some(fbb.create_vector(&buffers)),
        ..Default::default()
    };
    let model = fb::Model::create(&mut fbb, &model);
    fb::finish_model_buffer(&mut fbb, model);
    fbb.finished_data().to_vec()
}

/// `data` as a byte vector whose first byte lies at a multiple of DATA_ALIGN from the end of
/// the finished buffer (hence from its start).
fn aligned_bytes<'a>(fbb: &mut FlatBufferBuilder<'a>, data: &[u8]) -> WIPOffset<Vector<'a, u8>> {
    let used = fbb.unfinished_data().len();
    let pad = (DATA_ALIGN - (used + data.len()) % DATA_ALIGN) % DATA_ALIGN;
    for _ in 0..pad {
        fbb.push(0u8);
    }
    fbb.create_vector(data)
}

fn tensor<'a>(
    fbb: &mut FlatBufferBuilder<'a>,
    t: &Tensor,
    buffer: u32,
) -> WIPOffset<fb::Tensor<'a>> {
    let quantization = t.quant.as_ref().map(|q| {
        let args = fb::QuantizationParametersArgs {
            scale: Some(fbb.create_vector(&q.scales)),
            zero_point: Some(fbb.create_vector(&q.zero_points)),
            quantized_dimension: q.dimension,
            ..Default::default()
        };
        fb::QuantizationParameters::create(fbb, &args)
    });
    let args = fb::TensorArgs {
        shape: Some(fbb.create_vector(&t.shape)),
        type_: t.dtype,
        buffer,
        name: Some(fbb.create_string(&t.name)),
        quantization,
        ..Default::default()
    };
    fb::Tensor::create(fbb, &args)
}

/// The distinct operators of `g` in order of first use: the model's operator code table.
fn operator_codes(g: &Graph) -> Vec<BuiltinOperator> {
    let mut codes = Vec::new();
    for op in &g.operators {
        let code = op.options.operator();
        if !codes.contains(&code) {
            codes.push(code);
        }
    }
    codes
}

fn operator<'a>(
    fbb: &mut FlatBufferBuilder<'a>,
    op: &Operator,
    codes: &[BuiltinOperator],
) -> WIPOffset<fb::Operator<'a>> {
    let code = op.options.operator();
    let opcode_index = codes.iter().position(|&c| c == code).unwrap_or(0) as u32;
    let (builtin_options_type, builtin_options) = options(fbb, &op.options);
    let args = fb::OperatorArgs {
        opcode_index,
        inputs: Some(fbb.create_vector(&op.inputs)),
        outputs: Some(fbb.create_vector(&op.outputs)),
        builtin_options_type,
        builtin_options: Some(builtin_options),
        ..Default::default()
    };
    fb::Operator::create(fbb, &args)
}

/// The options table of `o` and its union tag.
fn options(
    fbb: &mut FlatBufferBuilder<'_>,
    o: &Options,
) -> (BuiltinOptions, WIPOffset<flatbuffers::UnionWIPOffset>) {
    match *o {
        Options::Conv {
            padding,
            stride,
            act,
        } => {
            let args = fb::Conv2DOptionsArgs {
                padding,
                stride_w: stride,
                stride_h: stride,
                fused_activation_function: act,
                ..Default::default()
            };
            let t = fb::Conv2DOptions::create(fbb, &args);
            (BuiltinOptions::Conv2DOptions, t.as_union_value())
        }
        Options::Depthwise {
            padding,
            stride,
            multiplier,
            act,
        } => {
            let args = fb::DepthwiseConv2DOptionsArgs {
                padding,
                stride_w: stride,
                stride_h: stride,
                depth_multiplier: multiplier,
                fused_activation_function: act,
                ..Default::default()
            };
            let t = fb::DepthwiseConv2DOptions::create(fbb, &args);
            (BuiltinOptions::DepthwiseConv2DOptions, t.as_union_value())
        }
        Options::FullyConnected { act } => {
            let args = fb::FullyConnectedOptionsArgs {
                fused_activation_function: act,
                ..Default::default()
            };
            let t = fb::FullyConnectedOptions::create(fbb, &args);
            (BuiltinOptions::FullyConnectedOptions, t.as_union_value())
        }
        Options::MaxPool {
            kernel,
            stride,
            act,
        } => {
            let args = fb::Pool2DOptionsArgs {
                padding: fb::Padding::VALID,
                stride_w: stride,
                stride_h: stride,
                filter_height: kernel.0,
                filter_width: kernel.1,
                fused_activation_function: act,
            };
            let t = fb::Pool2DOptions::create(fbb, &args);
            (BuiltinOptions::Pool2DOptions, t.as_union_value())
        }
        Options::Add { act } => {
            let args = fb::AddOptionsArgs {
                fused_activation_function: act,
                ..Default::default()
            };
            let t = fb::AddOptions::create(fbb, &args);
            (BuiltinOptions::AddOptions, t.as_union_value())
        }
        Options::Pad => {
            let t = fb::PadOptions::create(fbb, &fb::PadOptionsArgs {});
            (BuiltinOptions::PadOptions, t.as_union_value())
        }
        Options::Concatenation { axis } => {
            let args = fb::ConcatenationOptionsArgs {
                axis,
                fused_activation_function: fb::ActivationFunctionType::NONE,
            };
            let t = fb::ConcatenationOptions::create(fbb, &args);
            (BuiltinOptions::ConcatenationOptions, t.as_union_value())
        }
        Options::Quantize => {
            let t = fb::QuantizeOptions::create(fbb, &fb::QuantizeOptionsArgs {});
            (BuiltinOptions::QuantizeOptions, t.as_union_value())
        }
    }
}
