//! fully_connected on AMX tiles for a group of images, over the weights the VNNI set packs
//! ([`PackedFc`]: u8 w + 128, so one packing serves one image on VNNI and a group on tiles):
//! `tdpbsud` (signed inputs by unsigned weights) sums Σ(w + 128)·x, and −128·Σx per image
//! makes it Σw·x, exact in wrapping i32 (the packed VNNI kernel's correction). The images are
//! the product's rows ([`gemm::rows`]), so a group fills the input tiles only from 16 images:
//! the interpreter gives a model with small working areas groups of
//! [`crate::kernels::AMX_GROUP_IMAGES`] on this set.

use super::gemm;
use crate::kernels::vnni::{copy, input_sum};
use crate::kernels::{ConvImage, FcParams, Layout, PackedFc, AMX_MAX_K};

/// Images a group needs at least for the tiles (fewer run on VNNI: an input tile's rows would
/// be mostly zeros). Measured on a Xeon with AMX: a group of 8, half a tile, ran anomaly
/// detection at 0.79× the packed VNNI kernel's speed.
pub const AMX_MIN_FC_IMAGES: usize = 16;

/// Multiply-adds per image (K·N) from which a layer runs on the tiles. Measured over 32 images
/// on one core of a Xeon with AMX (`tile_costs`, two calls): 640 × 128 and 128 × 640 took
/// 0.65–0.93× the packed VNNI kernel's time, but 128 × 128 1.12–1.2× and 8 × 128 2–3×: each
/// call pays about a microsecond more on tiles, which only long products repay.
pub const AMX_MIN_FC_MACS: usize = 65_536;

/// Every image of `imgs` through `p`, where `p` holds the VNNI packing, K ≤ [`AMX_MAX_K`],
/// K·N ≥ [`AMX_MIN_FC_MACS`], the group has at least [`AMX_MIN_FC_IMAGES`] and the buffers
/// fit; `false` (nothing written) else.
///
/// # Safety
/// [`super::available`] must hold.
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn fully_connected_batch(p: &FcParams, imgs: &mut [ConvImage]) -> bool {
    imgs.len() >= AMX_MIN_FC_IMAGES
        && p.k.saturating_mul(p.n) >= AMX_MIN_FC_MACS
        && fully_connected_rows(p, imgs)
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
    let (w, n) = (&w[..l.bytes()], imgs.len());
    let row = |i: usize, dst: *mut i8| {
        let m = &mut imgs[i];
        copy(m.input.as_ptr(), dst, p.k);
        (
            m.output.as_mut_ptr(),
            input_sum(dst, p.k).wrapping_mul(-128),
        )
    };
    gemm::rows::<false>(p, w, l, n, row);
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::amx::skip;
    use crate::kernels::test_util::{fc_batch_matches_scalar, fc_suite, FcData};
    use crate::kernels::Packed;
    use crate::requant::Rounding;

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

    /// Groups of 1 to 40 images (one, two and three passes of 32, block counts odd and even,
    /// K not a multiple of 64 or of 4, a last weight tile inside and past the packing's end):
    /// each image's bytes as the reference's, in both roundings.
    #[test]
    fn groups_equal_scalar() {
        if skip() {
            return;
        }
        for (m, (k, n)) in (1..=40).step_by(3).chain([16, 32, 33, 64]).zip(
            [
                (640, 128),
                (128, 8),
                (301, 145),
                (64, 16),
                (5, 3),
                (8, 128),
                (4608, 40),
                (130, 33),
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

    /// What the tiles cost against the packed VNNI kernel (`… --ignored --nocapture
    /// tile_costs`, the figures behind [`AMX_MIN_FC_MACS`]): configuring and releasing the
    /// tiles, then anomaly detection's layer shapes over 32 images each way.
    #[test]
    #[ignore]
    fn tile_costs() {
        use crate::kernels::test_util::LayerData;
        use octet_testkit::Rng;
        use std::time::Instant;
        if skip() {
            return;
        }
        let n = 20_000u32;
        let t = Instant::now();
        for _ in 0..n {
            // SAFETY: the tiles may run (skip() is false).
            drop(unsafe { super::super::tiles::Tiles::configure() });
        }
        println!("configure + release: {:?}", t.elapsed() / n);
        for (k, nn) in [(640, 128), (128, 128), (128, 640), (8, 128)] {
            let mut rng = Rng::new(5);
            let data: Vec<FcData> = (0..32)
                .map(|_| FcData {
                    x: rng.i8s(k, -128, 127),
                    layer: LayerData::typical(&mut rng, nn, k),
                })
                .collect();
            let mut p = data[0].params();
            let buf = packed(&p);
            p.packed = Packed {
                layout: Layout::VnniFc,
                bytes: &buf,
            };
            let mut outs = vec![vec![0i8; nn]; 32];
            let reps = 2_000u32;
            for tiles in [true, false] {
                let t = Instant::now();
                for _ in 0..reps {
                    let mut imgs: Vec<ConvImage> = data
                        .iter()
                        .zip(outs.iter_mut())
                        .map(|(d, y)| ConvImage::new(&d.x, y, &mut []))
                        .collect();
                    // SAFETY: the tiles may run (skip() is false).
                    unsafe {
                        if tiles {
                            assert!(fully_connected_rows(&p, &mut imgs));
                        } else {
                            crate::kernels::vnni::fully_connected_batch(&p, &mut imgs);
                        }
                    }
                }
                let which = if tiles { "tiles" } else { "vnni" };
                println!("{k}x{nn}, 32 images, {which}: {:?}", t.elapsed() / reps);
            }
        }
    }
}
