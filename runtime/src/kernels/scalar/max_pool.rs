//! max_pool, scalar reference.

use crate::kernels::PoolParams;

/// Maximum over each kh×kw window (no padding), then the clamp.
pub fn max_pool(p: &PoolParams, input: &[i8], output: &mut [i8]) {
    let (c, w) = (p.input.c, p.input.w);
    let (ho, wo) = (p.output.h, p.output.w);
    for oy in 0..ho {
        for ox in 0..wo {
            let out = &mut output[(oy * wo + ox) * c..][..c];
            out.fill(i8::MIN);
            for ky in 0..p.kernel_h {
                for kx in 0..p.kernel_w {
                    let iy = oy * p.stride + ky;
                    let ix = ox * p.stride + kx;
                    let xi = &input[(iy * w + ix) * c..][..c];
                    for (o, &x) in out.iter_mut().zip(xi) {
                        *o = (*o).max(x);
                    }
                }
            }
            for o in out.iter_mut() {
                *o = p.out.clamp64(*o as i64);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::test_util::PoolCase;

    #[test]
    fn two_by_two() {
        // 2 channels, 2×2 → 1×1.
        let input = [1i8, -5, 7, -6, -3, -7, 2, -8];
        let mut out = [0i8; 2];
        max_pool(&PoolCase::square(2, 2, 2, 2).params(), &input, &mut out);
        assert_eq!(out, [7, -5]);
    }
}
