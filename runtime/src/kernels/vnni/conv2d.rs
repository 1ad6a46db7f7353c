//! conv2d, AVX-512 VNNI (512-bit): implicit GEMM over HWC input and OHWI weights.
//!
//! The u8 patches (x + 128) of up to [`VNNI_PIXEL_BLOCK`] output pixels are packed into
//! scratch, `align64(K)` bytes per row, zero past K. Then for each group of [`C`] output
//! channels (whose weight rows stay in L1) the micro-kernel runs over all packed pixels, [`R`] at
//! a time: `R·C` zmm accumulators, each step multiplying 64 bytes of a patch row by 64 weights
//! with `vpdpbusd`, so the weights stream from memory once per pixel block rather than once per
//! `R` pixels. Σw per channel (for the −128·Σw correction) accumulates alongside with a vector
//! of ones on the first pass and is cached. The requantization runs on 8 i64 lanes at a time,
//! in either rounding (`FusedRequant`'s form).

use core::arch::x86_64::*;

use super::packed_conv::copy_xor;
use crate::kernels::avx2::hsum8_v;
use crate::kernels::{scalar, ConvParams, PatchPiece, VNNI_PIXEL_BLOCK};
use crate::requant::{FusedRequant, OutputQuant, Rounding};

/// Pixels per micro-block.
const R: usize = 4;
/// Output channels per micro-block.
const C: usize = crate::kernels::VNNI_MIN_COUT;
/// Accumulators per micro-block (a multiple of 8).
const N: usize = R * C;
const CORR_CACHE: usize = 1024;

const fn align64(n: usize) -> usize {
    (n + 63) & !63
}

/// Requantization constants of `L` lanes (a multiple of 8), one [`FusedRequant`] each (corr
/// negated) with its bias: what the VNNI conv's micro-block (lane `pixel·C + channel`) and the
/// fully connected layer's rows requantize with, 8 lanes at a time ([`FusedLanes::apply8`]).
#[derive(Clone, Copy)]
#[repr(C, align(64))]
pub(super) struct FusedLanes<const L: usize> {
    m0: [i64; L],
    round: [i64; L],
    n: [i64; L],
    neg_corr: [i64; L],
    bias: [i32; L],
    ls: [i32; L],
}

impl<const L: usize> FusedLanes<L> {
    /// Every lane M0 = 0 (output: the zero point, clamped).
    pub(super) const fn new() -> Self {
        FusedLanes {
            m0: [0; L],
            round: [0; L],
            n: [1; L],
            neg_corr: [0; L],
            bias: [0; L],
            ls: [0; L],
        }
    }

    /// Lane `i`: requantization `q` after adding `bias`.
    #[inline]
    pub(super) fn set(&mut self, i: usize, q: &FusedRequant, bias: i32) {
        self.m0[i] = q.m0 as i64;
        self.round[i] = q.round;
        self.n[i] = q.n as i64;
        self.neg_corr[i] = -q.corr;
        self.bias[i] = bias;
        self.ls[i] = q.ls as i32;
    }

    /// Lanes `8g..8g + 8` of `acc` (bias not yet added) requantized exactly like
    /// `OutputQuant::finish`, in i64 lanes: `(P + round − [P < 0]·corr) >> n`, P =
    /// (acc·2^ls)·M0, the correction and the left shift only for the `DOUBLE` rounding
    /// ([`FusedRequant`]); then the zero point and the clamps.
    #[inline]
    #[target_feature(enable = "avx2,avx512f,avx512vl")]
    pub(super) unsafe fn apply8<const DOUBLE: bool>(
        &self,
        g: usize,
        acc: __m256i,
        out: &OutputQuant,
    ) -> __m128i {
        let b = _mm256_loadu_si256(self.bias.as_ptr().add(g * 8) as *const __m256i);
        let mut acc = _mm256_add_epi32(acc, b);
        if DOUBLE {
            let ls = _mm256_loadu_si256(self.ls.as_ptr().add(g * 8) as *const __m256i);
            acc = _mm256_sllv_epi32(acc, ls);
        }
        let ld = |a: &[i64; L]| _mm512_loadu_si512(a.as_ptr().add(g * 8) as *const _);
        let prod = _mm512_mul_epi32(_mm512_cvtepi32_epi64(acc), ld(&self.m0));
        let mut t = _mm512_add_epi64(prod, ld(&self.round));
        if DOUBLE {
            let neg = _mm512_cmplt_epi64_mask(prod, _mm512_setzero_si512());
            t = _mm512_mask_add_epi64(t, neg, t, ld(&self.neg_corr));
        }
        let z = _mm512_set1_epi64(out.zero_point as i64);
        let t = _mm512_add_epi64(_mm512_srav_epi64(t, ld(&self.n)), z);
        // The reference clamps to [act_min, act_max], then to i8: max then min gives act_max
        // where the clamp is empty, as it does.
        let t = _mm512_min_epi64(
            _mm512_max_epi64(t, _mm512_set1_epi64(out.act_min as i64)),
            _mm512_set1_epi64(out.act_max as i64),
        );
        let t = _mm512_min_epi64(
            _mm512_max_epi64(t, _mm512_set1_epi64(-128)),
            _mm512_set1_epi64(127),
        );
        _mm512_cvtepi64_epi8(t)
    }
}

/// The micro-block's constants.
type Epi = FusedLanes<N>;

/// Same bytes as [`scalar::conv2d`]; `scratch` holds `scratch_bytes(conv2d, …)` bytes (with
/// less the pixel block shrinks; below one `align64(K)` row it falls back to scalar).
///
/// # Safety
/// The CPU must support AVX2, AVX-512 F, BW, VL and VNNI.
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn conv2d(p: &ConvParams, input: &[i8], output: &mut [i8], scratch: &mut [u8]) {
    let k = p.k();
    let kp = align64(k);
    let cout = p.output.c;
    let npix = p.output.h * p.output.w;
    // Whole micro-blocks of R rows: the last block of a chunk may read rows past the packed
    // ones (stale scratch bytes), whose results are dropped.
    let chunk = (scratch.len() / kp.max(1)).min(VNNI_PIXEL_BLOCK) & !(R - 1);
    if chunk == 0 || cout < C || !p.is_uniform() {
        return crate::kernels::avx2::conv2d(p, input, output, scratch);
    }
    if k == 0
        || input.len() < p.input.len()
        || output.len() < npix * cout
        || p.weights.len() < cout * k
    {
        return scalar::conv2d(p, input, output);
    }
    let base = scratch.as_mut_ptr();
    let pads = PadRow::new(p);
    // 128·Σw per channel, computed with the first pixel chunk and reused (when it fits).
    let mut corr = [0i32; CORR_CACHE];
    let cache = cout <= CORR_CACHE;
    let wp = p.weights.as_ptr();
    let mut epi = Epi::new();
    let double = p.out.rounding == Rounding::Double;
    let mut c0 = 0;
    while c0 < npix {
        let nch = (npix - c0).min(chunk);
        for r in 0..nch {
            pack_patch(p, &pads, input, c0 + r, base.add(r * kp), kp);
        }
        let x = base as *const u8;
        // Groups of C channels; the last starts at cout − C (overlapping the one before: its
        // channels are recomputed to the same bytes).
        let mut next = 0;
        loop {
            let co = next.min(cout - C);
            let last = co + C >= cout;
            next = co + C;
            let w = wp.add(co * k);
            let mut r0 = 0;
            while r0 < nch {
                let np = (nch - r0).min(R);
                let xr = x.add(r0 * kp);
                let sums = if r0 == 0 && (c0 == 0 || !cache) {
                    let (s, sw) = micro::<true, false>(xr, kp, w, k, w);
                    if cache {
                        corr[co..co + C].copy_from_slice(&sw);
                    }
                    epi_fill(&mut epi, p, co, &sw);
                    s
                } else {
                    if r0 == 0 {
                        let sw: [i32; C] = corr[co..co + C].try_into().unwrap();
                        epi_fill(&mut epi, p, co, &sw);
                    }
                    if r0 + R >= nch && !last {
                        let pf = wp.add(next.min(cout - C) * k);
                        micro::<false, true>(xr, kp, w, k, pf).0
                    } else {
                        micro::<false, false>(xr, kp, w, k, w).0
                    }
                };
                let bytes = if double {
                    epilogue::<true>(sums, &epi, &p.out)
                } else {
                    epilogue::<false>(sums, &epi, &p.out)
                };
                for r in 0..np {
                    let at = (c0 + r0 + r) * cout + co;
                    let o: &mut [i8; C] = (&mut output[at..at + C]).try_into().unwrap();
                    *o = bytes[r * C..r * C + C].try_into().unwrap();
                }
                r0 += R;
            }
            if last {
                break;
            }
        }
        c0 += chunk;
    }
}

/// Fills the micro-block constants for channels `co..co + C`, the bias corrected by `corr`
/// (128·Σw).
#[inline]
fn epi_fill(e: &mut Epi, p: &ConvParams, co: usize, corr: &[i32; C]) {
    for (c, &cr) in corr.iter().enumerate() {
        let ch = co + c;
        let q = FusedRequant::new(p.multiplier.get(ch), p.shift.get(ch), p.out.rounding);
        let bias = p.bias.get(ch).wrapping_sub(cr);
        for r in 0..R {
            e.set(r * C + c, &q, bias);
        }
    }
}

/// Input channels whose u8 pad values fit the stack buffer; more fill byte by byte.
const PAD_BUF: usize = 2048;

/// The u8 pad values (pad + 128) of every input channel, when they fit [`PAD_BUF`].
struct PadRow {
    bytes: [u8; PAD_BUF],
    ok: bool,
}

impl PadRow {
    fn new(p: &ConvParams) -> Self {
        let mut bytes = [0u8; PAD_BUF];
        let ok = p.input.c <= PAD_BUF;
        if ok {
            for (ci, b) in bytes[..p.input.c].iter_mut().enumerate() {
                *b = (p.pad_value(ci) as u8) ^ 0x80;
            }
        }
        PadRow { bytes, ok }
    }
}

#[inline]
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl")]
unsafe fn fill_pad(p: &ConvParams, pads: &PadRow, dst: *mut u8) {
    if pads.ok {
        copy_xor(
            pads.bytes.as_ptr() as *const i8,
            dst as *mut i8,
            p.input.c,
            0,
        );
    } else {
        for ci in 0..p.input.c {
            dst.add(ci).write((p.pad_value(ci) as u8) ^ 0x80);
        }
    }
}

/// Requantizes the `N` sums (`N / 8` vectors, lane pixel·C + channel, bias not yet added)
/// exactly like `OutputQuant::finish` ([`FusedLanes::apply8`]).
#[inline]
#[target_feature(enable = "avx2,avx512f,avx512vl")]
unsafe fn epilogue<const DOUBLE: bool>(
    sums: [__m256i; N / 8],
    e: &Epi,
    out: &OutputQuant,
) -> [i8; N] {
    let mut res = [0i8; N];
    for (g, &v) in sums.iter().enumerate() {
        _mm_storel_epi64(
            res.as_mut_ptr().add(g * 8) as *mut __m128i,
            e.apply8::<DOUBLE>(g, v, out),
        );
    }
    res
}

/// Writes the u8 patch (x + 128) of output pixel `pi`, then zeros up to `kp`.
#[inline]
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl")]
unsafe fn pack_patch(
    p: &ConvParams,
    pads: &PadRow,
    input: &[i8],
    pi: usize,
    row: *mut u8,
    kp: usize,
) {
    p.patch_pieces(pi, |at, piece| match piece {
        PatchPiece::Input { start, n } => {
            let src = &input[start..start + n];
            copy_xor(src.as_ptr(), row.add(at) as *mut i8, n, -128);
        }
        PatchPiece::Pad => fill_pad(p, pads, row.add(at)),
    });
    core::ptr::write_bytes(row.add(p.k()), 0, kp - p.k());
}

/// Dot products of `R` u8 patch rows (`align64(k)` bytes, zero past `k`) with `C` weight rows
/// of `k` bytes, lane pixel·C + channel, and, when `SUM`, 128·Σw per channel.
#[inline]
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn micro<const SUM: bool, const PF: bool>(
    x: *const u8,
    xstride: usize,
    w: *const i8,
    k: usize,
    pf: *const i8,
) -> ([__m256i; N / 8], [i32; C]) {
    let mut a = [_mm512_setzero_si512(); N];
    let mut sw = [_mm512_setzero_si512(); C];
    let ones = _mm512_set1_epi8(1);
    macro_rules! step {
        ($kk:expr, $wv:expr) => {{
            let (kk, wv): (usize, [__m512i; C]) = ($kk, $wv);
            if SUM {
                for c in 0..C {
                    sw[c] = _mm512_dpbusd_epi32(sw[c], ones, wv[c]);
                }
            }
            for r in 0..R {
                let xv = _mm512_loadu_si512(x.add(r * xstride + kk) as *const _);
                for c in 0..C {
                    a[r * C + c] = _mm512_dpbusd_epi32(a[r * C + c], xv, wv[c]);
                }
            }
        }};
    }
    let kfull = k & !63;
    let mut kk = 0;
    while kk < kfull {
        if PF {
            // The next channel group's weights (C contiguous rows of k) into L2.
            for c in 0..C {
                _mm_prefetch::<_MM_HINT_T1>(pf.wrapping_add(c * k + kk));
            }
        }
        let wv: [__m512i; C] =
            core::array::from_fn(|c| _mm512_loadu_si512(w.add(c * k + kk) as *const _));
        step!(kk, wv);
        kk += 64;
    }
    if kfull < k {
        let m: __mmask64 = (1u64 << (k - kfull)) - 1;
        let wv: [__m512i; C] =
            core::array::from_fn(|c| _mm512_maskz_loadu_epi8(m, w.add(c * k + kfull)));
        step!(kfull, wv);
    }
    let y: [__m256i; N] = core::array::from_fn(|i| {
        _mm256_add_epi32(
            _mm512_castsi512_si256(a[i]),
            _mm512_extracti64x4_epi64::<1>(a[i]),
        )
    });
    let out: [__m256i; N / 8] = core::array::from_fn(|g| {
        hsum8_v([
            y[g * 8],
            y[g * 8 + 1],
            y[g * 8 + 2],
            y[g * 8 + 3],
            y[g * 8 + 4],
            y[g * 8 + 5],
            y[g * 8 + 6],
            y[g * 8 + 7],
        ])
    });
    let mut corr = [0i32; C];
    if SUM {
        for c in 0..C {
            corr[c] = _mm512_reduce_add_epi32(sw[c]).wrapping_mul(128);
        }
    }
    (out, corr)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::test_util::{conv_suite, ConvCase, ConvData};
    use crate::kernels::Kernels;

    // SAFETY: the kernel runs only where AVX-512 VNNI is available.
    conv_suite!(if Kernels::vnni_available(), |p, x, y, s| unsafe { conv2d(p, x, y, s) });

    /// Times the kernel on the ResNet-18 (CIFAR) 3×3 shapes:
    /// `cargo test --release -p octet-runtime --all-features -- --ignored --nocapture time_resnet`.
    #[test]
    #[ignore]
    fn time_resnet_shapes() {
        if !Kernels::vnni_available() {
            return;
        }
        let mut total = 0.0;
        for &(cin, cout, hw, s, kh) in &[
            (64usize, 64usize, 32usize, 1usize, 3usize),
            (64, 128, 32, 2, 3),
            (128, 128, 16, 1, 3),
            (128, 256, 16, 2, 3),
            (256, 256, 8, 1, 3),
            (256, 512, 8, 2, 3),
            (512, 512, 4, 1, 3),
            (3, 64, 32, 1, 3),
            (64, 128, 32, 2, 1),
            (128, 256, 16, 2, 1),
            (256, 512, 8, 2, 1),
        ] {
            let d = ConvData::typical(&ConvCase::square(cin, cout, hw, kh, s, kh / 2, 5)).unwrap();
            let (p, input) = (d.params(), &d.input);
            let (ho, kk) = (p.output.h, p.k());
            let mut got = vec![0i8; cout * ho * ho];
            let mut scratch = vec![0u8; crate::kernels::conv_scratch_bytes(&p.geometry())];
            let iters = 200;
            let t = std::time::Instant::now();
            for _ in 0..iters {
                unsafe { crate::kernels::avx2::conv2d(&p, input, &mut got, &mut scratch) };
            }
            let dt2 = t.elapsed().as_secs_f64() / iters as f64;
            let t = std::time::Instant::now();
            for _ in 0..iters {
                unsafe { conv2d(&p, input, &mut got, &mut scratch) };
            }
            let dt = t.elapsed().as_secs_f64() / iters as f64;
            println!("  avx2 {:.1} us", dt2 * 1e6);
            // ResNet-18 has 3 of the stride-1 convs per stage (1 for stage 1's first... approx).
            total += dt;
            let macs = (cout * ho * ho * kk) as f64;
            println!(
                "{cin}->{cout} {hw}x{hw} s{s}: {:.1} us, {:.1} GMAC/s",
                dt * 1e6,
                macs / dt / 1e9
            );
        }
        println!("sum {:.1} us", total * 1e6);
    }
}
