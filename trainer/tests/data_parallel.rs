//! Synchronous data parallelism on CPU, ranks as threads: 2 ranks × batch b follow 1 rank ×
//! batch 2b, gradient accumulation follows the larger batch, only rank 0 writes, and every
//! rank reports the same epoch.

use std::sync::Arc;
use std::time::Duration;

use candle_core::Device;
use octet_models::ModelKind;
use octet_trainer::data::{self, DataSource, DataSplit};
use octet_trainer::dist::{thread_group, Collective, ThreadRank};
use octet_trainer::metrics::EpochRecord;
use octet_trainer::train::{LrScaling, RunOptions, TrainConfig, Trainer};

/// 1,024 training and 400 test images of the bundled Fashion-MNIST subset.
fn small_split() -> DataSplit {
    let mut s = data::load(&DataSource::Bundled).expect("bundled subset");
    s.train = s
        .train
        .subset(&(0..1024).map(|i| i * 5).collect::<Vec<_>>());
    s.test = s.test.subset(&(0..400).collect::<Vec<_>>());
    s
}

/// LeNet has no batch norm, so splitting a batch over ranks changes nothing but the order of
/// float sums; augmentation is off because its random stream depends on the rank.
fn config(batch: usize) -> TrainConfig {
    let mut c = TrainConfig::new(ModelKind::LeNet, "bundled");
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
                        Trainer::with_collective(cfg, small_split(), &Device::Cpu, None, coll)
                            .unwrap();
                    let opts = RunOptions {
                        out: out.map(|p| p.to_path_buf()),
                        ..RunOptions::new(Device::Cpu)
                    };
                    t.run(&opts, &mut |_| {}).unwrap().records
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
    use octet_models::ops::batch_norm::{batch_norm_train_reference, batch_norm_train_synced};
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
        let y =
            batch_norm_train_reference(xv.as_tensor(), &gamma, &beta, &rm, &rv, 0.1, 1e-5).unwrap();
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
                        let y = batch_norm_train_synced(
                            xs.as_tensor(),
                            &gamma,
                            &beta,
                            &rm,
                            &rv,
                            0.1,
                            1e-5,
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
