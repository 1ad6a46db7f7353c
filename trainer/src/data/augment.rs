//! Training-time augmentation of the lab recipe: random crop from a zero-padded image,
//! then a random horizontal flip.

use rand::Rng;
use serde::{Deserialize, Serialize};

use super::{DataError, Result};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Augment {
    /// Zero padding on each side before cropping back to H×W; 0 disables the crop.
    pub crop_padding: usize,
    /// Flip horizontally with probability 0.5.
    pub flip: bool,
}

impl Augment {
    /// Padding 4 and flip, as for CIFAR-10.
    pub fn standard() -> Self {
        Self {
            crop_padding: 4,
            flip: true,
        }
    }

    /// Writes an augmented copy of the C×H×W image `src` into `dst` (same size). The
    /// crop offset is uniform in `0..=2·crop_padding` on each axis and shared by all
    /// channels. Pixels are copied straight from `src`: the padded image is never built.
    pub fn apply<R: Rng + ?Sized>(
        &self,
        src: &[u8],
        dst: &mut [u8],
        channels: usize,
        height: usize,
        width: usize,
        rng: &mut R,
    ) -> Result<()> {
        let plane = height.checked_mul(width);
        let len = plane.and_then(|p| p.checked_mul(channels));
        let (Some(plane), Some(len)) = (plane, len) else {
            return Err(DataError::Invalid(format!(
                "image shape {channels}×{height}×{width} overflows"
            )));
        };
        if src.len() != len || dst.len() != len {
            return Err(DataError::Invalid(format!(
                "augment: {channels}×{height}×{width} image needs {len} bytes, \
                 got source {} and destination {}",
                src.len(),
                dst.len()
            )));
        }
        if len == 0 {
            return Ok(());
        }
        let pad = self.crop_padding;
        let oy = rng.random_range(0..=pad.saturating_mul(2));
        let ox = rng.random_range(0..=pad.saturating_mul(2));
        let flip = self.flip && rng.random_bool(0.5);
        // Output (y, x) reads padded (y + oy, x + ox), i.e. source (y + oy − p, x + ox − p).
        let (y_lo, y_hi) = in_bounds(pad, oy, height);
        let (x_lo, x_hi) = in_bounds(pad, ox, width);
        for (src, dst) in src.chunks_exact(plane).zip(dst.chunks_exact_mut(plane)) {
            for (y, row) in dst.chunks_exact_mut(width).enumerate() {
                if !(y_lo..y_hi).contains(&y) || x_lo == x_hi {
                    row.fill(0);
                    continue;
                }
                // In range, y + oy ≥ p and x_lo + ox ≥ p, so these cannot underflow.
                let start = (y + oy - pad) * width + (x_lo + ox - pad);
                let (left, rest) = row.split_at_mut(x_lo);
                let (middle, right) = rest.split_at_mut(x_hi - x_lo);
                left.fill(0);
                middle.copy_from_slice(&src[start..start + middle.len()]);
                right.fill(0);
                if flip {
                    row.reverse();
                }
            }
        }
        Ok(())
    }
}

/// The output coordinates `lo..hi` (within `0..n`) whose source coordinate
/// `i + offset − pad` lies inside the image.
fn in_bounds(pad: usize, offset: usize, n: usize) -> (usize, usize) {
    let lo = pad.saturating_sub(offset).min(n);
    let hi = n.saturating_add(pad).saturating_sub(offset).min(n).max(lo);
    (lo, hi)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    /// Neither crop nor flip, and flip alone.
    const PLAIN: Augment = Augment {
        crop_padding: 0,
        flip: false,
    };
    const FLIP_ONLY: Augment = Augment {
        crop_padding: 0,
        flip: true,
    };

    fn ramp(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i % 255) as u8 + 1).collect()
    }

    fn run(aug: Augment, src: &[u8], c: usize, h: usize, w: usize, seed: u64) -> Vec<u8> {
        let mut dst = vec![0xAA; src.len()];
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        aug.apply(src, &mut dst, c, h, w, &mut rng).unwrap();
        dst
    }

    #[test]
    fn no_padding_no_flip_is_identity() {
        let src = ramp(3 * 5 * 7);
        for seed in 0..10 {
            assert_eq!(run(PLAIN, &src, 3, 5, 7, seed), src);
        }
    }

    #[test]
    fn flip_is_a_mirror_and_twice_is_identity() {
        let (c, h, w) = (2, 3, 4);
        let src = ramp(c * h * w);
        let aug = FLIP_ONLY;
        let mut flipped = 0;
        for seed in 0..40 {
            let once = run(aug, &src, c, h, w, seed);
            if once != src {
                flipped += 1;
                for (a, b) in once.chunks(w).zip(src.chunks(w)) {
                    assert!(a.iter().eq(b.iter().rev()));
                }
                // The same seed flips again, restoring the source.
                assert_eq!(run(aug, &once, c, h, w, seed), src);
            }
        }
        // Each seed flips with p = 0.5: both outcomes must occur in 40 tries.
        assert!((1..40).contains(&flipped), "{flipped}");
    }

    #[test]
    fn crop_shifts_and_fills_zeros() {
        let (c, h, w, pad) = (2, 6, 5, 2);
        let src = ramp(c * h * w);
        let aug = Augment {
            crop_padding: pad,
            ..PLAIN
        };
        let mut seen = std::collections::HashSet::new();
        for seed in 0..200 {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            // Draw the offsets the same way apply does, from an identical generator.
            let mut probe = rng.clone();
            let oy = probe.random_range(0..=2 * pad);
            let ox = probe.random_range(0..=2 * pad);
            seen.insert((oy, ox));
            let mut dst = vec![0xAA; src.len()];
            aug.apply(&src, &mut dst, c, h, w, &mut rng).unwrap();
            for ch in 0..c {
                for y in 0..h {
                    for x in 0..w {
                        let (sy, sx) = (
                            (y + oy) as isize - pad as isize,
                            (x + ox) as isize - pad as isize,
                        );
                        let expected =
                            if (0..h as isize).contains(&sy) && (0..w as isize).contains(&sx) {
                                src[ch * h * w + sy as usize * w + sx as usize]
                            } else {
                                0
                            };
                        assert_eq!(dst[ch * h * w + y * w + x], expected, "offset ({oy},{ox})");
                    }
                }
            }
        }
        assert_eq!(seen.len(), 25, "every offset in 0..=4 × 0..=4 occurs");
    }

    #[test]
    fn padding_larger_than_image_is_safe() {
        let src = ramp(3 * 2 * 3);
        let aug = Augment {
            crop_padding: 9,
            ..Augment::standard()
        };
        for seed in 0..50 {
            let out = run(aug, &src, 3, 2, 3, seed);
            assert!(out.iter().all(|v| *v == 0 || src.contains(v)));
        }
    }

    #[test]
    fn wrong_sizes_are_errors() {
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        let aug = Augment::standard();
        let mut dst = vec![0; 12];
        assert!(aug.apply(&[0; 11], &mut dst, 1, 3, 4, &mut rng).is_err());
        assert!(aug
            .apply(&[0; 12], &mut dst[..11], 1, 3, 4, &mut rng)
            .is_err());
        assert!(aug
            .apply(&[0; 12], &mut dst, usize::MAX, 3, 4, &mut rng)
            .is_err());
        assert!(aug.apply(&[], &mut [], 3, 0, 4, &mut rng).is_ok());
    }

    proptest! {
        #[test]
        fn outputs_come_from_source_or_padding(
            c in 1usize..4, h in 1usize..10, w in 1usize..10, pad in 0usize..6,
            flip: bool, seed: u64, fill: u64,
        ) {
            let mut pixel_rng = ChaCha8Rng::seed_from_u64(fill);
            let src: Vec<u8> = (0..c * h * w).map(|_| pixel_rng.random()).collect();
            let out = run(Augment { crop_padding: pad, flip }, &src, c, h, w, seed);
            prop_assert_eq!(out.len(), src.len());
            for v in &out {
                prop_assert!(*v == 0 || src.contains(v));
            }
        }

        #[test]
        fn flip_only_preserves_each_row_multiset(
            c in 1usize..4, h in 1usize..10, w in 1usize..10, seed: u64, fill: u64,
        ) {
            let mut pixel_rng = ChaCha8Rng::seed_from_u64(fill);
            let src: Vec<u8> = (0..c * h * w).map(|_| pixel_rng.random()).collect();
            let out = run(FLIP_ONLY, &src, c, h, w, seed);
            // Flipping permutes within rows, so every row (and thus the image) keeps
            // its multiset of pixels.
            for (a, b) in out.chunks(w).zip(src.chunks(w)) {
                let (mut a, mut b) = (a.to_vec(), b.to_vec());
                a.sort_unstable();
                b.sort_unstable();
                prop_assert_eq!(a, b);
            }
        }
    }
}
