//! pad, scalar reference.

use crate::kernels::PadParams;

/// The input placed at (`pad_top`, `pad_left`) of the output (same channels), every other byte
/// `p.value`.
pub fn pad(p: &PadParams, input: &[i8], output: &mut [i8]) {
    let (c, h, w) = (p.input.c, p.input.h, p.input.w);
    let wo = p.output.w;
    output[..p.output.len()].fill(p.value);
    for y in 0..h {
        let src = &input[y * w * c..][..w * c];
        let at = ((y + p.pad_top) * wo + p.pad_left) * c;
        output[at..at + w * c].copy_from_slice(src);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::Shape;

    #[test]
    fn frames_the_input() {
        let p = PadParams {
            input: Shape { c: 1, h: 1, w: 2 },
            output: Shape { c: 1, h: 2, w: 4 },
            pad_top: 1,
            pad_left: 1,
            value: -7,
        };
        let mut out = [0i8; 8];
        pad(&p, &[1, 2], &mut out);
        assert_eq!(out, [-7, -7, -7, -7, -7, 1, 2, -7]);
    }
}
