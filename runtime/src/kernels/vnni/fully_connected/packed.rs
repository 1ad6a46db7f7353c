//! The VNNI fully connected layer over weights packed at prepare ([`PackedFc`]): rows in the
//! lanes, 16 per vector, the input broadcast four bytes at a time, so every `vpdpbusd` adds 64
//! useful products and no lane sums remain to add up. Eight images × three blocks of sums per
//! pass (each weight vector loaded once for the eight: the layers outgrow L1, and L2's
//! bandwidth bounds the pass), four × four, or one image × eight blocks (enough independent
//! sums to keep `vpdpbusd` busy at batch 1).
//!
//! The sums are Σ(w + 128)·x: −128·Σx per image (one `vpdpbusd` against ones per 64 inputs)
//! makes them Σw·x, exact in wrapping i32. The requantization runs in 16 i32 lanes, in the
//! depthwise conv's short form where every row of a block has n ≥ 33 (the high half of x·M0,
//! ± 2^30 by its sign for the double rounding, plus the rounding term's high half, shifted by
//! n − 32), else in `HighRequant`'s form for any shift ([`FcEpi`]).

use core::arch::x86_64::*;

use crate::kernels::vnni::short_requant::{short_requant, short_unsigned};
use crate::kernels::{ConvImage, FcEpi, FcParams, PackedFc, FC_BLOCK_ROWS, FC_EPI_BYTES, FC_STEP};
use crate::requant::{OutputQuant, Rounding};

/// Images per pass at most (then 4, then one by one).
const J: usize = 8;
const PF: usize = 256;

/// Every image of `imgs` through layer `p` from its packed weights `w` (at least
/// `PackedFc::bytes`, `p` covered; inputs and outputs checked by the caller).
///
/// # Safety
/// The CPU must support AVX-512 F, BW, VL and VNNI.
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn run(p: &FcParams, w: &[u8], imgs: &mut [ConvImage]) {
    for group in imgs.chunks_mut(J) {
        let mut ptrs = [(core::ptr::null::<i8>(), core::ptr::null_mut::<i8>()); J];
        for (q, img) in ptrs.iter_mut().zip(group.iter_mut()) {
            *q = (img.input.as_ptr(), img.output.as_mut_ptr());
        }
        rows(p, w, group.len(), |i| ptrs[i]);
    }
}

/// Layer `p` from its packed weights `w` over `n` inputs, input `i` read at `at(i).0` (K
/// bytes) and its N outputs written at `at(i).1`: images, or the pixels of a pointwise conv.
///
/// # Safety
/// The CPU must support AVX-512 F, BW, VL and VNNI; `w` holds `PackedFc::bytes` of a covered
/// `p`; each `at(i)` points at K readable and N writable bytes, the outputs apart from every
/// input.
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(in crate::kernels::vnni) unsafe fn rows(
    p: &FcParams,
    w: &[u8],
    n: usize,
    at: impl Fn(usize) -> (*const i8, *mut i8),
) {
    let l = PackedFc { k: p.k, n: p.n };
    let lim = Limits::new(&p.out);
    let double = p.out.rounding == Rounding::Double;
    let mut i0 = 0;
    while i0 < n {
        let m = match n - i0 {
            r if r >= J => J,
            r if r >= 4 => 4,
            _ => 1,
        };
        let mut x = [core::ptr::null::<i8>(); J];
        let mut y = [core::ptr::null_mut::<i8>(); J];
        let mut corr = [_mm512_setzero_si512(); J];
        for i in 0..m {
            (x[i], y[i]) = at(i0 + i);
            corr[i] = _mm512_set1_epi32(sum(x[i], l.k).wrapping_mul(-128));
        }
        let mut b0 = 0;
        while b0 < l.blocks() {
            // 24 sums, 16 or 8 at most (the weights are read once per pass: more images per
            // pass, fewer bytes from L2 per multiply-add).
            let nb = (l.blocks() - b0).min(match m {
                J => 3,
                4 => 4,
                _ => 8,
            });
            let at = Pass {
                l,
                w: w.as_ptr().add(b0 * l.block_bytes()),
                x,
                y,
                corr,
                row0: b0 * FC_BLOCK_ROWS,
                lim: &lim,
                double,
            };
            match (m, nb) {
                (J, 1) => at.run::<J, 1>(),
                (J, 2) => at.run::<J, 2>(),
                (J, _) => at.run::<J, 3>(),
                (4, 1) => at.run::<4, 1>(),
                (4, 2) => at.run::<4, 2>(),
                (4, 3) => at.run::<4, 3>(),
                (4, _) => at.run::<4, 4>(),
                (_, 1) => at.run::<1, 1>(),
                (_, 2) => at.run::<1, 2>(),
                (_, 3) => at.run::<1, 3>(),
                (_, 4) => at.run::<1, 4>(),
                (_, 5) => at.run::<1, 5>(),
                (_, 6) => at.run::<1, 6>(),
                (_, 7) => at.run::<1, 7>(),
                (_, _) => at.run::<1, 8>(),
            }
            b0 += nb;
        }
        i0 += m;
    }
}

/// Σx of the `k` bytes at `x` (wrapping): −128 times it corrects sums over weights stored as
/// u8 w + 128 (this layout's, here and on the AMX tiles).
///
/// # Safety
/// The CPU must support AVX-512 F, BW and VNNI; `x` holds `k` readable bytes.
#[inline]
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn sum(x: *const i8, k: usize) -> i32 {
    let ones = _mm512_set1_epi8(1);
    let mut acc = _mm512_setzero_si512();
    let mut at = 0;
    while at < k {
        let mask: __mmask64 = if k - at >= 64 {
            !0
        } else {
            (1u64 << (k - at)) - 1
        };
        acc = _mm512_dpbusd_epi32(acc, ones, _mm512_maskz_loadu_epi8(mask, x.add(at)));
        at += 64;
    }
    _mm512_reduce_add_epi32(acc)
}

/// One pass: a run of blocks from `w` for up to [`J`] images.
struct Pass<'l> {
    l: PackedFc,
    /// The first block.
    w: *const u8,
    x: [*const i8; J],
    /// Where each image's outputs go.
    y: [*mut i8; J],
    /// −128·Σx per image, in every lane.
    corr: [__m512i; J],
    /// The first block's first row.
    row0: usize,
    lim: &'l Limits,
    double: bool,
}

impl Pass<'_> {
    /// `NB` blocks for the first `M` images.
    #[inline]
    #[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn run<const M: usize, const NB: usize>(&self) {
        let (l, bb) = (self.l, self.l.block_bytes());
        let acc = self.sums::<M, NB>();
        for b in 0..NB {
            let e = self.w.add(b * bb);
            let r0 = self.row0 + b * FC_BLOCK_ROWS;
            let rows = (l.n - r0).min(FC_BLOCK_ROWS);
            let mask = ((1u32 << rows) - 1) as u16;
            let epi = BlockEpi::load(e);
            for (&y, a) in self.y.iter().zip(&acc) {
                let v = epi.apply_biased(a[b], self.lim, self.double);
                _mm_mask_storeu_epi8(y.add(r0), mask, v);
            }
        }
    }

    /// The `NB` blocks' sums of the first `M` images. Not inlined: with the sums indexed by
    /// the epilogue's loops in the same function, the compiler stores every accumulator to the
    /// stack on every step (half the speed).
    #[inline(never)]
    #[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn sums<const M: usize, const NB: usize>(&self) -> [[__m512i; NB]; M] {
        let (l, bb) = (self.l, self.l.block_bytes());
        // The sums start at the bias and the correction: the epilogue adds neither.
        let mut acc = [[_mm512_setzero_si512(); NB]; M];
        for (a, &corr) in acc.iter_mut().zip(&self.corr) {
            for (b, a) in a.iter_mut().enumerate() {
                *a = _mm512_add_epi32(table(self.w.add(b * bb), FcEpi::BIAS), corr);
            }
        }
        let full = l.k / FC_STEP;
        let mut wp = self.w.add(FC_EPI_BYTES);
        for s in 0..full {
            let mut wv = [_mm512_setzero_si512(); NB];
            for (b, v) in wv.iter_mut().enumerate() {
                *v = _mm512_loadu_si512(wp.add(b * bb) as *const _);
                if M == 1 {
                    _mm_prefetch::<_MM_HINT_T0>(wp.add(b * bb + PF) as *const i8);
                }
            }
            for (i, a) in acc.iter_mut().enumerate() {
                let q = (self.x[i].add(FC_STEP * s) as *const i32).read_unaligned();
                let xb = _mm512_set1_epi32(q);
                for (b, a) in a.iter_mut().enumerate() {
                    *a = _mm512_dpbusd_epi32(*a, wv[b], xb);
                }
            }
            wp = wp.add(FC_STEP * FC_BLOCK_ROWS);
        }
        let rem = l.k - full * FC_STEP;
        if rem != 0 {
            // The last step's bytes past K are zero weights: any input there adds nothing, but
            // only K bytes of it may be read.
            for (i, a) in acc.iter_mut().enumerate() {
                let mut q = [0u8; FC_STEP];
                core::ptr::copy_nonoverlapping(
                    self.x[i].add(FC_STEP * full) as *const u8,
                    q.as_mut_ptr(),
                    rem,
                );
                let xb = _mm512_set1_epi32(i32::from_le_bytes(q));
                for (b, a) in a.iter_mut().enumerate() {
                    let wv = _mm512_loadu_si512(wp.add(b * bb) as *const _);
                    *a = _mm512_dpbusd_epi32(*a, wv, xb);
                }
            }
        }
        acc
    }
}

/// A block's requantization ([`FcEpi`]: the form its `HI` flag names) loaded once for the
/// rows of sums it requantizes (a pass's images here, the AMX conv's 32 pixels): the packed
/// layouts' epilogue.
pub(crate) struct BlockEpi {
    e: *const u8,
    /// Every row has the short form.
    hi: bool,
    bias: __m512i,
    m0: __m512i,
    r_hi: __m512i,
    n_hi: __m512i,
    /// The odd rows' M0 (2·M0 in the double rounding) in the even halves, the rounding terms
    /// of the even and odd rows (64-bit lanes), and n − 31: the short form's double rounding
    /// ([`short_unsigned`], over sums offset by `UNSIGNED_OFFSET`).
    m0_odd: __m512i,
    round: [__m512i; 2],
    rs: __m512i,
}

impl BlockEpi {
    /// The constants of the block at `e`.
    ///
    /// # Safety
    /// The CPU must support AVX-512 F; `e` points at a block's constants.
    #[inline]
    #[target_feature(enable = "avx2,avx512f")]
    pub(crate) unsafe fn load(e: *const u8) -> Self {
        let m0 = table(e, FcEpi::M0);
        let n_hi = table(e, FcEpi::N_HI);
        BlockEpi {
            e,
            hi: (e.add(FcEpi::HI) as *const i32).read_unaligned() == 1,
            bias: table(e, FcEpi::BIAS),
            m0,
            r_hi: table(e, FcEpi::R_HI),
            n_hi,
            m0_odd: _mm512_srli_epi64::<32>(m0),
            round: [table(e, FcEpi::ROUND), table(e, FcEpi::ROUND + 64)],
            rs: _mm512_add_epi32(n_hi, _mm512_set1_epi32(1)),
        }
    }

    /// 16 rows' sums corrected by `corr`, requantized in the block's form, clamped, as bytes.
    ///
    /// # Safety
    /// The CPU must support AVX-512 F, BW and VL.
    #[inline]
    #[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl")]
    pub(crate) unsafe fn apply(
        &self,
        sum: __m512i,
        corr: __m512i,
        lim: &Limits,
        double: bool,
    ) -> __m128i {
        self.apply_biased(
            _mm512_add_epi32(_mm512_add_epi32(sum, corr), self.bias),
            lim,
            double,
        )
    }

    /// [`BlockEpi::apply`] of sums that already hold the bias and the correction (their
    /// accumulators started at them).
    ///
    /// # Safety
    /// The CPU must support AVX-512 F, BW and VL.
    #[inline]
    #[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl")]
    pub(crate) unsafe fn apply_biased(&self, x: __m512i, lim: &Limits, double: bool) -> __m128i {
        if !self.hi {
            return requant(x, self.e, lim);
        }
        // The short form's rounding terms hold the zero point.
        if !double {
            return lim.clamp(short_requant::<false>(x, self.m0, self.r_hi, self.n_hi));
        }
        lim.clamp(short_unsigned::<true>(
            x,
            self.m0,
            self.m0_odd,
            self.round,
            self.rs,
        ))
    }
}

/// The output clamp, less the zero point, and the zero point (the general form); the clamp
/// itself and which of its sides the narrowing's saturation does not already give (the short
/// form, whose values hold the zero point).
pub(crate) struct Limits {
    lo: __m512i,
    hi: __m512i,
    zo: __m512i,
    act_min: __m512i,
    act_max: __m512i,
    clamp_min: bool,
    clamp_max: bool,
}

impl Limits {
    #[inline]
    #[target_feature(enable = "avx2,avx512f")]
    pub(crate) unsafe fn new(out: &OutputQuant) -> Self {
        Self::of(out.zero_point, out.act_min, out.act_max)
    }

    /// The limits of zero point `zo` and clamp `[act_min, act_max]`.
    #[inline]
    #[target_feature(enable = "avx2,avx512f")]
    pub(crate) unsafe fn of(zo: i32, act_min: i32, act_max: i32) -> Self {
        // Clamped before the zero point is added, so nothing overflows; the saturating
        // narrowing then clamps to i8 as the reference's last clamp does.
        Limits {
            lo: _mm512_set1_epi32(act_min.max(-128).saturating_sub(zo)),
            hi: _mm512_set1_epi32(act_max.min(127).saturating_sub(zo)),
            zo: _mm512_set1_epi32(zo),
            act_min: _mm512_set1_epi32(act_min.max(-128)),
            act_max: _mm512_set1_epi32(act_max.min(127)),
            // ReLU's lower side at the zero point −128, and no activation, are the i8 range.
            clamp_min: act_min > -128,
            clamp_max: act_max < 127,
        }
    }

    /// Requantized values that hold the zero point clamped, as bytes: only the sides of the
    /// clamp inside the i8 range cost an instruction.
    #[inline]
    #[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl")]
    pub(crate) unsafe fn clamp(&self, mut r: __m512i) -> __m128i {
        if self.clamp_min {
            r = _mm512_max_epi32(r, self.act_min);
        }
        if self.clamp_max {
            r = _mm512_min_epi32(r, self.act_max);
        }
        _mm512_cvtsepi32_epi8(r)
    }

    /// The requantized values clamped, with the zero point, as bytes.
    #[inline]
    #[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl")]
    pub(crate) unsafe fn finish(&self, r: __m512i) -> __m128i {
        let r = _mm512_min_epi32(_mm512_max_epi32(r, self.lo), self.hi);
        _mm512_cvtsepi32_epi8(_mm512_add_epi32(r, self.zo))
    }
}

/// Table `at` ([`FcEpi`]) of the block's constants at `e`.
#[inline]
#[target_feature(enable = "avx2,avx512f")]
unsafe fn table(e: *const u8, at: usize) -> __m512i {
    _mm512_loadu_si512(e.add(at) as *const _)
}

/// [`BlockEpi::apply_biased`]'s general form, for any shift: [`crate::requant::HighRequant`]'s
/// form, the depthwise conv's general `requant` on 16 lanes.
#[inline]
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl")]
unsafe fn requant(x: __m512i, e: *const u8, lim: &Limits) -> __m128i {
    let mut x = _mm512_min_epi32(
        _mm512_max_epi32(x, table(e, FcEpi::ACC_MIN)),
        table(e, FcEpi::ACC_MAX),
    );
    x = _mm512_sllv_epi32(x, table(e, FcEpi::LS));
    let m0 = table(e, FcEpi::M0);
    // t = x·M0·2^pre + round − [x < 0]·corr per 64-bit lane (corr is 0 or 2^31: x's bit 31);
    // `k` 0 for the even rows, 1 for the odd ones.
    let t = |x: __m512i, m0: __m512i, k: usize| {
        let p = _mm512_sllv_epi64(_mm512_mul_epi32(x, m0), table(e, FcEpi::PRE + 64 * k));
        let p = _mm512_add_epi64(p, table(e, FcEpi::ROUND + 64 * k));
        _mm512_sub_epi64(p, _mm512_and_si512(x, table(e, FcEpi::CORR + 64 * k)))
    };
    let even = t(x, m0, 0);
    let odd = t(_mm512_srli_epi64::<32>(x), _mm512_srli_epi64::<32>(m0), 1);
    let high = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64::<32>(even), odd);
    lim.finish(_mm512_srav_epi32(high, table(e, FcEpi::N)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::test_util::{fc_batch_matches_scalar, fc_suite, FcData};
    use crate::kernels::{Kernels, Layout, Packed};
    use crate::requant::FusedRequant;

    /// `p` packed, then run by the packed kernel over `x` into `y`.
    fn packed_fc(p: &FcParams, x: &[i8], y: &mut [i8]) {
        let mut buf = vec![0u8; PackedFc { k: p.k, n: p.n }.bytes()];
        PackedFc::pack(p, &mut buf);
        let p = FcParams {
            packed: Packed {
                layout: Layout::VnniFc,
                bytes: &buf,
            },
            ..*p
        };
        // SAFETY: called only where AVX-512 VNNI is available.
        unsafe { super::super::fully_connected(&p, x, y) };
    }

    fc_suite!(if Kernels::vnni_available(), |p, x, y| packed_fc(p, x, y));

    /// Groups of 1 to 13 images (passes of eight, four and one, several blocks): each image's
    /// bytes as the reference's, in both roundings.
    #[test]
    fn batches_equal_scalar() {
        if !Kernels::vnni_available() {
            println!("SKIP: no AVX-512 VNNI");
            return;
        }
        let mut tested = 0usize;
        for (m, (k, n)) in (1..=13).zip(
            [(640, 128), (128, 8), (301, 145), (64, 16), (5, 3)]
                .into_iter()
                .cycle(),
        ) {
            for rounding in [Rounding::Single, Rounding::Double] {
                let data: Vec<FcData> = (0..m)
                    .map(|i| FcData::random(k, n, (m * 31 + i) as u64))
                    .collect();
                let mut p = data[0].params();
                p.out.rounding = rounding;
                tested += !(0..n).all(|j| {
                    FusedRequant::new(p.multiplier.get(j), p.shift.get(j), rounding).n >= 33
                }) as usize;
                let mut buf = vec![0u8; PackedFc { k, n }.bytes()];
                PackedFc::pack(&p, &mut buf);
                p.packed = Packed {
                    layout: Layout::VnniFc,
                    bytes: &buf,
                };
                // SAFETY: AVX-512 VNNI is available.
                fc_batch_matches_scalar(&p, &data, &mut |p, imgs| unsafe {
                    super::super::fully_connected_batch(p, imgs)
                });
            }
        }
        // Some seeds draw any shift: the general form ran for those.
        assert!(tested >= 2, "only {tested} layers drew the general form");
    }
}
