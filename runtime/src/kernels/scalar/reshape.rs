//! reshape, scalar reference: the same bytes under another shape (HWC order is TFLite's
//! row-major NHWC order, so a reshape never moves a byte).

/// Copies `input` into `output` (validation makes their lengths equal).
pub fn reshape(input: &[i8], output: &mut [i8]) {
    let n = input.len().min(output.len());
    output[..n].copy_from_slice(&input[..n]);
}
