//! Parse/run round trips, hand-computed outputs, every kernel set == scalar (in both roundings,
//! on the embedded op set too), and every rejection path.

use octet_testkit as common;

use common::{embedded_net, fix_crc, hand_model, lenet, small_resnet, Builder, OpSpec, Rng};
use octet_runtime::{Kernels, Model, OpKind, RuntimeError};
use proptest::prelude::*;

fn run_all(bytes: &[u8], kernels: Kernels, pixels: &[u8]) -> Result<Vec<i8>, RuntimeError> {
    let m = Model::parse(bytes)?;
    let batch = pixels.len() / m.input_len().max(1);
    let mut arena = vec![0xA5u8; m.arena_bytes_for(kernels, batch.max(1))];
    m.run_with(kernels, pixels, &mut arena).map(|o| o.to_vec())
}

#[test]
fn hand_computed_model() {
    let bytes = hand_model().encode();
    let m = Model::parse(&bytes).unwrap();
    assert_eq!(m.input_len(), 4);
    assert_eq!(m.output_len(), 2);
    assert_eq!(m.output_scale(), 0.5);
    assert_eq!(m.num_ops(), 2);
    let mut arena = vec![0u8; m.arena_bytes(Kernels::Auto)];
    // q = [−128, 0, 127, 2], Σ = 1. conv: (1 + 5·5)/4 = 6.5 → 7 everywhere.
    // fc: 4·7 = 28; (10 + 7 − 7)/2 = 5.
    let out = m
        .run_with(Kernels::Scalar, &[0, 128, 255, 130], &mut arena)
        .unwrap();
    assert_eq!(out, &[28, 5]);
    let out = m.run(&[0, 128, 255, 130], &mut arena).unwrap();
    assert_eq!(out, &[28, 5]);
}

#[test]
fn lenet_round_trip_and_inspect() {
    let bytes = lenet(1).encode();
    let m = Model::parse(&bytes).unwrap();
    assert_eq!(m.input_shape(), (1, 32, 32));
    assert_eq!(m.output_len(), 10);
    assert_eq!(m.num_ops(), 7);
    let kinds: Vec<OpKind> = m.ops().map(|o| o.kind).collect();
    assert_eq!(
        kinds,
        [
            OpKind::Conv2d,
            OpKind::MaxPool,
            OpKind::Conv2d,
            OpKind::MaxPool,
            OpKind::FullyConnected,
            OpKind::FullyConnected,
            OpKind::FullyConnected
        ]
    );
    let conv = m.op(0).unwrap();
    assert_eq!(conv.window, octet_runtime::format::Window::square(5, 1, 0));
    assert_eq!(conv.weights.len(), 6 * 25);
    assert_eq!(conv.multipliers.len(), 6);
    assert!(conv.multipliers.iter().all(|m0| m0 >= 1 << 30));
    // Scratch is the kernels': none for the reference, the x86 sets' patch rows for the rest.
    let (tin, tout) = (
        m.tensor(conv.input0).unwrap(),
        m.tensor(conv.output).unwrap(),
    );
    assert_eq!(
        Kernels::Scalar.scratch_bytes(&conv.geometry(&tin, &tout)),
        0
    );
    assert!(Kernels::Avx2.scratch_bytes(&conv.geometry(&tin, &tout)) > 0);
    assert_eq!(m.working_bytes(Kernels::Scalar), m.activation_bytes());
    assert_eq!(
        m.working_bytes(Kernels::Avx2),
        octet_runtime::align16(m.activation_bytes()) + m.scratch_bytes(Kernels::Avx2)
    );
    assert_eq!(m.tensors().count(), 8);
    assert_eq!(m.tensor(0).unwrap().zero_point, -128);

    let mut rng = Rng::new(7);
    let pixels = rng.bytes(5 * 1024);
    let scalar = run_all(&bytes, Kernels::Scalar, &pixels).unwrap();
    let auto = run_all(&bytes, Kernels::Auto, &pixels).unwrap();
    assert_eq!(scalar, auto);
    assert_eq!(scalar.len(), 50);
    // Each image of a batch equals the image run alone.
    for i in 0..5 {
        let one = run_all(&bytes, Kernels::Auto, &pixels[i * 1024..(i + 1) * 1024]).unwrap();
        assert_eq!(one, &scalar[i * 10..(i + 1) * 10]);
    }
    // Outputs are not degenerate.
    assert!(scalar.iter().any(|&v| v != scalar[0]));
}

#[test]
fn resnet_round_trip() {
    let bytes = small_resnet(3).encode();
    let m = Model::parse(&bytes).unwrap();
    assert_eq!(m.input_len(), 3 * 16 * 16);
    let mut rng = Rng::new(9);
    let pixels = rng.bytes(3 * m.input_len());
    let scalar = run_all(&bytes, Kernels::Scalar, &pixels).unwrap();
    let auto = run_all(&bytes, Kernels::Auto, &pixels).unwrap();
    assert_eq!(scalar, auto);
    assert!(scalar.iter().any(|&v| v != scalar[0]));
    for k in Kernels::available() {
        assert_eq!(run_all(&bytes, k, &pixels).unwrap(), scalar, "{k:?}");
    }
}

/// The embedded op set (asymmetric SAME padding, strides, dilation, depthwise with a depth
/// multiplier, TFLite's add and average pool, padded max pool, pad, reshape, softmax) on an int8
/// input, in both roundings: every kernel set gives the scalar reference's bytes, and the two
/// roundings differ somewhere (the model records which one it uses).
#[test]
fn embedded_op_set_round_trip() {
    for rounding in [1u8, 2] {
        let bytes = embedded_net(rounding, 21).encode();
        let m = Model::parse(&bytes).unwrap();
        assert_eq!(
            m.input_encoding(),
            octet_runtime::format::InputEncoding::I8Hwc
        );
        assert_eq!((m.input_scale(), m.input_zero_point()), (0.05, 7));
        assert_eq!(m.output_scale(), 1.0 / 256.0);
        let kinds: Vec<OpKind> = m.ops().map(|o| o.kind).collect();
        for kind in [
            OpKind::DepthwiseConv2d,
            OpKind::TfliteAdd,
            OpKind::TfliteAvgPool,
            OpKind::Pad,
            OpKind::Reshape,
            OpKind::Softmax,
        ] {
            assert!(kinds.contains(&kind), "{kind:?}");
        }
        let inputs = Rng::new(4).bytes(16 * m.input_len());
        let scalar = run_all(&bytes, Kernels::Scalar, &inputs).unwrap();
        assert!(scalar.iter().any(|&v| v != scalar[0]));
        for k in Kernels::available() {
            assert_eq!(run_all(&bytes, k, &inputs).unwrap(), scalar, "{k:?}");
        }
    }
}

/// The rounding the header records is the one every kernel set applies: the hand model's conv
/// at a tie below zero (acc = −26, m = 1/4: −6.5) rounds to −6 singly (half up) and to −7 doubly
/// (TFLite's second step rounds half away from zero); the fc sums four of them.
#[test]
fn the_recorded_rounding_is_applied() {
    // q = pixel − 128 = [−13, −13, −13, −12]: Σ = −51, plus five pad taps of 5.
    let pixels = [115u8, 115, 115, 116];
    for (rounding, want) in [(1u8, -24i8), (2, -28)] {
        let mut b = hand_model();
        b.rounding = rounding;
        let bytes = b.encode();
        for k in Kernels::available() {
            let out = run_all(&bytes, k, &pixels).unwrap();
            // fc row 0: 4 outputs of the conv; row 1 (m = 1/2): (10 + 0)/2 = 5 for any conv.
            assert_eq!(out[0], want, "{k:?} rounding {rounding}");
            assert_eq!(out[1], 5, "{k:?} rounding {rounding}");
        }
        let m = Model::parse(&bytes).unwrap();
        assert_eq!(m.rounding().code(), rounding);
    }
}

#[test]
fn run_errors() {
    let bytes = lenet(2).encode();
    let m = Model::parse(&bytes).unwrap();
    let pixels = vec![0u8; 2048];
    let auto = Kernels::Auto;
    let mut small = vec![0u8; m.arena_bytes_for(auto, 2) - 1];
    let small_len = small.len();
    assert_eq!(
        m.run(&pixels, &mut small),
        Err(RuntimeError::ArenaTooSmall {
            needed: m.arena_bytes_for(auto, 2),
            len: small_len
        })
    );
    let mut arena = vec![0u8; m.arena_bytes_for(auto, 2)];
    assert_eq!(
        m.run(&pixels[..1000], &mut arena),
        Err(RuntimeError::InputLength {
            expected: 1024,
            got: 1000
        })
    );
    assert_eq!(
        m.run(&[], &mut arena),
        Err(RuntimeError::InputLength {
            expected: 1024,
            got: 0
        })
    );
    assert!(m.run(&pixels, &mut arena).is_ok());
    assert_eq!(m.arena_bytes_for(auto, 2), 32 + m.working_bytes(auto));
}

fn err(bytes: &[u8]) -> RuntimeError {
    Model::parse(bytes).unwrap_err()
}

#[test]
fn header_errors() {
    let good = lenet(4).encode();
    assert!(Model::parse(&good).is_ok());
    assert!(matches!(
        err(&good[..50]),
        RuntimeError::Truncated {
            needed: 80,
            len: 50
        }
    ));
    assert!(matches!(
        err(&good[..good.len() - 1]),
        RuntimeError::Truncated { .. }
    ));
    let mut f = good.clone();
    f[0] = b'X';
    assert_eq!(err(&f), RuntimeError::BadMagic);
    let mut f = good.clone();
    // Version 2 (scratch in the file) is refused, as is a later one.
    f[8] = 2;
    assert_eq!(err(&f), RuntimeError::UnsupportedVersion(2));
    f[8] = 4;
    assert_eq!(err(&f), RuntimeError::UnsupportedVersion(4));
    // No rounding, an unknown one, an unknown input encoding.
    for (at, v, what) in [
        (35, 0, "rounding"),
        (35, 3, "rounding"),
        (34, 9, "input encoding"),
    ] {
        let mut f = good.clone();
        f[at] = v;
        fix_crc(&mut f);
        assert_eq!(err(&f), RuntimeError::BadHeader { what });
    }
    let mut f = good.clone();
    *f.last_mut().unwrap() ^= 1;
    assert!(matches!(err(&f), RuntimeError::CrcMismatch { .. }));
    let mut f = good.clone();
    f.push(0);
    assert_eq!(err(&f), RuntimeError::BadHeader { what: "file_len" });
    // Out-of-range data offset (CRC fixed).
    let mut f = good.clone();
    f[52..56].copy_from_slice(&(good.len() as u32 + 16).to_le_bytes());
    fix_crc(&mut f);
    assert!(matches!(
        err(&f),
        RuntimeError::Truncated { .. } | RuntimeError::BadHeader { .. }
    ));
    // n_tensors too large for the file.
    let mut f = good.clone();
    f[36..40].copy_from_slice(&60000u32.to_le_bytes());
    fix_crc(&mut f);
    assert!(matches!(
        err(&f),
        RuntimeError::Truncated { .. } | RuntimeError::BadHeader { .. }
    ));
}

/// Issue 19: a valid-CRC file whose arena_bytes is huge (0xFFFFFFFF) was accepted, and the
/// CLI then tried to allocate threads × images × arena and aborted. The arena is exact.
#[test]
fn arena_bytes_must_be_exact() {
    let b = lenet(4);
    let good = b.encode();
    assert_eq!(
        Model::parse(&good).unwrap().working_bytes(Kernels::Scalar),
        b.arena as usize
    );
    for arena in [u32::MAX, b.arena + 1, b.arena + 16, b.arena - 1] {
        let mut f = good.clone();
        f[20..24].copy_from_slice(&arena.to_le_bytes());
        fix_crc(&mut f);
        assert!(
            matches!(
                err(&f),
                RuntimeError::BadHeader { what } if what.starts_with("arena_bytes")
            ) || (arena < b.arena && matches!(err(&f), RuntimeError::OutOfBounds { .. })),
            "arena {arena}: {:?}",
            Model::parse(&f).err()
        );
    }
    // Exact, but reached through an unused gap: the output tensor moved far away, the header
    // saying where it now ends.
    let n_t = b.tensors.len();
    let (out, bytes) = (n_t - 1, 10u32);
    let mut f = good.clone();
    let far = 0xF000_0000u32;
    tensor_field(&mut f, out, 16, &far.to_le_bytes());
    f[20..24].copy_from_slice(&(far + bytes).to_le_bytes());
    fix_crc(&mut f);
    assert_eq!(
        err(&f),
        RuntimeError::BadHeader {
            what: "arena_bytes (larger than all tensors side by side: unused gaps)"
        }
    );
}

fn tensor_field(f: &mut [u8], t: usize, off: usize, v: &[u8]) {
    let at = 80 + 32 * t + off;
    f[at..at + v.len()].copy_from_slice(v);
    fix_crc(f);
}

fn op_field(f: &mut [u8], n_t: usize, op: usize, off: usize, v: &[u8]) {
    let at = 80 + 32 * n_t + 80 * op + off;
    f[at..at + v.len()].copy_from_slice(v);
    fix_crc(f);
}

#[test]
fn tensor_and_op_errors() {
    use RuntimeError::{BadParam, BadShape, BadTensor, OutOfBounds};
    let b = lenet(5);
    let n_t = b.tensors.len();
    let good = b.encode();
    let tensor = |t: usize, off: usize, v: &[u8]| (80 + 32 * t + off, v.to_vec());
    let op = |o: usize, off: usize, v: &[u8]| (80 + 32 * n_t + 80 * o + off, v.to_vec());
    // (what, the fields rewritten, the error)
    let cases = [
        (
            "tensor outside the arena",
            vec![tensor(1, 16, &b.arena.to_le_bytes())],
            OutOfBounds {
                what: "tensor in arena",
                index: 1,
            },
        ),
        (
            "zero shape",
            vec![tensor(2, 0, &0u16.to_le_bytes())],
            BadTensor {
                index: 2,
                what: "shape",
            },
        ),
        (
            "bad scale",
            vec![tensor(2, 8, &f32::NAN.to_le_bytes())],
            BadTensor {
                index: 2,
                what: "scale",
            },
        ),
        (
            "shape inconsistent with the conv",
            vec![
                tensor(1, 2, &27u16.to_le_bytes()),
                tensor(1, 20, &(6u32 * 27 * 28).to_le_bytes()),
            ],
            BadShape { op: 0 },
        ),
        (
            "weights offset out of the data section",
            vec![op(0, 28, &0x0100_0000u32.to_le_bytes())],
            OutOfBounds {
                what: "weights",
                index: 0,
            },
        ),
        (
            "misaligned weights",
            vec![op(0, 28, &1u32.to_le_bytes())],
            BadParam {
                op: 0,
                what: "weights",
            },
        ),
        (
            "bad tensor id",
            vec![op(1, 2, &500u16.to_le_bytes())],
            OutOfBounds {
                what: "tensor id",
                index: 500,
            },
        ),
        (
            "unknown kind",
            vec![op(1, 0, &[12])],
            BadParam {
                op: 1,
                what: "kind",
            },
        ),
        (
            "activation range",
            vec![op(0, 20, &200i32.to_le_bytes())],
            BadParam {
                op: 0,
                what: "activation range",
            },
        ),
        (
            "a parameter on a kind without one",
            vec![op(0, 68, &5i32.to_le_bytes())],
            BadParam {
                op: 0,
                what: "parameter (0 for this kind)",
            },
        ),
        (
            "reserved bytes of an op",
            vec![op(0, 75, &[1])],
            BadParam {
                op: 0,
                what: "reserved",
            },
        ),
        (
            "a dilation of 0",
            vec![op(0, 16, &[0])],
            BadParam {
                op: 0,
                what: "window",
            },
        ),
    ];
    for (what, fields, expected) in cases {
        let mut f = good.clone();
        for (at, v) in fields {
            f[at..at + v.len()].copy_from_slice(&v);
        }
        fix_crc(&mut f);
        assert_eq!(err(&f), expected, "{what}");
    }
    // Output aliases the input.
    let mut f = good.clone();
    op_field(&mut f, n_t, 1, 6, &1u16.to_le_bytes());
    assert!(matches!(
        err(&f),
        RuntimeError::Aliasing { .. } | RuntimeError::BadShape { .. }
    ));
}

#[test]
fn bad_multiplier_rejected() {
    // (an edit of the builder, the op and the parameter refused)
    type Case = (fn(&mut Builder), u32, &'static str);
    let range = "multiplier/shift range";
    let cases: [Case; 3] = [
        (|b| b.ops[0].mult[2] = (1 << 30) - 1, 0, range),
        (|b| b.ops[4].shift[0] = 31, 4, range),
        (|b| b.ops[4].weights[3] = -128, 4, "weight -128"),
    ];
    for (edit, op, what) in cases {
        let mut b = lenet(6);
        edit(&mut b);
        assert_eq!(err(&b.encode()), RuntimeError::BadParam { op, what });
    }
    let mut b = lenet(6);
    b.ops[4].bias[0] = i32::MAX - 10;
    assert!(matches!(
        err(&b.encode()),
        RuntimeError::AccumulatorOverflow { op: 4, .. }
    ));
}

#[test]
fn accumulator_bound() {
    // fc with K = 65 536 is accepted; K = 65 792 (1×256×257) is rejected.
    for (w, ok) in [(256u16, true), (257, false)] {
        let mut b = Builder::new(1, 256, w, 1);
        let (c, h, w) = b.shape(0);
        let kk = c as usize * h as usize * w as usize;
        let out = b.tensor(1, 1, 1);
        b.push(OpSpec {
            kind: 2,
            in0: 0,
            in1: 0xFFFF,
            out,
            act_min: -128,
            act_max: 127,
            weights: vec![0; kk],
            bias: vec![0],
            mult: vec![1 << 30],
            shift: vec![0],
            ..Default::default()
        });
        let bytes = b.encode();
        let r = Model::parse(&bytes);
        if ok {
            assert_eq!(kk, 65_536);
            assert!(r.is_ok(), "{r:?}");
        } else {
            assert_eq!(
                r.unwrap_err(),
                RuntimeError::AccumulatorOverflow {
                    op: 0,
                    k: kk as u32
                }
            );
        }
    }
}

/// Moves op `j`'s output tensor to where op `i`'s is in the arena.
fn place_output_like(b: &mut Builder, j: usize, i: usize) {
    let (dst, src) = (b.ops[j].out as usize, b.ops[i].out as usize);
    b.tensors[dst].offset = b.tensors[src].offset;
}

#[test]
fn liveness_violation_rejected() {
    // In the ResNet, let the second conv's output overlap the stem output that the add reads.
    let mut b = small_resnet(8);
    place_output_like(&mut b, 2, 0);
    assert!(matches!(
        err(&b.encode()),
        RuntimeError::Aliasing { op: 2, .. }
    ));
    // Reading a tensor before it is written.
    let mut b = small_resnet(8);
    b.ops.swap(1, 2);
    assert!(matches!(
        err(&b.encode()),
        RuntimeError::Aliasing { .. } | RuntimeError::BadShape { .. }
    ));
}

#[test]
fn arena_reuse_is_accepted() {
    // LeNet with dead tensors reusing memory: conv1 output (dead after pool1) hosts conv2's.
    let mut b = lenet(10);
    place_output_like(&mut b, 2, 0);
    let bytes = b.encode();
    let m = Model::parse(&bytes).unwrap();
    let mut rng = Rng::new(1);
    let pixels = rng.bytes(3 * 1024);
    let mut arena = vec![0u8; m.arena_bytes_for(Kernels::Auto, 3)];
    let reused = m.run(&pixels, &mut arena).unwrap().to_vec();
    assert_eq!(
        reused,
        run_all(&lenet(10).encode(), Kernels::Scalar, &pixels).unwrap()
    );
}

#[test]
fn arbitrary_mutations_never_panic() {
    let models = [
        hand_model().encode(),
        lenet(11).encode(),
        small_resnet(12).encode(),
        embedded_net(2, 13).encode(),
    ];
    let mut rng = Rng::new(99);
    let mut accepted = 0;
    for base in &models {
        for i in 0..3000 {
            let mut f = base.clone();
            // Mostly the header and tables, where validation lives.
            let limit = if i % 4 == 0 {
                f.len()
            } else {
                (80 + 32 * 40 + 80 * 12).min(f.len())
            };
            let at = rng.range(0, limit as i64 - 1) as usize;
            match i % 3 {
                0 => f[at] = rng.next() as u8,
                1 => f[at] ^= 1 << (rng.next() % 8),
                _ => {
                    let v = [0u32, 1, 0xFFFF, 0xFFFF_FFFF, 0x8000_0000, 65_537][i % 6];
                    let at = at & !3;
                    if at + 4 <= f.len() {
                        f[at..at + 4].copy_from_slice(&v.to_le_bytes());
                    }
                }
            }
            // Without fixing the CRC: always an error unless the byte did not change.
            if f != *base && at >= 16 {
                assert!(Model::parse(&f).is_err());
            }
            fix_crc(&mut f);
            if let Ok(m) = Model::parse(&f) {
                accepted += 1;
                let mut arena = vec![0u8; m.arena_bytes(Kernels::Auto)];
                let pixels = vec![77u8; m.input_len()];
                let a = m
                    .run_with(Kernels::Scalar, &pixels, &mut arena)
                    .unwrap()
                    .to_vec();
                let b = m.run(&pixels, &mut arena).unwrap().to_vec();
                assert_eq!(a, b);
            }
        }
    }
    assert!(accepted > 0);
}

#[test]
fn truncations_never_panic() {
    let f = small_resnet(13).encode();
    for n in 0..f.len() {
        assert!(Model::parse(&f[..n]).is_err());
        let mut g = f[..n].to_vec();
        if n >= 20 {
            g[16..20].copy_from_slice(&(n as u32).to_le_bytes());
            fix_crc(&mut g);
        }
        assert!(Model::parse(&g).is_err());
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn random_bytes_never_panic(mut bytes in prop::collection::vec(any::<u8>(), 0..600), magic in any::<bool>()) {
        if magic && bytes.len() >= 16 {
            bytes[..8].copy_from_slice(b"OCTET8\r\n");
            bytes[8..12].copy_from_slice(&[3, 0, 80, 0]);
            fix_crc(&mut bytes);
        }
        prop_assert!(Model::parse(&bytes).is_err());
    }

    #[test]
    fn avx2_equals_scalar_models(
        cin in prop::sample::select(vec![1u16, 3, 5, 17, 33]),
        cout in prop::sample::select(vec![1u16, 3, 5, 17, 33]),
        hw in 3u16..12,
        k in prop::sample::select(vec![1u8, 3, 5]),
        stride in 1u8..=2,
        pad in 0u8..=2,
        batch in 1usize..=5,
        seed in any::<u64>(),
    ) {
        prop_assume!(hw + 2 * pad as u16 >= k as u16);
        let mut b = Builder::new(cin, hw, hw, seed);
        let x = b.conv(0, cout, k, stride, pad, seed % 2 == 0);
        // A second conv so the conv input has a random zero point.
        let (_, h2, _) = b.shape(x);
        let x = if h2 + 2 >= 3 { b.conv(x, cin, 3, 1, 1, false) } else { x };
        let x = b.fc(x, 7, false);
        let _ = x;
        let bytes = b.encode();
        let mut rng = Rng::new(seed ^ 5);
        let pixels = rng.bytes(batch * cin as usize * hw as usize * hw as usize);
        let scalar = run_all(&bytes, Kernels::Scalar, &pixels).unwrap();
        let auto = run_all(&bytes, Kernels::Auto, &pixels).unwrap();
        prop_assert_eq!(&scalar, &auto);
        for k in Kernels::available() {
            prop_assert_eq!(&scalar, &run_all(&bytes, k, &pixels).unwrap(), "{:?}", k);
        }
    }
}
