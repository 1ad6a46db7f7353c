//! tflite_add (TFLite's ADD), NEON (with or without dotprod, the same code): the inputs'
//! requantizations looked up in the call's tables ([`TfliteAddTables`]; NEON has no gather, so
//! the two loads per element are scalar), the output's on 4 lanes by the conv epilogues of this
//! module ([`Single4`], [`Double4`]: gemmlowp's NEON sequence for the double rounding), with
//! the op's one output pair in every lane. The same bytes as `scalar::tflite_add`.

use core::arch::aarch64::*;

use super::{Double4, Epilogue, Requant4, Single4};
use crate::kernels::{I32Array, Rounding, TfliteAddParams, TfliteAddTables};

/// `out[i]` for every element of the common length, from the tables of `p`.
///
/// # Safety
/// The CPU must support NEON.
#[target_feature(enable = "neon")]
pub unsafe fn tflite_add(
    p: &TfliteAddParams,
    t: &TfliteAddTables,
    a: &[i8],
    b: &[i8],
    output: &mut [i8],
) {
    match p.out.rounding {
        Rounding::Single => run::<Single4>(p, t, a, b, output),
        Rounding::Double => run::<Double4>(p, t, a, b, output),
    }
}

/// The loop for the rounding `Q` computes: 4 elements at a time, the last ones zero-filled.
#[inline(always)]
unsafe fn run<Q: Requant4>(
    p: &TfliteAddParams,
    t: &TfliteAddTables,
    a: &[i8],
    b: &[i8],
    output: &mut [i8],
) {
    let len = output.len().min(a.len()).min(b.len());
    let (m0, shift) = p.multipliers[2];
    // The epilogue's per-channel arrays, every lane the output's pair and a bias of 0.
    let bytes = |v: i32| -> [u8; 16] { core::array::from_fn(|i| v.to_le_bytes()[i % 4]) };
    let (bias, m0, shift) = (bytes(0), bytes(m0), bytes(shift));
    let e = Epilogue::new(&p.out);
    let q = Q::new(
        &(
            I32Array::new(&bias),
            I32Array::new(&m0),
            I32Array::new(&shift),
        ),
        0,
        4,
        &e,
    );
    // The table entry of byte x: index x + 128, as its bits flipped at the top (in range).
    let entry = |table: &[i32; 256], x: i8| table[(x as u8 ^ 0x80) as usize];
    let sums = |a: &[i8], b: &[i8]| -> [i32; 4] {
        core::array::from_fn(|i| entry(&t.a, a[i]).wrapping_add(entry(&t.b, b[i])))
    };
    // SAFETY: loads of local arrays of 4 i32; NEON (the caller's contract).
    let four = |s: [i32; 4]| q.apply(unsafe { vld1q_s32(s.as_ptr()) }, &e);
    let full = len & !3;
    for ((y, a), b) in output[..full]
        .chunks_exact_mut(4)
        .zip(a.chunks_exact(4))
        .zip(b.chunks_exact(4))
    {
        y.copy_from_slice(&four(sums(a, b)));
    }
    if full < len {
        let n = len - full;
        let (mut qa, mut qb) = ([0i8; 4], [0i8; 4]);
        qa[..n].copy_from_slice(&a[full..len]);
        qb[..n].copy_from_slice(&b[full..len]);
        output[full..len].copy_from_slice(&four(sums(&qa, &qb))[..n]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::test_util::tflite_add_suite;
    use crate::kernels::Kernels;

    tflite_add_suite!(if Kernels::neon_available(), |p, t, a, b, y| unsafe {
        tflite_add(p, t, a, b, y)
    });
}
