//! The built-in networks. Adding one is adding a file here: it declares each of its networks
//! as a [`Builtin`] — name, aliases, `--help` line, the function returning its [`NetSpec`]
//! description, training defaults that differ — usually as a named [`ModelKind`] constant, and
//! lists them in `pub(crate) const BUILTINS: &[ModelKind]`. `models/build.rs` finds the file
//! and declares its module; [`ModelKind::all`] orders the networks by [`Builtin::rank`].
//! (`cargo fmt` does not reach modules only `build.rs` declares: `.ci/run` runs `rustfmt` on
//! this folder.)

use crate::spec::NetSpec;
use crate::ModelKind;

/// Everything octet knows about a built-in network.
#[derive(Debug)]
pub struct Builtin {
    /// What `--model` takes and checkpoints record: changing it orphans saved checkpoints.
    pub name: &'static str,
    /// Other spellings `--model` takes (besides any case, with `-`/`_` ignored).
    pub aliases: &'static [&'static str],
    /// One line for `--help` (a width multiplier's default is added to it).
    pub help: &'static str,
    /// The position in `--help` and in `octet bench train`'s default list: ascending by rank,
    /// equal ranks by name.
    pub rank: u32,
    pub spec: Describe,
    /// A fresh `octet train`'s epochs, where this network's differ from the usual.
    pub epochs: Option<usize>,
}

/// How a built-in network's description is made.
#[derive(Debug)]
pub enum Describe {
    Fixed(fn() -> NetSpec),
    /// Channels scaled by a width multiplier: `default`, or another as `--model name:W`.
    Width {
        default: f32,
        at: fn(f32) -> NetSpec,
    },
}

// The `mod` of every other file here, and `FILES`, the list of their `BUILTINS`.
include!(concat!(env!("OUT_DIR"), "/zoo.rs"));

/// Every built-in network, in no particular order.
pub(crate) fn builtins() -> impl Iterator<Item = ModelKind> {
    FILES.iter().flat_map(|f| f.iter().copied())
}
