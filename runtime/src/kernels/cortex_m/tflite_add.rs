//! tflite_add (TensorFlow Lite's int8 ADD): the two input requantizations depend on the input
//! byte only, so a call tabulates them (`TfliteAddTables::input_table`, 256 values each) in the
//! scratch stated at prepare ([`CORTEX_M_ADD_SCRATCH`]); each element is then two table loads,
//! a sum and the output's requantization, two elements per two-lane epilogue ([`Requant2`]).

use super::{instance, Bounds, Clamp, Double, Epilogue, Full, Requant, Requant2, Round, Single};
use crate::kernels::{scalar, Rounding, TfliteAddParams, TfliteAddTables, CORTEX_M_ADD_SCRATCH};

/// Same bytes as [`scalar::tflite_add`]. With less scratch than [`CORTEX_M_ADD_SCRATCH`], or
/// parameters the format rejects, the scalar reference runs.
pub fn tflite_add(p: &TfliteAddParams, a: &[i8], b: &[i8], output: &mut [i8], scratch: &mut [u8]) {
    if !TfliteAddTables::covers(p) || scratch.len() < CORTEX_M_ADD_SCRATCH {
        return scalar::tflite_add(p, a, b, output);
    }
    // SAFETY: every bit pattern is a valid i32; the stated bytes count the 3 aligning skips.
    let (_, words, _) = unsafe { scratch.align_to_mut::<i32>() };
    let (ta, tb) = words[..512].split_at_mut(256);
    let (ta, tb): (&mut [i32; 256], &mut [i32; 256]) =
        (ta.try_into().unwrap(), tb.try_into().unwrap());
    TfliteAddTables::input_table(p, 0, ta);
    TfliteAddTables::input_table(p, 1, tb);
    let run: Run = instance!(&p.out, run);
    run(p, ta, tb, a, b, output)
}

/// [`run`] in one rounding and clamp.
type Run = fn(&TfliteAddParams, &[i32; 256], &[i32; 256], &[i8], &[i8], &mut [i8]);

/// The elements in rounding `R`, clamp `C` from the tables.
#[inline(never)]
fn run<R: Round, C: Clamp>(
    p: &TfliteAddParams,
    ta: &[i32; 256],
    tb: &[i32; 256],
    a: &[i8],
    b: &[i8],
    out: &mut [i8],
) {
    let e = Epilogue::new(&p.out);
    let (m, s) = p.multipliers[2];
    let q = Requant::<R>::new(m, s);
    let n = out.len().min(a.len()).min(b.len());
    let (a, b, out) = (&a[..n], &b[..n], &mut out[..n]);
    // The index of q is q + 128: its byte with the sign bit flipped.
    let sum =
        |x: i8, y: i8| ta[(x as u8 ^ 0x80) as usize].wrapping_add(tb[(y as u8 ^ 0x80) as usize]);
    let mut done = 0;
    if let Some(q2) = Requant2::<R, C>::new([q, q], &e) {
        let pairs = a.chunks_exact(2).zip(b.chunks_exact(2));
        for ((x, y), o) in pairs.zip(out.chunks_exact_mut(2)) {
            let [o0, o1] = q2.apply(sum(x[0], y[0]), sum(x[1], y[1]));
            o[0] = o0;
            o[1] = o1;
        }
        done = n & !1;
    }
    for ((&x, &y), o) in a[done..].iter().zip(&b[done..]).zip(&mut out[done..]) {
        *o = q.apply(sum(x, y), &e);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::test_util::{tflite_add_params, tflite_add_suite, Rng};

    tflite_add_suite!(if true, |p, _, a, b, y| {
        let mut scratch = vec![0xA5u8; CORTEX_M_ADD_SCRATCH];
        tflite_add(p, a, b, y, &mut scratch)
    });

    /// Parameters the format rejects, and too little scratch: the scalar reference's bytes.
    #[test]
    fn declines_to_the_reference() {
        let mut rng = Rng(7);
        let (a, b) = (rng.i8s(300, -128, 127), rng.i8s(300, -128, 127));
        for (i, len) in [CORTEX_M_ADD_SCRATCH - 1, CORTEX_M_ADD_SCRATCH]
            .into_iter()
            .enumerate()
        {
            let mut p = tflite_add_params(&mut rng);
            if i == 1 {
                p.left_shift = 24;
            }
            let mut want = vec![0i8; 300];
            scalar::tflite_add(&p, &a, &b, &mut want);
            let mut got = vec![0i8; 300];
            tflite_add(&p, &a, &b, &mut got, &mut vec![0; len]);
            assert_eq!(want, got, "{p:?}");
        }
    }
}
