//! conv2d, AVX2, output pixels in the vector lanes (8 per ymm), exact at 32 multiply-adds per
//! `vpmaddubsw`.
//!
//! `vpmaddubsw` multiplies u8 by i8 and adds pairs into i16 with saturation, which arbitrary
//! int8 pairs overflow. Here the sign of each activation moves onto the weight: |x| (u8, at most
//! 128) times `vpsignb(w, x)` = w·sign(x) (|w| ≤ 127, the format's weight range) keeps each
//! product within ±128·127 and each pair within ±32 512 < 2^15, so the i16 sums are exact;
//! `vpmaddwd` by ones adds the pairs into i32 lanes. Per 32 multiply-adds: `vpsignb`,
//! `vpmaddubsw`, `vpmaddwd`, `vpaddd`, with |x| shared by every output channel. With AVX-VNNI
//! (`VNNI = true`) one `vpdpbusd` on the same operands replaces the last three.
//!
//! Layout as in the VNNI pixels-in-lanes kernel (`vnni::lanes`), with the activations kept
//! signed: the input is copied once into scratch as quads of channels (`T`), one plane per
//! quad (the last one zero-padded), padded with the pad values, columns split by stride phase,
//! so 4 output pixels of a row read 16 contiguous bytes at every tap. Each vector holds two
//! runs of up to 4 output pixels, each within one row; a register tile of up to 8 channels
//! accumulates from the bias; the requantization runs on the high halves of the products in
//! i32 lanes, in either rounding (`FusedRequant`'s form with n from 33: shifts from −2 down,
//! the usual range; other convs run `avx2::conv2d`).
//!
//! Few input channels (`s·C_in ≤ 4`: 1 channel, Fashion-MNIST; 3, CIFAR-10's RGB at stride 1)
//! would leave most of each quad zero. There a quad is four consecutive bytes of a kernel row
//! instead (`kw·C_in` contiguous bytes of the HWC input): the input is copied once, padded, and
//! the quads of 4 output pixels come out of 16 input bytes by one in-lane `vpshufb`, so a 5×5
//! kernel over 1 channel costs 10 quads per pixel and channel instead of 25.

use core::arch::x86_64::*;
use core::ops::Range;

use crate::kernels::valid::pad_rows;
use crate::kernels::{ConvImage, ConvParams, QuadPlanes};
use crate::requant::Rounding;

/// Pixels per run: two runs make a vector of 8 lanes.
const RUN: usize = 4;
/// Output channels per register tile.
const CH: usize = 8;
/// Bytes after `T` that the last runs' 16-byte loads may reach (into dropped lanes).
const SLACK: usize = 64;

/// One output channel's requantization, for accumulators that already hold the bias: its
/// [`crate::requant::FusedRequant`] (n ≥ 33).
#[derive(Clone, Copy)]
#[repr(C)]
struct Epi {
    bias: i32,
    m0: i32,
    /// round >> 32 (below 2^29): what lies below is 0 (single) or 2^30 (double), added to
    /// the products first.
    r_hi: i32,
    /// n − 32.
    n_hi: i32,
}

/// Whether [`conv2d_lanes_avx2`] covers this conv (given enough scratch): a uniform window,
/// every channel's n of at least 33 (shifts from −2 down, in either rounding) and a clamp
/// within i8.
pub fn lanes_covered(p: &ConvParams) -> bool {
    let (hp, wp) = (p.input.h + 2 * p.pad(), p.input.w + 2 * p.pad());
    p.is_uniform()
        && p.input.c >= 1
        && p.output.c >= 1
        && p.stride() >= 1
        && hp >= p.window.kernel_h
        && wp >= p.window.kernel_w
        && p.window.kernel_h * p.window.kernel_w >= 1
        && p.output.h == (hp - p.window.kernel_h) / p.stride() + 1
        && p.output.w == (wp - p.window.kernel_w) / p.stride() + 1
        && p.out.act_min.max(-128) <= p.out.act_max.min(127)
        && (0..p.output.c).all(|c| p.epilogue_requant(c).n >= 33)
}

/// Quads per kernel row in the few-channel mode, when it applies (fewer quads than one per tap
/// and plane, and the 4 pixels' windows within 16 bytes).
fn narrow_quads(p: &ConvParams) -> Option<usize> {
    let (cin, s) = (p.input.c, p.stride());
    let g = (p.window.kernel_w * cin).div_ceil(4);
    let planes = cin.div_ceil(4);
    (s * cin <= 4 && g < p.window.kernel_w * planes && p.window.kernel_h * g <= MAX_TAPS)
        .then_some(g)
}

/// Scratch bytes [`conv2d_lanes_avx2`] needs for this conv.
pub fn lanes_scratch(p: &ConvParams) -> usize {
    match narrow_quads(p) {
        Some(g) => {
            let (hp, wp) = (p.input.h + 2 * p.pad(), p.input.w + 2 * p.pad());
            64 + hp * wp * p.input.c
                + SLACK
                + p.output.c * (p.window.kernel_h * g * 4 + core::mem::size_of::<Epi>())
        }
        None => {
            let t = QuadPlanes::new(&p.geometry()).bytes();
            64 + t + SLACK + p.output.c * core::mem::size_of::<Epi>()
        }
    }
}

/// Output rows `rows` of the conv (all of them: `0..output.h`) into `im.output` (those rows,
/// HWC), the input copied only for the rows they read, so threads sharing an image each take a
/// band of rows. Same bytes as the same rows of `scalar::conv2d`, or `false` (output untouched)
/// outside [`lanes_covered`] or when the scratch is too small for `T`: the caller then runs
/// another kernel.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub unsafe fn conv2d_lanes_avx2(p: &ConvParams, im: ConvImage, rows: Range<usize>) -> bool {
    conv2d_lanes::<false>(p, im, rows)
}

/// [`conv2d_lanes_avx2`] with AVX-VNNI's `vpdpbusd`.
///
/// # Safety
/// The CPU must support AVX2 and AVX-VNNI.
#[target_feature(enable = "avx2,avxvnni")]
pub unsafe fn conv2d_lanes_vnni(p: &ConvParams, im: ConvImage, rows: Range<usize>) -> bool {
    conv2d_lanes::<true>(p, im, rows)
}

/// A run of up to 4 output pixels within one row: its first pixel and length.
#[derive(Clone, Copy)]
struct Run {
    pix: usize,
    n: usize,
    /// Its base in `T` (tap 0, plane 0).
    base: *const u8,
}

/// What every tile of one conv shares.
struct Job<'p> {
    p: &'p ConvParams<'p>,
    g: QuadPlanes,
    /// Tap offsets in `T` (taps in kernel order).
    offs: [usize; MAX_TAPS],
    taps: usize,
    epi: *const Epi,
    out: *mut i8,
    clamp: (__m256i, __m256i),
    /// The output zero point (i32 lanes), added after the shift.
    zero_point: __m256i,
    /// The double rounding, and what it adds below the high halves: 2^30 for a non-negative
    /// product, 2^30 − 2^31 for a negative one (i64 lanes).
    double: bool,
    below: (__m256i, __m256i),
    /// Few-channel mode: the weight quads `[channel][ky][quad]` and the in-lane byte shuffle
    /// that picks 4 pixels' quads out of 16 input bytes.
    wq: *const i32,
    shuffle: __m256i,
    /// `T` (or the padded input).
    t: *mut u8,
    /// The few-channel mode's quads per kernel row.
    narrow: Option<usize>,
}

/// Taps a conv may have (11×11).
const MAX_TAPS: usize = 121;

/// The kernel, inlined into each entry point (their target features reach the intrinsics).
#[inline(always)]
unsafe fn conv2d_lanes<const VNNI: bool>(
    p: &ConvParams,
    im: ConvImage,
    rows: Range<usize>,
) -> bool {
    let (kh, kw, cout) = (p.window.kernel_h, p.window.kernel_w, p.output.c);
    if !lanes_covered(p)
        || kh * kw > MAX_TAPS
        || im.scratch.len() < lanes_scratch(p)
        || im.input.len() < p.input.len()
        || rows.start >= rows.end
        || rows.end > p.output.h
        || im.output.len() < rows.len() * p.output.w * cout
        || p.weights.len() < cout * p.k()
    {
        return false;
    }
    let job = Job::new(p, im, &rows);
    job.run::<VNNI>(rows);
    true
}

impl<'p> Job<'p> {
    /// Builds the conv's scratch for output rows `rows`: `T` (or, in the few-channel mode, the
    /// padded input and the weight quads) and the requantization constants.
    #[inline(always)]
    unsafe fn new(p: &'p ConvParams<'p>, im: ConvImage, rows: &Range<usize>) -> Self {
        let (input, output, scratch) = (im.input, im.output, im.scratch);
        let g = QuadPlanes::new(&p.geometry());
        let (cin, cout, s) = (p.input.c, p.output.c, p.stride());
        let (kh, kw, wo) = (p.window.kernel_h, p.window.kernel_w, p.output.w);
        // Padded input rows the band reads: from its first window to its last.
        let in_rows = rows.start * s..((rows.end - 1) * s + kh).min(p.input.h + 2 * p.pad());
        let t = scratch.as_mut_ptr().add(scratch.as_ptr().align_offset(64));
        let narrow = narrow_quads(p);
        // Few-channel mode: the padded input (HWC) and the weight quads; else T.
        let rowb = (p.input.w + 2 * p.pad()) * cin;
        let (data_len, wq) = match narrow {
            Some(gq) => {
                pad_input(p, input, t, in_rows);
                let len = (p.input.h + 2 * p.pad()) * rowb + SLACK;
                let wq = t.add(len) as *mut i32;
                weight_quads(p, gq, wq);
                (len + cout * kh * gq * 4, wq as *const i32)
            }
            None => {
                build_t(p, &g, input, t, in_rows);
                (g.bytes() + SLACK, core::ptr::null())
            }
        };
        let epi = t.add(data_len) as *mut Epi;
        fill_epi(p, epi);
        let mut job = Job {
            p,
            g: match narrow {
                Some(_) => QuadPlanes { planes: 1, ..g },
                None => g,
            },
            offs: [0; MAX_TAPS],
            taps: match narrow {
                Some(gq) => kh * gq,
                None => kh * kw,
            },
            wq,
            // Byte 4l + j of each 128-bit half: byte l·s·C_in + j of the window (pixel l's
            // quad).
            shuffle: {
                let b: [u8; 16] = core::array::from_fn(|i| ((i / 4) * s * cin + i % 4) as u8);
                let v = _mm_loadu_si128(b.as_ptr() as *const __m128i);
                _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(v), v)
            },
            epi,
            // Where pixel 0 would be (before the slice for a band; only the band's pixels are
            // written, through `wrapping_add`).
            out: output.as_mut_ptr().wrapping_sub(rows.start * wo * cout),
            clamp: (
                _mm256_set1_epi32(p.out.act_min.max(-128)),
                _mm256_set1_epi32(p.out.act_max.min(127)),
            ),
            zero_point: _mm256_set1_epi32(p.out.zero_point),
            double: p.out.rounding == Rounding::Double,
            below: (_mm256_set1_epi64x(1 << 30), _mm256_set1_epi64x(-(1 << 30))),
            t,
            narrow,
        };
        let taps = job.taps;
        for (tp, o) in job.offs.iter_mut().enumerate().take(taps) {
            *o = match narrow {
                Some(gq) => (tp / gq) * rowb + 4 * (tp % gq),
                None => g.at(s, tp / kw, tp % kw),
            };
        }
        job
    }

    /// Output rows `rows`: runs in raster order, two per vector, every channel.
    #[inline(always)]
    unsafe fn run<const VNNI: bool>(&self, rows: Range<usize>) {
        let (p, narrow) = (self.p, self.narrow.is_some());
        let (cin, cout, s, wo) = (p.input.c, p.output.c, p.stride(), p.output.w);
        let rowb = (p.input.w + 2 * p.pad()) * cin;
        let mut next = (rows.start, 0usize);
        let mut take = || -> Option<Run> {
            let (oy, x0) = next;
            if oy >= rows.end {
                return None;
            }
            let n = (wo - x0).min(RUN);
            next = if x0 + RUN >= wo {
                (oy + 1, 0)
            } else {
                (oy, x0 + RUN)
            };
            Some(Run {
                pix: oy * wo + x0,
                n,
                base: if narrow {
                    self.t.add(oy * s * rowb + x0 * s * cin)
                } else {
                    self.t.add(oy * s * self.g.row + x0 * 4)
                },
            })
        };
        while let Some(a) = take() {
            let b = take().unwrap_or(Run { n: 0, ..a });
            let mut co = 0;
            while co + CH <= cout {
                self.tiles::<VNNI, CH>(a, b, co, narrow);
                co += CH;
            }
            // The remaining channels: 4, 2, 1.
            if cout - co >= 4 {
                self.tiles::<VNNI, 4>(a, b, co, narrow);
                co += 4;
            }
            if cout - co >= 2 {
                self.tiles::<VNNI, 2>(a, b, co, narrow);
                co += 2;
            }
            if cout - co >= 1 {
                self.tiles::<VNNI, 1>(a, b, co, narrow);
            }
        }
    }
}

/// The few-channel mode's weight quads `[channel][ky][quad]`: each kernel row's `kw·C_in`
/// bytes, zero-padded to `gq` quads.
#[inline(always)]
unsafe fn weight_quads(p: &ConvParams, gq: usize, wq: *mut i32) {
    let (kh, run) = (p.window.kernel_h, p.window.kernel_w * p.input.c);
    for co in 0..p.output.c {
        for ky in 0..kh {
            let mut b = [0u8; 4 * MAX_TAPS];
            let src = p.weights.as_ptr().add(co * p.k() + ky * run) as *const u8;
            core::ptr::copy_nonoverlapping(src, b.as_mut_ptr(), run);
            let dst = wq.add((co * kh + ky) * gq) as *mut u8;
            core::ptr::copy_nonoverlapping(b.as_ptr(), dst, 4 * gq);
        }
    }
}

/// Every output channel's requantization constants.
#[inline(always)]
unsafe fn fill_epi(p: &ConvParams, epi: *mut Epi) {
    for c in 0..p.output.c {
        let f = p.epilogue_requant(c);
        epi.add(c).write(Epi {
            bias: p.bias.get(c),
            m0: f.m0,
            r_hi: (f.round >> 32) as i32,
            n_hi: f.n as i32 - 32,
        });
    }
}

impl Job<'_> {
    #[inline(always)]
    unsafe fn tiles<const VNNI: bool, const C: usize>(
        &self,
        a: Run,
        b: Run,
        co: usize,
        narrow: bool,
    ) {
        if narrow {
            self.tile::<VNNI, C, true>(a, b, co)
        } else {
            self.tile::<VNNI, C, false>(a, b, co)
        }
    }

    /// Output channels `co..co + C` of the pixels of runs `a` and `b`.
    #[inline(always)]
    unsafe fn tile<const VNNI: bool, const C: usize, const NARROW: bool>(
        &self,
        a: Run,
        b: Run,
        co: usize,
    ) {
        let acc = self.accumulate::<VNNI, C, NARROW>(a, b, co);
        let rows = if self.double {
            self.requantize::<C, true>(acc, co)
        } else {
            self.requantize::<C, false>(acc, co)
        };
        self.store::<C>(rows, a, b, co);
    }

    /// The accumulators of output channels `co..co + C` over runs `a` and `b`: 8 lanes each,
    /// from the bias.
    #[inline(always)]
    unsafe fn accumulate<const VNNI: bool, const C: usize, const NARROW: bool>(
        &self,
        a: Run,
        b: Run,
        co: usize,
    ) -> [__m256i; C] {
        let (p, g) = (self.p, self.g);
        let (cin, k) = (p.input.c, p.k());
        let ones = _mm256_set1_epi16(1);
        let mut acc: [__m256i; C] =
            core::array::from_fn(|c| _mm256_set1_epi32((*self.epi.add(co + c)).bias));
        let wc = p.weights.as_ptr().add(co * k);
        for tp in 0..self.taps {
            let o = self.offs[tp];
            for j in 0..g.planes {
                let x = _mm256_inserti128_si256::<1>(
                    _mm256_castsi128_si256(
                        _mm_loadu_si128(a.base.add(o + j * g.plane) as *const _),
                    ),
                    _mm_loadu_si128(b.base.add(o + j * g.plane) as *const _),
                );
                let x = if NARROW {
                    _mm256_shuffle_epi8(x, self.shuffle)
                } else {
                    x
                };
                let ax = _mm256_abs_epi8(x);
                let wq = wc.add(tp * cin + 4 * j);
                // A partial last plane's quad runs into the next tap's weights (meeting zeros
                // in T); at the row's last tap it is built without passing the row's end.
                let valid = (cin - 4 * j).min(4);
                let last = valid < 4 && tp + 1 == self.taps;
                let quad = |c: usize| -> i32 {
                    let src = wq.add(c * k);
                    if NARROW {
                        self.wq.add((co + c) * self.taps + tp).read()
                    } else if last {
                        let mut q = 0u32;
                        for i in 0..valid {
                            q |= (src.add(i).read() as u8 as u32) << (8 * i);
                        }
                        q as i32
                    } else {
                        (src as *const i32).read_unaligned()
                    }
                };
                for (c, acc) in acc.iter_mut().enumerate() {
                    let sw = _mm256_sign_epi8(_mm256_set1_epi32(quad(c)), x);
                    *acc = if VNNI {
                        // Only in conv2d_lanes_vnni, which needs AVX-VNNI.
                        _mm256_dpbusd_avx_epi32(*acc, ax, sw)
                    } else {
                        let pair = _mm256_maddubs_epi16(ax, sw);
                        _mm256_add_epi32(*acc, _mm256_madd_epi16(pair, ones))
                    };
                }
            }
        }
        acc
    }

    /// Each channel's 8 accumulators requantized: its 8 bytes, in lane order. With n ≥ 33,
    /// `(P + round − [P < 0]·corr) >> n` (`FusedRequant`, P = acc·M0) is
    /// `(((P + b) >> 32) + r_hi) >> (n − 32)`, b what lies below 2^32 less the correction:
    /// nothing for the single rounding, ±2^30 by P's sign for the `DOUBLE`; the zero point
    /// is added after it.
    #[inline(always)]
    unsafe fn requantize<const C: usize, const DOUBLE: bool>(
        &self,
        acc: [__m256i; C],
        co: usize,
    ) -> [__m128i; C] {
        let (lo, hi) = self.clamp;
        let zero = _mm256_setzero_si256();
        let below = |p: __m256i| {
            if DOUBLE {
                let neg = _mm256_cmpgt_epi64(zero, p);
                _mm256_add_epi64(p, _mm256_blendv_epi8(self.below.0, self.below.1, neg))
            } else {
                p
            }
        };
        let mut rows = [_mm_setzero_si128(); C];
        for (c, &acc) in acc.iter().enumerate() {
            let e = self.epi.add(co + c).read();
            let m = _mm256_set1_epi32(e.m0);
            let ev = below(_mm256_mul_epi32(acc, m));
            let od = below(_mm256_mul_epi32(_mm256_srli_epi64::<32>(acc), m));
            // The high halves of the 8 products, in lane order.
            let h = _mm256_blend_epi32::<0xAA>(_mm256_srli_epi64::<32>(ev), od);
            let y = _mm256_sra_epi32(
                _mm256_add_epi32(h, _mm256_set1_epi32(e.r_hi)),
                _mm_cvtsi32_si128(e.n_hi),
            );
            let y = _mm256_add_epi32(y, self.zero_point);
            let y = _mm256_min_epi32(_mm256_max_epi32(y, lo), hi);
            let b8 = _mm256_packs_epi16(_mm256_packs_epi32(y, y), _mm256_setzero_si256());
            // Channel c's 8 bytes: lanes 0..4 of each 128-bit half.
            rows[c] = _mm_unpacklo_epi32(
                _mm256_castsi256_si128(b8),
                _mm256_extracti128_si256::<1>(b8),
            );
        }
        rows
    }

    /// Channel rows `rows` (channels `co..co + C`) to the HWC output of the runs' pixels.
    #[inline(always)]
    unsafe fn store<const C: usize>(&self, rows: [__m128i; C], a: Run, b: Run, co: usize) {
        let cout = self.p.output.c;
        if C == CH {
            // 8 channels × 8 pixels transposed: one 8-byte store per pixel.
            let a0 = _mm_unpacklo_epi8(rows[0], rows[1 % C]);
            let a1 = _mm_unpacklo_epi8(rows[2 % C], rows[3 % C]);
            let a2 = _mm_unpacklo_epi8(rows[4 % C], rows[5 % C]);
            let a3 = _mm_unpacklo_epi8(rows[6 % C], rows[7 % C]);
            let (b0, b1) = (_mm_unpacklo_epi16(a0, a1), _mm_unpackhi_epi16(a0, a1));
            let (b2, b3) = (_mm_unpacklo_epi16(a2, a3), _mm_unpackhi_epi16(a2, a3));
            // Pixels (0, 1), (2, 3), (4, 5), (6, 7): 8 channel bytes each.
            let px = [
                _mm_unpacklo_epi32(b0, b2),
                _mm_unpackhi_epi32(b0, b2),
                _mm_unpacklo_epi32(b1, b3),
                _mm_unpackhi_epi32(b1, b3),
            ];
            for (l, &v) in px
                .iter()
                .enumerate()
                .flat_map(|(i, v)| [(2 * i, v), (2 * i + 1, v)])
            {
                let (run, i) = if l < RUN { (a, l) } else { (b, l - RUN) };
                if i < run.n {
                    let bytes = if l % 2 == 0 {
                        _mm_cvtsi128_si64(v)
                    } else {
                        _mm_cvtsi128_si64(_mm_unpackhi_epi64(v, v))
                    };
                    let dst = self.out.wrapping_add((run.pix + i) * cout + co) as *mut i64;
                    dst.write_unaligned(bytes);
                }
            }
        } else {
            for (c, &r) in rows.iter().enumerate() {
                let bytes = _mm_cvtsi128_si64(r) as u64;
                for (l, run, i) in
                    (0..2 * RUN).map(|l| if l < RUN { (l, a, l) } else { (l, b, l - RUN) })
                {
                    if i < run.n {
                        self.out
                            .wrapping_add((run.pix + i) * cout + co + c)
                            .write((bytes >> (8 * l)) as i8);
                    }
                }
            }
        }
    }
}

/// Writes padded rows `rows` of `T` (see the module doc): planes of quads, padded, columns by
/// stride phase; the slack after it zeroed.
unsafe fn build_t(p: &ConvParams, g: &QuadPlanes, input: &[i8], t: *mut u8, rows: Range<usize>) {
    let (cin, s, pad) = (p.input.c, p.stride(), p.pad());
    let wp = p.input.w + 2 * pad;
    for j in 0..g.planes {
        let quad = |c: usize| if c < cin { p.pad_value(c) as u8 } else { 0 };
        let pq = u32::from_le_bytes(core::array::from_fn(|i| quad(4 * j + i)));
        let valid = (cin - 4 * j).min(4);
        let tj = t.add(j * g.plane);
        for yp in rows.clone() {
            for xp in 0..wp {
                let (y, x) = (yp.wrapping_sub(pad), xp.wrapping_sub(pad));
                let q = if y < p.input.h && x < p.input.w {
                    let src = input.as_ptr().add((y * p.input.w + x) * cin + 4 * j) as *const u8;
                    if valid == 4 {
                        (src as *const u32).read_unaligned()
                    } else {
                        // The last plane of C_in % 4 channels: the missing channels 0.
                        u32::from_le_bytes(core::array::from_fn(|i| {
                            if i < valid {
                                src.add(i).read()
                            } else {
                                0
                            }
                        }))
                    }
                } else {
                    pq
                };
                (tj.add(g.at(s, yp, xp)) as *mut u32).write_unaligned(q);
            }
        }
    }
    core::ptr::write_bytes(t.add(g.bytes()), 0, SLACK);
}

/// Padded rows `rows` of the input, `(h + 2·pad) × (w + 2·pad) × C_in` bytes, the border
/// filled with the pad values (`valid::pad_rows`); the slack after it zeroed (read only into
/// dropped lanes and zero weight bytes).
unsafe fn pad_input(p: &ConvParams, input: &[i8], img: *mut u8, rows: Range<usize>) {
    let (cin, h, w, pad) = (p.input.c, p.input.h, p.input.w, p.pad());
    let (hp, wp) = (h + 2 * pad, w + 2 * pad);
    let image = core::slice::from_raw_parts_mut(img as *mut i8, hp * wp * cin);
    pad_rows(p, input, (pad, pad), wp, rows, image);
    core::ptr::write_bytes(img.add(hp * wp * cin), 0, SLACK);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::test_util::{as_single, check_conv_rows, conv_suite, ConvCase};
    use crate::kernels::Kernels;

    /// Both entry points this CPU can run (AVX2, AVX-VNNI), whole and in bands of rows; each
    /// declines only what it declines in the single rounding.
    fn check(c: &ConvCase) {
        type Lanes = unsafe fn(&ConvParams, ConvImage, Range<usize>) -> bool;
        let mut kernels: Vec<Lanes> = Vec::new();
        if Kernels::avx2_available() {
            kernels.push(conv2d_lanes_avx2);
        }
        if Kernels::avx_vnni_available() {
            kernels.push(conv2d_lanes_vnni);
        }
        let declines = |p: &ConvParams, s| !lanes_covered(&as_single(p)) || s < lanes_scratch(p);
        for f in kernels {
            // SAFETY: only the entry points this CPU supports.
            check_conv_rows(c, &mut |p, im, r| unsafe { f(p, im, r) }, &declines);
        }
    }

    conv_suite!(check);
}
