//! What each batch-norm op is: its geometry and held operands. The CPU bodies ([`super::op`])
//! and the CUDA launcher ([`super::cuda`]) both take these, so neither imports the other's.

use candle_core::{bail, Layout, Result, Tensor};

use super::BnLayout;
use crate::Activation;

/// How the ops walk a batch-norm input: `m` values in each of `c` channels, `hw` values a
/// plane.
#[derive(Debug, Clone, Copy)]
pub(super) struct Geom {
    pub layout: BnLayout,
    pub m: usize,
    pub c: usize,
    pub hw: usize,
}

impl Geom {
    pub(super) fn of(l: &Layout, layout: BnLayout) -> Result<Self> {
        let (m, c, hw) = match (layout, l.dims()) {
            (BnLayout::Nchw, &[n, c, h, w]) => (n * h * w, c, h * w),
            (BnLayout::ChannelsLast, &[n, h, w, c]) => (n * h * w, c, h * w),
            (BnLayout::Nchw, d) => bail!("batch norm: expected a 4-d tensor, got {d:?}"),
            (BnLayout::ChannelsLast, d) => {
                bail!("batch norm: expected a 4-d channels-last tensor, got {d:?}")
            }
        };
        Ok(Self { layout, m, c, hw })
    }

    /// Index of channel `ch`'s `j`-th value (in (image, position) order).
    pub(super) fn at(&self, ch: usize, j: usize) -> usize {
        match self.layout {
            BnLayout::Nchw => (j / self.hw * self.c + ch) * self.hw + j % self.hw,
            BnLayout::ChannelsLast => j * self.c + ch,
        }
    }

    /// Channel of the value at index `i`.
    pub(super) fn channel(&self, i: usize) -> usize {
        match self.layout {
            BnLayout::Nchw => (i / self.hw) % self.c,
            BnLayout::ChannelsLast => i % self.c,
        }
    }
}

/// Per-channel `[mean; biased variance]` in f32, shape `(2, c)`; no gradient (the apply op's
/// backward accounts for the statistics' dependence on x).
pub(super) struct Stats {
    pub layout: BnLayout,
}

/// `running = keep * running + take * stats[row]`, in place.
pub(super) struct RunningUpdate {
    pub row: usize,
    pub keep: f32,
    pub take: f32,
}

/// `(x, gamma, beta) → y` using the held statistics, then the rectifier `act`.
pub(super) struct Apply {
    pub stats: Tensor,
    pub eps: f32,
    pub layout: BnLayout,
    pub act: Option<Activation>,
}

/// `(x, dy, y) → (2, c)`: `[Σ g·x̂; Σ g]` per channel (the gradients of gamma and beta),
/// g = dy masked by the rectifier's output y when `act`.
pub(super) struct BwdReduce {
    pub stats: Tensor,
    pub eps: f32,
    pub layout: BnLayout,
    pub act: Option<Activation>,
}

/// `(x, dy, sums) → dx`, `y` held for the rectifier's mask.
pub(super) struct BwdDx {
    pub stats: Tensor,
    pub gamma: Tensor,
    pub y: Tensor,
    pub eps: f32,
    pub layout: BnLayout,
    pub act: Option<Activation>,
}
