//! Networks as candle modules, each defined once as data: a [`spec::NetSpec`] description
//! (built in: [`zoo`], one file per network; or a user's TOML/JSON file) from which the
//! layers, the PyTorch names and the exporter's graph all derive.
//!
//! Every tensor is named as in the PyTorch `state_dict` of the lab code, so a checkpoint saved
//! by PyTorch loads here and one saved here loads in PyTorch. Parameters live in [`Params`],
//! which tells trained weights from buffers (batch-norm running statistics). The layers run
//! on the training ops of `octet-train-ops`, as the [`OpsConfig`] a network is built with
//! says.

mod activations;
mod batch_norm;
mod builder;
mod conv;
pub mod dropout;
mod error;
mod init;
mod kind;
mod linear;
mod model;
mod network;
mod params;
pub mod spec;
mod stats_sync;
pub mod zoo;

pub use activations::Activations;
pub use batch_norm::BatchNorm2d;
pub use conv::{Conv2d, Conv2dConfig};
pub use error::{ModelError, Result};
pub use kind::ModelKind;
pub use linear::Linear;
pub use model::{model_help, Model};
pub use network::SpecNetwork;
pub use octet_train_ops::{OpsConfig, StatsSync};
pub use params::{Param, Params, Role};

use candle_core::{DType, Device, Tensor};

use crate::spec::NetSpec;

/// The image side every data set is brought to (28×28 MNIST-style images are padded): the
/// input size the built-in networks are built for.
pub const IMAGE_SIDE: usize = 32;

/// A network that octet trains, evaluates and exports.
pub trait Network: Send {
    /// Logits for a batch of normalised images `(n, c, h, w)`. `train` selects batch-norm's
    /// batch statistics (and updates its running statistics) instead of the running ones.
    /// A channels-last network takes the same NCHW input and converts it once.
    fn forward(&self, x: &Tensor, train: bool) -> candle_core::Result<Tensor>;
    /// What every network holds besides its layers.
    fn parts(&self) -> &NetworkParts;
    /// How the network holds its activations.
    fn activations(&self) -> Activations {
        self.parts().activations
    }
    /// Every named tensor of the model: weights and buffers.
    fn params(&self) -> &Params {
        &self.parts().params
    }
    /// The ops settings the network runs with (its backward pass takes the gradient sum
    /// from them: `ops().backward(&loss)`).
    fn ops(&self) -> &OpsConfig {
        &self.parts().ops
    }
    /// Seeds the dropout masks of the next training forward pass ([`dropout::key`]): the
    /// same key, the same masks. Networks without dropout ignore it.
    fn set_dropout_key(&self, _key: u64) {}
}

/// Every network's named tensors and the settings it was built with.
pub struct NetworkParts {
    pub params: Params,
    pub activations: Activations,
    pub ops: OpsConfig,
}

/// How [`build_with`] builds a network beyond its shape. `Default`: NCHW activations, the
/// default (fast) ops.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NetworkConfig {
    /// How the network holds its activations (the weights are the same: f32, PyTorch
    /// layouts and names, whatever this is).
    pub activations: Activations,
    pub ops: OpsConfig,
}

/// Builds `model` with freshly initialised weights (PyTorch's default initialisation, drawn
/// from a seeded generator so the same seed gives the same model on any device), NCHW
/// activations and the default ops.
pub fn build(
    model: impl Into<Model>,
    in_channels: usize,
    classes: usize,
    seed: u64,
    device: &Device,
) -> Result<Box<dyn Network>> {
    build_with(
        model,
        in_channels,
        classes,
        seed,
        device,
        &NetworkConfig::default(),
    )
}

/// [`build`] as `cfg` says.
pub fn build_with(
    model: impl Into<Model>,
    in_channels: usize,
    classes: usize,
    seed: u64,
    device: &Device,
    cfg: &NetworkConfig,
) -> Result<Box<dyn Network>> {
    build_spec(
        &model.into().spec(),
        (in_channels, IMAGE_SIDE, IMAGE_SIDE),
        classes,
        seed,
        device,
        cfg,
    )
}

/// Builds the network `spec` describes for `(channels, height, width)` images, as
/// [`build_with`].
pub fn build_spec(
    spec: &NetSpec,
    image: (usize, usize, usize),
    classes: usize,
    seed: u64,
    device: &Device,
    cfg: &NetworkConfig,
) -> Result<Box<dyn Network>> {
    if let Activations::ChannelsLast(dtype @ (DType::BF16 | DType::F16)) = cfg.activations {
        if !device.is_cuda() {
            return Err(ModelError::DtypeNeedsCuda(dtype));
        }
    }
    let mut init = init::Init::new(seed);
    let b = builder::LayerBuilder::new(device, &mut init, cfg);
    Ok(Box::new(SpecNetwork::new(b, spec, image, classes)?))
}
