use std::collections::HashMap;

use candle_core::{DType, Device, Tensor};
use octet_models::{build, ModelError, ModelKind, Role};

#[test]
fn resnet18_has_the_pytorch_parameter_count_and_names() -> anyhow::Result<()> {
    let m = build(ModelKind::RESNET18, 3, 10, 0, &Device::Cpu)?;
    assert_eq!(m.params().num_trainable(), 11_173_962);
    let names: Vec<&str> = m.params().iter().map(|p| p.name.as_str()).collect();
    assert_eq!(
        &names[..6],
        [
            "conv1.weight",
            "bn1.weight",
            "bn1.bias",
            "bn1.running_mean",
            "bn1.running_var",
            "layer1.0.conv1.weight"
        ]
    );
    for n in [
        "layer2.0.shortcut.0.weight",
        "layer2.0.shortcut.1.running_var",
        "layer4.1.bn2.bias",
        "linear.weight",
        "linear.bias",
    ] {
        assert!(names.contains(&n), "{n} missing");
    }
    assert!(
        !names.contains(&"layer1.0.shortcut.0.weight"),
        "identity shortcut has no conv"
    );
    // state_dict order inside a block: conv1, bn1, conv2, bn2, shortcut.
    let pos = |n: &str| names.iter().position(|x| *x == n).unwrap();
    assert!(pos("layer2.0.bn2.running_var") < pos("layer2.0.shortcut.0.weight"));
    let buffers = m.params().iter().filter(|p| p.role == Role::Buffer).count();
    assert_eq!(buffers, 2 * 20, "20 batch norms, two buffers each");
    Ok(())
}

#[test]
fn lenet_shapes_and_count() -> anyhow::Result<()> {
    let m = build(ModelKind::LENET, 3, 10, 0, &Device::Cpu)?;
    assert_eq!(m.params().num_trainable(), 62_006);
    let m1 = build(ModelKind::LENET, 1, 10, 0, &Device::Cpu)?;
    let x = Tensor::randn(0f32, 1.0, (4, 1, 32, 32), &Device::Cpu)?;
    assert_eq!(m1.forward(&x, true)?.dims(), [4, 10]);
    Ok(())
}

#[test]
fn same_seed_same_weights_other_seed_other_weights() -> anyhow::Result<()> {
    let w = |seed| -> anyhow::Result<Vec<f32>> {
        let m = build(ModelKind::LENET, 1, 10, seed, &Device::Cpu)?;
        Ok(m.params()
            .get("conv2.weight")
            .unwrap()
            .var
            .flatten_all()?
            .to_vec1()?)
    };
    assert_eq!(w(7)?, w(7)?);
    assert_ne!(w(7)?, w(8)?);
    Ok(())
}

#[test]
fn resnet18_forward_backward_reaches_every_weight() -> anyhow::Result<()> {
    let m = build(ModelKind::RESNET18, 3, 10, 1, &Device::Cpu)?;
    let x = Tensor::randn(0f32, 1.0, (2, 3, 32, 32), &Device::Cpu)?;
    let y = m.forward(&x, true)?;
    assert_eq!(y.dims(), [2, 10]);
    let grads = y.sqr()?.sum_all()?.backward()?;
    for p in m.params().trainable() {
        let g = grads
            .get(p.var.as_tensor())
            .unwrap_or_else(|| panic!("no gradient for {}", p.name));
        assert_eq!(g.shape(), p.var.shape());
    }
    // Eval mode uses running stats: deterministic and independent of the batch.
    let a = m.forward(&x.narrow(0, 0, 1)?, false)?;
    let b = m.forward(&x, false)?.narrow(0, 0, 1)?;
    let d = (a - b)?.abs()?.max_all()?.to_scalar::<f32>()?;
    assert!(d < 1e-4, "{d}");
    Ok(())
}

#[test]
fn load_checks_names_and_shapes_and_leaves_model_intact() -> anyhow::Result<()> {
    let src = build(ModelKind::LENET, 1, 10, 3, &Device::Cpu)?;
    let dst = build(ModelKind::LENET, 1, 10, 4, &Device::Cpu)?;
    let mut map: HashMap<String, Tensor> = src
        .params()
        .iter()
        .map(|p| (p.name.clone(), p.var.as_tensor().copy().unwrap()))
        .collect();
    let fc1 = |m: &dyn octet_models::Network| -> candle_core::Result<Vec<f32>> {
        m.params()
            .get("fc1.weight")
            .unwrap()
            .var
            .flatten_all()?
            .to_vec1::<f32>()
    };
    let before = fc1(dst.as_ref())?;

    let mut bad = map.clone();
    bad.remove("fc2.bias");
    match dst.params().load(|n| bad.get(n).cloned()) {
        Err(ModelError::MissingTensor { name }) => assert_eq!(name, "fc2.bias"),
        other => panic!("{other:?}"),
    }
    let mut bad = map.clone();
    bad.insert(
        "conv1.weight".into(),
        Tensor::zeros((6, 3, 5, 5), DType::F32, &Device::Cpu)?,
    );
    let err = dst.params().load(|n| bad.get(n).cloned()).unwrap_err();
    assert!(err.to_string().contains("conv1.weight"), "{err}");
    let after = fc1(dst.as_ref())?;
    assert_eq!(before, after, "a failed load must not change the model");

    // f64 tensors (what some exporters write) are converted.
    map.insert("fc3.bias".into(), map["fc3.bias"].to_dtype(DType::F64)?);
    dst.params().load(|n| map.get(n).cloned())?;
    let x = Tensor::randn(0f32, 1.0, (2, 1, 32, 32), &Device::Cpu)?;
    let d = (src.forward(&x, false)? - dst.forward(&x, false)?)?
        .abs()?
        .max_all()?
        .to_scalar::<f32>()?;
    assert_eq!(d, 0.0);
    Ok(())
}
