//! tflite_avg_pool (TensorFlow Lite's AVERAGE_POOL_2D): four channels per word, their sums in
//! the two 16-bit lanes of two registers (`SXTAB16`, bytes 0 and 2, then 1 and 3), exact for
//! windows of up to 256 taps (|sum| ≤ 256·128); the division rounds half away from zero as the
//! reference's does.

use super::{load, sxtab16, Epilogue};
use crate::kernels::{scalar, PoolParams};

/// Most taps a window may hold for the 16-bit lane sums to be exact.
const MAX_TAPS: usize = 256;

/// Same bytes as [`scalar::tflite_avg_pool`]. Channels go 4 at a time, the last word the last
/// 4 channels (overlapping the one before where C is not a multiple of 4). Fewer than 4
/// channels, more than [`MAX_TAPS`] taps or dilation run the scalar kernel.
pub fn tflite_avg_pool(p: &PoolParams, input: &[i8], output: &mut [i8]) {
    let (c, w) = (p.input.c, p.input.w);
    let (ho, wo) = (p.output.h, p.output.w);
    let g = &p.window;
    if c < 4
        || g.kernel_h * g.kernel_w > MAX_TAPS
        || g.dilation_h != 1
        || g.dilation_w != 1
        || input.len() < p.input.len()
        || output.len() < ho * wo * c
    {
        return scalar::tflite_avg_pool(p, input, output);
    }
    let e = Epilogue::new(&p.out);
    for (i, o) in output.chunks_exact_mut(c).take(ho * wo).enumerate() {
        let (rows, cols, count) = p.window_of(i);
        let mut at = 0;
        loop {
            let at4 = at.min(c - 4);
            let (mut s02, mut s13) = (0u32, 0u32);
            for iy in rows.clone().filter(|_| !cols.is_empty()) {
                // The window's pixels in this row, the last one's 4 values ending it.
                let len = (cols.len() - 1) * c + 4;
                let row = &input[(iy * w + cols.start) * c + at4..][..len];
                for px in row.chunks(c) {
                    // SAFETY: at4 + 4 ≤ C values of the pixel.
                    let v = unsafe { load(px.as_ptr()) };
                    s02 = sxtab16::<0>(s02, v);
                    s13 = sxtab16::<8>(s13, v);
                }
            }
            let sums = [s02, s13, s02 >> 16, s13 >> 16].map(|s| s as i16 as i32);
            for (y, s) in o[at4..at4 + 4].iter_mut().zip(sums) {
                let avg = match s > 0 {
                    true => (s + count / 2) / count,
                    false => (s - count / 2) / count,
                };
                *y = avg.max(e.lo).min(e.hi) as i8;
            }
            if at4 + 4 == c {
                break;
            }
            at += 4;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::test_util::{tflite_avg_pool_suite, PoolCase};

    tflite_avg_pool_suite!(if true, |p, x, y| tflite_avg_pool(p, x, y));

    /// The largest window of exact lane sums (16×16), all −128.
    #[test]
    fn largest_exact_window() {
        let p = PoolCase::square(4, 16, 16, 1).params();
        let input = vec![-128i8; 4 * 256];
        let mut got = [0i8; 4];
        tflite_avg_pool(&p, &input, &mut got);
        assert_eq!(got, [-128; 4]);
    }
}
