//! What every layer's constructor needs, in one value: where its tensors register (and so
//! on which device), the seeded initialiser, and the ops settings the layer keeps. A
//! network's constructor makes one, builds its layers through it, and `finish`es it into
//! the network's [`NetworkParts`].

use candle_core::Device;

use crate::init::Init;
use crate::{Activations, NetworkConfig, NetworkParts, OpsConfig, Params};

pub(crate) struct LayerBuilder<'a> {
    pub params: Params,
    pub init: &'a mut Init,
    pub ops: OpsConfig,
    activations: Activations,
}

impl<'a> LayerBuilder<'a> {
    pub(crate) fn new(dev: &Device, init: &'a mut Init, cfg: &NetworkConfig) -> Self {
        Self {
            params: Params::new(dev),
            init,
            ops: cfg.ops,
            activations: cfg.activations,
        }
    }

    /// How the network being built holds its activations.
    pub(crate) fn params_activations(&self) -> Activations {
        self.activations
    }

    /// The built network's named tensors and settings.
    pub(crate) fn finish(self) -> NetworkParts {
        NetworkParts {
            params: self.params,
            activations: self.activations,
            ops: self.ops,
        }
    }
}
