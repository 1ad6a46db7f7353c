//! Test support shared by octet's crates (a dev-dependency, never a dependency): the test data
//! stream ([`Rng`]) and, in [`models`], an `.o8` writer independent of the runtime's reader and
//! of the exporter's writer, with the models the tests run; in [`exported`], those models as the
//! exporter writes them for TFLite; in [`imported`], the models `bench/imported_models.sh` wrote.

pub mod exported;
pub mod imported;
pub mod models;
mod rng;

pub use models::*;
pub use rng::Rng;
