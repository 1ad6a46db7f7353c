//! Synchronous data parallelism on CPU, ranks as threads: 2 ranks × batch b follow 1 rank ×
//! batch 2b, gradient accumulation follows the larger batch, buckets started during backward
//! give the weights of buckets sent after it, bf16 compression halves the bytes, only rank 0
//! writes, and every rank reports the same epoch.

mod common;

use std::sync::Arc;
use std::time::Duration;

use candle_core::Device;
use octet_models::{ModelKind, Role};
use octet_trainer::data::DataSplit;
use octet_trainer::dist::{thread_group, Collective, ThreadRank};
use octet_trainer::metrics::EpochRecord;
use octet_trainer::train::{LrScaling, RunOptions, TrainConfig, Trainer};

/// 1,024 training and 400 test images of the bundled Fashion-MNIST subset.
fn small_split() -> DataSplit {
    common::bundled_subset(1024, 5, 400)
}

/// LeNet has no batch norm, so splitting a batch over ranks changes nothing but the order of
/// float sums.
fn config(batch: usize) -> TrainConfig {
    config_of(ModelKind::LENET, batch)
}

/// Two epochs, lr 0.05, seed 5; augmentation is off because its random stream depends on the
/// rank.
fn config_of(kind: ModelKind, batch: usize) -> TrainConfig {
    let mut c = TrainConfig::new(kind, "bundled");
    c.epochs = 2;
    c.batch_size = batch;
    c.lr = 0.05;
    c.seed = 5;
    c.augment = false;
    c
}

fn run_ranks(
    cfg: TrainConfig,
    world: usize,
    out: Option<&std::path::Path>,
) -> Vec<Vec<EpochRecord>> {
    run_ranks_on(cfg, world, out, small_split)
        .into_iter()
        .map(|(records, _)| records)
        .collect()
}

/// Every parameter and buffer of a model, by name, as f32 bits.
type Weights = Vec<(String, Role, Vec<u32>)>;

/// Each rank's records and final weights, training on `split()`.
fn run_ranks_on(
    cfg: TrainConfig,
    world: usize,
    out: Option<&std::path::Path>,
    split: fn() -> DataSplit,
) -> Vec<(Vec<EpochRecord>, Weights)> {
    let ranks: Vec<Arc<ThreadRank>> = thread_group(world, Duration::from_secs(60))
        .into_iter()
        .map(Arc::new)
        .collect();
    std::thread::scope(|s| {
        let handles: Vec<_> = ranks
            .iter()
            .map(|r| {
                let cfg = cfg.clone();
                let coll: Arc<dyn Collective> = r.clone();
                s.spawn(move || {
                    let mut t =
                        Trainer::with_collective(cfg, split(), &Device::Cpu, None, coll).unwrap();
                    let opts = RunOptions {
                        out: out.map(|p| p.to_path_buf()),
                        ..RunOptions::new(Device::Cpu)
                    };
                    let records = t.run(&opts, &mut |_| {}).unwrap().records;
                    let weights = t
                        .model()
                        .params()
                        .iter()
                        .map(|p| {
                            let v = p.var.flatten_all().unwrap().to_vec1::<f32>().unwrap();
                            let bits = v.iter().map(|x| x.to_bits()).collect();
                            (p.name.clone(), p.role, bits)
                        })
                        .collect();
                    (records, weights)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol * a.abs().max(1.0)
}

#[test]
fn two_ranks_of_batch_b_follow_one_rank_of_batch_2b() {
    let one = run_ranks(config(64), 1, None).remove(0);
    let two = run_ranks(config(32), 2, None);
    // Every rank reports the same (summed) epoch.
    for (r0, r1) in two[0].iter().zip(&two[1]) {
        let key = |r: &EpochRecord| {
            (
                r.step,
                r.images,
                r.train_loss,
                r.train_accuracy,
                r.test_loss,
                r.test_accuracy,
            )
        };
        assert_eq!(key(r0), key(r1));
    }
    for (a, b) in one.iter().zip(&two[0]) {
        assert_eq!((a.step, a.images), (b.step, b.images));
        assert!(
            close(a.train_loss, b.train_loss, 1e-4),
            "{} vs {}",
            a.train_loss,
            b.train_loss
        );
        let (ta, tb) = (a.test_loss.unwrap(), b.test_loss.unwrap());
        assert!(close(ta, tb, 1e-4), "test loss {ta} vs {tb}");
        assert_eq!(b.world, 2);
        assert_eq!(b.ranks.len(), 2);
        // ResNet-free LeNet gradients: 61,706 floats all-reduced per step.
        let steps = 1024 / 64;
        assert_eq!(b.ranks[1].comm_bytes, 4 * 61_706 * steps as u64);
    }
}

#[test]
fn accumulating_two_micro_batches_follows_the_double_batch() {
    let one = run_ranks(config(64), 1, None).remove(0);
    let mut cfg = config(32);
    cfg.accumulate = 2;
    let acc = run_ranks(cfg, 1, None).remove(0);
    for (a, b) in one.iter().zip(&acc) {
        assert_eq!(a.step, b.step);
        assert!(
            close(a.train_loss, b.train_loss, 1e-4),
            "{} vs {}",
            a.train_loss,
            b.train_loss
        );
    }
}

/// 256 training and 100 test images: enough steps for a network with residual blocks.
fn tiny_split() -> DataSplit {
    common::bundled_subset(256, 5, 100)
}

/// ResNet-8: shortcut convs and batch norm, 27 parameters in many small buckets.
fn resnet8(batch: usize) -> TrainConfig {
    let mut c = config_of(ModelKind::RESNET8, batch);
    // Small buckets: several per step, some closed by the first-bucket cap.
    c.bucket_mb = 0.05;
    c
}

#[test]
fn buckets_started_during_backward_give_the_same_weights_as_after_it() {
    use octet_trainer::dist::BucketTail;
    let cases = [
        (resnet8(16), 1, BucketTail::Auto),
        (resnet8(8), 2, BucketTail::On),
        (config(32), 1, BucketTail::Auto),
    ];
    for (cfg, accumulate, tail) in cases {
        let mut cfg = cfg;
        cfg.accumulate = accumulate;
        cfg.bucket_tail = tail;
        let split = if cfg.model == "lenet" {
            small_split
        } else {
            tiny_split
        };
        let mut after = cfg.clone();
        after.overlap = false;
        let during = run_ranks_on(cfg, 2, None, split);
        let after = run_ranks_on(after, 2, None, split);
        // Every rank ends with the same parameters, bit for bit, in both modes, and the
        // modes agree on every weight and buffer: the same buckets' sums, only issued earlier.
        let trainable = |w: &Weights| -> Weights {
            w.iter().filter(|w| w.1 != Role::Buffer).cloned().collect()
        };
        assert_eq!(trainable(&during[0].1), trainable(&during[1].1));
        assert_eq!(trainable(&after[0].1), trainable(&after[1].1));
        assert_eq!(during[0].1, after[0].1);
        assert_eq!(during[1].1, after[1].1);
        let losses = |r: &[EpochRecord]| r.iter().map(|e| e.train_loss).collect::<Vec<_>>();
        assert_eq!(losses(&during[0].0), losses(&after[0].0));
        // Every byte went out once per step in both.
        let bytes = |r: &[EpochRecord]| r.iter().map(|e| e.times.comm_bytes).sum::<u64>();
        assert_eq!(bytes(&during[0].0), bytes(&after[0].0));
        // `auto` chooses after the second epoch, the same on every rank; a flag chooses
        // itself.
        let chosen = |r: &[EpochRecord]| r.iter().map(|e| e.bucket_tail).collect::<Vec<_>>();
        assert_eq!(chosen(&during[0].0), chosen(&during[1].0));
        let second = chosen(&during[0].0)[1];
        assert_eq!(second.is_some(), tail == BucketTail::Auto, "{second:?}");
        assert_eq!(chosen(&during[0].0)[0], None);
        assert_eq!(chosen(&during[0].0).len(), 2);
    }
}

#[test]
fn bf16_compression_halves_the_bytes_and_keeps_ranks_identical() {
    let mut cfg = config(32);
    cfg.epochs = 1;
    let plain = run_ranks_on(cfg.clone(), 2, None, small_split);
    cfg.grad_compress = octet_trainer::dist::GradCompress::Bf16;
    let bf16 = run_ranks_on(cfg, 2, None, small_split);
    assert_eq!(bf16[0].1, bf16[1].1);
    assert_ne!(bf16[0].1, plain[0].1, "bf16 sums round differently");
    let (a, b) = (&plain[0].0[0], &bf16[0].0[0]);
    assert_eq!(2 * b.times.comm_bytes, a.times.comm_bytes);
    assert!(
        close(a.train_loss, b.train_loss, 1e-2),
        "{} vs {}",
        a.train_loss,
        b.train_loss
    );
    let (ta, tb) = (a.test_accuracy.unwrap(), b.test_accuracy.unwrap());
    assert!((ta - tb).abs() <= 0.02, "test accuracy {ta} vs {tb}");
}

#[test]
fn linear_scaling_multiplies_the_rate_by_the_global_batch() {
    let mut cfg = config(32);
    cfg.lr_scaling = LrScaling::Linear;
    cfg.base_batch = 32;
    cfg.epochs = 1;
    cfg.schedule = octet_trainer::optim::Schedule::Constant;
    let recs = run_ranks(cfg, 2, None);
    assert!((recs[0][0].lr - 0.1).abs() < 1e-12, "{}", recs[0][0].lr);
}

#[test]
fn only_rank_0_writes_the_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(32);
    cfg.epochs = 1;
    run_ranks(cfg, 2, Some(dir.path()));
    let mut names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["last.safetensors", "metrics.csv"]);
}

#[test]
fn sync_batch_norm_over_two_ranks_equals_batch_norm_of_the_whole_batch() {
    use candle_core::{DType, Tensor, Var};
    use octet_train_ops::{
        batch_norm_train_reference, batch_norm_train_synced, BnConfig, BnParams,
    };
    use octet_trainer::dist::sync_bn::RankSum;
    let dev = Device::Cpu;
    for (c, hw) in [(16usize, 16usize), (64, 8), (3, 5)] {
        let x = Tensor::randn(0f32, 1.0, (8, c, hw, hw), &dev).unwrap();
        let r = Tensor::randn(0f32, 1.0, (8, c, hw, hw), &dev).unwrap();
        let gamma = Var::randn(1f32, 0.1, c, &dev).unwrap();
        let beta = Var::randn(0f32, 0.1, c, &dev).unwrap();
        let stats = || {
            (
                Var::zeros(c, DType::F32, &Device::Cpu).unwrap(),
                Var::ones(c, DType::F32, &Device::Cpu).unwrap(),
            )
        };
        let rows = |t: &Tensor| t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        // The whole batch of 8 on one rank, through the reference op.
        let xv = Var::from_tensor(&x).unwrap();
        let (rm, rv) = stats();
        let p = BnParams {
            gamma: &gamma,
            beta: &beta,
            running_mean: &rm,
            running_var: &rv,
        };
        let y = batch_norm_train_reference(xv.as_tensor(), &p, &BnConfig::default()).unwrap();
        let g = (y * &r).unwrap().sum_all().unwrap().backward().unwrap();
        let want_x = rows(g.get(xv.as_tensor()).unwrap());
        let want_gamma = rows(g.get(gamma.as_tensor()).unwrap());
        let want_rv = rows(rv.as_tensor());
        // Two ranks of 4 with synchronised statistics.
        let ranks: Vec<Arc<dyn Collective>> = thread_group(2, Duration::from_secs(60))
            .into_iter()
            .map(|r| Arc::new(r) as Arc<dyn Collective>)
            .collect();
        let got: Vec<(Vec<f32>, Vec<f32>, Vec<f32>)> = std::thread::scope(|s| {
            let hs: Vec<_> = ranks
                .iter()
                .enumerate()
                .map(|(k, coll)| {
                    let (x, r, gamma, beta) = (x.clone(), r.clone(), gamma.clone(), beta.clone());
                    let (sync, (rm, rv)) = (RankSum::new(coll.clone()), stats());
                    s.spawn(move || {
                        let xs = Var::from_tensor(&x.narrow(0, 4 * k, 4).unwrap()).unwrap();
                        let p = BnParams {
                            gamma: &gamma,
                            beta: &beta,
                            running_mean: &rm,
                            running_var: &rv,
                        };
                        let y = batch_norm_train_synced(
                            xs.as_tensor(),
                            &p,
                            &BnConfig::default(),
                            &sync,
                        )
                        .unwrap();
                        let rs = r.narrow(0, 4 * k, 4).unwrap();
                        let g = (y * rs).unwrap().sum_all().unwrap().backward().unwrap();
                        (
                            rows(g.get(xs.as_tensor()).unwrap()),
                            rows(g.get(gamma.as_tensor()).unwrap()),
                            rows(rv.as_tensor()),
                        )
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let got_x: Vec<f32> = got.iter().flat_map(|g| g.0.clone()).collect();
        let got_gamma: Vec<f32> = got[0].1.iter().zip(&got[1].1).map(|(a, b)| a + b).collect();
        let rel = |a: &[f32], b: &[f32]| {
            let s = a.iter().fold(1e-12f32, |m, x| m.max(x.abs()));
            a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs())) / s
        };
        assert!(
            rel(&want_x, &got_x) < 1e-5,
            "x grad, c {c}: {}",
            rel(&want_x, &got_x)
        );
        assert!(rel(&want_gamma, &got_gamma) < 1e-5, "gamma grad, c {c}");
        // Both ranks keep the running variance of the whole batch.
        assert!(rel(&want_rv, &got[0].2) < 1e-5 && rel(&want_rv, &got[1].2) < 1e-5);
    }
}

/// Weights of a small residual network, in the layout of ResNet-18's blocks: a 3×3 stem
/// conv–BN–ReLU, one block with an identity shortcut (the BN-ReLU output feeds two consumers),
/// one stride-2 block whose shortcut is a 1×1 conv–BN, average pool, linear.
struct ResNetLike {
    vars: Vec<(String, candle_core::Var)>,
}

impl ResNetLike {
    fn new(dtype: candle_core::DType) -> Self {
        use candle_core::{Tensor, Var};
        let dev = Device::Cpu;
        let mut vars = Vec::new();
        let mut seed = 0x5eed_u64;
        let mut add = |name: &str, shape: &[usize], kind: char| {
            let n: usize = shape.iter().product();
            let fan_in = n / shape[0];
            // A fixed generator: the same weights everywhere, independent of candle's RNG.
            let v: Vec<f64> = (0..n)
                .map(|_| {
                    seed = seed
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let u = (seed >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0;
                    match kind {
                        'w' => u / (fan_in as f64).sqrt(),
                        'g' => 1.0 + 0.2 * u,
                        _ => 0.2 * u,
                    }
                })
                .collect();
            let t = Tensor::from_vec(v, shape, &dev)
                .unwrap()
                .to_dtype(dtype)
                .unwrap();
            vars.push((name.to_string(), Var::from_tensor(&t).unwrap()));
        };
        let bn = |add: &mut dyn FnMut(&str, &[usize], char), name: &str, c: usize| {
            add(&format!("{name}.weight"), &[c], 'g');
            add(&format!("{name}.bias"), &[c], 'b');
        };
        add("conv1.weight", &[8, 3, 3, 3], 'w');
        bn(&mut add, "bn1", 8);
        for (name, cin, cout) in [("layer1", 8, 8), ("layer2", 8, 16)] {
            add(&format!("{name}.conv1.weight"), &[cout, cin, 3, 3], 'w');
            bn(&mut add, &format!("{name}.bn1"), cout);
            add(&format!("{name}.conv2.weight"), &[cout, cout, 3, 3], 'w');
            bn(&mut add, &format!("{name}.bn2"), cout);
            if cin != cout {
                add(
                    &format!("{name}.shortcut.0.weight"),
                    &[cout, cin, 1, 1],
                    'w',
                );
                bn(&mut add, &format!("{name}.shortcut.1"), cout);
            }
        }
        add("linear.weight", &[10, 16], 'w');
        add("linear.bias", &[10], 'b');
        Self { vars }
    }

    fn get(&self, name: &str) -> &candle_core::Tensor {
        self.vars
            .iter()
            .find(|(n, _)| n == name)
            .unwrap()
            .1
            .as_tensor()
    }

    /// Mean cross-entropy of the batch; `bn` is training-mode batch norm of (input, name).
    fn loss(
        &self,
        x: &candle_core::Tensor,
        y: &candle_core::Tensor,
        bn: &dyn Fn(&candle_core::Tensor, &str) -> candle_core::Tensor,
    ) -> candle_core::Tensor {
        let conv = |x: &candle_core::Tensor, name: &str, pad: usize, stride: usize| {
            x.conv2d(self.get(&format!("{name}.weight")), pad, stride, 1, 1)
                .unwrap()
        };
        let mut h = bn(&conv(x, "conv1", 1, 1), "bn1").relu().unwrap();
        for (name, stride) in [("layer1", 1), ("layer2", 2)] {
            let o = bn(
                &conv(&h, &format!("{name}.conv1"), 1, stride),
                &format!("{name}.bn1"),
            );
            let o = bn(
                &conv(&o.relu().unwrap(), &format!("{name}.conv2"), 1, 1),
                &format!("{name}.bn2"),
            );
            let short = if stride == 1 {
                h.clone()
            } else {
                let s = conv(&h, &format!("{name}.shortcut.0"), 0, stride);
                bn(&s, &format!("{name}.shortcut.1"))
            };
            h = (o + short).unwrap().relu().unwrap();
        }
        let h = h.avg_pool2d(4).unwrap().flatten_from(1).unwrap();
        let logits = h
            .matmul(&self.get("linear.weight").t().unwrap())
            .unwrap()
            .broadcast_add(self.get("linear.bias"))
            .unwrap();
        candle_nn::loss::cross_entropy(&logits, y).unwrap()
    }

    /// Gradients of every weight, by name order, as f64.
    fn grads(&self, g: &candle_core::backprop::GradStore) -> Vec<(String, Vec<f64>)> {
        self.vars
            .iter()
            .map(|(n, v)| {
                let t = g.get(v.as_tensor()).unwrap();
                let t = t.to_dtype(candle_core::DType::F64).unwrap();
                (
                    n.clone(),
                    t.flatten_all().unwrap().to_vec1::<f64>().unwrap(),
                )
            })
            .collect()
    }
}

/// SyncBN in a residual network: 2 ranks × 3 images give the gradients of 1 rank × 6, with
/// statistics and their gradients crossing ranks in 6 batch norms, a BN-ReLU output feeding
/// two consumers (identity shortcut) and a downsampling conv–BN shortcut.
///
/// f64 on purpose. In f32, ResNet-18 (2 ranks × 4 vs 1 × 8) shows gradient differences of
/// 1e-3 to 3e-1 of a layer's largest gradient upstream of some block, and they are not SyncBN's:
/// the one-rank f32 gradients differ from the same computation in f64 by as much (2e-4 to 3e-1
/// over seven draws), and so does one rank with its input scaled by 1 + 2^-20 (which batch norm
/// undoes). The cause is ReLU's kink: of the ~6M ReLU inputs a few lie within f32 rounding
/// (~1e-5) of zero, summing the batch in another order flips their sign, and one flipped
/// element moves its channel's Σ dy by ~1/√(elements per channel) (2e-2 in layer1, 9e-2 in
/// layer4), which batch norm's backward then spreads to every weight upstream (the first bad
/// parameter is always the bias of the BN before the flipped ReLU). In f64 the same ResNet-18
/// comparison, through the same ops, agrees to 2.2e-14–2.6e-14. Measured here: 1.5e-15; 1e-10
/// leaves orders of margin above f64 rounding and is far below a mistake in the synced backward
/// (without the backward all-reduce of the statistics' gradient: 0.27). Needs the thread ranks
/// to sum f64 in f64 (with an f32 wire this test sees 6.5e-8).
#[test]
fn sync_batch_norm_in_a_residual_network_over_two_ranks_equals_one_rank_in_f64() {
    use candle_core::{DType, Tensor, Var};
    use octet_train_ops::{
        batch_norm_train_reference, batch_norm_train_synced, BnConfig, BnParams,
    };
    use octet_trainer::dist::sync_bn::RankSum;
    let dev = Device::Cpu;
    let (b, dt) = (3usize, DType::F64);
    let x = Tensor::randn(0f64, 1.0, (2 * b, 3, 8, 8), &dev).unwrap();
    let y = Tensor::new(&[3u32, 1, 4, 1, 5, 9], &dev).unwrap();
    let stats = |c: usize| {
        (
            Var::zeros(c, dt, &Device::Cpu).unwrap(),
            Var::ones(c, dt, &Device::Cpu).unwrap(),
        )
    };
    type Running = std::cell::RefCell<Vec<(String, Vec<f64>)>>;
    let running = |r: &Running, name: &str, rv: &Var| {
        let v = rv.as_tensor().to_vec1::<f64>().unwrap();
        r.borrow_mut().push((name.to_string(), v));
    };
    // The whole batch on one rank, through the one-rank op.
    let net = ResNetLike::new(dt);
    let want_running = Running::default();
    let bn = |t: &Tensor, name: &str| {
        let (rm, rv) = stats(t.dim(1).unwrap());
        let g = net.get(&format!("{name}.weight"));
        let bb = net.get(&format!("{name}.bias"));
        let p = BnParams {
            gamma: g,
            beta: bb,
            running_mean: &rm,
            running_var: &rv,
        };
        let out = batch_norm_train_reference(t, &p, &BnConfig::default()).unwrap();
        running(&want_running, name, &rv);
        out
    };
    let want = net.grads(&net.loss(&x, &y, &bn).backward().unwrap());
    // Two ranks of b: synchronised statistics, then gradients averaged over the ranks.
    let ranks: Vec<Arc<dyn Collective>> = thread_group(2, Duration::from_secs(60))
        .into_iter()
        .map(|r| Arc::new(r) as Arc<dyn Collective>)
        .collect();
    let got: Vec<_> = std::thread::scope(|s| {
        let hs: Vec<_> = ranks
            .iter()
            .enumerate()
            .map(|(k, coll)| {
                let (xs, ys, coll) = (
                    x.narrow(0, b * k, b).unwrap(),
                    y.narrow(0, b * k, b).unwrap(),
                    coll.clone(),
                );
                s.spawn(move || {
                    let net = ResNetLike::new(dt);
                    let sync = RankSum::new(coll.clone());
                    let got_running = Running::default();
                    let bn = |t: &Tensor, name: &str| {
                        let (rm, rv) = stats(t.dim(1).unwrap());
                        let g = net.get(&format!("{name}.weight"));
                        let bb = net.get(&format!("{name}.bias"));
                        let p = BnParams {
                            gamma: g,
                            beta: bb,
                            running_mean: &rm,
                            running_var: &rv,
                        };
                        let out =
                            batch_norm_train_synced(t, &p, &BnConfig::default(), &sync).unwrap();
                        running(&got_running, name, &rv);
                        out
                    };
                    let g = net.loss(&xs, &ys, &bn).backward().unwrap();
                    let mean = net
                        .grads(&g)
                        .into_iter()
                        .map(|(n, v)| {
                            let t = Tensor::new(v.as_slice(), &Device::Cpu).unwrap();
                            let m = (coll.all_reduce_sum(&t).unwrap() / 2.0).unwrap();
                            (n, m.to_vec1::<f64>().unwrap())
                        })
                        .collect::<Vec<_>>();
                    (mean, got_running.into_inner())
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let rel = |a: &[f64], b: &[f64]| {
        let s = a.iter().fold(1e-300f64, |m, x| m.max(x.abs()));
        a.iter().zip(b).fold(0f64, |m, (x, y)| m.max((x - y).abs())) / s
    };
    let want_running = want_running.into_inner();
    assert_eq!(want.len(), 20);
    assert_eq!(want_running.len(), 6);
    for (grads, runs) in &got {
        for ((name, w), (_, g)) in want.iter().zip(grads) {
            let e = rel(w, g);
            assert!(
                e < 1e-10,
                "{name}: gradient differs by {e:.1e} of its largest"
            );
        }
        for ((name, w), (_, g)) in want_running.iter().zip(runs) {
            let e = rel(w, g);
            assert!(e < 1e-12, "{name}: running variance differs by {e:.1e}");
        }
    }
}

/// Ranks that resume from different points (one read a checkpoint, one found none: a `--out`
/// not shared between machines) all stop with the reason instead of hanging.
#[test]
fn ranks_resuming_from_different_points_all_refuse() {
    let dir = tempfile::tempdir().unwrap();
    let mut first = config(64);
    first.epochs = 1;
    run_ranks(first, 1, Some(dir.path()));
    let ck = octet_trainer::checkpoint::load_checked(&dir.path().join("last.safetensors")).unwrap();
    let ranks: Vec<Arc<ThreadRank>> = thread_group(2, Duration::from_secs(60))
        .into_iter()
        .map(Arc::new)
        .collect();
    let errors: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = ranks
            .iter()
            .map(|r| {
                let coll: Arc<dyn Collective> = r.clone();
                let resume = (coll.rank() == 0).then_some(&ck);
                s.spawn(move || {
                    match Trainer::with_collective(
                        config(32),
                        small_split(),
                        &Device::Cpu,
                        resume,
                        coll,
                    ) {
                        Ok(_) => "started".to_string(),
                        Err(e) => e.to_string(),
                    }
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for e in &errors {
        assert!(
            e.contains("1 rank(s) resumed from another point than rank 0")
                && e.contains("file system all of them share"),
            "{e}"
        );
    }
    assert!(
        errors[1].contains("this is rank 1: epoch 0 step 0, rank 0: epoch 1 step 16"),
        "{}",
        errors[1]
    );
}
