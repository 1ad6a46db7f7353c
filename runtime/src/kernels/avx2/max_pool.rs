//! max_pool, AVX2: row by row. The maximum over the window's rows first, over whole input rows
//! at once (`w·C` contiguous bytes, 32 per instruction), then over the window's columns for
//! every start column (the row against itself shifted by C bytes), then the stride's columns
//! picked out; the reference's per-pixel channel loops are too short to vectorise (LeNet: 6
//! channels).

use core::arch::x86_64::*;

use crate::kernels::{scalar, PoolParams};

/// Longest input row (`w·C` bytes) kept on the stack; wider rows run the scalar kernel.
const ROW: usize = 8192;

/// Same bytes as [`scalar::max_pool`].
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub unsafe fn max_pool(p: &PoolParams, input: &[i8], output: &mut [i8]) {
    let (c, w) = (p.input.c, p.input.w);
    let (ho, wo) = (p.output.h, p.output.w);
    let n = w * c;
    if !p.is_unpadded_uniform()
        || n + 8 > ROW
        || input.len() < p.input.len()
        || output.len() < p.output.len()
        || (ho > 0 && (ho - 1) * p.window.stride_h + p.window.kernel_h > p.input.h)
        || (wo > 0 && (wo - 1) * p.window.stride_h + p.window.kernel_w > w)
    {
        return scalar::max_pool(p, input, output);
    }
    // Only the n + 8 bytes used are initialised (zeroing both whole rows would cost LeNet's
    // pools as much as the pooling).
    let mut vb = [core::mem::MaybeUninit::<i8>::uninit(); ROW];
    let mut mb = [core::mem::MaybeUninit::<i8>::uninit(); ROW];
    core::ptr::write_bytes(vb.as_mut_ptr(), 0, n + 8);
    core::ptr::write_bytes(mb.as_mut_ptr(), 0, n + 8);
    // SAFETY: the first n + 8 bytes of each were just initialised.
    let v = core::slice::from_raw_parts_mut(vb.as_mut_ptr() as *mut i8, n);
    let m = core::slice::from_raw_parts_mut(mb.as_mut_ptr() as *mut i8, n + 8);
    for oy in 0..ho {
        let y0 = oy * p.window.stride_h;
        v.copy_from_slice(&input[y0 * n..][..n]);
        for ky in 1..p.window.kernel_h {
            let r = &input[(y0 + ky) * n..][..n];
            let mut i = 0;
            while i + 32 <= n {
                let a = _mm256_loadu_si256(v.as_ptr().add(i) as *const __m256i);
                let b = _mm256_loadu_si256(r.as_ptr().add(i) as *const __m256i);
                _mm256_storeu_si256(v.as_mut_ptr().add(i) as *mut __m256i, _mm256_max_epi8(a, b));
                i += 32;
            }
            for (a, &b) in v[i..].iter_mut().zip(&r[i..]) {
                *a = (*a).max(b);
            }
        }
        // Over the window's columns, for every start column at once: m[i] = max over kx of
        // v[i + kx·C].
        let span = (w - p.window.kernel_w + 1) * c;
        m[..span].copy_from_slice(&v[..span]);
        for kx in 1..p.window.kernel_w {
            let off = kx * c;
            let mut i = 0;
            while i + 32 <= span {
                let a = _mm256_loadu_si256(m.as_ptr().add(i) as *const __m256i);
                let b = _mm256_loadu_si256(v.as_ptr().add(i + off) as *const __m256i);
                _mm256_storeu_si256(m.as_mut_ptr().add(i) as *mut __m256i, _mm256_max_epi8(a, b));
                i += 32;
            }
            while i < span {
                m[i] = m[i].max(v[i + off]);
                i += 1;
            }
        }
        // The clamp (monotonic: it commutes with the maximum) over the whole row, then the
        // windows' start columns (every stride-th pixel).
        let (lo, hi) = (
            _mm256_set1_epi8(p.out.clamp64(i8::MIN as i64)),
            _mm256_set1_epi8(p.out.clamp64(i8::MAX as i64)),
        );
        let mut i = 0;
        while i + 32 <= span {
            let v = _mm256_loadu_si256(m.as_ptr().add(i) as *const __m256i);
            let v = _mm256_min_epi8(_mm256_max_epi8(v, lo), hi);
            _mm256_storeu_si256(m.as_mut_ptr().add(i) as *mut __m256i, v);
            i += 32;
        }
        for b in &mut m[i..span] {
            *b = p.out.clamp64(*b as i64);
        }
        let out = &mut output[oy * wo * c..][..wo * c];
        if p.window.stride_h == 1 {
            out.copy_from_slice(&m[..wo * c]);
        } else if (4..=8).contains(&c) {
            // 8 bytes per pixel, each store's spill-over (at most 4 bytes: C ≥ 4) rewritten by
            // the next pixel's, within the row; the last pixel exactly. The loads stay within
            // m's n + 8 bytes.
            let step = p.window.stride_h * c;
            for ox in 0..wo - 1 {
                let v = (m.as_ptr().add(ox * step) as *const u64).read_unaligned();
                (out.as_mut_ptr().add(ox * c) as *mut u64).write_unaligned(v);
            }
            let last = (wo - 1) * c;
            out[last..].copy_from_slice(&m[(wo - 1) * step..][..c]);
        } else {
            for (ox, o) in out.chunks_exact_mut(c).enumerate() {
                o.copy_from_slice(&m[ox * p.window.stride_h * c..][..c]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::test_util::{max_pool_matches_scalar, pool_cases};
    use crate::kernels::Kernels;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn equals_scalar(c in pool_cases(true, -128..=127)) {
            if Kernels::avx2_available() {
                // SAFETY: AVX2 checked above.
                max_pool_matches_scalar(&c, &mut |p, x, y| unsafe { max_pool(p, x, y) });
            }
        }
    }
}
