//! The pointwise conv (`CortexMConv::is_pointwise`: 1×1, stride 1, no padding, C_in a multiple
//! of 4): a matrix product over all the image's pixels, so no band of rows: blocks of
//! [`CORTEX_M_FLAT_BLOCK`] consecutive pixels (across rows) are gathered straight from the input,
//! each word of 4 values widened by `SXTB16` into values 0, 2 and 1, 3 — the weights widened in
//! the same order, so each `SMLAD` still pairs a weight with its value. The channel pairs'
//! loop is the conv's ([`conv2d::block`](super::conv2d)).

use super::conv2d::{block, second_channel, widen_groups, Block, Sums, RUN};
use super::{instance, widen, word, Bounds, Clamp, Double, Epilogue, Full, Single};
use crate::kernels::{ConvParams, CortexMConv, Rounding, CORTEX_M_FLAT_BLOCK};

/// Conv `p` (pointwise, laid out as `l`) into `output`; `false` (nothing written) where the
/// buffers are short or the scratch holds less than a pixel pair's patches and a weight pair.
pub(super) fn pointwise(
    p: &ConvParams,
    l: &CortexMConv,
    input: &[i8],
    output: &mut [i8],
    scratch: &mut [u8],
) -> bool {
    let (k, cout, n) = (p.input.c, p.output.c, l.pixels);
    let len = l.pair / 8;
    if input.len() < n * k || output.len() < n * cout || p.weights.len() < cout * k || len == 0 {
        return false;
    }
    // SAFETY: every bit pattern is a valid u64.
    let (_, words, _) = unsafe { scratch.align_to_mut::<u64>() };
    let room = words.len() / len;
    let all = l.all_weights() && room > l.pairs;
    let wp = if all { l.pairs } else { 1 };
    let block_px = (2 * room.saturating_sub(wp)).min(CORTEX_M_FLAT_BLOCK);
    if block_px == 0 {
        return false;
    }
    let (cols, wts) = words.split_at_mut(words.len() - wp * len);
    if all {
        for (cp, dst) in wts.chunks_exact_mut(len).enumerate() {
            widen_weights(p, 2 * cp, dst);
        }
    }
    let e = Epilogue::new(&p.out);
    let blk: Block = instance!(&p.out, block);
    let mut sums: Sums = [[0; 4]; RUN];
    for x0 in (0..n).step_by(block_px) {
        let np = (n - x0).min(block_px);
        let cols = &mut cols[..np.div_ceil(2) * len];
        gather(&input[x0 * k..][..np * k], k, cols);
        let out = &mut output[x0 * cout..][..np * cout];
        for c0 in (0..cout).step_by(2) {
            let wt: &[u64] = if all {
                &wts[c0 / 2 * len..][..len]
            } else {
                widen_weights(p, c0, wts);
                wts
            };
            blk(p, cols, wt, out, c0, &e, &mut sums);
        }
    }
    true
}

/// The pixels of `src` (`k` values each) by pairs into `cols` (`cols.len()` / pairs words a
/// pair, an odd last pixel twice): per word of 4 values, the pair's `SXTB16` halves (values 0
/// and 2), then its `SXTB16 ROR #8` halves (1 and 3), pixel 0 in the low half.
fn gather(src: &[i8], k: usize, cols: &mut [u64]) {
    let pairs = src.len().div_ceil(2 * k);
    let len = cols.len() / pairs.max(1);
    for (i, dst) in cols.chunks_exact_mut(len).enumerate() {
        let p0 = &src[2 * i * k..][..k];
        let p1 = src.get((2 * i + 1) * k..(2 * i + 2) * k).unwrap_or(p0);
        for ((d, x0), x1) in dst
            .chunks_exact_mut(2)
            .zip(p0.chunks_exact(4))
            .zip(p1.chunks_exact(4))
        {
            let ((a0, b0), (a1, b1)) = (widen(word(x0)), widen(word(x1)));
            d[0] = a0 as u64 | (a1 as u64) << 32;
            d[1] = b0 as u64 | (b1 as u64) << 32;
        }
    }
}

/// Channels `c0` and `c0 + 1` (zeros past C_out) into `pair`, in [`gather`]'s order: per word
/// of 4 weights its `SXTB16` halves, then its `SXTB16 ROR #8` halves, channel `c0` in the low
/// half of each element.
fn widen_weights(p: &ConvParams, c0: usize, pair: &mut [u64]) {
    let k = p.input.c;
    let (c1, mask) = second_channel(c0, p.output.c);
    let (w0, w1) = (&p.weights[c0 * k..][..k], &p.weights[c1 * k..][..k]);
    let pair = &mut pair[..k / 2];
    // SAFETY: `pair` holds two words per group of four of the k values (k a multiple of 4).
    unsafe { widen_groups::<false>(w0.as_ptr(), w1.as_ptr(), pair, mask) };
}
