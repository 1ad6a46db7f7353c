//! `--precision bf16` (bf16 channels-last activations, f32 master weights) against f32 on the
//! same GPU: a seeded three-epoch run on 4,096 images of the bundled subset follows the f32
//! loss curve. TF32 is off for the f32 runs, so the difference is bf16's rounding. f32 on cuDNN
//! is not repeatable (its backward-filter algorithms sum with atomics): four f32 runs of one
//! seed ended epoch 3 between 0.352 and 0.375. So each epoch's mean training loss in bf16 must
//! be at most 5% above both of two f32 runs (bf16 trains no worse) and within 15% of the
//! nearer (the same curve; bf16 ran 2–8% below f32 at epochs 2–3), and the test accuracy after
//! the last epoch within 8 points of the nearer. Earlier epochs' accuracy is not compared: after 16
//! steps two runs that differ in rounding alone were 5.5 points apart (33.8% vs 39.3%), and
//! the runs diverge like two seeds would. Ignored without `--include-ignored`; fails, saying
//! so, without a CUDA device.

mod common;

use octet_models::{ModelKind, OpsConfig};
use octet_trainer::Precision;

/// bf16's loss at most this much above both f32 runs (training no worse)...
const LOSS_WORSE_TOL: f64 = 0.05;
/// ...and within this of the nearer one either way.
const LOSS_TOL: f64 = 0.15;
const ACCURACY_TOL: f64 = 0.08;
const EPOCHS: usize = 3;

#[test]
#[ignore = "needs a CUDA GPU: run with --features cuda -- --include-ignored"]
fn bf16_follows_the_f32_loss_curve() {
    let dev = common::cuda();
    let ops = OpsConfig {
        tf32: false,
        ..OpsConfig::default()
    };
    let run = |kind, precision| common::loss_curve(&dev, ops, kind, precision, EPOCHS, 4096);
    for kind in [ModelKind::RESNET18, ModelKind::LENET] {
        // f32 itself is not repeatable on cuDNN (its backward-filter algorithms sum with
        // atomics): two f32 runs of one seed were 2.5% apart at epoch 2. bf16 is compared
        // with the nearer of two.
        let f32_runs = [run(kind, Precision::F32), run(kind, Precision::F32)];
        let bf16_run = run(kind, Precision::Bf16);
        for (epoch, b) in bf16_run.iter().enumerate() {
            let (fa, fb) = (f32_runs[0][epoch], f32_runs[1][epoch]);
            let near = ((b.0 - fa.0).abs() / fa.0).min((b.0 - fb.0).abs() / fb.0);
            let worse = (b.0 - fa.0.max(fb.0)) / fa.0.max(fb.0);
            println!(
                "{kind} epoch {}: loss bf16 {:.5} f32 {:.5} / {:.5} (off the nearer by {near:.2e}, above both by {worse:.2e}), test accuracy {:.4} vs {:.4} / {:.4}",
                epoch + 1,
                b.0,
                fa.0,
                fb.0,
                b.1,
                fa.1,
                fb.1
            );
            assert!(
                worse <= LOSS_WORSE_TOL && near <= LOSS_TOL,
                "{kind} epoch {} loss {b:?} vs {fa:?} and {fb:?}",
                epoch + 1
            );
        }
        assert_eq!(bf16_run.len(), EPOCHS);
        let b = bf16_run[EPOCHS - 1].1;
        let f = (f32_runs[0][EPOCHS - 1].1, f32_runs[1][EPOCHS - 1].1);
        assert!(
            (b - f.0).abs().min((b - f.1).abs()) <= ACCURACY_TOL,
            "{kind}: test accuracy {b} (bf16) vs {f:?} (f32) after {EPOCHS} epochs"
        );
    }
}
