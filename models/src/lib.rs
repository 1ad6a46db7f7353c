//! LeNet and ResNet-18 (CIFAR variant) as candle modules.
//!
//! Every tensor is named as in the PyTorch `state_dict` of the lab code, so a checkpoint saved
//! by PyTorch loads here and one saved here loads in PyTorch. Parameters live in [`Params`],
//! which tells trained weights from buffers (batch-norm running statistics).

mod activations;
mod batch_norm;
mod conv;
mod error;
mod init;
mod kind;
mod lenet;
mod linear;
pub mod ops;
mod params;
mod resnet;
mod stats_sync;

pub use activations::Activations;
pub use batch_norm::BatchNorm2d;
pub use conv::Conv2d;
pub use error::{ModelError, Result};
pub use kind::ModelKind;
pub use lenet::LeNet;
pub use linear::Linear;
pub use params::{Param, Params, Role};
pub use resnet::ResNet18;
pub use stats_sync::StatsSync;

use candle_core::{DType, Device, Tensor};

/// A network that octet trains, evaluates and exports.
pub trait Network: Send {
    /// Logits for a batch of normalised images `(n, c, h, w)`. `train` selects batch-norm's
    /// batch statistics (and updates its running statistics) instead of the running ones.
    /// A channels-last network takes the same NCHW input and converts it once.
    fn forward(&self, x: &Tensor, train: bool) -> candle_core::Result<Tensor>;
    /// How the network holds its activations.
    fn activations(&self) -> Activations;
    /// Every named tensor of the model: weights and buffers.
    fn params(&self) -> &Params;
}

/// Builds `kind` with freshly initialised weights (PyTorch's default initialisation, drawn
/// from a seeded generator so the same seed gives the same model on any device).
pub fn build(
    kind: ModelKind,
    in_channels: usize,
    classes: usize,
    seed: u64,
    device: &Device,
) -> Result<Box<dyn Network>> {
    build_with(kind, in_channels, classes, seed, device, Activations::Nchw)
}

/// [`build`] with the activations held as `act` says (the weights are the same: f32, PyTorch
/// layouts and names, whatever `act`).
pub fn build_with(
    kind: ModelKind,
    in_channels: usize,
    classes: usize,
    seed: u64,
    device: &Device,
    act: Activations,
) -> Result<Box<dyn Network>> {
    if let Activations::ChannelsLast(dtype @ (DType::BF16 | DType::F16)) = act {
        if !device.is_cuda() {
            return Err(ModelError::DtypeNeedsCuda(dtype));
        }
    }
    let mut init = init::Init::new(seed);
    Ok(match kind {
        ModelKind::LeNet => Box::new(LeNet::new(in_channels, classes, &mut init, device, act)?),
        ModelKind::ResNet18 => {
            Box::new(ResNet18::new(in_channels, classes, &mut init, device, act)?)
        }
    })
}
