use candle_core::{Device, Tensor, Var};
use octet_models::ops::batch_norm::{batch_norm_train_reference, batch_norm_train_synced};
use octet_trainer::dist::sync_bn::RankSum;
use octet_trainer::dist::{thread_group, Collective};
use std::sync::Arc;
use std::time::Duration;

#[test]
fn bn_split() {
    let dev = Device::Cpu;
    for (c, hw) in [(128usize, 16usize), (256, 8), (64, 32), (128, 8), (256, 16)] {
        let x = Tensor::randn(0f32, 1.0, (8, c, hw, hw), &dev).unwrap();
        let r = Tensor::randn(0f32, 1.0, (8, c, hw, hw), &dev).unwrap();
        let gamma = Var::randn(1f32, 0.1, c, &dev).unwrap();
        let beta = Var::randn(0f32, 0.1, c, &dev).unwrap();
        let xv = Var::from_tensor(&x).unwrap();
        let rm = Var::zeros(c, candle_core::DType::F32, &dev).unwrap();
        let rv = Var::ones(c, candle_core::DType::F32, &dev).unwrap();
        let y = batch_norm_train_reference(
            xv.as_tensor(),
            gamma.as_tensor(),
            beta.as_tensor(),
            &rm,
            &rv,
            0.1,
            1e-5,
        )
        .unwrap();
        let g = (y * &r).unwrap().sum_all().unwrap().backward().unwrap();
        let gx = g
            .get(xv.as_tensor())
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        let gg = g.get(gamma.as_tensor()).unwrap().to_vec1::<f32>().unwrap();
        let ranks: Vec<Arc<dyn Collective>> = thread_group(2, Duration::from_secs(60))
            .into_iter()
            .map(|r| Arc::new(r) as Arc<dyn Collective>)
            .collect();
        let out: Vec<(Vec<f32>, Vec<f32>)> = std::thread::scope(|s| {
            let hs: Vec<_> = ranks
                .iter()
                .enumerate()
                .map(|(k, co)| {
                    let (x, r, gamma, beta, co) = (
                        x.clone(),
                        r.clone(),
                        gamma.clone(),
                        beta.clone(),
                        co.clone(),
                    );
                    s.spawn(move || {
                        let sync = RankSum::new(co);
                        let xs = Var::from_tensor(&x.narrow(0, 4 * k, 4).unwrap()).unwrap();
                        let rm = Var::zeros(c, candle_core::DType::F32, &Device::Cpu).unwrap();
                        let rv = Var::ones(c, candle_core::DType::F32, &Device::Cpu).unwrap();
                        let y = batch_norm_train_synced(
                            xs.as_tensor(),
                            gamma.as_tensor(),
                            beta.as_tensor(),
                            &rm,
                            &rv,
                            0.1,
                            1e-5,
                            &sync,
                        )
                        .unwrap();
                        let g = (y * r.narrow(0, 4 * k, 4).unwrap())
                            .unwrap()
                            .sum_all()
                            .unwrap()
                            .backward()
                            .unwrap();
                        (
                            g.get(xs.as_tensor())
                                .unwrap()
                                .flatten_all()
                                .unwrap()
                                .to_vec1::<f32>()
                                .unwrap(),
                            g.get(gamma.as_tensor()).unwrap().to_vec1::<f32>().unwrap(),
                        )
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let gx2: Vec<f32> = out.iter().flat_map(|o| o.0.clone()).collect();
        let gg2: Vec<f32> = out[0].1.iter().zip(&out[1].1).map(|(a, b)| a + b).collect();
        let rel = |a: &[f32], b: &[f32]| {
            let s = a.iter().fold(0f32, |m, x| m.max(x.abs()));
            a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs())) / s
        };
        println!(
            "c {c} hw {hw}: gx rel {:.2e} gamma rel {:.2e}",
            rel(&gx, &gx2),
            rel(&gg, &gg2)
        );
    }
}
