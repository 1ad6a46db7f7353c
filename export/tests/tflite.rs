//! The `.o8` → `.tflite` converter: the flatbuffer reads back with the reader flatc generated
//! from TFLite's schema and holds the `.o8`'s tensors, quantization and ops as TFLite expresses
//! them; what TFLite cannot express is refused with an error naming it.

use octet_testkit as common;
use octet_testkit::exported as tflite_models;

use octet_export::tflite::schema::{root_as_model, BuiltinOperator, TensorType};
use octet_export::tflite::to_tflite;
use octet_export::ExportError;
use octet_runtime::{Model, OpKind};

/// The builtin operator of each of the model's operators, in order.
fn operators(tfl: &[u8]) -> Vec<BuiltinOperator> {
    let m = root_as_model(tfl).expect("a valid TFLite flatbuffer");
    let codes = m.operator_codes().unwrap();
    let g = m.subgraphs().unwrap().get(0);
    g.operators()
        .unwrap()
        .iter()
        .map(|op| codes.get(op.opcode_index() as usize).builtin_code())
        .collect()
}

#[test]
fn lenet_reads_back_with_the_o8s_tensors_and_ops() {
    let o8 = tflite_models::lenet(7);
    let t = to_tflite(&o8).unwrap();
    assert_eq!(t.multipliers.inexact, 0, "{:?}", t.multipliers.examples);
    assert_eq!(t.multipliers.pairs, 6 + 16 + 120 + 84 + 10);
    use BuiltinOperator as B;
    assert_eq!(
        operators(&t.bytes),
        [
            B::QUANTIZE,
            B::CONV_2D,
            B::MAX_POOL_2D,
            B::CONV_2D,
            B::MAX_POOL_2D,
            B::FULLY_CONNECTED,
            B::FULLY_CONNECTED,
            B::FULLY_CONNECTED
        ]
    );
    let model = Model::parse(&o8).unwrap();
    let fb = root_as_model(&t.bytes).unwrap();
    let g = fb.subgraphs().unwrap().get(0);
    let tensors = g.tensors().unwrap();
    // The uint8 pixels: real = pixel/255, then q = pixel − 128 in the int8 input.
    let pixels = tensors.get(g.inputs().unwrap().get(0) as usize);
    assert_eq!(pixels.type_(), TensorType::UINT8);
    assert_eq!(
        pixels.shape().unwrap().iter().collect::<Vec<_>>(),
        [1, 32, 32, 1]
    );
    let q = pixels.quantization().unwrap();
    assert_eq!(q.zero_point().unwrap().get(0), 0);
    // Every op's output carries the .o8 output tensor's scale and zero point; each weight
    // tensor one scale per output channel; each int32 bias the .o8's plus z_in·Σw.
    let ops = g.operators().unwrap();
    for (op, info) in ops.iter().skip(1).zip(model.ops()) {
        let out = tensors.get(op.outputs().unwrap().get(0) as usize);
        let want = model.tensor(info.output).unwrap();
        let q = out.quantization().unwrap();
        assert_eq!(q.scale().unwrap().get(0), want.scale, "op {}", info.index);
        assert_eq!(q.zero_point().unwrap().get(0), want.zero_point as i64);
        if matches!(info.kind, OpKind::Conv2d | OpKind::FullyConnected) {
            let w = tensors.get(op.inputs().unwrap().get(1) as usize);
            assert_eq!(w.type_(), TensorType::INT8);
            let wq = w.quantization().unwrap();
            assert_eq!(wq.scale().unwrap().len(), want.c as usize);
            assert_eq!(wq.quantized_dimension(), 0);
            let b = tensors.get(op.inputs().unwrap().get(2) as usize);
            assert_eq!(b.type_(), TensorType::INT32);
            let data = fb
                .buffers()
                .unwrap()
                .get(b.buffer() as usize)
                .data()
                .unwrap();
            let z_in = model.tensor(info.input0).unwrap().zero_point as i64;
            let per = info.weights.len() / want.c as usize;
            for c in 0..want.c as usize {
                let got = i32::from_le_bytes(data[4 * c..4 * c + 4].try_into().unwrap());
                let sum: i64 = info.weights[c * per..(c + 1) * per]
                    .iter()
                    .map(|&v| v as i64)
                    .sum();
                assert_eq!(got as i64, info.bias.get(c) as i64 + z_in * sum);
            }
        }
    }
}

#[test]
fn every_op_kind_converts() {
    let o8 = tflite_models::all_ops(3);
    let t = to_tflite(&o8).unwrap();
    assert_eq!(t.multipliers.inexact, 0, "{:?}", t.multipliers.examples);
    // TFLite's adds (the exported default): their parameters are the ones TFLite derives.
    assert_eq!(t.multipliers.adds, 0);
    let ops = operators(&t.bytes);
    use BuiltinOperator as B;
    for want in [
        B::PAD,
        B::DEPTHWISE_CONV_2D,
        B::ADD,
        B::MAX_POOL_2D,
        B::FULLY_CONNECTED,
    ] {
        assert!(ops.contains(&want), "no {want:?} in {ops:?}");
    }
    // One PAD: the stride-2 conv; the stride-1 3×3 convs pad as TFLite's SAME does.
    assert_eq!(ops.iter().filter(|&&o| o == B::PAD).count(), 1);
    // The stem pads with its pad value: the int8 input's zero point, the uint8 one 128 above.
    let model = Model::parse(&o8).unwrap();
    let pad_value = model.op(0).unwrap().pad_values[0] as i64;
    let fb = root_as_model(&t.bytes).unwrap();
    let g = fb.subgraphs().unwrap().get(0);
    let zp = |i: i32| {
        let t = g.tensors().unwrap().get(i as usize);
        t.quantization().unwrap().zero_point().unwrap().get(0)
    };
    let quantize = g.operators().unwrap().get(0);
    assert_eq!(zp(quantize.outputs().unwrap().get(0)), pad_value);
    assert_eq!(zp(quantize.inputs().unwrap().get(0)), pad_value + 128);
}

/// Multipliers drawn at random (not from f32 scales) are mostly unreachable: counted, not
/// hidden.
#[test]
fn unreachable_multipliers_are_counted() {
    let mut b = common::lenet(5);
    for op in &mut b.ops {
        for m in &mut op.mult {
            *m |= 1; // odd M0s: most fall between the values f32 scales reach
        }
    }
    let t = to_tflite(&b.encode()).unwrap();
    assert!(t.multipliers.inexact > 0);
    assert!(t.multipliers.inexact <= t.multipliers.pairs);
    let e = &t.multipliers.examples[0];
    assert_ne!(e.stored, e.derived);
}

fn refused(o8: &[u8], what: &str) {
    match to_tflite(o8) {
        Err(ExportError::Tflite(m)) => assert!(m.contains(what), "{m}"),
        other => panic!("expected a refusal naming {what:?}, got {other:?}"),
    }
}

#[test]
fn what_tflite_cannot_express_is_refused() {
    // A clamp that is neither none nor ReLU.
    let mut b = common::lenet(1);
    tflite_models::as_exported(&mut b);
    b.ops[0].act_max = 100;
    refused(&b.encode(), "clamps to");
    // Not an .o8 at all.
    assert!(matches!(to_tflite(b"TFL3"), Err(ExportError::BadInput(_))));
}

/// A first conv padding each of three channels with its own value (a CIFAR model's): the input
/// is framed by CONCATENATION of constants holding those values, then a VALID conv.
#[test]
fn per_channel_pad_values_frame_the_input() {
    let mut b = common::Builder::new(3, 8, 8, 2);
    b.conv(0, 4, 3, 1, 1, false);
    tflite_models::as_exported(&mut b);
    b.ops[0].pad_values = vec![1, 2, 3];
    let t = to_tflite(&b.encode()).unwrap();
    use BuiltinOperator as B;
    assert_eq!(
        operators(&t.bytes),
        [B::QUANTIZE, B::CONCATENATION, B::CONCATENATION, B::CONV_2D]
    );
    let fb = root_as_model(&t.bytes).unwrap();
    let g = fb.subgraphs().unwrap().get(0);
    let tensors = g.tensors().unwrap();
    let rows = g.operators().unwrap().get(2);
    let framed = tensors.get(rows.outputs().unwrap().get(0) as usize);
    assert_eq!(
        framed.shape().unwrap().iter().collect::<Vec<_>>(),
        [1, 10, 10, 3]
    );
    let cap = tensors.get(rows.inputs().unwrap().get(0) as usize);
    let data = fb
        .buffers()
        .unwrap()
        .get(cap.buffer() as usize)
        .data()
        .unwrap();
    assert_eq!(data.len(), 10 * 3);
    assert!(data.chunks(3).all(|px| px == [1, 2, 3]), "{data:?}");
    // The input keeps its zero point, −128.
    let quantize = g.operators().unwrap().get(0);
    let input = tensors.get(quantize.outputs().unwrap().get(0) as usize);
    assert_eq!(
        input.quantization().unwrap().zero_point().unwrap().get(0),
        -128
    );
}
