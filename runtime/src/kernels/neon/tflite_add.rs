//! tflite_add (TFLite's ADD), NEON (with or without dotprod, the same code): the inputs'
//! requantizations looked up in the call's tables ([`TfliteAddTables`]; NEON has no gather, so
//! the two loads per element are scalar), the output's on 4 lanes by the conv epilogues of this
//! module ([`Single4`], [`Double4`]: gemmlowp's NEON sequence for the double rounding), with
//! the op's one output pair in every lane; where packing found the op one line in both input
//! bytes ([`PairLine`]), 16 elements at a time in two multiply-adds and a shift per 4. The same
//! bytes as `scalar::tflite_add`.

use core::arch::aarch64::*;

use super::{Double4, Epilogue, Requant4, Single4};
use crate::kernels::{I32Array, PairLine, Rounding, TfliteAddParams, TfliteAddTables};

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
    if let Some(l) = &t.pair {
        return run_pair(l, t.lo + t.zero_point, t.hi + t.zero_point, a, b, output);
    }
    match p.out.rounding {
        Rounding::Single => run::<Single4>(p, t, a, b, output),
        Rounding::Double => run::<Double4>(p, t, a, b, output),
    }
}

/// Every element from the op's line in both input bytes, clamped to `[lo, hi]`: 16 at a time,
/// the last ones through 16-byte buffers.
#[inline(always)]
unsafe fn run_pair(l: &PairLine, lo: i32, hi: i32, a: &[i8], b: &[i8], output: &mut [i8]) {
    let len = output.len().min(a.len()).min(b.len());
    let (ca, cb, c0) = (vdupq_n_s32(l.a), vdupq_n_s32(l.b), vdupq_n_s32(l.c));
    // vshlq by −s: an arithmetic shift right.
    let (s, lo, hi) = (vdupq_n_s32(-(l.s as i32)), vdupq_n_s32(lo), vdupq_n_s32(hi));
    let four = |qa: int16x4_t, qb: int16x4_t| {
        let x = vmlaq_s32(vmlaq_s32(c0, vmovl_s16(qa), ca), vmovl_s16(qb), cb);
        vqmovn_s32(vminq_s32(vmaxq_s32(vshlq_s32(x, s), lo), hi))
    };
    let eight = |qa: int16x8_t, qb: int16x8_t| {
        let low = four(vget_low_s16(qa), vget_low_s16(qb));
        vqmovn_s16(vcombine_s16(
            low,
            four(vget_high_s16(qa), vget_high_s16(qb)),
        ))
    };
    let sixteen = |qa: int8x16_t, qb: int8x16_t| {
        let low = eight(vmovl_s8(vget_low_s8(qa)), vmovl_s8(vget_low_s8(qb)));
        vcombine_s8(low, eight(vmovl_high_s8(qa), vmovl_high_s8(qb)))
    };
    let full = len & !15;
    for i in (0..full).step_by(16) {
        let v = sixteen(vld1q_s8(a.as_ptr().add(i)), vld1q_s8(b.as_ptr().add(i)));
        vst1q_s8(output.as_mut_ptr().add(i), v);
    }
    if full < len {
        let n = len - full;
        let (mut qa, mut qb, mut out) = ([0i8; 16], [0i8; 16], [0i8; 16]);
        qa[..n].copy_from_slice(&a[full..len]);
        qb[..n].copy_from_slice(&b[full..len]);
        vst1q_s8(
            out.as_mut_ptr(),
            sixteen(vld1q_s8(qa.as_ptr()), vld1q_s8(qb.as_ptr())),
        );
        output[full..len].copy_from_slice(&out[..n]);
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

    /// The op as one line in both input bytes where packing finds one (most of the suite's
    /// TFLite-derived parameters), else from the tables.
    mod pair {
        use super::*;
        tflite_add_suite!(if Kernels::neon_available(), |p, t, a, b, y| unsafe {
            tflite_add(p, &t.clone().with_pair_line(p), a, b, y)
        });
    }
}
