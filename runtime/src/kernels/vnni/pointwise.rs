//! conv2d, AVX-512 VNNI, for a 1×1 conv of stride 1 without padding whose weights were packed
//! at prepare: the fully connected kernel over packed weights applied to every pixel (K =
//! C_in, N = C_out; `ConvParams::pointwise_fc`), the pixels of an image or a group of images
//! eight at a time as that kernel takes images. Output channels lie in the lanes, so small
//! images (MobileNet's 6×6 and 3×3 layers) leave no lane empty, and the outputs are written in
//! HWC order without a transpose.

use super::fully_connected::packed_rows;
use crate::kernels::{ConvImage, ConvParams, Layout, PackedFc, GROUP_IMAGES};

/// `p` over every image of `images` (their scratch unused), where `p` is a pointwise conv
/// packed for this kernel and the buffers hold its tensors; `false` (nothing written) else.
///
/// # Safety
/// The CPU must support AVX-512 F, BW, VL and VNNI.
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn conv2d_pointwise(p: &ConvParams, images: &mut [ConvImage]) -> bool {
    let (Some(f), Some(w)) = (p.pointwise_fc(), p.packed.of(Layout::VnniFc)) else {
        return false;
    };
    let px = p.output.h * p.output.w;
    let (cin, cout) = (f.k, f.n);
    let fits = |m: &ConvImage| m.input.len() >= px * cin && m.output.len() >= px * cout;
    if w.len() < (PackedFc { k: cin, n: cout }).bytes() || !images.iter().all(fits) {
        return false;
    }
    for group in images.chunks_mut(GROUP_IMAGES) {
        let mut ptrs = [(core::ptr::null::<i8>(), core::ptr::null_mut::<i8>()); GROUP_IMAGES];
        for (q, m) in ptrs.iter_mut().zip(group.iter_mut()) {
            *q = (m.input.as_ptr(), m.output.as_mut_ptr());
        }
        // SAFETY: pixel i of the group lies within its image's checked tensors.
        packed_rows(&f, w, group.len() * px, |i| {
            let (x, y) = ptrs[i / px];
            (x.add(i % px * cin), y.add(i % px * cout))
        });
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::test_util::{ConvCase, ConvData};
    use crate::kernels::{scalar, Kernels, Packed, Rounding};

    /// Pointwise convs of the models' shapes (1 to 5 images, 9 to 2 304 pixels, C 8 to 256),
    /// packed: each image's bytes as the reference's, in both roundings; other windows decline.
    #[test]
    fn equals_scalar() {
        if !Kernels::vnni_available() {
            println!("SKIP: no AVX-512 VNNI");
            return;
        }
        let mut tested = 0;
        for &(cin, cout, hw, n) in &[
            (8, 16, 48, 1),
            (64, 64, 5, 3),
            (128, 256, 6, 2),
            (256, 256, 3, 5),
            (20, 36, 4, 4),
            (3, 5, 7, 9),
        ] {
            for r in Rounding::ALL {
                let case =
                    |i: usize| ConvCase::square(cin, cout, hw, 1, 1, 0, (cin * 31 + i) as u64);
                let data: Vec<ConvData> = (0..n)
                    .filter_map(|i| ConvData::typical(&case(i).with_rounding(r)))
                    .collect();
                let mut p = data[0].params();
                let f = p.pointwise_fc().expect("pointwise");
                tested += 1;
                let mut buf = vec![0u8; PackedFc { k: cin, n: cout }.bytes()];
                PackedFc::pack(&f, &mut buf);
                p.packed = Packed {
                    layout: Layout::VnniFc,
                    bytes: &buf,
                };
                let mut want = vec![vec![0i8; p.output.len()]; n];
                let mut got = vec![vec![0x55i8; p.output.len()]; n];
                for (d, y) in data.iter().zip(want.iter_mut()) {
                    scalar::conv2d(&p, &d.input, y);
                }
                let mut imgs: Vec<ConvImage> = data
                    .iter()
                    .zip(got.iter_mut())
                    .map(|(d, y)| ConvImage::new(&d.input, y, &mut []))
                    .collect();
                // SAFETY: AVX-512 VNNI is available.
                assert!(unsafe { conv2d_pointwise(&p, &mut imgs) });
                assert_eq!(want, got, "{cin}→{cout}, {hw}×{hw}, {n} images, {r:?}");
            }
        }
        assert!(tested >= 10, "{tested}");
        // A 3×3 window is no pointwise conv.
        let d = ConvData::typical(&ConvCase::square(8, 16, 6, 3, 1, 1, 1)).unwrap();
        let p = d.params();
        assert!(p.pointwise_fc().is_none());
    }
}
