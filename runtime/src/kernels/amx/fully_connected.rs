//! fully_connected on AMX tiles for a group of images, over the weights the VNNI set packs
//! ([`PackedFc`]: u8 w + 128, so one packing serves a single image on VNNI and a group on
//! tiles): `tdpbsud` (signed inputs by unsigned weights) sums Σ(w + 128)·x, and −128·Σx per
//! image, summed as each input is staged, makes it Σw·x, exact in wrapping i32 (the packed
//! VNNI kernel's correction). Up to 16 images a pass (one input tile, K padded with zeros to
//! 64), four blocks of 16 outputs per step; the last step's weight tiles, where K/4 is not a
//! multiple of 16, are copied into zeroed tiles first (the layout holds no rows past K). The
//! packed VNNI epilogue requantizes each image's row of each block.

use core::arch::x86_64::*;
use core::mem::MaybeUninit;

use super::tiles::{Tiles, ROWS, ROW_BYTES};
use crate::kernels::vnni::{copy, BlockEpi, Limits};
use crate::kernels::{
    ConvImage, FcParams, Layout, PackedFc, AMX_K_STEP, AMX_MAX_K, FC_BLOCK_ROWS, FC_EPI_BYTES,
    FC_STEP,
};
use crate::requant::Rounding;

/// Images a group needs at least for the tiles (fewer run on VNNI: a tile's 16 rows would be
/// mostly zeros).
pub const AMX_MIN_FC_IMAGES: usize = 8;

/// Blocks of 16 outputs per step (four sum tiles).
const BLOCKS: usize = 4;

/// Every image of `imgs` through `p`, where `p` holds the VNNI packing, K ≤ [`AMX_MAX_K`],
/// the group has at least [`AMX_MIN_FC_IMAGES`] and the buffers fit; `false` (nothing
/// written) else.
///
/// # Safety
/// [`super::available`] must hold.
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn fully_connected_batch(p: &FcParams, imgs: &mut [ConvImage]) -> bool {
    imgs.len() >= AMX_MIN_FC_IMAGES && fully_connected_rows(p, imgs)
}

/// [`fully_connected_batch`] for any number of images.
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn fully_connected_rows(p: &FcParams, imgs: &mut [ConvImage]) -> bool {
    let Some(w) = p.packed.of(Layout::VnniFc) else {
        return false;
    };
    let l = PackedFc { k: p.k, n: p.n };
    let fits = |m: &ConvImage| m.input.len() >= p.k && m.output.len() >= p.n;
    if w.len() < l.bytes() || p.k == 0 || p.k > AMX_MAX_K || !imgs.iter().all(fits) {
        return false;
    }
    let kp = p.k.next_multiple_of(AMX_K_STEP);
    let (k_steps, bb, tile) = (kp / AMX_K_STEP, l.block_bytes(), ROWS * ROW_BYTES);
    // Rows of weights in the last step's tiles (K/4 rows of 64 bytes in all).
    let tail = l.steps() - (k_steps - 1) * ROWS;
    let mut a = MaybeUninit::<[i8; ROWS * AMX_MAX_K]>::uninit();
    let a = a.as_mut_ptr() as *mut i8;
    // Past K every row is zero; rows past the group's are multiplied too, their sums dropped.
    core::ptr::write_bytes(a, 0, ROWS * kp);
    let mut last = [[0u8; ROWS * ROW_BYTES]; BLOCKS];
    let lim = Limits::new(&p.out);
    let double = p.out.rounding == Rounding::Double;
    let mut c = [[[0i32; ROWS]; ROWS]; 4];
    let tiles = Tiles::configure();
    for group in imgs.chunks_mut(ROWS) {
        let mut corr = [0i32; ROWS];
        for (i, m) in group.iter().enumerate() {
            copy(m.input.as_ptr(), a.add(i * kp), p.k);
            corr[i] = sum(a.add(i * kp), kp).wrapping_mul(-128);
        }
        for b0 in (0..l.blocks()).step_by(BLOCKS) {
            // Blocks past the last run as the last; their sums are dropped.
            let bs: [usize; BLOCKS] = core::array::from_fn(|j| (b0 + j).min(l.blocks() - 1));
            let wt = bs.map(|b| w.as_ptr().add(b * bb + FC_EPI_BYTES));
            tiles.zero();
            for s in 0..k_steps {
                let mut b = wt.map(|x| x.add(s * tile));
                if s + 1 == k_steps && tail < ROWS {
                    for (j, t) in last.iter_mut().enumerate() {
                        // Rows past the layer's stay zero from the start.
                        core::ptr::copy_nonoverlapping(b[j], t.as_mut_ptr(), tail * ROW_BYTES);
                        b[j] = t.as_ptr();
                    }
                }
                tiles.step_1x4_unsigned(a.add(s * AMX_K_STEP), kp, b);
            }
            tiles.store(&mut c);
            for (j, &b) in bs.iter().enumerate().take(l.blocks() - b0) {
                let epi = BlockEpi::load(w.as_ptr().add(b * bb));
                let first = b * FC_BLOCK_ROWS;
                let mask = ((1u32 << (p.n - first).min(FC_BLOCK_ROWS)) - 1) as u16;
                for (i, m) in group.iter_mut().enumerate() {
                    let sums = _mm512_loadu_si512(c[j][i].as_ptr() as _);
                    let v = epi.apply(sums, _mm512_set1_epi32(corr[i]), &lim, double);
                    _mm_mask_storeu_epi8(m.output.as_mut_ptr().add(first), mask, v);
                }
            }
        }
    }
    drop(tiles);
    true
}

/// Σ of the `n` bytes at `x` (a multiple of 64), wrapping.
#[inline]
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn sum(x: *const i8, n: usize) -> i32 {
    let ones = _mm512_set1_epi8(1);
    let mut acc = _mm512_setzero_si512();
    for at in (0..n).step_by(64) {
        acc = _mm512_dpbusd_epi32(acc, ones, _mm512_loadu_si512(x.add(at) as *const _));
    }
    _mm512_reduce_add_epi32(acc)
}

const _: () = assert!(FC_STEP * ROWS == AMX_K_STEP);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::test_util::{fc_batch_matches_scalar, fc_suite, FcData};
    use crate::kernels::{Kernels, Packed};

    fn skip() -> bool {
        static SAID: std::sync::Once = std::sync::Once::new();
        let skip = !Kernels::amx_available();
        if skip {
            SAID.call_once(|| println!("SKIP: no AMX-INT8 tiles here"));
        }
        skip
    }

    /// `p` packed as the VNNI set packs it.
    fn packed(p: &FcParams) -> Vec<u8> {
        let mut buf = vec![0u8; PackedFc { k: p.k, n: p.n }.bytes()];
        PackedFc::pack(p, &mut buf);
        buf
    }

    /// One image on the tiles (below the group threshold: the kernel itself).
    fn one(p: &FcParams, x: &[i8], y: &mut [i8]) {
        if skip() || p.k > AMX_MAX_K {
            // Past the tiles' K the VNNI kernel runs (what the dispatch does).
            return crate::kernels::scalar::fully_connected(p, x, y);
        }
        let buf = packed(p);
        let p = FcParams {
            packed: Packed {
                layout: Layout::VnniFc,
                bytes: &buf,
            },
            ..*p
        };
        // SAFETY: the tiles may run (skip() is false).
        assert!(unsafe { fully_connected_rows(&p, &mut [ConvImage::new(x, y, &mut [])]) });
    }

    fc_suite!(if !skip(), |p, x, y| one(p, x, y));

    /// Groups of 1 to 21 images (one and two passes of 16, block counts not a multiple of
    /// four, K not a multiple of 64 or of 4): each image's bytes as the reference's, in both
    /// roundings.
    #[test]
    fn groups_equal_scalar() {
        if skip() {
            return;
        }
        for (m, (k, n)) in (1..=21).zip(
            [
                (640, 128),
                (128, 8),
                (301, 145),
                (64, 16),
                (5, 3),
                (8, 128),
                (4608, 40),
            ]
            .into_iter()
            .cycle(),
        ) {
            for rounding in [Rounding::Single, Rounding::Double] {
                let data: Vec<FcData> = (0..m)
                    .map(|i| FcData::random(k, n, (m * 29 + i) as u64))
                    .collect();
                let mut p = data[0].params();
                p.out.rounding = rounding;
                let buf = packed(&p);
                p.packed = Packed {
                    layout: Layout::VnniFc,
                    bytes: &buf,
                };
                // SAFETY: the tiles may run (skip() is false).
                fc_batch_matches_scalar(&p, &data, &mut |p, imgs| unsafe {
                    assert!(fully_connected_rows(p, imgs));
                });
            }
        }
    }
}
