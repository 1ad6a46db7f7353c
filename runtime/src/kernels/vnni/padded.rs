//! The input of a uniform conv padded and offset to u8 (x + 128) in scratch, as the
//! few-channel and the implicit convs read it: `vpdpbusd` multiplies u8 by int8, so with the
//! input as u8 the weights stay int8 and the −128·Σw correction is per channel.

use core::arch::x86_64::*;
use core::ops::Range;

use super::packed_conv::copy_xor;
use crate::kernels::ConvParams;

/// Bytes of one padded input row of `p`: `(w + 2·pad)·C_in`.
pub(crate) fn row_bytes(p: &ConvParams) -> usize {
    (p.input.w + 2 * p.pad()) * p.input.c
}

/// Padded input rows that `n` (≥ 1) consecutive output rows of `p` read: `(n − 1)·stride + kh`
/// (saturating: a conv too large for memory is declined, never wrapped).
pub(crate) fn band_rows(p: &ConvParams, n: usize) -> usize {
    n.saturating_sub(1)
        .saturating_mul(p.stride())
        .saturating_add(p.window.kernel_h)
}

/// Padded rows `rows` (of `h + 2·pad`) of `p`'s input as u8 (x + 128), [`row_bytes`] each, from
/// `img` on: the border filled with the pad values (offset too).
///
/// # Safety
/// The CPU must support AVX-512 F and BW; `input` holds `p`'s input, `p` is uniform, `rows`
/// lies within the padded height and `img` has room for those rows.
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl")]
pub(super) unsafe fn pad_flipped(p: &ConvParams, input: &[i8], img: *mut u8, rows: Range<usize>) {
    let (cin, h, w, pad) = (p.input.c, p.input.h, p.input.w, p.pad());
    let row = row_bytes(p);
    // One pad value for every channel (the input zero point, as a rule): the border is a
    // fill; else channel by channel.
    let one = (p.pad_value(0) as u8) ^ 0x80;
    let same = (1..cin).all(|c| (p.pad_value(c) as u8) ^ 0x80 == one);
    let fill = |dst: *mut u8, pixels: usize| {
        if same {
            // Inline: the borders are a few bytes a row, too few for a call to memset.
            let (v, n) = (_mm512_set1_epi8(one as i8), pixels * cin);
            let mut at = 0;
            while at < n {
                let k = (n - at).min(64);
                _mm512_mask_storeu_epi8(dst.add(at) as *mut i8, u64::MAX >> (64 - k), v);
                at += 64;
            }
            return;
        }
        for x in 0..pixels {
            for c in 0..cin {
                dst.add(x * cin + c).write((p.pad_value(c) as u8) ^ 0x80);
            }
        }
    };
    for (i, yp) in rows.enumerate() {
        let dst = img.add(i * row);
        if yp < pad || yp >= h + pad {
            fill(dst, w + 2 * pad);
            continue;
        }
        fill(dst, pad);
        // The row's interior: w·C_in bytes.
        let src = input.as_ptr().add((yp - pad) * w * cin);
        copy_xor(src, dst.add(pad * cin) as *mut i8, w * cin, -128);
        fill(dst.add((w + pad) * cin), pad);
    }
}
