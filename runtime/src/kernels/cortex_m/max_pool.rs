//! max_pool: four channels per word, their maxima and clamp lane-wise (`SSUB8` + `SEL`).

use super::{load, max8, min8, Epilogue};
use crate::kernels::{scalar, PoolParams};

/// Same bytes as [`scalar::max_pool`]. Channels go 4 at a time; when C is not a multiple of 4
/// the last word is the last 4 channels, overlapping the one before (the same bytes written
/// twice). Fewer than 4 channels, or windows past the input, run the scalar kernel.
pub fn max_pool(p: &PoolParams, input: &[i8], output: &mut [i8]) {
    let (c, h, w) = (p.input.c, p.input.h, p.input.w);
    let (ho, wo, s) = (p.output.h, p.output.w, p.window.stride_h);
    let (kh, kw) = (p.window.kernel_h, p.window.kernel_w);
    let inside = |n: usize, k: usize, len: usize| n == 0 || (n - 1) * s + k <= len;
    if c < 4
        || !p.is_unpadded_uniform()
        || input.len() < p.input.len()
        || output.len() < ho * wo * c
        || !inside(ho, kh, h)
        || !inside(wo, kw, w)
    {
        return scalar::max_pool(p, input, output);
    }
    let e = Epilogue::new(&p.out);
    let splat = |v: i32| u32::from_le_bytes([v as u8; 4]);
    let (lo, hi) = (splat(e.lo), splat(e.hi));
    let mut out = output.chunks_exact_mut(c);
    for oy in 0..ho {
        for ox in 0..wo {
            let Some(o) = out.next() else { return };
            let corner = input[(oy * s * w + ox * s) * c..].as_ptr();
            let mut c0 = 0;
            loop {
                let at = c0.min(c - 4);
                // i8::MIN in every lane: the scalar kernel's start.
                let mut m = 0x8080_8080;
                for ky in 0..kh {
                    for kx in 0..kw {
                        // SAFETY: the window lies inside the input (checked above) and
                        // at + 4 ≤ C.
                        m = max8(m, unsafe { load(corner.add((ky * w + kx) * c + at)) });
                    }
                }
                o[at..at + 4]
                    .copy_from_slice(&min8(max8(m, lo), hi).to_le_bytes().map(|b| b as i8));
                if at + 4 == c {
                    break;
                }
                c0 += 4;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::test_util::{max_pool_matches_scalar, pool_cases};
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn equals_scalar(c in pool_cases(false, -200..=200)) {
            max_pool_matches_scalar(&c, &mut |p, x, y| max_pool(p, x, y));
        }
    }
}
