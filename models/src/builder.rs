//! What every layer's constructor needs, in one value: where its tensors register (and so
//! on which device), the seeded initialiser, and the ops settings the layer keeps.

use crate::init::Init;
use crate::{OpsConfig, Params};

pub(crate) struct LayerBuilder<'a> {
    pub params: &'a mut Params,
    pub init: &'a mut Init,
    pub ops: OpsConfig,
}
