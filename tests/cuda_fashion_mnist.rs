//! The CUDA int8 path on real data: LeNet and ResNet-18 are trained for one epoch on the GPU
//! (full Fashion-MNIST), exported to int8 (calibrated on 1,024 training images), and the GPU
//! runtime's output bytes for all 10,000 test images must equal the CPU runtime's.
//!
//! Needs a CUDA device and the full Fashion-MNIST (`$OCTET_FASHION_MNIST`, else
//! `/usr/share/datasets/fashion-mnist`): ignored by default, run with
//! `cargo test --release --features cuda --test cuda_fashion_mnist -- --include-ignored`;
//! without either it fails saying which is missing.
#![cfg(feature = "cuda")]

use std::collections::HashMap;
use std::path::PathBuf;

use candle_core::{Device, Tensor};
use octet_export::{export, ExportOptions, Input};
use octet_models::ModelKind;
use octet_runtime::cuda::CudaModel;
use octet_runtime::parallel::{arena_bytes_parallel, run_parallel};
use octet_runtime::Model;
use octet_trainer::data::{self, DataSource, DataSplit};
use octet_trainer::train::{RunOptions, TrainConfig, Trainer};

/// Images per GPU call (the planned maximum batch).
const GPU_BATCH: usize = 1000;

fn fashion_mnist() -> DataSplit {
    let dir = std::env::var_os("OCTET_FASHION_MNIST").map(PathBuf::from);
    data::load(&DataSource::FashionMnist(dir)).unwrap_or_else(|e| {
        panic!("this test needs the full Fashion-MNIST ($OCTET_FASHION_MNIST): {e}")
    })
}

/// One epoch of `kind` on `dev`; the weights on the CPU by name.
fn train(kind: ModelKind, split: &DataSplit, dev: &Device) -> HashMap<String, Tensor> {
    let mut cfg = TrainConfig::new(kind, &split.name);
    cfg.epochs = 1;
    cfg.seed = 3;
    cfg.eval_every_epoch = false;
    let mut t = Trainer::new(cfg, split.clone(), dev, None).expect("trainer");
    t.run(&RunOptions::new(dev.clone()), &mut |_| {})
        .expect("one epoch");
    t.model()
        .params()
        .iter()
        .map(|p| {
            let v = p.var.as_tensor().to_device(&Device::Cpu).expect("to cpu");
            (p.name.clone(), v)
        })
        .collect()
}

/// The CPU runtime's bytes for `pixels`, on every core (`run_parallel` gives `Model::run`'s
/// bytes: images are independent).
fn cpu_bytes(model: &Model, pixels: &[u8]) -> Vec<i8> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let batch = pixels.len() / model.input_len();
    let mut arena =
        vec![0u8; arena_bytes_parallel(model, octet_runtime::Kernels::Auto, batch, threads)];
    run_parallel(model, pixels, &mut arena, threads)
        .expect("cpu run")
        .to_vec()
}

#[test]
#[ignore = "needs a CUDA GPU: run with --features cuda -- --include-ignored"]
fn gpu_bytes_equal_cpu_bytes_on_the_fashion_mnist_test_set() {
    let dev = Device::new_cuda(0).unwrap_or_else(|e| panic!("this test needs a CUDA GPU: {e}"));
    let split = fashion_mnist();
    let test = &split.test;
    assert_eq!(test.len(), 10_000);
    for kind in [ModelKind::LENET, ModelKind::RESNET18] {
        let tensors = train(kind, &split, &dev);
        let model: octet_models::Model = kind.into();
        let input = Input {
            model: &model,
            tensors: &tensors,
            mean: &split.norm.mean,
            std: &split.norm.std,
            channels: test.channels,
            height: test.height,
            width: test.width,
            classes: test.classes,
        };
        let image_len = test.channels * test.height * test.width;
        let calib = &split.train.images[..1024 * image_len];
        let bytes = export(&input, calib, &ExportOptions::default())
            .expect("export")
            .bytes;
        let model = Model::parse(&bytes).expect("parse");
        let want = cpu_bytes(&model, &test.images);
        let mut gpu =
            CudaModel::new(&model, 0, GPU_BATCH).unwrap_or_else(|e| panic!("CudaModel::new: {e}"));
        let mut got = vec![0i8; want.len()];
        for (px, out) in test
            .images
            .chunks(GPU_BATCH * image_len)
            .zip(got.chunks_mut(GPU_BATCH * model.output_len()))
        {
            gpu.run_into(px, out).expect("gpu run");
        }
        let differing = want.iter().zip(&got).filter(|(a, b)| a != b).count();
        let correct = got
            .chunks(model.output_len())
            .zip(&test.labels)
            .filter(|(logits, &label)| {
                let best = (0..logits.len()).max_by_key(|&i| (logits[i], usize::MAX - i));
                best == Some(label as usize)
            })
            .count();
        println!(
            "{kind}: {} test images, {differing} of {} output bytes differ; int8 accuracy {:.2}%",
            test.len(),
            want.len(),
            correct as f64 / 100.0
        );
        assert_eq!(differing, 0, "{kind}: GPU bytes differ from CPU bytes");
    }
}
