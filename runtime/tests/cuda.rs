//! The GPU path (feature `cuda`): `CudaModel::run` gives the same bytes as `Model::run` (the
//! scalar reference; the fastest CPU set for ResNet-18, whose bytes the CPU suites check
//! against it) for every test model, batch size, both roundings, every op kind of format v3
//! (the embedded net: int8 input, depthwise, TFLite's add and average pool, padded max pool,
//! pad, reshape, softmax), the u8 HWC input, and random conv / fc / depthwise / pool shapes and
//! windows, through every conv kernel (the automatic pick, the dp4a fallback, each tensor-core
//! tile); typed errors. The tests that need a GPU are ignored by default; a machine with one
//! runs them with
//! `cargo test --release -p octet-runtime --features cuda -- --include-ignored`, and without
//! one they fail saying so. The NVRTC test needs only NVRTC and always runs.
//! `profile_resnet18` is also the GPU benchmark of the kernels (`--nocapture` for its tables).
#![cfg(feature = "cuda")]

use octet_testkit as common;

use common::{
    embedded_net, hand_model, lenet, lenet_on, out_size, resnet18, small_resnet, Builder, OpSpec,
    Rng,
};
use octet_runtime::cuda::{compile_ptx, CudaError, CudaModel, FC_WARP_MAX_BATCH, KERNEL_NAMES};
use octet_runtime::format::INPUT_U8_HWC;
use octet_runtime::{Kernels, Model, Rounding};
use proptest::prelude::*;
use std::time::Instant;

/// The CPU reference: the scalar kernels' `Model::run_with` over the batch.
fn cpu(model: &Model, pixels: &[u8]) -> Vec<i8> {
    cpu_with(Kernels::Scalar, model, pixels)
}

/// `Model::run_with(kernels)` over the batch, split across threads (each chunk is its own
/// call; images are independent, so the bytes are those of one call).
fn cpu_with(kernels: Kernels, model: &Model, pixels: &[u8]) -> Vec<i8> {
    let n_in = model.input_len();
    let batch = pixels.len() / n_in;
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(batch)
        .max(1);
    let per = batch.div_ceil(threads);
    let mut out = vec![0i8; batch * model.output_len()];
    std::thread::scope(|s| {
        for (px, o) in pixels
            .chunks(per * n_in)
            .zip(out.chunks_mut(per * model.output_len()))
        {
            s.spawn(move || {
                let b = px.len() / n_in;
                let mut arena = vec![0u8; model.arena_bytes_for(kernels, b)];
                o.copy_from_slice(model.run_with(kernels, px, &mut arena).unwrap());
            });
        }
    });
    out
}

/// `CudaModel::new` on device 0; without a usable GPU, a panic that says so.
fn gpu(model: &Model, max_batch: usize) -> CudaModel {
    CudaModel::new(model, 0, max_batch).unwrap_or_else(|e| match e {
        CudaError::NoDevice { .. } => panic!("this test needs a CUDA GPU: {e}"),
        e => panic!("CudaModel::new: {e}"),
    })
}

/// The model in `bytes`, on the CPU and uploaded to the GPU for `max_batch` images.
fn parse_and_upload(bytes: &[u8], max_batch: usize) -> (Model<'_>, CudaModel) {
    let model = Model::parse(bytes).unwrap();
    let g = gpu(&model, max_batch);
    (model, g)
}

/// `b`'s model on `batch` random images (from `seed`) through every conv path, against the
/// CPU bytes.
fn every_path_matches_cpu(b: &Builder, batch: usize, seed: u64) -> Result<(), String> {
    let bytes = b.encode();
    let (model, mut g) = parse_and_upload(&bytes, batch);
    let pixels = Rng::new(seed).bytes(batch * model.input_len());
    let want = cpu(&model, &pixels);
    all_paths(&mut g, &pixels, &want)
}

/// The conv kernel choices to test: the automatic pick, the dp4a fallback, each mma tile.
fn conv_paths() -> Vec<Option<&'static str>> {
    let mut v = vec![None, Some("dp4a")];
    v.extend(
        KERNEL_NAMES
            .iter()
            .filter(|n| n.starts_with("conv_mma_"))
            .map(|&n| Some(n)),
    );
    v
}

/// Selects a conv path on `g` (see [`conv_paths`]); false when the device lacks it.
fn select_path(g: &mut CudaModel, path: Option<&str>) -> bool {
    g.set_tensor_cores(path != Some("dp4a"));
    match path {
        Some("dp4a") | None => g.force_mma_tile(None),
        Some(tile) => g.force_mma_tile(Some(tile)),
    }
}

/// GPU bytes through every conv path, each against the CPU bytes `want`.
fn all_paths(g: &mut CudaModel, pixels: &[u8], want: &[i8]) -> Result<(), String> {
    for path in conv_paths() {
        if !select_path(g, path) {
            continue; // below sm_80: no tensor-core tiles
        }
        let got = g.run(pixels).map_err(|e| e.to_string())?;
        if got != want {
            let first = got.iter().zip(want).position(|(a, b)| a != b).unwrap();
            return Err(format!(
                "path {path:?}: GPU != CPU at byte {first}: {} vs {}",
                got[first], want[first]
            ));
        }
    }
    select_path(g, None);
    Ok(())
}

/// The model in `bytes` on the GPU against the scalar reference, batch by batch.
fn check_batches(name: &str, bytes: &[u8], batches: &[usize], seed: u64) {
    check_batches_with(Kernels::Scalar, name, bytes, batches, seed);
}

/// The model in `bytes` on the GPU against the CPU's `kernels`, batch by batch: `run`,
/// `run_into`, the dp4a fallback with the pinned staging copy.
fn check_batches_with(kernels: Kernels, name: &str, bytes: &[u8], batches: &[usize], seed: u64) {
    let max = *batches.iter().max().unwrap();
    let (model, mut g) = parse_and_upload(bytes, max);
    let mut rng = Rng::new(seed);
    for &b in batches {
        let pixels = rng.bytes(b * model.input_len());
        let want = cpu_with(kernels, &model, &pixels);
        let got = g.run(&pixels).unwrap().to_vec();
        assert_eq!(got.len(), want.len(), "{name} batch {b}");
        if got != want {
            let first = got.iter().zip(&want).position(|(a, b)| a != b).unwrap();
            panic!(
                "{name} batch {b}: GPU != CPU at {first} (image {}, logit {}): {} vs {}",
                first / model.output_len(),
                first % model.output_len(),
                got[first],
                want[first]
            );
        }
        // Again through run_into, and the buffers' reuse gives the same bytes.
        let mut again = vec![0i8; want.len()];
        g.run_into(&pixels, &mut again).unwrap();
        assert_eq!(again, want, "{name} batch {b} (run_into)");
        // The dp4a fallback and the pinned staging copy give the same bytes too.
        g.set_tensor_cores(false);
        g.set_pinned_staging(true).unwrap();
        assert_eq!(
            g.run(&pixels).unwrap(),
            want,
            "{name} batch {b} (dp4a, pinned)"
        );
        g.set_tensor_cores(true);
        g.set_pinned_staging(false).unwrap();
    }
}

/// Odd channel counts (3, 5, 7), stride 2, padding with and without pad values, 1×1 conv,
/// max-pool 3/2, requantizing add with ReLU, avg-pool, fc with K % 4 ≠ 0.
fn odd_model(seed: u64) -> Builder {
    let mut b = Builder::new(3, 15, 13, seed);
    let x = b.conv(0, 5, 3, 2, 1, true);
    let x = b.conv(x, 8, 1, 1, 0, false);
    let x = b.max_pool(x, 3, 2);
    let y = b.conv(x, 8, 3, 1, 1, false);
    let x = b.add(x, y, true);
    let x = b.avg_pool(x, 2, 1);
    let x = b.fc(x, 7, true);
    b.fc(x, 5, false);
    b
}

/// One input channel, fc straight from 25 pixels (K % 4 ≠ 0).
fn fc_only(seed: u64) -> Builder {
    let mut b = Builder::new(1, 5, 5, seed);
    let x = b.fc(0, 9, true);
    b.fc(x, 3, false);
    b
}

/// Random constants (weights, bias, multipliers, shifts) for `n` outputs of `k` inputs each,
/// drawn by the common builder as an fc's: a conv's constants are an fc's over its kh·kw·C_in
/// taps.
fn dense_constants(seed: u64, n: u16, k: usize) -> OpSpec {
    let k = u16::try_from(k).expect("at most 65535 taps");
    let mut fc = Builder::new(k, 1, 1, seed);
    fc.fc(0, n, false);
    fc.ops.pop().expect("the fc just pushed")
}

/// One conv layer to test (any window: kh × kw, two strides, four paddings, dilations), with
/// its channels, optionally followed by an fc, in either rounding.
#[derive(Clone, Copy, Debug)]
struct ConvCase {
    /// Input channels, height, width.
    input: (u16, u16, u16),
    cout: u16,
    /// kernel h, w; stride h, w; pad top, left, bottom, right; dilation h, w.
    window: [u8; 10],
    /// Random pad values per input channel (else the input zero point pads).
    pad_values: bool,
    relu: bool,
    /// Outputs of an fc after the conv.
    fc: Option<u16>,
    /// The model's rounding code (1 single, 2 double).
    rounding: u8,
    /// Every third output channel's M0 is 0 (TFLite's encoding of a tiny multiplier).
    zero_m0: bool,
}

impl ConvCase {
    /// A conv of `cout` channels with a `kernel` window, `(stride, pad)` on every side, over
    /// `input`; no dilation, pad values, ReLU or fc; single rounding.
    fn new(input: (u16, u16, u16), cout: u16, kernel: (u8, u8), (stride, pad): (u8, u8)) -> Self {
        let (kh, kw) = kernel;
        ConvCase {
            input,
            cout,
            window: [kh, kw, stride, stride, pad, pad, pad, pad, 1, 1],
            pad_values: false,
            relu: false,
            fc: None,
            rounding: 1,
            zero_m0: false,
        }
    }

    /// The output (h, w), or `None` when the dilated kernel exceeds the padded input.
    fn out(&self) -> Option<(u16, u16)> {
        let (_, h, w) = self.input;
        let [kh, kw, sh, sw, pt, pl, pb, pr, dh, dw] = self.window;
        window_fits(self.input, self.window).then(|| {
            (
                out_size(h, kh, sh, dh, pt, pb),
                out_size(w, kw, sw, dw, pl, pr),
            )
        })
    }

    /// The model: input, the conv, the fc if any; random constants from `seed`.
    fn model(&self, seed: u64) -> Builder {
        let (cin, h, w) = self.input;
        let (ho, wo) = self.out().expect("the kernel fits the padded input");
        let [kh, kw, ..] = self.window;
        let mut b = Builder::new(cin, h, w, seed);
        b.rounding = self.rounding;
        let out = b.tensor(self.cout, ho, wo);
        let k = kh as usize * kw as usize * cin as usize;
        let mut constants = dense_constants(b.rng.next(), self.cout, k);
        if self.zero_m0 {
            constants.mult.iter_mut().step_by(3).for_each(|m| *m = 0);
        }
        let pad_values = if self.pad_values {
            (0..cin).map(|_| b.rng.range(-128, 127) as i8).collect()
        } else {
            Vec::new()
        };
        let zp = b.tensors[out as usize].zp;
        let (act_min, act_max) = if self.relu {
            (zp.max(-128), 127)
        } else {
            (-128, 127)
        };
        b.push(OpSpec {
            kind: 1,
            in0: 0,
            out,
            window: self.window,
            act_min,
            act_max,
            pad_values,
            ..constants
        });
        if let Some(n) = self.fc {
            b.fc(out, n, false);
        }
        b
    }
}

#[test]
fn nvrtc_compiles_every_kernel() {
    let archs = [
        "compute_75",
        "compute_80",
        "compute_86",
        "compute_89",
        "compute_90",
    ];
    for (arch, rounding) in archs.iter().flat_map(|a| Rounding::ALL.map(|r| (a, r))) {
        let ptx =
            compile_ptx(arch, rounding).unwrap_or_else(|e| panic!("{arch} {rounding:?}: {e}"));
        for name in KERNEL_NAMES {
            assert!(
                ptx.contains(&format!(".entry {name}(")),
                "{arch}: kernel {name} missing from the PTX"
            );
        }
        // The conv and fc kernels use the int8 dot product instruction.
        assert!(ptx.contains("dp4a.s32.s32"), "{arch}: no dp4a in the PTX");
    }
    // The rounding is compiled in: the two roundings give different code.
    let [single, double] = Rounding::ALL.map(|r| compile_ptx("compute_90", r).unwrap());
    assert_ne!(single, double);
}

#[test]
#[ignore = "needs a CUDA GPU: run with --features cuda -- --include-ignored"]
fn hand_model_matches_cpu() {
    let bytes = hand_model().encode();
    let (_, mut g) = parse_and_upload(&bytes, 2);
    assert_eq!(g.run(&[0, 128, 255, 130]).unwrap(), &[28, 5]);
    check_batches("hand", &bytes, &[1, 3, 64, 1000], 1);
}

#[test]
#[ignore = "needs a CUDA GPU: run with --features cuda -- --include-ignored"]
fn lenet_matches_cpu() {
    for seed in [1, 2] {
        check_batches("lenet", &lenet(seed).encode(), &[1, 3, 64, 1000], seed);
    }
}

/// `run_all` splits any number of images into `max_batch` chunks (the last one shorter) and
/// gives the CPU's bytes; a length that is not whole images is refused.
#[test]
#[ignore = "needs a CUDA GPU: run with --features cuda -- --include-ignored"]
fn run_all_chunks_any_count() {
    let bytes = lenet(4).encode();
    let (model, mut g) = parse_and_upload(&bytes, 7);
    for n in [1, 7, 50] {
        let pixels = Rng::new(n as u64).bytes(n * model.input_len());
        assert_eq!(
            g.run_all(&pixels).unwrap(),
            cpu(&model, &pixels),
            "{n} images"
        );
    }
    assert!(matches!(
        g.run_all(&[0u8; 5]),
        Err(CudaError::InputLength { .. })
    ));
    assert!(matches!(g.run_all(&[]), Err(CudaError::InputLength { .. })));
}

#[test]
#[ignore = "needs a CUDA GPU: run with --features cuda -- --include-ignored"]
fn small_resnet_matches_cpu() {
    check_batches(
        "small_resnet",
        &small_resnet(3).encode(),
        &[1, 3, 64, 1000],
        3,
    );
}

#[test]
#[ignore = "needs a CUDA GPU: run with --features cuda -- --include-ignored"]
fn resnet18_matches_cpu() {
    // 256 images: the automatic pick uses every direct tile size somewhere. Against the
    // fastest CPU set (the scalar reference would take minutes here).
    let bytes = resnet18(4).encode();
    check_batches_with(Kernels::Auto, "resnet18", &bytes, &[1, 3, 64, 256], 4);
}

/// The embedded net (format v3's op set as TFLite models hold it: int8 input, a conv with
/// TFLite's asymmetric SAME padding and two strides, depthwise convs with a depth multiplier
/// and dilation, TFLite's add, a padded max pool, pad, TFLite's average pool, reshape, fc,
/// softmax) in both roundings: the scalar reference's bytes.
#[test]
#[ignore = "needs a CUDA GPU: run with --features cuda -- --include-ignored"]
fn embedded_net_matches_cpu() {
    for rounding in [1, 2] {
        for seed in [1, 2] {
            let name = format!("embedded_net({rounding}, {seed})");
            let bytes = embedded_net(rounding, seed).encode();
            check_batches(&name, &bytes, &[1, 3, 64, 1000], seed);
        }
    }
}

/// octet's models in TensorFlow Lite's double rounding (every conv/fc epilogue, avg_pool, the
/// residual add fused after a conv): the scalar reference's bytes, through every conv path.
#[test]
#[ignore = "needs a CUDA GPU: run with --features cuda -- --include-ignored"]
fn double_rounding_models_match_cpu() {
    let models = [
        ("hand", hand_model()),
        ("lenet", lenet(13)),
        ("small_resnet", small_resnet(14)),
        ("odd", odd_model(15)),
    ];
    for (name, mut b) in models {
        b.rounding = 2;
        check_batches(
            &format!("{name} double"),
            &b.encode(),
            &[1, 3, 64, 1000],
            16,
        );
        every_path_matches_cpu(&b, 19, 17).unwrap_or_else(|e| panic!("{name} double: {e}"));
    }
    let mut r = resnet18(18);
    r.rounding = 2;
    let bytes = r.encode();
    check_batches("resnet18 double", &bytes, &[1, 5], 18);
    every_path_matches_cpu(&r, 9, 19).unwrap_or_else(|e| panic!("resnet18 double: {e}"));
    // The automatic pick's large-batch tiles, against the fastest CPU set.
    check_batches_with(Kernels::Auto, "resnet18 double", &bytes, &[256], 20);
}

/// Inputs already HWC as u8 values (TFLite's uint8 input, q = u − 128), both roundings.
#[test]
#[ignore = "needs a CUDA GPU: run with --features cuda -- --include-ignored"]
fn u8_hwc_input_matches_cpu() {
    for rounding in [1, 2] {
        let mut b = lenet_on(3, 21);
        (b.rounding, b.input_encoding) = (rounding, INPUT_U8_HWC);
        let name = format!("lenet u8-hwc r{rounding}");
        check_batches(&name, &b.encode(), &[1, 3, 64, 1000], 21);
    }
}

/// ResNet-18's conv shapes (C_in 64…512, 3×3 and strided 1×1) through every path, with M
/// large enough for several row tiles.
#[test]
#[ignore = "needs a CUDA GPU: run with --features cuda -- --include-ignored"]
fn resnet_shapes_match_cpu_on_every_path() {
    let shapes = [
        ((64, 32, 32), 64, 3, 1, 1, 6),
        ((64, 32, 32), 128, 3, 2, 1, 5),
        ((64, 32, 32), 128, 1, 2, 0, 5),
        ((128, 16, 16), 256, 3, 2, 1, 7),
        ((256, 8, 8), 512, 1, 2, 0, 9),
        ((512, 4, 4), 512, 3, 1, 1, 33),
        ((3, 32, 32), 64, 3, 1, 1, 6),
    ];
    for (i, &(chw, cout, k, stride, pad, batch)) in shapes.iter().enumerate() {
        let seed = 40 + i as u64;
        let case = ConvCase {
            pad_values: i % 2 == 0,
            relu: true,
            ..ConvCase::new(chw, cout, (k, k), (stride, pad))
        };
        every_path_matches_cpu(&case.model(seed), batch, seed)
            .unwrap_or_else(|e| panic!("shape {i}: {e}"));
    }
}

#[test]
#[ignore = "needs a CUDA GPU: run with --features cuda -- --include-ignored"]
fn odd_shapes_match_cpu() {
    for seed in [5, 6, 7] {
        check_batches("odd", &odd_model(seed).encode(), &[1, 3, 64, 1000], seed);
    }
    check_batches("fc_only", &fc_only(8).encode(), &[1, 3, 64, 1000], 8);
    // Rectangular kernels, C_out across the 64-wide tile, stride 3, pad 2 with pad values.
    let rect = ConvCase {
        pad_values: true,
        relu: true,
        fc: Some(13),
        ..ConvCase::new((7, 11, 9), 70, (3, 2), (3, 2))
    };
    check_batches("rect", &rect.model(9).encode(), &[1, 3, 64, 1000], 9);
    // C_in % 4 = 0 (aligned loads), pad with the input zero point.
    let aligned = ConvCase {
        fc: Some(4),
        ..ConvCase::new((8, 9, 9), 16, (3, 3), (1, 1))
    };
    check_batches(
        "aligned",
        &aligned.model(10).encode(),
        &[1, 3, 64, 1000],
        10,
    );
}

#[test]
#[ignore = "needs a CUDA GPU: run with --features cuda -- --include-ignored"]
fn fc_paths_agree_at_the_threshold() {
    // Batches on both sides of FC_WARP_MAX_BATCH (warp kernel vs GEMM).
    let bytes = lenet(11).encode();
    let batches = [
        FC_WARP_MAX_BATCH - 1,
        FC_WARP_MAX_BATCH,
        FC_WARP_MAX_BATCH + 1,
    ];
    check_batches("lenet fc threshold", &bytes, &batches, 11);
}

#[test]
#[ignore = "needs a CUDA GPU: run with --features cuda -- --include-ignored"]
fn typed_errors() {
    let bytes = lenet(12).encode();
    let model = Model::parse(&bytes).unwrap();
    match CudaModel::new(&model, 0, 0) {
        Err(CudaError::BadMaxBatch { max_batch: 0 }) => {}
        Err(e @ CudaError::NoDevice { .. }) => panic!("this test needs a CUDA GPU: {e}"),
        Err(e) => panic!("max_batch 0: {e}"),
        Ok(_) => panic!("max_batch 0 accepted"),
    }
    assert!(matches!(
        CudaModel::new(&model, 4096, 1),
        Err(CudaError::NoDevice { ordinal: 4096, .. })
    ));
    let mut g = gpu(&model, 4);
    let n = model.input_len();
    assert_eq!(g.max_batch(), 4);
    assert_eq!(g.input_len(), n);
    assert_eq!(g.output_len(), 10);
    assert!(matches!(
        g.run(&vec![0u8; 5 * n]),
        Err(CudaError::BatchTooLarge { batch: 5, max: 4 })
    ));
    assert!(matches!(
        g.run(&[]),
        Err(CudaError::InputLength { expected, got: 0 }) if expected == n
    ));
    assert!(matches!(
        g.run(&vec![0u8; n + 1]),
        Err(CudaError::InputLength { got, .. }) if got == n + 1
    ));
    let mut out = vec![0i8; 9];
    assert!(matches!(
        g.run_into(&vec![0u8; n], &mut out),
        Err(CudaError::OutputLength {
            expected: 10,
            got: 9
        })
    ));
    // The model still runs after the errors.
    let pixels = Rng::new(12).bytes(4 * n);
    assert_eq!(g.run(&pixels).unwrap(), cpu(&model, &pixels).as_slice());
    // Errors display.
    let e = CudaError::BatchTooLarge { batch: 5, max: 4 };
    assert!(e.to_string().contains("5"));
}

/// Random conv cases: C_in from `cin`, H and W up to `hw`, C_out up to `cout`, kernel sides up
/// to `k`; windows uniform (stride up to 3, the same padding up to 2 on every side) or not (two
/// strides, four paddings, dilation up to 2); with and without pad values, ReLU, zero
/// multipliers and an fc after; either rounding.
fn conv_cases(
    cin: impl Strategy<Value = u16>,
    hw: u16,
    cout: u16,
    k: u8,
) -> impl Strategy<Value = ConvCase> {
    let shape = (cin, 1..=hw, 1..=hw, 1..=cout);
    let uniform = (1..=k, 1..=k, 1u8..=3, 0u8..=2)
        .prop_map(|(kh, kw, s, p)| [kh, kw, s, s, p, p, p, p, 1, 1]);
    let general = (
        (1..=k, 1..=k),
        (1u8..=3, 1u8..=3),
        [0u8..=2, 0u8..=2, 0u8..=2, 0u8..=2],
        (1u8..=2, 1u8..=2),
    )
        .prop_map(|((kh, kw), (sh, sw), [pt, pl, pb, pr], (dh, dw))| {
            [kh, kw, sh, sw, pt, pl, pb, pr, dh, dw]
        });
    let window = prop_oneof![uniform, general];
    let options = (any::<bool>(), any::<bool>(), 1u8..=2, any::<bool>());
    (shape, window, options, prop::option::of(1u16..=20))
        .prop_map(
            |((cin, h, w, cout), window, (pad_values, relu, rounding, zero_m0), fc)| ConvCase {
                window,
                pad_values,
                relu,
                fc,
                rounding,
                zero_m0,
                ..ConvCase::new((cin, h, w), cout, (1, 1), (1, 0))
            },
        )
        .prop_filter("the kernel fits the padded input", |c| c.out().is_some())
}

/// A random window for a depthwise conv or a pool over an `h × w` input: kernel up to 3,
/// strides up to 2, paddings below the kernel (so no pool window lies in the padding alone),
/// dilation up to 2 (`dilated`).
fn small_window(dilated: bool) -> impl Strategy<Value = [u8; 10]> {
    let d = if dilated { 2u8 } else { 1 };
    (
        (1u8..=3, 1u8..=3),
        (1u8..=2, 1u8..=2),
        [0u8..=2, 0u8..=2, 0u8..=2, 0u8..=2],
        (1..=d, 1..=d),
    )
        .prop_map(|((kh, kw), (sh, sw), [pt, pl, pb, pr], (dh, dw))| {
            [
                kh,
                kw,
                sh,
                sw,
                pt.min(kh - 1),
                pl.min(kw - 1),
                pb.min(kh - 1),
                pr.min(kw - 1),
                dh,
                dw,
            ]
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    #[ignore = "needs a CUDA GPU: run with --features cuda -- --include-ignored"]
    fn random_conv_matches_cpu(
        seed in any::<u64>(), case in conv_cases(1u16..=9, 10, 70, 4), batch in 1usize..=12,
    ) {
        every_path_matches_cpu(&case.model(seed), batch, seed ^ 0x5555)
            .map_err(TestCaseError::fail)?;
    }

    /// C_in a multiple of 16 (half of them of 32): the tensor cores' direct tiles; C_out and
    /// M on and off the tile sizes, C_out % 16 ≠ 0 (the byte-store epilogue) and = 0.
    #[test]
    #[ignore = "needs a CUDA GPU: run with --features cuda -- --include-ignored"]
    fn random_mma_conv_matches_cpu(
        seed in any::<u64>(), case in conv_cases((1u16..=8).prop_map(|c| 16 * c), 12, 160, 3),
        batch in 1usize..=24,
    ) {
        every_path_matches_cpu(&case.model(seed), batch, seed ^ 0x3333)
            .map_err(TestCaseError::fail)?;
    }

    /// A residual block: the add after the second conv is fused into that conv's epilogue on
    /// the tensor-core path (C_out % 16 == 0), with the conv's output as either add input;
    /// either rounding (the conv side's epilogue).
    #[test]
    #[ignore = "needs a CUDA GPU: run with --features cuda -- --include-ignored"]
    fn random_residual_block_matches_cpu(
        seed in any::<u64>(), c16 in 1u16..=4, h in 1u16..=12, w in 1u16..=12,
        conv_first in any::<bool>(), relu in any::<bool>(), batch in 1usize..=24,
        rounding in 1u8..=2,
    ) {
        let c = 16 * c16;
        let mut b = Builder::new(c, h, w, seed);
        b.rounding = rounding;
        let x = b.conv(0, c, 3, 1, 1, true);
        let y = b.conv(x, c, 3, 1, 1, false);
        let z = if conv_first { b.add(y, x, relu) } else { b.add(x, y, relu) };
        b.fc(z, 7, false);
        every_path_matches_cpu(&b, batch, seed ^ 0x7777).map_err(TestCaseError::fail)?;
    }

    #[test]
    #[ignore = "needs a CUDA GPU: run with --features cuda -- --include-ignored"]
    fn random_fc_matches_cpu(
        seed in any::<u64>(), k in 1u16..=300, n in 1u16..=70, relu in any::<bool>(),
        batch in 1usize..=20, rounding in 1u8..=2,
    ) {
        let mut b = Builder::new(k, 1, 1, seed);
        b.rounding = rounding;
        b.fc(0, n, relu);
        every_path_matches_cpu(&b, batch, seed ^ 0xAAAA).map_err(TestCaseError::fail)?;
    }

    /// The embedded op set on random shapes and windows, either rounding, u8 or int8 input:
    /// two depthwise convs (depth multiplier, strides, paddings, dilation) into TFLite's add, a
    /// padded max pool and TFLite's average pool over the same window into another, pad,
    /// reshape, softmax.
    #[test]
    #[ignore = "needs a CUDA GPU: run with --features cuda -- --include-ignored"]
    fn random_embedded_layers_match_cpu(
        seed in any::<u64>(), c in 1u16..=12, h in 1u16..=10, w in 1u16..=10, dm in 1u16..=3,
        dw_window in small_window(true), pool_window in small_window(false),
        pads in [0u8..=2, 0u8..=2, 0u8..=2, 0u8..=2], value in any::<i8>(),
        rounding in 1u8..=2, int8 in any::<bool>(), batch in 1usize..=20,
    ) {
        let mut b = if int8 {
            Builder::new_int8(c, h, w, 0.05, 3, seed)
        } else {
            Builder::new(c, h, w, seed)
        };
        b.rounding = rounding;
        prop_assume!(window_fits(b.shape(0), dw_window));
        let x = b.depthwise(0, dm, dw_window, true);
        let y = b.depthwise(0, dm, dw_window, false);
        let x = b.tflite_add(x, y, false);
        prop_assume!(window_fits(b.shape(x), pool_window));
        let p = b.max_pool_window(x, pool_window);
        let q = b.tflite_avg_pool(x, pool_window);
        let x = b.tflite_add(p, q, true);
        let x = b.pad(x, pads, value);
        let (c, h, w) = b.shape(x);
        let x = b.reshape(x, c * w, h, 1);
        b.softmax(x);
        every_path_matches_cpu(&b, batch, seed ^ 0x1111).map_err(TestCaseError::fail)?;
    }
}

/// Whether `window` fits a c×h×w input: the padded input holds the dilated kernel.
fn window_fits((_, h, w): (u16, u16, u16), window: [u8; 10]) -> bool {
    let [kh, kw, _, _, pt, pl, pb, pr, dh, dw] = window;
    let fits =
        |n: u16, k: u8, d: u8, a: u8, b: u8| n + a as u16 + b as u16 > (k as u16 - 1) * d as u16;
    fits(h, kh, dh, pt, pb) && fits(w, kw, dw, pl, pr)
}

/// Median of `reps` timed calls of `f` (milliseconds), after `warm` untimed ones.
fn median_ms(warm: usize, reps: usize, mut f: impl FnMut()) -> f64 {
    for _ in 0..warm {
        f();
    }
    let mut t: Vec<f64> = (0..reps)
        .map(|_| {
            let s = Instant::now();
            f();
            s.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    t.sort_by(|a, b| a.total_cmp(b));
    t[reps / 2]
}

/// The GPU benchmark of the kernels on the ResNet-18 fixture (random weights), which also
/// checks the GPU bytes at batch 1024:
/// `cargo test --release -p octet-runtime --features cuda --test cuda -- --ignored profile
/// --nocapture`. Host pixels → host logits per batch for the tensor-core and dp4a paths,
/// pinned and pageable copies, then the per-kernel device times (CUDA events) at batch 1024.
#[test]
#[ignore = "needs a CUDA GPU: run with --features cuda -- --include-ignored"]
fn profile_resnet18() {
    let bytes = resnet18(4).encode();
    let (model, mut g) = parse_and_upload(&bytes, 4096);
    let (n_in, n_out) = (model.input_len(), model.output_len());
    let px = Rng::new(1).bytes(4096 * n_in);
    let mut out = vec![0i8; 4096 * n_out];
    // Same bytes as the CPU (its fastest set) at batch 1024 on the path timed below.
    let want = cpu_with(Kernels::Auto, &model, &px[..1024 * n_in]);
    assert_eq!(g.run(&px[..1024 * n_in]).unwrap(), want.as_slice());
    println!("| path | batch | ms | img/s |\n|---|---:|---:|---:|");
    for (label, mma, pinned, fuse) in [
        ("mma, pinned", true, true, true),
        ("mma, pageable", true, false, true),
        ("mma, pinned, adds unfused", true, true, false),
        ("dp4a, pinned", false, true, true),
    ] {
        g.set_tensor_cores(mma);
        g.set_pinned_staging(pinned).unwrap();
        g.set_fused_adds(fuse);
        for b in [1, 256, 1024, 4096] {
            let (p, o) = (&px[..b * n_in], &mut out[..b * n_out]);
            let reps = if b <= 256 { 50 } else { 15 };
            let ms = median_ms(3, reps, || g.run_into(p, o).unwrap());
            println!("| {label} | {b} | {ms:.3} | {:.0} |", b as f64 * 1e3 / ms);
        }
    }
    g.set_pinned_staging(false).unwrap();
    g.set_fused_adds(true);
    // The forward alone (images already on the device), octet's single rounding against
    // TensorFlow Lite's double (the same network; its own kernels, the rounding compiled in).
    let mut double = resnet18(4);
    double.rounding = 2;
    let double = double.encode();
    let (model2, mut g2) = parse_and_upload(&double, 4096);
    let p = &px[..256 * n_in];
    let want2 = cpu_with(Kernels::Auto, &model2, p);
    assert_eq!(g2.run(p).unwrap(), want2.as_slice());
    g.set_tensor_cores(true);
    for (label, m) in [("single", &mut g), ("double", &mut g2)] {
        for b in [1, 256, 1024, 4096] {
            m.load(&px[..b * n_in]).unwrap();
            let reps = if b <= 256 { 50 } else { 15 };
            let ms = median_ms(3, reps, || m.run_loaded().unwrap());
            let rate = b as f64 * 1e3 / ms;
            println!("| mma, loaded, {label} rounding | {b} | {ms:.3} | {rate:.0} |");
        }
    }
    for (mma, b) in [(true, 1024), (true, 1)] {
        g.set_tensor_cores(mma);
        let sum = mean_profile(&mut g, &px[..b * n_in], 10);
        let total: f32 = sum.iter().map(|s| s.1).sum();
        println!("\nper step, batch {b}, tensor cores {mma}: total {total:.3} ms (device)");
        for (l, ms) in &sum {
            println!("{ms:8.3} ms  {:5.1}%  {l}", 100.0 * ms / total);
        }
    }
    // Every direct tile forced on every conv: which tile suits which shape.
    g.set_tensor_cores(true);
    for b in [1024, 256] {
        let tiles: Vec<&str> = KERNEL_NAMES
            .iter()
            .copied()
            .filter(|n| n.starts_with("conv_mma_") && !n.ends_with("_gather"))
            .collect();
        let mut rows: Vec<(String, Vec<f32>)> = Vec::new();
        for (ti, tile) in tiles.iter().enumerate() {
            assert!(g.force_mma_tile(Some(tile)));
            for (l, ms) in mean_profile(&mut g, &px[..b * n_in], 5) {
                let Some(shape) = l.strip_prefix("conv ").and_then(|l| l.split(" [").next()) else {
                    continue;
                };
                if shape.contains(" 3->") {
                    continue;
                }
                match rows.iter_mut().find(|r| r.0 == shape) {
                    Some(r) if r.1.len() > ti => {}
                    Some(r) => r.1.push(ms),
                    None => rows.push((shape.to_string(), vec![ms])),
                }
            }
        }
        g.force_mma_tile(None);
        println!("\nms per conv shape and forced tile, batch {b}");
        println!("shape | {}", tiles.join(" | ").replace("conv_mma_", ""));
        for (shape, t) in &rows {
            let cells: Vec<String> = t.iter().map(|v| format!("{v:.3}")).collect();
            println!("{shape} | {}", cells.join(" | "));
        }
    }
}

/// Mean per-step device times of `runs` profiled runs (after 3 untimed ones).
fn mean_profile(g: &mut CudaModel, pixels: &[u8], runs: usize) -> Vec<(String, f32)> {
    for _ in 0..3 {
        g.profile(pixels).unwrap();
    }
    let mut sum: Vec<(String, f32)> = Vec::new();
    for _ in 0..runs {
        for (i, (l, ms)) in g.profile(pixels).unwrap().into_iter().enumerate() {
            if i == sum.len() {
                sum.push((l, 0.0));
            }
            sum[i].1 += ms / runs as f32;
        }
    }
    sum
}

/// `load` + `run_loaded` + `read_logits` give `run`'s bytes; running before loading, or after
/// `run` replaced the loaded images, is a typed error.
#[test]
#[ignore = "needs a CUDA GPU: run with --features cuda -- --include-ignored"]
fn loaded_images_give_run_bytes() {
    let bytes = small_resnet(21).encode();
    let (model, mut g) = parse_and_upload(&bytes, 8);
    assert!(matches!(g.run_loaded(), Err(CudaError::NothingLoaded)));
    let pixels = Rng::new(22).bytes(8 * model.input_len());
    let want = g.run(&pixels).unwrap().to_vec();
    assert_eq!(g.load(&pixels).unwrap(), 8);
    for _ in 0..2 {
        g.run_loaded().unwrap();
        assert_eq!(g.read_logits().unwrap(), &want[..]);
    }
    g.run(&pixels[..model.input_len()]).unwrap();
    assert!(matches!(g.run_loaded(), Err(CudaError::NothingLoaded)));
}

/// Replaying captured CUDA graphs (the default) gives the bytes of launching every op, for
/// several batch sizes in turn (one graph each) and after the graphs are turned off and on.
#[test]
#[ignore = "needs a CUDA GPU: run with --features cuda -- --include-ignored"]
fn cuda_graphs_give_the_same_bytes() {
    let bytes = resnet18(31).encode();
    let (model, mut g) = parse_and_upload(&bytes, 16);
    let mut rng = Rng::new(32);
    let n = model.input_len();
    let inputs: Vec<Vec<u8>> = [1usize, 16, 5, 16, 1]
        .iter()
        .map(|&b| rng.bytes(b * n))
        .collect();
    for px in &inputs {
        let want = cpu(&model, px);
        assert_eq!(g.run(px).unwrap(), want.as_slice());
        g.set_cuda_graphs(false);
        assert_eq!(g.run(px).unwrap(), want.as_slice());
        g.set_cuda_graphs(true);
        g.load(px).unwrap();
        g.run_loaded().unwrap();
        assert_eq!(g.read_logits().unwrap(), want.as_slice());
    }
}

/// The MLPerf Tiny models as the host imports them (`bench/imported_models.sh DIR`, read from
/// OCTET_IMPORTED_DIR; a SKIP line without it): the GPU gives the host's output bytes, which
/// are TensorFlow Lite Micro's (tests/mlperf_tiny.rs), for every input of NAME.inputs.
#[test]
#[ignore = "needs a CUDA GPU: run with --features cuda -- --include-ignored"]
fn imported_mlperf_tiny_models_give_the_hosts_bytes() {
    let Some(cases) = octet_testkit::imported::imported_cases() else {
        return;
    };
    for case in cases {
        let m = Model::parse(&case.model).unwrap();
        let batch = m.batch_of(case.inputs.len()).unwrap();
        let got = gpu(&m, batch).run_all(&case.inputs).unwrap();
        let got: Vec<u8> = got.iter().map(|&v| v as u8).collect();
        let path = case.path.display();
        assert_eq!(got, case.expected, "{path} on the GPU");
        println!("{path}: {batch} inputs, the host's bytes");
    }
}
