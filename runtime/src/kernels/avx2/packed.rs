//! The AVX2 kernels over weights packed at prepare in [`PackedFc`]'s blocks with int8 weights
//! and the layer's own bias ([`Layout::Avx2Fc`], [`Layout::Avx2Conv`]): output rows in the
//! lanes, a block's 16 rows as two vectors of 8 i32 sums (its 64-byte steps split in halves),
//! the input broadcast four bytes at a time, so no lane sums remain to add up. Exact at 32
//! multiply-adds per `vpmaddubsw`, as the lanes conv is: |x| (u8, at most 128) times
//! `vpsignb(w, x)` (|w| ≤ 127, the format's range) keeps each pair within ±32 512; `vpmaddwd`
//! by ones adds the pairs into the i32 sums. Per 32 multiply-adds: `vpsignb`, `vpmaddubsw`,
//! `vpmaddwd`, `vpaddd` (with AVX-VNNI `vpsignb` and one `vpdpbusd`: the avx-vnni set); |x| is
//! shared by every row.
//!
//! [`sums`] is the product of a few inputs (images, or a conv's pixels read in place through
//! their kernel rows) by a few halves; the requantization is the packed VNNI epilogue's on 8
//! lanes ([`HalfEpi`]): its short form where a block has it, else `HighRequant`'s, both
//! roundings.

use core::arch::x86_64::*;

use crate::kernels::{ConvImage, FcEpi, FcParams, Layout, PackedFc, FC_BLOCK_ROWS, FC_EPI_BYTES};
use crate::requant::{OutputQuant, Rounding};

/// Bytes of a half block's step: 8 rows × 4 weights.
const HALF: usize = 32;

/// Where a product's inputs lie: `kh` runs (kernel rows, `row` bytes apart) of `kwc` bytes
/// (whole steps of 4), then, for a layer whose K is not a multiple of 4, a last step of `tail`
/// bytes (1 to 3; only with one run).
#[derive(Clone, Copy)]
pub(super) struct Steps {
    pub kh: usize,
    pub row: usize,
    pub kwc: usize,
    pub tail: usize,
}

/// The sums of `H` halves (half `h` is block `h / 2`'s rows 8·(h % 2)…, blocks `bb` bytes apart
/// from `w`) for the `M` inputs at `x`, each starting at its row's bias: with AVX-VNNI's
/// `vpdpbusd` where `vnni` (one instruction for `vpmaddubsw`, `vpmaddwd` and `vpaddd`).
///
/// # Safety
/// AVX2, and AVX-VNNI where `vnni`; `w` holds `H / 2` (rounded up) blocks of the layout `s`
/// describes; every `x[m]` is readable for every step `s` reads (4 bytes a step, `tail` in the
/// last).
#[inline]
#[target_feature(enable = "avx2")]
pub(super) unsafe fn sums<const H: usize, const M: usize>(
    vnni: bool,
    x: &[*const i8; M],
    w: *const u8,
    bb: usize,
    s: Steps,
) -> [[__m256i; H]; M] {
    match vnni {
        true => sums_vnni(x, w, bb, s),
        false => sums_avx2(x, w, bb, s),
    }
}

/// [`sums`] on AVX2 alone (`sums_avx2`) and with AVX-VNNI (`sums_vnni`): one loop, compiled
/// once per set of features (a body shared without them would pass its vectors through
/// memory). Not inlined, as the packed VNNI kernels' sums (the output stage's loops would
/// otherwise keep the accumulators on the stack).
macro_rules! sums_with {
    ($name:ident, $features:literal, $vnni:literal) => {
        #[inline(never)]
        #[target_feature(enable = $features)]
        unsafe fn $name<const H: usize, const M: usize>(
            x: &[*const i8; M],
            w: *const u8,
            bb: usize,
            s: Steps,
        ) -> [[__m256i; H]; M] {
            let half = |h: usize| w.add((h / 2) * bb + (h % 2) * HALF);
            let mut acc = [[_mm256_setzero_si256(); H]; M];
            for h in 0..H {
                let bias = _mm256_loadu_si256(half(h).add(FcEpi::BIAS) as *const _);
                for a in acc.iter_mut() {
                    a[h] = bias;
                }
            }
            let ones = _mm256_set1_epi16(1);
            let mut wp = FC_EPI_BYTES;
            let mut step = |wp: usize, q: [i32; M]| {
                let wv: [__m256i; H] =
                    core::array::from_fn(|h| _mm256_loadu_si256(half(h).add(wp) as *const _));
                for (a, &q) in acc.iter_mut().zip(&q) {
                    let xb = _mm256_set1_epi32(q);
                    let ax = _mm256_abs_epi8(xb);
                    for (a, &wv) in a.iter_mut().zip(&wv) {
                        let sw = _mm256_sign_epi8(wv, xb);
                        *a = match $vnni {
                            true => _mm256_dpbusd_avx_epi32(*a, ax, sw),
                            false => _mm256_add_epi32(
                                *a,
                                _mm256_madd_epi16(_mm256_maddubs_epi16(ax, sw), ones),
                            ),
                        };
                    }
                }
            };
            for ky in 0..s.kh {
                let o = ky * s.row;
                for j in (0..s.kwc).step_by(4) {
                    step(
                        wp,
                        core::array::from_fn(|m| (x[m].add(o + j) as *const i32).read_unaligned()),
                    );
                    wp += 2 * HALF;
                }
            }
            if s.tail > 0 {
                step(
                    wp,
                    core::array::from_fn(|m| {
                        let mut q = [0u8; 4];
                        core::ptr::copy_nonoverlapping(
                            x[m].add(s.kwc) as *const u8,
                            q.as_mut_ptr(),
                            s.tail,
                        );
                        i32::from_le_bytes(q)
                    }),
                );
            }
            acc
        }
    };
}

sums_with!(sums_avx2, "avx2", false);
sums_with!(sums_vnni, "avx2,avxvnni", true);

/// Half `h` of a block's requantization on 8 lanes ([`FcEpi`]; the packed VNNI epilogue's):
/// the short form (`short_requant`, `short_unsigned`) where the block has it, its constants
/// loaded once; else `HighRequant`'s, from the table as it runs.
struct HalfEpi {
    /// The half's constants (the block's, offset to the half's rows).
    e: *const u8,
    /// The block has the short form.
    short: bool,
    m0: __m256i,
    m0_odd: __m256i,
    /// Single rounding: round >> 32 with the zero point.
    r_hi: __m256i,
    /// Double rounding: the even and odd rows' 64-bit terms (`UnsignedRequant::round`).
    round: [__m256i; 2],
    /// n − 32 (single) or n − 31 (double).
    shift: __m256i,
}

impl HalfEpi {
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn load(e: *const u8, h: usize, double: bool) -> Self {
        let hi = (e.add(FcEpi::HI) as *const i32).read_unaligned() == 1;
        let e = e.add(HALF * h);
        let t = |at: usize| _mm256_loadu_si256(e.add(at) as *const _);
        let m0 = t(FcEpi::M0);
        let n_hi = t(FcEpi::N_HI);
        HalfEpi {
            e,
            short: hi,
            m0,
            m0_odd: _mm256_srli_epi64::<32>(m0),
            r_hi: t(FcEpi::R_HI),
            // 64-bit lanes: the even rows' table, then the odd rows' 64 bytes on.
            round: [t(FcEpi::ROUND), t(FcEpi::ROUND + 2 * HALF)],
            shift: match double {
                true => _mm256_add_epi32(n_hi, _mm256_set1_epi32(1)),
                false => n_hi,
            },
        }
    }

    /// The requantized sums (which hold the bias, offset by `UNSIGNED_OFFSET` in the short
    /// double rounding), clamped, with the zero point.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn apply<const DOUBLE: bool>(&self, x: __m256i, c: &Clamp) -> __m256i {
        if !self.short {
            return c.finish(self.general(x));
        }
        let x_odd = _mm256_srli_epi64::<32>(x);
        let r = if DOUBLE {
            // `short_unsigned`: x is u = sums + 2^30, positive; m0 holds 2·M0.
            let even = _mm256_add_epi64(_mm256_mul_epu32(x, self.m0), self.round[0]);
            let odd = _mm256_add_epi64(_mm256_mul_epu32(x_odd, self.m0_odd), self.round[1]);
            let high = _mm256_blend_epi32::<0xAA>(_mm256_srli_epi64::<32>(even), odd);
            // u ≥ 2^30 where the sum is ≥ 0.
            _mm256_srav_epi32(
                _mm256_add_epi32(high, _mm256_srli_epi32::<30>(x)),
                self.shift,
            )
        } else {
            // `short_requant`: the rounding term's low half is 0.
            let even = _mm256_mul_epi32(x, self.m0);
            let odd = _mm256_mul_epi32(x_odd, self.m0_odd);
            let high = _mm256_blend_epi32::<0xAA>(_mm256_srli_epi64::<32>(even), odd);
            _mm256_srav_epi32(_mm256_add_epi32(high, self.r_hi), self.shift)
        };
        c.apply(r)
    }

    /// `HighRequant`'s form for any shift (the VNNI epilogue's general `requant`), before the
    /// clamp and the zero point.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn general(&self, x: __m256i) -> __m256i {
        let t = |at: usize| _mm256_loadu_si256(self.e.add(at) as *const _);
        let x = _mm256_min_epi32(_mm256_max_epi32(x, t(FcEpi::ACC_MIN)), t(FcEpi::ACC_MAX));
        let x = _mm256_sllv_epi32(x, t(FcEpi::LS));
        // x·M0·2^pre + round − [x < 0]·corr per 64-bit lane (corr is 0 or 2^31: x's bit 31);
        // `k` 0 for the even rows, 1 for the odd ones.
        let p = |x: __m256i, m0: __m256i, k: usize| {
            let p = _mm256_sllv_epi64(_mm256_mul_epi32(x, m0), t(FcEpi::PRE + 2 * HALF * k));
            let p = _mm256_add_epi64(p, t(FcEpi::ROUND + 2 * HALF * k));
            _mm256_sub_epi64(p, _mm256_and_si256(x, t(FcEpi::CORR + 2 * HALF * k)))
        };
        let even = p(x, self.m0, 0);
        let odd = p(_mm256_srli_epi64::<32>(x), self.m0_odd, 1);
        let high = _mm256_blend_epi32::<0xAA>(_mm256_srli_epi64::<32>(even), odd);
        _mm256_srav_epi32(high, t(FcEpi::N))
    }
}

/// The output clamp: on values that hold the zero point only its sides inside the i8 range
/// (the narrowing saturates to it); on values without it the clamp less the zero point, then
/// the zero point (nothing overflows).
#[derive(Clone, Copy)]
pub(super) struct Clamp {
    lo: __m256i,
    hi: __m256i,
    min: bool,
    max: bool,
    lo_z: __m256i,
    hi_z: __m256i,
    zo: __m256i,
}

impl Clamp {
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn new(out: &OutputQuant) -> Self {
        let (lo, hi, zo) = (out.act_min.max(-128), out.act_max.min(127), out.zero_point);
        Clamp {
            lo: _mm256_set1_epi32(lo),
            hi: _mm256_set1_epi32(hi),
            min: out.act_min > -128,
            max: out.act_max < 127,
            lo_z: _mm256_set1_epi32(lo.saturating_sub(zo)),
            hi_z: _mm256_set1_epi32(hi.saturating_sub(zo)),
            zo: _mm256_set1_epi32(zo),
        }
    }

    /// Values without the zero point clamped, with it.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn finish(&self, v: __m256i) -> __m256i {
        let v = _mm256_min_epi32(_mm256_max_epi32(v, self.lo_z), self.hi_z);
        _mm256_add_epi32(v, self.zo)
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn apply(&self, mut v: __m256i) -> __m256i {
        if self.min {
            v = _mm256_max_epi32(v, self.lo);
        }
        if self.max {
            v = _mm256_min_epi32(v, self.hi);
        }
        v
    }
}

/// 16 i32 lanes (two vectors) as 16 saturated bytes, in order.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn narrow16(a: __m256i, b: __m256i) -> __m128i {
    // a0–3 b0–3 | a4–7 b4–7, then a0–3 a4–7 | b0–3 b4–7.
    let v = _mm256_permute4x64_epi64::<0xD8>(_mm256_packs_epi32(a, b));
    _mm_packs_epi16(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v))
}

/// One layer's output stage: where blocks lie, the clamp and the rounding.
#[derive(Clone, Copy)]
pub(super) struct Outputs {
    /// The layer's packed blocks.
    pub w: *const u8,
    /// Bytes per block.
    pub bb: usize,
    /// Outputs (rows) of the layer.
    pub n: usize,
    pub clamp: Clamp,
    pub double: bool,
    /// The products on AVX-VNNI.
    pub vnni: bool,
}

/// One block's output stage, its constants loaded: the rows it holds and the halves that
/// hold them (one for at most 8 rows).
pub(super) struct BlockOut {
    epi: [HalfEpi; 2],
    clamp: Clamp,
    double: bool,
    /// The block's first row.
    r0: usize,
    rows: usize,
    two: bool,
}

impl Outputs {
    /// Block `b`'s output stage.
    ///
    /// # Safety
    /// AVX2; the block exists.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn block_out(&self, b: usize) -> BlockOut {
        let e = self.w.add(b * self.bb);
        let r0 = b * FC_BLOCK_ROWS;
        let rows = (self.n - r0).min(FC_BLOCK_ROWS);
        let two = rows > FC_BLOCK_ROWS / 2;
        BlockOut {
            epi: [
                HalfEpi::load(e, 0, self.double),
                HalfEpi::load(e, two as usize, self.double),
            ],
            clamp: self.clamp,
            double: self.double,
            r0,
            rows,
            two,
        }
    }

    /// Block `b` (its output stage `o`) for the first `m` of the `M` inputs at `x` (outputs
    /// at `y`), in as few lanes as hold them: the sums of its halves, requantized, stored.
    ///
    /// # Safety
    /// As [`sums`]'; each `y[i]` is writable for the layer's N bytes.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn block<const M: usize>(
        &self,
        o: &BlockOut,
        x: &[*const i8; M],
        y: &[*mut i8; M],
        m: usize,
        s: Steps,
    ) {
        let wb = self.w.add(o.r0 / FC_BLOCK_ROWS * self.bb);
        match (m, o.two) {
            (1, false) => o.store(
                &sums::<1, 1>(self.vnni, &[x[0]], wb, self.bb, s),
                0,
                &[y[0]],
                1,
            ),
            (1, true) => o.store(
                &sums::<2, 1>(self.vnni, &[x[0]], wb, self.bb, s),
                0,
                &[y[0]],
                1,
            ),
            (2, false) => o.store(
                &sums::<1, 2>(self.vnni, &[x[0], x[1]], wb, self.bb, s),
                0,
                &[y[0], y[1]],
                2,
            ),
            (2, true) => o.store(
                &sums::<2, 2>(self.vnni, &[x[0], x[1]], wb, self.bb, s),
                0,
                &[y[0], y[1]],
                2,
            ),
            (_, false) => o.store(&sums::<1, M>(self.vnni, x, wb, self.bb, s), 0, y, m),
            (_, true) => o.store(&sums::<2, M>(self.vnni, x, wb, self.bb, s), 0, y, m),
        }
    }
}

impl BlockOut {
    /// Halves `h0` and, where the block has two, `h0 + 1` of the sums `acc` (from [`sums`])
    /// requantized and stored for the first `m` inputs at `y[i]` (each the input's output row).
    ///
    /// # Safety
    /// AVX2; each `y[i]` is writable for the layer's N bytes.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn store<const H: usize, const M: usize>(
        &self,
        acc: &[[__m256i; H]; M],
        h0: usize,
        y: &[*mut i8; M],
        m: usize,
    ) {
        match self.double {
            true => self.store_in::<true, H, M>(acc, h0, y, m),
            false => self.store_in::<false, H, M>(acc, h0, y, m),
        }
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn store_in<const DOUBLE: bool, const H: usize, const M: usize>(
        &self,
        acc: &[[__m256i; H]; M],
        h0: usize,
        y: &[*mut i8; M],
        m: usize,
    ) {
        for (a, &y) in acc.iter().zip(y).take(m) {
            // A block of at most 8 rows narrows its one half with zeros.
            let v = narrow16(
                self.epi[0].apply::<DOUBLE>(a[h0], &self.clamp),
                match self.two {
                    true => self.epi[1].apply::<DOUBLE>(a[h0 + 1], &self.clamp),
                    false => _mm256_setzero_si256(),
                },
            );
            if self.rows == FC_BLOCK_ROWS {
                _mm_storeu_si128(y.add(self.r0) as *mut __m128i, v);
            } else {
                let mut bytes = [0i8; 16];
                _mm_storeu_si128(bytes.as_mut_ptr() as *mut __m128i, v);
                core::ptr::copy_nonoverlapping(bytes.as_ptr(), y.add(self.r0), self.rows);
            }
        }
    }
}

/// Images per pass of the fully connected layer over a group (each weight vector loaded once
/// for them).
const IMAGES: usize = 4;
/// Blocks per pass of one image (8 vectors of sums: enough to keep the multiplies busy).
const ONE_BLOCKS: usize = 4;

/// Every image of `imgs` through layer `p` from its weights packed as [`Layout::Avx2Fc`], where
/// `p` has them and the buffers hold the layer; `false` (nothing written) else.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub unsafe fn fully_connected_packed(p: &FcParams, imgs: &mut [ConvImage]) -> bool {
    fc(p, imgs, false)
}

/// [`fully_connected_packed`] with AVX-VNNI's `vpdpbusd`.
///
/// # Safety
/// The CPU must support AVX2 and AVX-VNNI.
#[target_feature(enable = "avx2,avxvnni")]
pub unsafe fn fully_connected_packed_vnni(p: &FcParams, imgs: &mut [ConvImage]) -> bool {
    fc(p, imgs, true)
}

/// [`fully_connected_packed`], the products on AVX-VNNI where `vnni`.
#[target_feature(enable = "avx2")]
unsafe fn fc(p: &FcParams, imgs: &mut [ConvImage], vnni: bool) -> bool {
    let Some(w) = p.packed.of(Layout::Avx2Fc) else {
        return false;
    };
    let l = PackedFc { k: p.k, n: p.n };
    let fits = |m: &ConvImage| m.input.len() >= p.k && m.output.len() >= p.n;
    if p.k == 0 || p.n == 0 || w.len() < l.bytes() || !imgs.iter().all(fits) {
        return false;
    }
    let s = Steps {
        kh: 1,
        row: 0,
        kwc: p.k & !3,
        tail: p.k & 3,
    };
    let out = Outputs {
        w: w.as_ptr(),
        bb: l.block_bytes(),
        n: p.n,
        clamp: Clamp::new(&p.out),
        double: p.out.rounding == Rounding::Double,
        vnni,
    };
    let blocks = l.blocks();
    for group in imgs.chunks_mut(IMAGES) {
        let m = group.len();
        let x: [*const i8; IMAGES] = core::array::from_fn(|i| group[i.min(m - 1)].input.as_ptr());
        let y: [*mut i8; IMAGES] =
            core::array::from_fn(|i| group[i.min(m - 1)].output.as_mut_ptr());
        let mut b = 0;
        if m == 1 {
            // Whole blocks four at a time (8 vectors of sums); a last one of 8 rows alone.
            while b + ONE_BLOCKS <= blocks && out.n - b * FC_BLOCK_ROWS > 7 * FC_BLOCK_ROWS / 2 {
                let wb = out.w.add(b * out.bb);
                let acc = sums::<{ 2 * ONE_BLOCKS }, 1>(out.vnni, &[x[0]], wb, out.bb, s);
                for j in 0..ONE_BLOCKS {
                    out.block_out(b + j).store(&acc, 2 * j, &[y[0]], 1);
                }
                b += ONE_BLOCKS;
            }
        }
        for b in b..blocks {
            out.block(&out.block_out(b), &x, &y, m, s);
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::test_util::{fc_batch_matches_scalar, fc_suite, FcData};
    use crate::kernels::{Kernels, Packed};

    /// `p` packed as the AVX2 set packs it.
    fn packed(p: &FcParams) -> Vec<u8> {
        let mut buf = vec![0u8; PackedFc { k: p.k, n: p.n }.bytes()];
        PackedFc::pack_signed(p, &mut buf);
        buf
    }

    /// Whether the kernel's products on AVX-VNNI (`vnni`) can run here: else the test says
    /// SKIP and checks nothing.
    fn here(vnni: bool) -> bool {
        let ok = match vnni {
            true => Kernels::avx_vnni_available(),
            false => Kernels::avx2_available(),
        };
        if !ok {
            println!("SKIP: no {} here", if vnni { "AVX-VNNI" } else { "AVX2" });
        }
        ok
    }

    /// One image through the packed kernel (it declines nothing it is given).
    fn one(p: &FcParams, x: &[i8], y: &mut [i8], vnni: bool) {
        let buf = packed(p);
        let p = FcParams {
            packed: Packed {
                layout: Layout::Avx2Fc,
                bytes: &buf,
            },
            ..*p
        };
        // SAFETY: called only where the features are here.
        assert!(unsafe { fc(&p, &mut [ConvImage::new(x, y, &mut [])], vnni) });
    }

    fc_suite!(if Kernels::avx2_available(), |p, x, y| one(p, x, y, false));

    /// The products on AVX-VNNI's `vpdpbusd`.
    mod vnni {
        use super::*;
        fc_suite!(if Kernels::avx_vnni_available(), |p, x, y| one(p, x, y, true));

        #[test]
        fn batches_equal_scalar() {
            super::batches(true);
        }
    }

    #[test]
    fn batches_equal_scalar() {
        batches(false);
    }

    /// Groups of 1 to 13 images (passes of four, two and one; one image four blocks a pass;
    /// K not a multiple of 4; most layers on rounding ties): each image's bytes as the
    /// reference's, in both roundings; some layers in the general form.
    fn batches(vnni: bool) {
        if !here(vnni) {
            return;
        }
        let mut general = 0;
        for (m, (k, n)) in (1..=13).zip(
            [(640, 128), (128, 8), (301, 145), (64, 16), (5, 3), (8, 70)]
                .into_iter()
                .cycle(),
        ) {
            for rounding in [Rounding::Single, Rounding::Double] {
                let mut data: Vec<FcData> = (0..m)
                    .map(|i| FcData::random(k, n, (m * 37 + i) as u64))
                    .collect();
                if m % 3 != 2 {
                    // Multipliers 2^30 (products on rounding ties: where the roundings
                    // differ), shifts −1 (the general form with the double rounding's sign
                    // correction) or −5 (the short form).
                    let l = &mut data[0].layer;
                    let shift = if m % 3 == 0 { -1i32 } else { -5 };
                    let word = |v: i32, b: &mut [u8]| b.copy_from_slice(&v.to_le_bytes());
                    l.mult.chunks_exact_mut(4).for_each(|b| word(1 << 30, b));
                    l.shift.chunks_exact_mut(4).for_each(|b| word(shift, b));
                    l.bias.chunks_exact_mut(4).for_each(|b| word(0, b));
                }
                let mut p = data[0].params();
                p.out.rounding = rounding;
                let buf = packed(&p);
                let l = PackedFc { k, n };
                general += buf.chunks_exact(l.block_bytes()).any(|b| b[FcEpi::HI] == 0) as usize;
                p.packed = Packed {
                    layout: Layout::Avx2Fc,
                    bytes: &buf,
                };
                // SAFETY: the features are here.
                fc_batch_matches_scalar(&p, &data, &mut |p, imgs| unsafe {
                    assert!(fc(p, imgs, vnni));
                });
            }
        }
        assert!(general >= 2, "only {general} layers drew the general form");
    }
}
