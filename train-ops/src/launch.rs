//! Launch geometry of the training ops' kernels: how a per-channel reduction is cut into
//! blocks (NCHW: [`Split`]; channels-last: [`RowSplit`]) and the grids of the per-channel and
//! element-wise kernels. The `.cu` sources assume these block sizes.

use candle_core::cuda_backend::cudarc::driver::LaunchConfig;
use candle_core::Result;

/// Threads of the NCHW partial-reduction blocks (a multiple of 32, at most 1024).
pub(crate) const REDUCE_THREADS: u32 = 256;

/// Threads of the blocks that combine one channel's partial results.
const FINAL_THREADS: u32 = 128;

/// Threads of every block of the channels-last reductions (`kernels/channels_last.cu` sizes
/// its shared memory for 256).
pub(crate) const CL_THREADS: u32 = 256;

/// Blocks a reduction aims for: about 8 resident blocks of 256 threads on each of an
/// H100's 132 SMs, so even few channels fill the GPU.
const TARGET_BLOCKS: usize = 1024;

/// The fewest loads (float4 or float) an NCHW partial block takes: 4 per thread, so that
/// small tensors are not cut into blocks that mostly idle.
const MIN_ITEMS_PER_BLOCK: usize = 4 * REDUCE_THREADS as usize;

/// The fewest rows a channels-last partial block walks, so small tensors are not cut into
/// idle blocks.
const MIN_ROWS_PER_BLOCK: usize = 64;

/// A size as a kernel's 32-bit argument.
pub(crate) fn i32_arg(v: usize, what: &str) -> Result<i32> {
    i32::try_from(v).map_err(|_| candle_core::Error::Msg(format!("{what}: {v} too large")))
}

/// How a per-channel reduction over `items` items (float4s or floats) a channel is cut:
/// `splits` blocks a channel, each taking `chunk` consecutive items.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Split {
    pub splits: usize,
    pub chunk: usize,
}

impl Split {
    /// Enough blocks over all `c` channels to fill the GPU, none smaller than
    /// `MIN_ITEMS_PER_BLOCK` items unless a channel is; no empty blocks.
    pub(crate) fn new(c: usize, items: usize) -> Self {
        Self::cut(c, items, MIN_ITEMS_PER_BLOCK)
    }

    /// `items` cut for `across` independent reductions (channels, tiles of channels) so all
    /// of them together fill the GPU, no block under `min_items` unless the whole is.
    fn cut(across: usize, items: usize, min_items: usize) -> Self {
        let items = items.max(1);
        let splits = TARGET_BLOCKS
            .div_ceil(across.max(1))
            .min(items.div_ceil(min_items.max(1)))
            .max(1);
        let chunk = items.div_ceil(splits);
        Self {
            splits: items.div_ceil(chunk),
            chunk,
        }
    }

    /// `c * splits` blocks of `REDUCE_THREADS`.
    pub(crate) fn partial_launch(&self, c: usize) -> LaunchConfig {
        LaunchConfig {
            grid_dim: ((c * self.splits) as u32, 1, 1),
            block_dim: (REDUCE_THREADS, 1, 1),
            shared_mem_bytes: 0,
        }
    }
}

/// How a channels-last reduction is cut: `tiles` tiles of channel groups (one thread per
/// group and row), each split over `splits` blocks of `chunk` consecutive rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RowSplit {
    pub tiles: usize,
    pub splits: usize,
    pub chunk: usize,
}

impl RowSplit {
    /// `groups` channel groups (channels / vector width) over `rows` rows.
    pub(crate) fn new(groups: usize, rows: usize) -> Self {
        let groups = groups.max(1);
        let per_row = groups.min(CL_THREADS as usize);
        let tiles = groups.div_ceil(per_row);
        let rows_at_once = (CL_THREADS as usize / per_row).max(1);
        let cut = Split::cut(tiles, rows, MIN_ROWS_PER_BLOCK.max(rows_at_once));
        Self {
            tiles,
            splits: cut.splits,
            chunk: cut.chunk,
        }
    }

    pub(crate) fn launch(&self) -> LaunchConfig {
        LaunchConfig {
            grid_dim: ((self.tiles * self.splits) as u32, 1, 1),
            block_dim: (CL_THREADS, 1, 1),
            shared_mem_bytes: 0,
        }
    }
}

/// One block per channel combining that channel's partial results.
pub(crate) fn per_channel(c: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (c as u32, 1, 1),
        block_dim: (FINAL_THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// A grid-stride launch over `n` items: enough blocks to fill the GPU, not one per item.
pub(crate) fn elementwise(n: usize) -> LaunchConfig {
    const THREADS: u32 = 256;
    let blocks = n.div_ceil(THREADS as usize).clamp(1, 65_535) as u32;
    LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every block gets at least one item (row), and together they cover the channel.
    fn covers(splits: usize, chunk: usize, items: usize) -> bool {
        splits >= 1 && chunk >= 1 && (splits - 1) * chunk < items && splits * chunk >= items
    }

    /// `(reductions, items)`: channels (or channel groups) and their items (or rows).
    const CASES: [(usize, usize); 12] = [
        (64, 131_072),
        (512, 4),
        (3, 3136),
        (1, 1),
        (5, 49),
        (1, 10_000_000),
        (8, 131_072),
        (64, 8),
        (3, 1000),
        (300, 77),
        (16, 65),
        (2400, 3),
    ];

    #[test]
    fn splits_cover_every_item_once() {
        for (c, items) in CASES {
            let s = Split::new(c, items);
            assert!(covers(s.splits, s.chunk, items), "{c} {items}: {s:?}");
            let s = RowSplit::new(c, items);
            assert!(covers(s.splits, s.chunk, items), "{c} rows {items}: {s:?}");
            assert!(s.tiles * c.min(CL_THREADS as usize) >= c);
        }
        // Few channels, many items: the GPU is filled.
        assert_eq!(Split::new(64, 131_072).splits * 64, TARGET_BLOCKS);
        // 64 channels in groups of 8 over b512's 32×32 rows: the GPU is filled.
        assert_eq!(RowSplit::new(8, 512 * 1024).splits, 1024);
    }
}
