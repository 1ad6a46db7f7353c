//! The input of a uniform conv padded and offset to u8 (x + 128) in scratch, as the
//! few-channel and the implicit convs read it: `vpdpbusd` multiplies u8 by int8, so with the
//! input as u8 the weights stay int8 and the −128·Σw correction is per channel.

use core::arch::x86_64::*;
use core::ops::Range;

use super::lanes::vbmi;
use crate::kernels::ConvParams;

/// Padded rows `rows` (of `h + 2·pad`) of `p`'s input as u8 (x + 128), `(w + 2·pad)·cp` bytes
/// each, from `img` on: each pixel's C_in channels then `cp − C_in` filler bytes (a quad for
/// fewer than 4 channels: whatever they hold meets zero weights), the border filled with the
/// pad values (offset too).
///
/// # Safety
/// The CPU must support AVX-512 F and BW; `input` holds `p`'s input, `p` is uniform, `rows`
/// lies within the padded height, `cp` ≥ C_in ≥ 1 and `img` has room for those rows.
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl")]
pub(super) unsafe fn pad_flipped(
    p: &ConvParams,
    input: &[i8],
    img: *mut u8,
    rows: Range<usize>,
    cp: usize,
) {
    let (cin, h, w, pad) = (p.input.c, p.input.h, p.input.w, p.pad());
    let row = (w + 2 * pad) * cp;
    // One pad value for every channel (the input zero point, as a rule): the border is a
    // fill; else channel by channel (the filler as the last channel).
    let pv = |c: usize| (p.pad_value(c.min(cin - 1)) as u8) ^ 0x80;
    let same = (1..cin).all(|c| pv(c) == pv(0));
    let fill = |dst: *mut u8, pixels: usize| {
        if same {
            return core::ptr::write_bytes(dst, pv(0), pixels * cp);
        }
        for x in 0..pixels {
            for c in 0..cp {
                dst.add(x * cp + c).write(pv(c));
            }
        }
    };
    let widen = cp != cin && cp == 4 && vbmi();
    for (i, yp) in rows.enumerate() {
        let dst = img.add(i * row);
        if yp < pad || yp >= h + pad {
            fill(dst, w + 2 * pad);
            continue;
        }
        fill(dst, pad);
        let src = input.as_ptr().add((yp - pad) * w * cin);
        let inner = dst.add(pad * cp);
        if cp == cin {
            flip_copy(src, inner, w * cin);
        } else if widen {
            widen_quads(src, inner, w, cin);
        } else {
            widen_scalar(src, inner, w, cin, cp);
        }
        fill(dst.add((w + pad) * cp), pad);
    }
}

/// `w` pixels of `cin` channels from `src` to `dst` as `cp` bytes each (offset by 128, the
/// filler 128): [`widen_quads`] without VBMI.
unsafe fn widen_scalar(src: *const i8, dst: *mut u8, w: usize, cin: usize, cp: usize) {
    for x in 0..w {
        for c in 0..cp {
            let v = if c < cin {
                *src.add(x * cin + c) as u8
            } else {
                0
            };
            dst.add(x * cp + c).write(v ^ 0x80);
        }
    }
}

/// `n` bytes from `src` to `dst`, each offset by 128, 64 at a time.
#[inline]
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl")]
unsafe fn flip_copy(src: *const i8, dst: *mut u8, n: usize) {
    let flip = _mm512_set1_epi8(-128);
    let mut at = 0;
    while at < n {
        let m: __mmask64 = if n - at >= 64 {
            !0
        } else {
            (1u64 << (n - at)) - 1
        };
        let v = _mm512_maskz_loadu_epi8(m, src.add(at));
        _mm512_mask_storeu_epi8(dst.add(at) as *mut i8, m, _mm512_xor_si512(v, flip));
        at += 64;
    }
}

/// `w` pixels of `cin` < 4 channels from `src` to `dst` as quads (offset by 128, the filler
/// 128), 16 pixels per `vpermb`.
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl,avx512vbmi")]
unsafe fn widen_quads(src: *const i8, dst: *mut u8, w: usize, cin: usize) {
    let idx: [u8; 64] = core::array::from_fn(|i| ((i / 4) * cin + (i % 4).min(cin - 1)) as u8);
    let idx = _mm512_loadu_si512(idx.as_ptr() as *const _);
    // Byte 4·x + c holds channel c of pixel x where c < cin.
    let keep = (0..64).fold(0u64, |m, i| m | (((i % 4 < cin) as u64) << i));
    let flip = _mm512_set1_epi8(-128);
    let mut x = 0;
    while x < w {
        let n = (w - x).min(16);
        let m_in: __mmask64 = (1u64 << (n * cin)) - 1;
        let m_out: __mmask64 = if n == 16 { !0 } else { (1u64 << (4 * n)) - 1 };
        let v = _mm512_maskz_loadu_epi8(m_in, src.add(x * cin));
        let q = _mm512_maskz_permutexvar_epi8(keep, idx, v);
        _mm512_mask_storeu_epi8(dst.add(4 * x) as *mut i8, m_out, _mm512_xor_si512(q, flip));
        x += n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::Kernels;

    /// The `vpermb` widening writes the plain loop's bytes, and nothing past its pixels.
    #[test]
    fn widen_quads_equals_scalar() {
        if !(Kernels::vnni_available() && vbmi()) {
            println!("SKIP: no AVX-512 VBMI on this CPU, the widening is not run");
            return;
        }
        let src: Vec<i8> = (0..200).map(|i| (i * 37 % 256) as u8 as i8).collect();
        for cin in 1..4 {
            for w in 0..40 {
                let (mut want, mut got) = (vec![7u8; 4 * w + 64], vec![7u8; 4 * w + 64]);
                // SAFETY: VBMI checked; src holds w·cin bytes, dst 4·w.
                unsafe {
                    widen_scalar(src.as_ptr(), want.as_mut_ptr(), w, cin, 4);
                    widen_quads(src.as_ptr(), got.as_mut_ptr(), w, cin);
                }
                assert_eq!(want, got, "cin {cin}, {w} pixels");
            }
        }
    }
}
