//! A conv whose window is not uniform (TensorFlow's SAME padding with its short side, KWS's
//! 10×4 window) as the x86 and NEON convs run it: the input padded into scratch with each
//! channel's pad value, then the uniform conv with no padding over it
//! ([`crate::kernels::ValidConv`]). The padded taps read the same values as the reference's,
//! so the bytes are the same.

use crate::kernels::{valid_conv, ConvParams, Placement, Shape};

/// The uniform conv over `input` padded into the front of `scratch`, with that padded input
/// and the scratch after it; `None` where [`valid_conv`] has no form for `p`, or the buffers
/// are short (the caller runs the scalar reference).
pub fn as_valid<'a>(
    p: &ConvParams<'a>,
    input: &[i8],
    scratch: &'a mut [u8],
) -> Option<(ConvParams<'a>, &'a [i8], &'a mut [u8])> {
    let (q, front) = valid_params(p)?;
    if scratch.len() < front || input.len() < p.input.len() {
        return None;
    }
    let (image, rest) = scratch.split_at_mut(front);
    let bytes = q.input.len();
    // SAFETY: i8 and u8 have one layout; `image` is borrowed for 'a and not used as u8 again.
    let image: &'a mut [i8] =
        unsafe { core::slice::from_raw_parts_mut(image.as_mut_ptr() as *mut i8, bytes) };
    pad(p, input, q.input, image);
    Some((q, image, rest))
}

/// The uniform conv [`as_valid`] runs `p` as (over the padded input, with no padding) and the
/// scratch its padded input takes at the front (64-byte multiple); `None` where
/// [`valid_conv`] has no form for `p`.
pub fn valid_params<'a>(p: &ConvParams<'a>) -> Option<(ConvParams<'a>, usize)> {
    let v = valid_conv(&p.geometry())?;
    let g = &v.geometry;
    let padded = Shape {
        c: p.input.c,
        h: g.h_in as usize,
        w: g.w_in as usize,
    };
    let q = ConvParams {
        input: padded,
        window: Placement {
            pad_top: 0,
            pad_left: 0,
            ..p.window
        },
        ..*p
    };
    Some((q, v.image_bytes().next_multiple_of(64)))
}

/// Writes the padded input: row r, column x of `padded` are input row r − pad_top, column
/// x − pad_left, or the channels' pad values outside the input.
fn pad(p: &ConvParams, input: &[i8], padded: Shape, image: &mut [i8]) {
    let (top, left) = (p.window.pad_top, p.window.pad_left);
    pad_rows(p, input, (top, left), padded.w, 0..padded.h, image);
}

/// Rows `rows` of conv `p`'s input padded `top` rows above and `left` columns to the left, each
/// `width` pixels (HWC), into the same rows of `image`: input pixels where they fall, the
/// channels' pad values elsewhere. What every x86 and NEON conv that copies a padded input
/// writes.
pub(crate) fn pad_rows(
    p: &ConvParams,
    input: &[i8],
    (top, left): (usize, usize),
    width: usize,
    rows: core::ops::Range<usize>,
    image: &mut [i8],
) {
    let c = p.input.c;
    let row = width * c;
    let mut pads = [0i8; 64];
    let few = c <= pads.len();
    for (ci, v) in pads.iter_mut().take(c).enumerate() {
        *v = p.pad_value(ci);
    }
    let fill = |px: &mut [i8]| {
        if few {
            px.copy_from_slice(&pads[..c]);
        } else {
            for (ci, v) in px.iter_mut().enumerate() {
                *v = p.pad_value(ci);
            }
        }
    };
    for r in rows {
        let out = &mut image[r * row..][..row];
        let iy = r.wrapping_sub(top);
        if iy >= p.input.h {
            out.chunks_exact_mut(c).for_each(&fill);
            continue;
        }
        // Columns left of, within and right of the input.
        let x0 = left.min(width);
        let x1 = (left + p.input.w).min(width);
        out[..x0 * c].chunks_exact_mut(c).for_each(&fill);
        let src = &input[(iy * p.input.w) * c..][..(x1 - x0) * c];
        out[x0 * c..x1 * c].copy_from_slice(src);
        out[x1 * c..].chunks_exact_mut(c).for_each(&fill);
    }
}

#[cfg(all(test, feature = "std"))]
mod tests {
    use super::*;
    use crate::kernels::test_util::{conv_matches_scalar_in, conv_suite, ConvCase};
    use crate::kernels::{dispatch, Kernels};

    /// Every SIMD set of this CPU through the dispatch, with the scratch the set states: a conv
    /// with a window that is not uniform but has one stride runs padded (`as_valid` takes
    /// it), with the reference's bytes.
    fn check(c: &ConvCase) {
        for k in Kernels::available().filter(|k| !matches!(k, Kernels::Scalar | Kernels::Auto)) {
            let r = k.resolve().unwrap();
            conv_matches_scalar_in(c, &|g| k.scratch_bytes(g), &mut |p, x, y, s| {
                let g = p.geometry();
                if valid_conv(&g).is_some() {
                    assert!(!p.is_uniform(), "{c:?}");
                    let mut copy = s.to_vec();
                    assert!(as_valid(p, x, &mut copy).is_some(), "{c:?}");
                }
                dispatch::conv2d(r, p, x, y, s)
            });
        }
    }

    conv_suite!(check);

    /// TensorFlow's SAME padding at stride 2 on an even input (no row above, one below) and
    /// KWS's 10×4 window: both run padded.
    #[test]
    fn same_windows_are_covered() {
        if Kernels::available().all(|k| matches!(k, Kernels::Scalar | Kernels::Auto)) {
            println!("SKIP: no SIMD kernel set on this CPU");
            return;
        }
        for c in [
            ConvCase::square(16, 32, 32, 3, 2, 0, 1).with_same(),
            ConvCase {
                h: 49,
                w: 10,
                kh: 10,
                kw: 4,
                ..ConvCase::square(1, 64, 0, 1, 2, 0, 2).with_same()
            },
        ] {
            check(&c);
            let d = crate::kernels::test_util::ConvData::random(&c).unwrap();
            assert!(valid_conv(&d.params().geometry()).is_some(), "{c:?}");
        }
    }
}
