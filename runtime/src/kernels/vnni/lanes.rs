//! conv2d, AVX-512 VNNI, output pixels in the vector lanes: each `vpdpbusd` multiplies the u8
//! patch quads of 16 output pixels by one output channel's 4 weights, broadcast straight from
//! the OHWI row (`{1to16}` operand), so weights are read in place, never packed.
//!
//! Per conv, the input is copied once into scratch as u8 (x + 128) quads of channels (`T`):
//! one plane per quad of input channels, padded with the pad values, columns split by stride
//! phase, so the 16 pixels of an output row segment read 64 contiguous bytes at every tap.
//! Per pass of up to [`PASS`] output pixels, the patch quads are copied from `T`
//! into a panel (`[quad][vector][16 pixels][4]`); an NV×CH register tile (NV vectors of 16
//! pixels × CH channels) runs over the panel for each group of CH channels, starting from the
//! bias corrected by −128·Σw. The requantization handles the 16 pixels of one channel at once
//! with that channel's constants broadcast, in either rounding ([`OutputStage`]), into a
//! channel-major tile transposed to HWC at the end of the pass.
//!
//! Covers ([`covers`]) a uniform window, C_in a multiple of 4 or below 4, C_out a multiple of
//! 8, any shift and a non-empty clamp, in both roundings; over one image, a band of
//! its rows (threads sharing an image) or a group of images.

use core::arch::x86_64::*;
use core::ops::Range;

use crate::kernels::{
    lanes_regions, lanes_supported, ConvImage, ConvParams, QuadPlanes, LANES_EPI_BYTES,
};
use crate::requant::Rounding;

/// One output channel's requantization, for accumulators that already hold the bias: the
/// channel's [`crate::requant::FusedRequant`].
#[derive(Clone, Copy, Default)]
#[repr(C)]
pub(super) struct Epi {
    /// bias − 128·Σw (wrapping): the accumulator's start value.
    pub(super) bias: i32,
    m0: i32,
    /// Left shift of the accumulator (the double rounding's, shift > 0; else 0).
    ls: i32,
    /// Right shift n in [1, 62].
    n: i32,
    /// The rounding term (|acc·M0| < 2^62 and r ≤ 2^61 + 2^30: the sum fits i64).
    r: i64,
    /// For n ≥ 33: round >> 32 (the part of round below 2^32 is the same for every channel,
    /// see [`OutputStage::apply`]), below 2^29.
    r_hi: i32,
    /// −corr (0 or −2^31), added where the product is negative.
    corr: i32,
}

const _: () = assert!(core::mem::size_of::<Epi>() == LANES_EPI_BYTES);

/// Output pixels per pass: three vectors, the (3, 8) tile of 24 accumulators (at most
/// `LANES_PIXEL_BLOCK`, which sizes the panel and tile regions).
const PASS: usize = 48;
const _: () = assert!(PASS <= crate::kernels::LANES_PIXEL_BLOCK && PASS.is_multiple_of(V));

/// Vectors per pass.
const PASS_VECTORS: usize = PASS / V;

/// One pass: output pixels `pix0..pix0 + npx`, numbered across the images, in `nv` vectors.
#[derive(Clone, Copy)]
struct Pass<'a> {
    /// Per image: its `T`, input and output.
    ptrs: &'a [(*mut u8, *const i8, *mut i8)],
    /// `T` of image i lives in slot i % slots.
    slots: usize,
    pix0: usize,
    npx: usize,
    nv: usize,
}

/// The scratch regions a pass works in besides `T`.
#[derive(Clone, Copy)]
struct Regions {
    /// The patch quads, `[quad][vector][16 pixels][4]`.
    panel: *mut u8,
    /// The requantized outputs, `[vector][channel][16 pixels]`.
    tile: *mut u8,
    /// Per output channel constants.
    epi: *mut Epi,
}

/// Pixels per vector.
const V: usize = 16;

/// Output rows `rows` of the conv (all of them: `0..output.h`) into `im.output` (those rows,
/// HWC), `T` built only for the input rows they read, so threads sharing an image each take a
/// band of rows ([`crate::parallel`]). Same bytes as the same rows of `scalar::conv2d`, or
/// `false` (output untouched) when the conv is outside what this kernel covers
/// ([`lanes_supported`], a clamp outside i8, a scratch smaller than
/// `scratch_bytes`): the caller then runs another kernel.
///
/// # Safety
/// The CPU must support AVX2, AVX-512 F, BW, VL and VNNI.
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn conv2d_lanes(p: &ConvParams, im: ConvImage, rows: Range<usize>) -> bool {
    lanes(p, &mut [im], rows)
}

/// [`conv2d_lanes`] over several images at once (up to [`MAX_IMAGES`]): their output pixels
/// share passes, so each weight row is read once per pass of up to `PASS` pixels rather
/// than once per image (the small late layers), and Σw once per call.
///
/// # Safety
/// The CPU must support AVX2, AVX-512 F, BW, VL and VNNI.
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn conv2d_lanes_batch(p: &ConvParams, images: &mut [ConvImage]) -> bool {
    lanes(p, images, 0..p.output.h)
}

/// The kernel: output rows `rows` of every image (all rows when there are several images),
/// each image's output holding those rows.
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn lanes(p: &ConvParams, images: &mut [ConvImage], rows: Range<usize>) -> bool {
    let g = p.geometry();
    let s = p.stride();
    let all_rows = rows == (0..p.output.h);
    if !covers(p)
        || images.is_empty()
        || images.len() > MAX_IMAGES
        || rows.start >= rows.end
        || rows.end > p.output.h
        || (images.len() > 1 && !all_rows)
    {
        return false;
    }
    let cout = p.output.c;
    let npix = p.output.h * p.output.w;
    // The pixels computed: all of every image, or one image's band.
    let (px_lo, px_hi) = (rows.start * p.output.w, rows.end * p.output.w);
    let (tb, pb, tileb, eb) = lanes_regions(&g);
    // Per image: (T, input, output); the output pointer placed where pixel 0 would be (before
    // the slice for a band: `store_tile` only writes pixels from `px_lo` on).
    let mut ptrs = [(
        core::ptr::null_mut::<u8>(),
        core::ptr::null::<i8>(),
        core::ptr::null_mut::<i8>(),
    ); MAX_IMAGES];
    for (im, slot) in images.iter_mut().zip(ptrs.iter_mut()) {
        let off = im.scratch.as_ptr().align_offset(64);
        if im.input.len() < p.input.len()
            || im.output.len() < (px_hi - px_lo) * cout
            || im.scratch.len() < off + tb + pb + tileb + eb
        {
            return false;
        }
        *slot = (
            im.scratch.as_mut_ptr().add(off),
            im.input.as_ptr(),
            im.output.as_mut_ptr().wrapping_sub(px_lo * cout),
        );
    }
    let ptrs = &ptrs[..images.len()];
    let panel = ptrs[0].0.add(tb);
    let tile = panel.add(pb);
    let r = Regions {
        panel,
        tile,
        epi: tile.add(tileb) as *mut Epi,
    };
    let geo = Geo::new(p);
    let total = if all_rows { npix * ptrs.len() } else { px_hi };
    // 1×1 without padding over whole blocks of 16 quads: the panel straight from the input.
    let pointwise = p.window.kernel_h == 1
        && p.window.kernel_w == 1
        && p.pad() == 0
        && p.input.c.is_multiple_of(64);
    // T of image i lives in slot i % slots (the T regions of the first images' scratch):
    // enough slots for the images one pass spans, few enough to stay in cache.
    let slots = ((PASS - 1) / npix + 2).min(ptrs.len());
    let mut built = 0;
    let mut pix0 = px_lo;
    while pix0 < total {
        let npx = (total - pix0).min(PASS);
        let nv = npx.div_ceil(V);
        // Each image's T just before its first pass, while its input is still in cache.
        while !pointwise && built <= (pix0 + npx - 1) / npix {
            build_t(
                p,
                &geo,
                images[built].input,
                ptrs[built % slots].0,
                rows.clone(),
            );
            built += 1;
        }
        let pass = Pass {
            ptrs,
            slots,
            pix0,
            npx,
            nv,
        };
        // With rows of a multiple of 16 pixels every vector is one row segment: read `T`.
        let mut bases = [core::ptr::null::<u8>(); PASS_VECTORS];
        let direct = if pointwise {
            build_panel_pointwise(p, &pass, panel);
            None
        } else if p.output.w.is_multiple_of(V) {
            for (v, b) in bases.iter_mut().enumerate().take(nv) {
                let (im, pi) = ((pix0 + v * V) / npix, (pix0 + v * V) % npix);
                let (oy, ox) = (pi / p.output.w, pi % p.output.w);
                *b = ptrs[im % slots].0.add(oy * s * geo.row + ox * 4);
            }
            Some(&bases)
        } else {
            build_panel(p, &geo, &pass, panel);
            None
        };
        let first = pix0 == px_lo;
        // nv ≤ PASS_VECTORS = 3.
        match nv {
            3 => groups::<3, 8>(p, &geo, &r, direct, first),
            2 => groups::<2, 8>(p, &geo, &r, direct, first),
            _ => groups::<1, 8>(p, &geo, &r, direct, first),
        }
        store_tile(tile, cout, npix, ptrs, pix0, npx);
        pix0 += npx;
    }
    true
}

/// Whether the kernel covers conv `p` (given buffers of the sizes it checks): a uniform window,
/// the lanes geometry ([`lanes_supported`]), every shift within the epilogue's range
/// (`epi_supported`: a non-empty clamp), in either rounding.
pub fn covers(p: &ConvParams) -> bool {
    let s = p.stride();
    let (hp, wp) = (p.input.h + 2 * p.pad(), p.input.w + 2 * p.pad());
    p.is_uniform()
        && lanes_supported(&p.geometry())
        && s > 0
        && hp >= p.window.kernel_h
        && wp >= p.window.kernel_w
        && p.output.h == (hp - p.window.kernel_h) / s + 1
        && p.output.w == (wp - p.window.kernel_w) / s + 1
        && epi_supported(p)
        && p.weights.len() >= p.output.c * p.k()
}

/// Images a batched call takes at most.
pub const MAX_IMAGES: usize = crate::kernels::GROUP_IMAGES;

/// Layout of `T` and of the quads.
struct Geo {
    /// Quads of input channels (planes of `T`).
    planes: usize,
    /// Columns per stride phase.
    wq: usize,
    /// Bytes per row of `T` (all phases).
    row: usize,
    /// Bytes per plane.
    plane: usize,
    /// Quads per patch: kh·kw·planes.
    kq: usize,
    /// The layout the fields above copy (for [`Geo::at`]).
    q: QuadPlanes,
    /// Weight bytes per quad: 4, or C_in when C_in < 4 (one quad per tap, its extra bytes
    /// meeting zeros in `T`).
    wstep: usize,
    /// The i32 epilogue applies ([`epi_hi`]).
    hi: bool,
    /// The double rounding.
    double: bool,
}

impl Geo {
    fn new(p: &ConvParams) -> Self {
        let q = QuadPlanes::new(&p.geometry());
        Geo {
            planes: q.planes,
            wq: q.wq,
            row: q.row,
            plane: q.plane,
            q,
            kq: p.window.kernel_h * p.window.kernel_w * q.planes,
            wstep: if p.input.c.is_multiple_of(4) {
                4
            } else {
                p.input.c
            },
            hi: epi_hi(p),
            double: p.out.rounding == Rounding::Double,
        }
    }

    /// Byte offset in `T` of padded pixel (yp, xp), plane 0.
    #[inline(always)]
    fn at(&self, s: usize, yp: usize, xp: usize) -> usize {
        self.q.at(s, yp, xp)
    }
}

/// Whether the clamp is a non-empty range within i8 (every requantization fits [`Epi`], in
/// either rounding).
pub(super) fn epi_supported(p: &ConvParams) -> bool {
    p.out.act_min.max(-128) <= p.out.act_max.min(127)
}

/// Whether every channel has n of at least 33 (shifts from −2 down, in either rounding), where
/// the epilogue can work on the high halves of the products in i32 lanes
/// ([`OutputStage::apply`]).
pub(super) fn epi_hi(p: &ConvParams) -> bool {
    (0..p.output.c).all(|c| p.epilogue_requant(c).n >= 33)
}

/// Fills the constants of channels `co..co + CH` (Σw read just before the tile reads the same
/// weight rows, so they come from memory once).
#[inline]
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn fill_epi(p: &ConvParams, co: usize, ch: usize, epi: *mut Epi) {
    let k = p.k();
    for c in co..co + ch {
        let f = p.epilogue_requant(c);
        let sw = sum_w(p.weights.as_ptr().add(c * k), k);
        epi.add(c).write(Epi {
            bias: p.bias.get(c).wrapping_sub(sw.wrapping_mul(128)),
            m0: f.m0,
            ls: f.ls as i32,
            n: f.n as i32,
            r: f.round,
            r_hi: (f.round >> 32) as i32,
            // corr ≤ 2^31: its negation fits i32.
            corr: (-f.corr) as i32,
        });
    }
}

/// Σ of `k` weights at `w`.
#[inline]
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn sum_w(w: *const i8, k: usize) -> i32 {
    let ones = _mm512_set1_epi8(1);
    let mut acc = _mm512_setzero_si512();
    let mut i = 0;
    while i + 64 <= k {
        acc = _mm512_dpbusd_epi32(acc, ones, _mm512_loadu_si512(w.add(i) as *const _));
        i += 64;
    }
    if i < k {
        let m: __mmask64 = (1u64 << (k - i)) - 1;
        acc = _mm512_dpbusd_epi32(acc, ones, _mm512_maskz_loadu_epi8(m, w.add(i)));
    }
    _mm512_reduce_add_epi32(acc)
}

/// The u8 pad quad of plane `j` (channels past C_in are 0: they meet the next tap's weights).
fn pad_quad(p: &ConvParams, j: usize) -> u32 {
    let b: [u8; 4] = core::array::from_fn(|i| {
        let c = 4 * j + i;
        if c < p.input.c {
            (p.pad_value(c) as u8) ^ 0x80
        } else {
            0
        }
    });
    u32::from_le_bytes(b)
}

/// Writes the part of `T` output rows `rows` read: its padded pixels' quads, the border with
/// the pad quads.
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn build_t(p: &ConvParams, g: &Geo, input: &[i8], t: *mut u8, rows: Range<usize>) {
    let (cin, h, w, pad, s) = (p.input.c, p.input.h, p.input.w, p.pad(), p.stride());
    let hp = h + 2 * pad;
    // Padded input rows read: from the band's first window to its last.
    let (yp0, yp1) = (
        rows.start * s,
        ((rows.end - 1) * s + p.window.kernel_h).min(hp),
    );
    if pad > 0 {
        for j in 0..g.planes {
            let d = pad_quad(p, j);
            let tj = t.add(j * g.plane);
            let dv = _mm512_set1_epi32(d as i32);
            for yp in (0..pad)
                .chain(h + pad..hp)
                .filter(|yp| (yp0..yp1).contains(yp))
            {
                // A whole border row, every phase.
                let row = tj.add(yp * g.row);
                let mut i = 0;
                while i + 64 <= g.row {
                    _mm512_storeu_si512(row.add(i) as *mut _, dv);
                    i += 64;
                }
                while i < g.row {
                    (row.add(i) as *mut u32).write_unaligned(d);
                    i += 4;
                }
            }
            for xp in (0..pad).chain(w + pad..w + 2 * pad) {
                // The column's offset once (a division), then every interior row read.
                let col = tj.add(g.at(s, pad, xp));
                for y in yp0.max(pad) - pad..yp1.min(h + pad).saturating_sub(pad) {
                    (col.add(y * g.row) as *mut u32).write_unaligned(d);
                }
            }
        }
    }
    // The input pixels read: whole rows y0..y1.
    let (y0, y1) = (yp0.max(pad) - pad, yp1.min(h + pad).saturating_sub(pad));
    if y0 >= y1 {
        return;
    }
    let x = input.as_ptr() as *const u8;
    let mut first = y0 * w;
    let few = (cin < 4 && vbmi()).then(|| FewQuads::new(cin));
    let narrow = matches!(cin, 4 | 8 | 16);
    if (cin.is_multiple_of(4) && cin >= 16) || few.is_some() || narrow {
        // Blocks of 16 pixels × up to 16 quads, transposed in registers (a block may reach
        // into rows outside the band: their quads are written where they belong, unread).
        let npx = (h * w) & !15;
        let (b0, b1) = ((y0 * w) & !15, (y1 * w).next_multiple_of(16).min(npx));
        for i0 in (b0..b1).step_by(16) {
            // Where the block's lanes go, once for all its planes.
            let segs = TSegs::new(g, s, pad, w, i0);
            if let Some(f) = &few {
                // C_in < 4: the 16 pixels' bytes regrouped into quads by `vpermb`.
                segs.store(t, f.of(x.add(i0 * cin)));
                continue;
            }
            if narrow {
                // 1, 2 or 4 quads: the 16 pixels' 1 to 4 vectors, each plane by permutes.
                let planes = narrow_planes(x.add(i0 * cin), cin);
                for (j, &v) in planes.iter().enumerate().take(g.planes) {
                    segs.store(t.add(j * g.plane), v);
                }
                continue;
            }
            for j0 in (0..g.planes).step_by(16) {
                // The last block of planes reads only the quads it has (a masked load).
                let nq = (g.planes - j0).min(16);
                let mask = ((1u32 << nq) - 1) as u16;
                let rows: [__m512i; 16] = core::array::from_fn(|i| {
                    let at = x.add((i0 + i) * cin + 4 * j0) as *const i32;
                    let v = _mm512_maskz_loadu_epi32(mask, at);
                    _mm512_xor_si512(v, _mm512_set1_epi8(-128))
                });
                let cols = transpose16x16_d(rows);
                for (m, &v) in cols.iter().enumerate().take(nq) {
                    segs.store(t.add((j0 + m) * g.plane), v);
                }
            }
        }
        if b0 < b1 {
            first = first.max(b1);
        }
    }
    // Column offsets without a division per pixel: phase and quad column advance together.
    let (mut y, mut xx) = (first / w.max(1), first % w.max(1));
    let (mut ph, mut xq) = ((xx + pad) % s, (xx + pad) / s);
    for pi in first..y1 * w {
        let src = x.add(pi * cin);
        let dst = t.add((y + pad) * g.row + ph * g.wq * 4 + xq * 4);
        xx += 1;
        ph += 1;
        if ph == s {
            ph = 0;
            xq += 1;
        }
        if xx == w {
            (y, xx) = (y + 1, 0);
            (ph, xq) = (pad % s, pad / s);
        }
        if cin.is_multiple_of(4) {
            for j in 0..g.planes {
                let q = (src.add(4 * j) as *const u32).read_unaligned() ^ 0x8080_8080;
                (dst.add(j * g.plane) as *mut u32).write_unaligned(q);
            }
        } else {
            // C_in < 4: one plane, the missing channels 0.
            let b: [u8; 4] =
                core::array::from_fn(|i| if i < cin { src.add(i).read() ^ 0x80 } else { 0 });
            (dst as *mut u32).write_unaligned(u32::from_le_bytes(b));
        }
    }
}

/// The quads of 16 pixels of `cin` ∈ {4, 8, 16} channels at `x` as u8 (x + 128), plane by
/// plane (lane = pixel; planes past cin / 4 unset): dword p·q + j of the pixels is lane p of
/// plane j, q = cin / 4, picked from pairs of vectors by `vpermt2d`.
#[inline]
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl")]
unsafe fn narrow_planes(x: *const u8, cin: usize) -> [__m512i; 4] {
    let q = cin / 4;
    let flip = _mm512_set1_epi8(-128);
    let ld = |v: usize| _mm512_xor_si512(_mm512_loadu_si512(x.add(64 * v) as *const _), flip);
    let mut out = [_mm512_setzero_si512(); 4];
    if q == 1 {
        out[0] = ld(0);
        return out;
    }
    // Lane p: dword p·q + j of a pair of vectors (pixels 0–7 of the pair's 128 bytes for
    // q = 2, 16 pixels; for q = 4, 8 pixels, pixels 8–15 from the second pair into lanes 8–15).
    let (a, b) = (ld(0), ld(1));
    let (c, d) = if q == 4 { (ld(2), ld(3)) } else { (a, b) };
    let lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    // p·2, or (p mod 8)·4.
    let base = if q == 4 {
        _mm512_slli_epi32::<2>(_mm512_and_si512(lane, _mm512_set1_epi32(7)))
    } else {
        _mm512_slli_epi32::<1>(lane)
    };
    for (j, o) in out.iter_mut().enumerate().take(q) {
        let idx = _mm512_add_epi32(base, _mm512_set1_epi32(j as i32));
        *o = if q == 4 {
            let lo = _mm512_permutex2var_epi32(a, idx, b);
            let hi = _mm512_permutex2var_epi32(c, idx, d);
            _mm512_mask_blend_epi32(0xFF00, lo, hi)
        } else {
            _mm512_permutex2var_epi32(a, idx, b)
        };
    }
    out
}

/// How 16 pixels of `cin` < 4 channels become their quads (lane = pixel): the channels as u8
/// (x + 128), 0 past `cin`.
struct FewQuads {
    cin: usize,
    /// Byte 4p + j: byte cin·p + j of the pixels.
    idx: __m512i,
    /// The bytes of the channels.
    keep: __mmask64,
    /// 0x80 on those bytes.
    flip: __m512i,
}

impl FewQuads {
    #[inline]
    #[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl,avx512vbmi")]
    unsafe fn new(cin: usize) -> Self {
        let (mut idx, mut keep, mut flip) = ([0u8; 64], 0u64, [0u8; 64]);
        for p in 0..16 {
            for j in 0..cin {
                idx[4 * p + j] = (cin * p + j) as u8;
                keep |= 1 << (4 * p + j);
                flip[4 * p + j] = 0x80;
            }
        }
        let ld = |a: &[u8; 64]| _mm512_loadu_si512(a.as_ptr() as *const _);
        FewQuads {
            cin,
            idx: ld(&idx),
            keep,
            flip: ld(&flip),
        }
    }

    /// The quads of the 16 pixels at `x` (only their 16·cin bytes read).
    #[inline]
    #[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl,avx512vbmi")]
    unsafe fn of(&self, x: *const u8) -> __m512i {
        let v = _mm512_maskz_loadu_epi8((1u64 << (16 * self.cin)) - 1, x as *const i8);
        let q = _mm512_maskz_permutexvar_epi8(self.keep, self.idx, v);
        _mm512_xor_si512(q, self.flip)
    }
}

/// Where one plane's quads of input pixels `i0..i0 + 16` (lane = pixel) go in `T`: row
/// segment by row segment and, for strides above 1, stride phase by stride phase (each lane in
/// exactly one piece, so at most 16).
struct TSegs {
    n: usize,
    /// (lanes, packed: the lanes compressed to the front first, byte offset in the plane).
    pieces: [(u16, bool, usize); 16],
    /// Stride 2 over whole 16-pixel rows: (even, odd) column offsets, 8 lanes each.
    halves: Option<(usize, usize)>,
}

impl TSegs {
    fn new(g: &Geo, s: usize, pad: usize, w: usize, i0: usize) -> Self {
        let mut t = TSegs {
            n: 0,
            pieces: [(0, false, 0); 16],
            halves: None,
        };
        if s == 2 && w.is_multiple_of(16) {
            let (y, x) = (i0 / w, i0 % w);
            let xp = x + pad;
            t.halves = Some((g.at(2, y + pad, xp), g.at(2, y + pad, xp + 1)));
            return t;
        }
        // Lanes 0, s, 2s, … (below 16).
        let every = (0..16).step_by(s.max(1)).fold(0u32, |m, i| m | 1 << i);
        let mut l = 0;
        while l < 16 {
            let (y, x) = ((i0 + l) / w, (i0 + l) % w);
            let len = (w - x).min(16 - l);
            if s == 1 {
                // Lane l lands on pixel (y, x): the whole vector shifted back l lanes.
                let m = (((1u32 << len) - 1) << l) as u16;
                let off = g.at(1, y + pad, x + pad).wrapping_sub(4 * l);
                t.pieces[t.n] = (m, false, off);
                t.n += 1;
            } else {
                for ph in 0..s.min(len) {
                    // Lanes l + ph, l + ph + s, …: columns x + ph, x + ph + s, … (one phase).
                    let m = (every << (l + ph)) & (((1u32 << len) - 1) << l);
                    t.pieces[t.n] = (m as u16, true, g.at(s, y + pad, x + ph + pad));
                    t.n += 1;
                }
            }
            l += len;
        }
        t
    }

    #[inline]
    #[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn store(&self, tj: *mut u8, v: __m512i) {
        if let Some((even, odd)) = self.halves {
            let split = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
            let v = _mm512_permutexvar_epi32(split, v);
            _mm256_storeu_si256(tj.add(even) as *mut __m256i, _mm512_castsi512_si256(v));
            _mm256_storeu_si256(
                tj.add(odd) as *mut __m256i,
                _mm512_extracti64x4_epi64::<1>(v),
            );
            return;
        }
        for &(m, packed, off) in &self.pieces[..self.n] {
            // Masked-off lanes are not written (an offset before the plane's start included).
            let dst = tj.wrapping_add(off) as *mut i32;
            if packed {
                let n = m.count_ones();
                let keep = ((1u32 << n) - 1) as u16;
                _mm512_mask_storeu_epi32(dst, keep, _mm512_maskz_compress_epi32(m, v));
            } else {
                _mm512_mask_storeu_epi32(dst, m, v);
            }
        }
    }
}

/// 16×16 transpose of dwords: lane j of row i becomes lane i of row j.
#[inline]
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn transpose16x16_d(r: [__m512i; 16]) -> [__m512i; 16] {
    // Within each 128-bit lane: pairs, then quads of rows.
    let t: [__m512i; 16] = core::array::from_fn(|i| {
        let (a, b) = (r[i & !1], r[i | 1]);
        if i % 2 == 0 {
            _mm512_unpacklo_epi32(a, b)
        } else {
            _mm512_unpackhi_epi32(a, b)
        }
    });
    // u[4i + m]: rows 4i..4i+4 of column 4L + m in 128-bit lane L.
    let u: [__m512i; 16] = core::array::from_fn(|i| {
        let (base, m) = (i & !3, i % 4);
        let (a, b) = (t[base + (m >> 1)], t[base + 2 + (m >> 1)]);
        if m % 2 == 0 {
            _mm512_unpacklo_epi64(a, b)
        } else {
            _mm512_unpackhi_epi64(a, b)
        }
    });
    let mut out = [_mm512_setzero_si512(); 16];
    for m in 0..4 {
        let v0 = _mm512_shuffle_i32x4::<0x88>(u[m], u[4 + m]);
        let w0 = _mm512_shuffle_i32x4::<0xDD>(u[m], u[4 + m]);
        let v1 = _mm512_shuffle_i32x4::<0x88>(u[8 + m], u[12 + m]);
        let w1 = _mm512_shuffle_i32x4::<0xDD>(u[8 + m], u[12 + m]);
        out[m] = _mm512_shuffle_i32x4::<0x88>(v0, v1);
        out[8 + m] = _mm512_shuffle_i32x4::<0xDD>(v0, v1);
        out[4 + m] = _mm512_shuffle_i32x4::<0x88>(w0, w1);
        out[12 + m] = _mm512_shuffle_i32x4::<0xDD>(w0, w1);
    }
    out
}

/// Copies the patch quads of the pass's output pixels into the panel,
/// `[quad][vector][16 pixels][4]` with `nv` vectors per quad, row segment by row segment.
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn build_panel(p: &ConvParams, g: &Geo, pass: &Pass, panel: *mut u8) {
    let Pass {
        ptrs,
        slots,
        pix0,
        npx,
        nv,
    } = *pass;
    let (wo, s) = (p.output.w, p.stride());
    let npix = p.output.h * wo;
    let (kh, kw) = (p.window.kernel_h, p.window.kernel_w);
    if (wo == 4 || wo == 8) && npix.is_multiple_of(V) && pix0.is_multiple_of(V) {
        // Every vector is 16 / wo whole rows of one image: whole loads, one store per quad.
        for v in 0..nv {
            let (im, pi) = ((pix0 + v * V) / npix, (pix0 + v * V) % npix);
            let t = ptrs[im % slots].0;
            let oy = pi / wo;
            for ky in 0..kh {
                for kx in 0..kw {
                    let r0 = t.add(g.at(s, oy * s + ky, kx));
                    let q0 = (ky * kw + kx) * g.planes;
                    for j in 0..g.planes {
                        let src = r0.add(j * g.plane);
                        let x = if wo == 8 {
                            let a = _mm256_loadu_si256(src as *const __m256i);
                            let b = _mm256_loadu_si256(src.add(s * g.row) as *const __m256i);
                            _mm512_inserti64x4::<1>(_mm512_castsi256_si512(a), b)
                        } else {
                            let row = |r: usize| {
                                _mm_loadu_si128(src.add(r * s * g.row) as *const __m128i)
                            };
                            let a = _mm256_inserti128_si256::<1>(
                                _mm256_castsi128_si256(row(0)),
                                row(1),
                            );
                            let b = _mm256_inserti128_si256::<1>(
                                _mm256_castsi128_si256(row(2)),
                                row(3),
                            );
                            _mm512_inserti64x4::<1>(_mm512_castsi256_si512(a), b)
                        };
                        _mm512_storeu_si512(panel.add(((q0 + j) * nv + v) * 64) as *mut _, x);
                    }
                }
            }
        }
        return;
    }
    let mut lane = 0;
    while lane < npx {
        let (im, pi) = ((pix0 + lane) / npix, (pix0 + lane) % npix);
        let t = ptrs[im % slots].0;
        let (oy, ox) = (pi / wo, pi % wo);
        let v = lane / V;
        let l = lane % V;
        let len = (wo - ox).min(V - l).min(npx - lane);
        let m: __mmask16 = ((1u32 << len) - 1) as u16;
        let dst0 = panel.add(v * 64 + l * 4);
        for ky in 0..kh {
            for kx in 0..kw {
                let src = t.add(g.at(s, oy * s + ky, ox * s + kx));
                let q0 = (ky * kw + kx) * g.planes;
                for j in 0..g.planes {
                    let x = _mm512_maskz_loadu_epi32(m, src.add(j * g.plane) as *const i32);
                    _mm512_mask_storeu_epi32(dst0.add((q0 + j) * nv * 64) as *mut i32, m, x);
                }
            }
        }
        lane += len;
    }
}

/// The panel of a 1×1 conv without padding, C_in a multiple of 64, from the HWC inputs: per
/// vector and block of 16 quads, the 16 pixels' 64 channels (u8) transposed in registers.
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn build_panel_pointwise(p: &ConvParams, pass: &Pass, panel: *mut u8) {
    let Pass {
        ptrs,
        pix0,
        npx,
        nv,
        ..
    } = *pass;
    let (cin, w, wo, s) = (p.input.c, p.input.w, p.output.w, p.stride());
    let npix = p.output.h * wo;
    let flip = _mm512_set1_epi8(-128);
    for v in 0..nv {
        // The input pixel of each lane (lanes past npx repeat the last one: dropped later).
        let src: [*const u8; 16] = core::array::from_fn(|l| {
            let g = pix0 + (v * V + l).min(npx - 1);
            let (im, pi) = (g / npix, g % npix);
            let (oy, ox) = (pi / wo, pi % wo);
            (ptrs[im].1 as *const u8).add((oy * s * w + ox * s) * cin)
        });
        for jb in 0..cin / 64 {
            let rows: [__m512i; 16] = core::array::from_fn(|l| {
                _mm512_xor_si512(_mm512_loadu_si512(src[l].add(64 * jb) as *const _), flip)
            });
            let cols = transpose16x16_d(rows);
            for (m, &c) in cols.iter().enumerate() {
                _mm512_storeu_si512(panel.add(((16 * jb + m) * nv + v) * 64) as *mut _, c);
            }
        }
    }
}

/// Runs the NV×CH tile over every group of CH output channels; on the `first` pass also fills
/// each group's constants. `direct`: the vectors' bases in `T` (each vector one row segment),
/// else the panel.
#[inline]
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn groups<const NV: usize, const CH: usize>(
    p: &ConvParams,
    g: &Geo,
    r: &Regions,
    direct: Option<&[*const u8; PASS_VECTORS]>,
    first: bool,
) {
    let Regions { panel, tile, epi } = *r;
    let (k, cout, w) = (p.k(), p.output.c, p.weights.as_ptr());
    // When C_in < 4 the last quad's 4-byte reads pass the end of the weight row: into the next
    // row (bytes meeting zeros in T), or, for the last group, past the weights.
    let short = !g.wstep.is_multiple_of(4);
    let q = match direct {
        Some(b) => Quads::<NV>::new(
            core::array::from_fn(|v| b[v]),
            p.window.kernel_h * p.window.kernel_w,
            g.planes,
            g.plane,
            (p.window.kernel_w, p.stride(), g.row, g.wq * 4),
        ),
        None => Quads::<NV>::new(
            core::array::from_fn(|v| panel.add(v * 64) as *const u8),
            1,
            g.kq,
            NV * 64,
            (1, 1, 0, 0),
        ),
    };

    let out = OutputStage::new(p, g.hi);
    let mut co = 0;
    while co < cout {
        if first {
            fill_epi(p, co, CH, epi);
        }
        let (wc, ec, tc) = (w.add(co * k), epi.add(co), tile.add(co * V));
        // The next group's rows (the first group's after the last: the next pass), contiguous.
        let pf = w.add(if co + CH < cout { (co + CH) * k } else { 0 });
        let wk = (wc, pf, k, g.wstep);
        let tail = short && co + CH >= cout;
        let to = (tc, cout * V);
        match (g.hi, g.double) {
            (true, false) => tile_kernel::<NV, CH, true, false>(&q, tail, wk, ec, &out, to),
            (false, false) => tile_kernel::<NV, CH, false, false>(&q, tail, wk, ec, &out, to),
            (true, true) => tile_kernel::<NV, CH, true, true>(&q, tail, wk, ec, &out, to),
            (false, true) => tile_kernel::<NV, CH, false, true>(&q, tail, wk, ec, &out, to),
        }
        co += CH;
    }
}

/// Where a tile reads its patch quads: for tap t (of `taps`), `inner` quads starting at
/// `base[v] + off(t)`, `step` bytes apart. The panel is one tap of all quads; `T` itself is
/// read straight when each vector's 16 pixels lie in one output row.
#[derive(Clone, Copy)]
struct Quads<const NV: usize> {
    base: [*const u8; NV],
    taps: usize,
    inner: usize,
    step: usize,
    /// Tap offsets: `(t / kw)·row + ((t % kw) % s)·phase + ((t % kw) / s)·4`, the first
    /// [`TAPS`] precomputed (no divisions in the tile).
    kw: usize,
    s: usize,
    row: usize,
    phase: usize,
    offs: [usize; TAPS],
}

/// Taps whose offsets are precomputed (7×7 kernels and smaller).
const TAPS: usize = 49;

impl<const NV: usize> Quads<NV> {
    fn new(
        base: [*const u8; NV],
        taps: usize,
        inner: usize,
        step: usize,
        tap: (usize, usize, usize, usize),
    ) -> Self {
        let (kw, s, row, phase) = tap;
        let mut q = Quads {
            base,
            taps,
            inner,
            step,
            kw,
            s,
            row,
            phase,
            offs: [0; TAPS],
        };
        for t in 0..taps.min(TAPS) {
            q.offs[t] = q.tap_off(t);
        }
        q
    }

    fn tap_off(&self, t: usize) -> usize {
        let (ky, kx) = (t / self.kw, t % self.kw);
        ky * self.row + (kx % self.s) * self.phase + (kx / self.s) * 4
    }

    #[inline(always)]
    fn off(&self, t: usize) -> usize {
        if t < TAPS {
            self.offs[t]
        } else {
            self.tap_off(t)
        }
    }
}

/// NV vectors × CH channels: `vpdpbusd` of each patch vector with each channel's broadcast
/// weight quad, then the requantized bytes into the tile (row per channel).
#[inline(always)]
unsafe fn tile_kernel<const NV: usize, const CH: usize, const HI: bool, const DOUBLE: bool>(
    q: &Quads<NV>,
    tail: bool,
    (w, pf, k, wstep): (*const i8, *const i8, usize, usize),
    epi: *const Epi,
    out: &OutputStage,
    (tile, tstride): (*mut u8, usize),
) {
    let mut acc: [[__m512i; NV]; CH] =
        core::array::from_fn(|c| [_mm512_set1_epi32((*epi.add(c)).bias); NV]);
    let mut wp = w;
    let mut xp = q.base;
    for t in 0..q.taps {
        let off = q.off(t);
        xp = core::array::from_fn(|v| q.base[v].add(off));
        let n = q.inner - (tail && t + 1 == q.taps) as usize;
        for _ in 0..n {
            // The next group's CH·K weight bytes into L2 over this tile's K/4 steps, so Σw and
            // the next tile find them there (the late layers' weights outgrow L2).
            _mm_prefetch::<_MM_HINT_T1>(pf.wrapping_add(wp.offset_from(w) as usize * CH));
            let xv: [__m512i; NV] = core::array::from_fn(|v| _mm512_loadu_si512(xp[v] as *const _));
            for (c, row) in acc.iter_mut().enumerate() {
                let wv = _mm512_set1_epi32((wp.add(c * k) as *const i32).read_unaligned());
                for (a, &x) in row.iter_mut().zip(&xv) {
                    *a = _mm512_dpbusd_epi32(*a, x, wv);
                }
            }
            xp = core::array::from_fn(|v| xp[v].add(q.step));
            wp = wp.add(wstep);
        }
    }
    if tail {
        // The row's last bytes (fewer than 4), read without passing its end.
        let rem = k - (q.taps * q.inner - 1) * wstep;
        let xv: [__m512i; NV] = core::array::from_fn(|v| _mm512_loadu_si512(xp[v] as *const _));
        for (c, row) in acc.iter_mut().enumerate() {
            let src = wp.add(c * k) as *const u8;
            let mut q = src.read() as u32;
            if rem > 1 {
                q |= (src.add(1).read() as u32) << 8;
            }
            if rem > 2 {
                q |= (src.add(2).read() as u32) << 16;
            }
            let wv = _mm512_set1_epi32(q as i32);
            for (a, &x) in row.iter_mut().zip(&xv) {
                *a = _mm512_dpbusd_epi32(*a, x, wv);
            }
        }
    }
    // Unrolled by hand with constant indices (CH ≤ 8): the accumulators stay in registers,
    // here and in the loop above.
    macro_rules! channel {
        ($c:literal) => {
            if $c < CH {
                // A copy: the tile stores cannot alias it, so its broadcasts are done once.
                let e = epi.add($c).read();
                for v in 0..NV {
                    let b = out.apply::<HI, DOUBLE>(acc[$c][v], &e);
                    _mm_storeu_si128(tile.add(v * tstride + $c * V) as *mut __m128i, b);
                }
            }
        };
    }
    channel!(0);
    channel!(1);
    channel!(2);
    channel!(3);
    channel!(4);
    channel!(5);
    channel!(6);
    channel!(7);
}

/// The output stage of the VNNI convs: one channel's 16 accumulators (bias included) to
/// bytes, exactly `OutputQuant::finish` in either rounding (the channel's `FusedRequant`),
/// with that channel's constants broadcast.
#[derive(Clone, Copy)]
pub(super) struct OutputStage {
    /// The clamp: i32 lanes for the i32 epilogue, else i64 lanes.
    clamp: (__m512i, __m512i),
    /// Even and odd lanes back together: from the low (i64 epilogue) or high (i32) halves.
    lo_idx: __m512i,
    hi_idx: __m512i,
    /// The double rounding's i32 epilogue: what lies below the high halves, 2^30 for a
    /// non-negative product and 2^30 − 2^31 for a negative one (i64 lanes).
    below: (__m512i, __m512i),
    /// The output zero point, added after the shift: i32 lanes for the i32 epilogue, else
    /// i64 lanes.
    zero_point: __m512i,
}

impl OutputStage {
    /// For conv `p`, with the i32 epilogue where `hi` ([`epi_hi`]).
    #[inline(always)]
    pub(super) unsafe fn new(p: &ConvParams, hi: bool) -> Self {
        let (lo_c, hi_c) = (p.out.act_min.max(-128), p.out.act_max.min(127));
        OutputStage {
            clamp: if hi {
                (_mm512_set1_epi32(lo_c), _mm512_set1_epi32(hi_c))
            } else {
                (
                    _mm512_set1_epi64(lo_c as i64),
                    _mm512_set1_epi64(hi_c as i64),
                )
            },
            lo_idx: _mm512_setr_epi32(0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30),
            hi_idx: _mm512_setr_epi32(1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31),
            below: (_mm512_set1_epi64(1 << 30), _mm512_set1_epi64(-(1 << 30))),
            zero_point: if hi {
                _mm512_set1_epi32(p.out.zero_point)
            } else {
                _mm512_set1_epi64(p.out.zero_point as i64)
            },
        }
    }

    /// `((P + r − [P < 0]·corr) >> n) + z` with P = (acc·2^ls)·M0, clamped (`FusedRequant`).
    /// `HI` (n from 33, see [`epi_hi`]; then ls = 0): round's part
    /// below 2^32 is 0 (single) or 2^30 (double) and corr 0 or 2^31 for every channel, so
    /// `(P + round − [P < 0]·corr) >> n = (((P + b) >> 32) + r_hi) >> (n − 32)`, b that part
    /// less the correction (nothing for the single rounding, ±2^30 by P's sign for the
    /// double), and (P + b) >> 32 (the high halves) fits i32: the rest, the zero point after
    /// the shift and the clamp, runs on 16 i32 lanes. Else on even and odd lanes in i64, the
    /// low halves back together.
    #[inline(always)]
    pub(super) unsafe fn apply<const HI: bool, const DOUBLE: bool>(
        &self,
        acc: __m512i,
        e: &Epi,
    ) -> __m128i {
        let clamp = self.clamp;
        // `vpmuldq` reads the low half of each 64-bit lane: a 32-bit broadcast of M0 is enough.
        let m = _mm512_set1_epi32(e.m0);
        let zero = _mm512_setzero_si512();
        if HI {
            let below = |p: __m512i| {
                if DOUBLE {
                    let neg = _mm512_cmplt_epi64_mask(p, zero);
                    let q = _mm512_add_epi64(p, self.below.0);
                    _mm512_mask_add_epi64(q, neg, p, self.below.1)
                } else {
                    p
                }
            };
            let ev = below(_mm512_mul_epi32(acc, m));
            let od = below(_mm512_mul_epi32(_mm512_srli_epi64::<32>(acc), m));
            let h = _mm512_add_epi32(
                _mm512_permutex2var_epi32(ev, self.hi_idx, od),
                _mm512_set1_epi32(e.r_hi),
            );
            let y = _mm512_sra_epi32(h, _mm_cvtsi32_si128(e.n - 32));
            let y = _mm512_add_epi32(y, self.zero_point);
            _mm512_cvtepi32_epi8(_mm512_min_epi32(_mm512_max_epi32(y, clamp.0), clamp.1))
        } else {
            let r = _mm512_set1_epi64(e.r);
            let n = _mm_cvtsi32_si128(e.n);
            let (x, corr) = if DOUBLE {
                let ls = _mm_cvtsi32_si128(e.ls);
                (_mm512_sll_epi32(acc, ls), _mm512_set1_epi64(e.corr as i64))
            } else {
                (acc, zero)
            };
            let one = |x: __m512i| {
                let p = _mm512_mul_epi32(x, m);
                let mut t = _mm512_add_epi64(p, r);
                if DOUBLE {
                    t = _mm512_mask_add_epi64(t, _mm512_cmplt_epi64_mask(p, zero), t, corr);
                }
                let y = _mm512_add_epi64(_mm512_sra_epi64(t, n), self.zero_point);
                _mm512_min_epi64(_mm512_max_epi64(y, clamp.0), clamp.1)
            };
            let ev = one(x);
            let od = one(_mm512_srli_epi64::<32>(x));
            _mm512_cvtepi32_epi8(_mm512_permutex2var_epi32(ev, self.lo_idx, od))
        }
    }
}

/// Whether the CPU has AVX-512 VBMI (`vpermb`; CPUID leaf 7, ECX bit 1), cached. The VNNI
/// kernels run only where the OS saves the AVX-512 state, so the bit alone decides.
pub(super) fn vbmi() -> bool {
    use core::sync::atomic::{AtomicU8, Ordering};
    static STATE: AtomicU8 = AtomicU8::new(0);
    match STATE.load(Ordering::Relaxed) {
        1 => false,
        2 => true,
        _ => {
            // SAFETY: CPUID exists on every x86-64 CPU, and leaf 7 on every one with AVX2.
            #[allow(unused_unsafe)]
            let has = unsafe { __cpuid_count(7, 0).ecx & 2 != 0 };
            STATE.store(1 + has as u8, Ordering::Relaxed);
            has
        }
    }
}

/// Tile (`[vector][channel][16 pixels]`) of pixels `pix0..pix0 + npx` (numbered across the
/// images, `npix` each) to their HWC rows of `cout` bytes.
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl,avx512vbmi,avx512vnni")]
pub(super) unsafe fn store_tile(
    tile: *const u8,
    cout: usize,
    npix: usize,
    ptrs: &[(*mut u8, *const i8, *mut i8)],
    pix0: usize,
    npx: usize,
) {
    let vbmi = vbmi();
    let row = |l: usize| {
        let (im, pi) = ((pix0 + l) / npix, (pix0 + l) % npix);
        // `wrapping_add`: the pointer may sit before its slice (a band's, see `lanes`).
        (ptrs[im].2 as *mut u8).wrapping_add(pi * cout)
    };
    let mut l0 = 0;
    while l0 < npx {
        let n = (npx - l0).min(16);
        let src = tile.add(l0 / V * cout * V);
        // 16 pixels of one image: consecutive rows.
        let one = n == 16 && (pix0 + l0) / npix == (pix0 + l0 + 15) / npix;
        let mut c0 = 0;
        if one {
            let dst = row(l0);
            while c0 + 16 <= cout {
                if vbmi {
                    transpose16_vbmi(src.add(c0 * V), dst.add(c0), cout);
                } else {
                    transpose16_sse(src.add(c0 * V), V, dst.add(c0), cout);
                }
                c0 += 16;
            }
        } else {
            // A row's last pixels (fewer than 16), or pixels of two images (small images in
            // a group): transposed whole on the stack, each of the n rows copied to its place.
            let mut dst = [core::ptr::null_mut::<u8>(); 16];
            for (l, d) in dst.iter_mut().enumerate().take(n) {
                *d = row(l0 + l);
            }
            let mut buf = [0u8; 256];
            while c0 + 16 <= cout {
                if vbmi {
                    transpose16_vbmi(src.add(c0 * V), buf.as_mut_ptr(), 16);
                } else {
                    transpose16_sse(src.add(c0 * V), V, buf.as_mut_ptr(), 16);
                }
                for (l, d) in dst.iter().enumerate().take(n) {
                    let v = _mm_loadu_si128(buf.as_ptr().add(16 * l) as *const __m128i);
                    _mm_storeu_si128(d.add(c0) as *mut __m128i, v);
                }
                c0 += 16;
            }
        }
        if vbmi && cout - c0 >= 8 {
            // The last 8 channels (C_out is a multiple of 8): 8 bytes per pixel.
            let mut buf = [0u64; 16];
            transpose8_vbmi(src.add(c0 * V), buf.as_mut_ptr() as *mut u8);
            for (l, &v) in buf.iter().enumerate().take(n) {
                (row(l0 + l).add(c0) as *mut u64).write_unaligned(v);
            }
            c0 += 8;
        }
        for l in l0..l0 + n {
            let dst = row(l);
            for c in c0..cout {
                dst.add(c).write(src.add(c * V + l % V).read());
            }
        }
        l0 += n;
    }
}

/// 16×16 byte transpose: row i of `src` (stride `ss`) becomes column i of `dst` (stride `ds`).
#[inline]
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn transpose16_sse(src: *const u8, ss: usize, dst: *mut u8, ds: usize) {
    let r: [__m128i; 16] =
        core::array::from_fn(|i| _mm_loadu_si128(src.add(i * ss) as *const __m128i));
    // a[i]: rows 2i, 2i+1 interleaved, columns 0..8 (i < 8) or 8..16 (i ≥ 8).
    let a: [__m128i; 16] = core::array::from_fn(|i| {
        let (x, y) = (r[2 * (i % 8)], r[2 * (i % 8) + 1]);
        if i < 8 {
            _mm_unpacklo_epi8(x, y)
        } else {
            _mm_unpackhi_epi8(x, y)
        }
    });
    // b[4h + 2·hi + …]: rows 4i..4i+4 for 4 columns.
    let b: [__m128i; 16] = core::array::from_fn(|i| {
        let half = i / 8; // columns 0..8 or 8..16
        let hi = (i / 4) % 2; // the lower or upper 4 of those columns
        let pair = i % 4; // rows 4·pair..4·pair + 4
        let (x, y) = (a[8 * half + 2 * pair], a[8 * half + 2 * pair + 1]);
        if hi == 0 {
            _mm_unpacklo_epi16(x, y)
        } else {
            _mm_unpackhi_epi16(x, y)
        }
    });
    // b[4q + pair] holds columns 4q..4q+4 of rows 4·pair..4·pair+4.
    for q in 0..4 {
        let (b0, b1, b2, b3) = (b[4 * q], b[4 * q + 1], b[4 * q + 2], b[4 * q + 3]);
        let lo01 = _mm_unpacklo_epi32(b0, b1); // rows 0..8, columns 4q, 4q+1
        let hi01 = _mm_unpackhi_epi32(b0, b1); // rows 0..8, columns 4q+2, 4q+3
        let lo23 = _mm_unpacklo_epi32(b2, b3); // rows 8..16
        let hi23 = _mm_unpackhi_epi32(b2, b3);
        let cols = [
            _mm_unpacklo_epi64(lo01, lo23),
            _mm_unpackhi_epi64(lo01, lo23),
            _mm_unpacklo_epi64(hi01, hi23),
            _mm_unpackhi_epi64(hi01, hi23),
        ];
        for (i, &c) in cols.iter().enumerate() {
            _mm_storeu_si128(dst.add((4 * q + i) * ds) as *mut __m128i, c);
        }
    }
}

/// [`transpose8_vbmi`]'s byte indices: pixels 0–7, then 8–15.
const TRANSPOSE8: [[u8; 64]; 2] = {
    let mut t = [[0u8; 64]; 2];
    let mut i = 0;
    while i < 128 {
        let (half, j) = (i / 64, i % 64);
        t[half][j] = (16 * (j % 8) + j / 8 + 8 * half) as u8;
        i += 1;
    }
    t
};

/// 8 channels × 16 pixels (128 bytes, channel-major) to 16 rows of 8 channel bytes at `dst`
/// (128 bytes, pixel-major): byte 8p + c of the result is byte 16c + p of `src`.
#[inline]
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl,avx512vbmi")]
unsafe fn transpose8_vbmi(src: *const u8, dst: *mut u8) {
    let (a, b) = (
        _mm512_loadu_si512(src as *const _),
        _mm512_loadu_si512(src.add(64) as *const _),
    );
    let idx = |half: usize| _mm512_loadu_si512(TRANSPOSE8[half].as_ptr() as *const _);
    _mm512_storeu_si512(dst as *mut _, _mm512_permutex2var_epi8(a, idx(0), b));
    _mm512_storeu_si512(
        dst.add(64) as *mut _,
        _mm512_permutex2var_epi8(a, idx(1), b),
    );
}

/// 16 channels × 16 pixels (256 bytes, channel-major) to 16 rows of 16 channel bytes, row `p`
/// at `dst + p·ds`: bytes regrouped per pixel within each 4 channels (`vpermb`), then the
/// four 4-byte groups of each pixel interleaved.
#[inline]
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl,avx512vbmi")]
unsafe fn transpose16_vbmi(src: *const u8, dst: *mut u8, ds: usize) {
    // Byte 4p + j of the result: channel j, pixel p.
    let idx = _mm512_set_epi8(
        63, 47, 31, 15, 62, 46, 30, 14, 61, 45, 29, 13, 60, 44, 28, 12, 59, 43, 27, 11, 58, 42, 26,
        10, 57, 41, 25, 9, 56, 40, 24, 8, 55, 39, 23, 7, 54, 38, 22, 6, 53, 37, 21, 5, 52, 36, 20,
        4, 51, 35, 19, 3, 50, 34, 18, 2, 49, 33, 17, 1, 48, 32, 16, 0,
    );
    let y: [__m512i; 4] = core::array::from_fn(|k| {
        _mm512_permutexvar_epi8(idx, _mm512_loadu_si512(src.add(64 * k) as *const _))
    });
    // Per 128-bit lane L (pixels 4L..4L+4): e[m] holds pixel 4L + m's 16 channels.
    let a = _mm512_unpacklo_epi32(y[0], y[1]);
    let b = _mm512_unpackhi_epi32(y[0], y[1]);
    let c = _mm512_unpacklo_epi32(y[2], y[3]);
    let d = _mm512_unpackhi_epi32(y[2], y[3]);
    let e = [
        _mm512_unpacklo_epi64(a, c),
        _mm512_unpackhi_epi64(a, c),
        _mm512_unpacklo_epi64(b, d),
        _mm512_unpackhi_epi64(b, d),
    ];
    for (m, &v) in e.iter().enumerate() {
        let lanes = [
            _mm512_castsi512_si128(v),
            _mm512_extracti32x4_epi32::<1>(v),
            _mm512_extracti32x4_epi32::<2>(v),
            _mm512_extracti32x4_epi32::<3>(v),
        ];
        for (l, &x) in lanes.iter().enumerate() {
            _mm_storeu_si128(dst.add((4 * l + m) * ds) as *mut __m128i, x);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::test_util::{check_conv_rows, conv_suite, ConvCase, ConvData};
    use crate::kernels::Kernels;
    use proptest::prelude::*;

    /// Declines only outside a uniform window and the lanes geometry or for an empty clamp, in
    /// either rounding, whatever the shifts. Whole, and in bands of rows.
    fn check(c: &ConvCase) {
        if !Kernels::vnni_available() {
            return;
        }
        let declines = |p: &ConvParams, _| {
            let empty_clamp = p.out.act_min.max(-128) > p.out.act_max.min(127);
            !p.is_uniform() || !lanes_supported(&p.geometry()) || empty_clamp
        };
        // SAFETY: AVX-512 VNNI checked above.
        check_conv_rows(
            c,
            &mut |p, im, r| unsafe { conv2d_lanes(p, im, r) },
            &declines,
        );
    }

    conv_suite!(check);

    /// Several images in one call (passes spanning images, T slots reused) against the scalar
    /// kernel image by image, in the case's rounding.
    fn check_batch(c: &ConvCase, n: usize) {
        if !Kernels::vnni_available() {
            return;
        }
        let Some(mut d) = ConvData::typical(c) else {
            return;
        };
        let inputs: Vec<Vec<i8>> = (0..n).map(|_| d.another_input()).collect();
        let p = d.params();
        let sb = crate::kernels::conv_scratch_bytes(&p.geometry());
        let mut outs = vec![vec![0x55i8; p.output.len()]; n];
        let mut scr = vec![vec![0xAAu8; sb]; n];
        let mut imgs = images(&inputs, &mut outs, &mut scr);
        // SAFETY: AVX-512 VNNI checked above.
        assert!(unsafe { conv2d_lanes_batch(&p, &mut imgs) });
        for (i, (x, got)) in inputs.iter().zip(&outs).enumerate() {
            let mut want = vec![0i8; p.output.len()];
            crate::kernels::scalar::conv2d(&p, x, &mut want);
            let bad: Vec<usize> = (0..want.len()).filter(|&j| want[j] != got[j]).collect();
            assert!(bad.is_empty(), "{c:?} image {i}: {bad:?}");
        }
    }

    /// The images of a batched call.
    pub(super) fn images<'a>(
        inputs: &'a [Vec<i8>],
        outs: &'a mut [Vec<i8>],
        scratch: &'a mut [Vec<u8>],
    ) -> Vec<ConvImage<'a>> {
        inputs
            .iter()
            .zip(outs.iter_mut())
            .zip(scratch.iter_mut())
            .map(|((x, y), s)| ConvImage::new(x, y, s))
            .collect()
    }

    #[test]
    fn batches() {
        for &(cin, cout, hw, k, s, n) in &[
            (8, 16, 4, 3, 1, 1),
            (8, 16, 4, 3, 1, 8),
            (8, 8, 2, 3, 1, 7),
            (4, 16, 8, 3, 2, 5),
            (64, 16, 16, 3, 1, 3),
            (3, 8, 5, 3, 1, 8),
            (12, 24, 1, 1, 1, 8),
            (16, 8, 9, 1, 2, 6),
            (64, 16, 5, 1, 2, 6),
            (16, 8, 8, 3, 1, 3),
            (32, 16, 16, 3, 2, 4),
            (128, 8, 4, 1, 1, 8),
            // Images of 9 and 36 pixels: 16-pixel vectors across images.
            (32, 40, 3, 1, 1, 5),
            // Fewer than 4 channels (quads by `vpermb`), strides 1 and 2.
            (1, 8, 17, 3, 2, 3),
            (2, 16, 16, 3, 1, 2),
            (3, 8, 32, 3, 2, 2),
            (16, 24, 6, 1, 1, 4),
        ] {
            for r in Rounding::ALL {
                let c = ConvCase::square(cin, cout, hw, k, s, k / 2, 7 + n as u64);
                check_batch(&c.with_rounding(r), n);
            }
        }
    }

    #[test]
    fn transpose_16x16() {
        if !Kernels::vnni_available() || !vbmi() {
            return;
        }
        let src: Vec<u8> = (0..256).map(|i| i as u8).collect();
        for vbmi in [false, true] {
            let mut dst = vec![0u8; 16 * 24];
            if vbmi {
                unsafe { transpose16_vbmi(src.as_ptr(), dst.as_mut_ptr(), 24) };
            } else {
                unsafe { transpose16_sse(src.as_ptr(), 16, dst.as_mut_ptr(), 24) };
            }
            for c in 0..16 {
                for p in 0..16 {
                    assert_eq!(dst[p * 24 + c], src[c * 16 + p], "{vbmi} {c} {p}");
                }
            }
        }
    }

    proptest! {
        /// Output rows of 16 or 32 pixels: the patch quads are read from `T` directly.
        #[test]
        fn lanes_rows_of_16(
            cin in prop::sample::select(vec![3usize, 4, 8, 68]),
            cout in prop::sample::select(vec![8usize, 16, 24]),
            h in 1usize..5,
            wide in any::<bool>(),
            k in prop::sample::select(vec![1usize, 3]),
            stride in 1usize..=2, seed in any::<u64>(),
        ) {
            let wo = if wide { 32 } else { 16 };
            let w = wo * stride;
            check(&ConvCase { w, ..ConvCase::square(cin, cout, h, k, stride, k / 2, seed) });
        }
    }
}

#[cfg(test)]
mod timing {
    use super::*;
    use crate::kernels::test_util::{ConvCase, ConvData};
    use crate::kernels::Kernels;

    /// Times the batched kernel on ResNet-18 (CIFAR) shapes, 8 images per call, in the single
    /// rounding or, with `ROUNDING=double`, the double:
    /// `SHAPE=cin,cout,hw,k,s cargo test --release -p octet-runtime --lib -- --ignored --nocapture time_lanes`.
    #[test]
    #[ignore]
    fn time_lanes() {
        if !Kernels::vnni_available() {
            return;
        }
        let shape = std::env::var("SHAPE").unwrap_or_else(|_| "64,64,32,3,1".into());
        let v: Vec<usize> = shape.split(',').map(|x| x.parse().unwrap()).collect();
        let (cin, cout, hw, kh, s) = (v[0], v[1], v[2], v[3], v[4]);
        let n = 8;
        let rounding = match std::env::var("ROUNDING").as_deref() {
            Ok("double") => Rounding::Double,
            _ => Rounding::Single,
        };
        let c = ConvCase::square(cin, cout, hw, kh, s, kh / 2, 5).with_rounding(rounding);
        let mut d = ConvData::typical(&c).unwrap();
        let inputs: Vec<Vec<i8>> = (0..n).map(|_| d.another_input()).collect();
        let p = d.params();
        let (ho, kk) = (p.output.h, p.k());
        let sb = crate::kernels::conv_scratch_bytes(&p.geometry());
        let mut outs = vec![vec![0i8; cout * ho * ho]; n];
        let mut scr = vec![vec![0u8; sb]; n];
        let iters = std::env::var("ITERS").map_or(200, |x| x.parse().unwrap());
        fn cpu() -> f64 {
            #[repr(C)]
            struct Ts(i64, i64);
            extern "C" {
                fn clock_gettime(clock: i32, ts: *mut Ts) -> i32;
            }
            let mut ts = Ts(0, 0);
            // SAFETY: CLOCK_THREAD_CPUTIME_ID and a valid out pointer.
            unsafe { clock_gettime(3, &mut ts) };
            ts.0 as f64 + ts.1 as f64 * 1e-9
        }
        let mut best = f64::MAX;
        let evict = std::env::var("EVICT").is_ok();
        let mut junk = vec![0u8; if evict { 24 << 20 } else { 0 }];
        let mut spent = 0.0;
        for _ in 0..5 {
            let t = cpu();
            for _ in 0..iters / 5 {
                if evict {
                    let e = cpu();
                    junk.iter_mut()
                        .step_by(64)
                        .for_each(|b| *b = b.wrapping_add(1));
                    spent += cpu() - e;
                }
                let mut imgs = super::tests::images(&inputs, &mut outs, &mut scr);
                assert!(unsafe { conv2d_lanes_batch(&p, &mut imgs) });
            }
            best = best.min((cpu() - t - spent) / (iters / 5) as f64);
            spent = 0.0;
        }
        let macs = (n * cout * ho * ho * kk) as f64;
        println!(
            "{cin}->{cout} {hw}x{hw} k{kh} s{s}: {:.1} us/img, {:.1} GMAC/s",
            best / n as f64 * 1e6,
            macs / best / 1e9
        );
    }
}
