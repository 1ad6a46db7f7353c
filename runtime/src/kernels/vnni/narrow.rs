//! conv2d, AVX-512 VNNI, for inputs with few channels (C_in ≤ 8: the first layer of every
//! model here, 1 channel for Fashion-MNIST, 3 for CIFAR-10; LeNet's second, 6 channels).
//!
//! With one input channel a quad of channels (what `vpdpbusd` multiplies per lane) would be
//! three quarters zeros. Here a quad is instead four consecutive bytes of a kernel row
//! (`kw·C_in` bytes of the HWC input, contiguous): the taps of one kernel row take
//! `G = ⌈kw·C_in / 4⌉` quads, so a 5×5 kernel over 1 channel costs 10 `vpdpbusd` per 16 output
//! pixels and channel instead of 25. The padded input is copied once as u8 (x + 128) into the
//! op's scratch; the quads of 16 output pixels are picked out of 128 input bytes by one
//! `vpermt2b` (AVX-512 VBMI) per kernel row and quad, shared by every output channel, and the
//! weights' quads (zero past `kw·C_in`) are built once per call in the scratch after it. The
//! epilogue is the pixels-in-lanes kernel's (`lanes::OutputStage`), in either rounding.

use core::arch::x86_64::*;

use super::lanes::{epi_hi, epi_supported, fill_epi, store_tile, vbmi, Epi, OutputStage};
use super::padded::{pad_flipped, row_bytes};
use crate::kernels::{ConvImage, ConvParams};

/// Pixels per vector.
const V: usize = 16;
/// Output channels per register tile.
const CH: usize = 8;
/// Largest kh·G (quads per output pixel and channel).
const MAX_TAPS: usize = 64;
/// Largest G (quads per kernel row).
const MAX_G: usize = 8;
/// Bytes every window load may read past the padded image.
const SLACK: usize = 128;

/// Quads per kernel row.
const fn quads(p: &ConvParams) -> usize {
    (p.window.kernel_w * p.input.c).div_ceil(4)
}

/// Whether [`conv2d_narrow`] covers this conv (given enough scratch): C_in ≤ 8, a kernel row
/// in at most 8 quads, the 16 pixels' windows within 128 bytes, the epilogue's range
/// (`epi_supported`), a uniform window, and AVX-512 VBMI; either rounding.
pub fn narrow_supported(p: &ConvParams) -> bool {
    let (cin, s) = (p.input.c, p.stride());
    let g = quads(p);
    let (hp, wp) = (p.input.h + 2 * p.pad(), p.input.w + 2 * p.pad());
    p.is_uniform()
        && (1..=8).contains(&cin)
        && s >= 1
        && (1..=MAX_G).contains(&g)
        && (V - 1) * s * cin + 4 * g <= 128
        && p.window.kernel_h >= 1
        && p.window.kernel_h * g <= MAX_TAPS
        && p.output.c >= 1
        && hp >= p.window.kernel_h
        && wp >= p.window.kernel_w
        && p.output.h == (hp - p.window.kernel_h) / s + 1
        && p.output.w == (wp - p.window.kernel_w) / s + 1
        && epi_supported(p)
        && vbmi()
}

/// Scratch regions: the padded image (+ SLACK, to a multiple of 64), the weight quads, the
/// constants, the output tile.
fn regions(p: &ConvParams) -> [usize; 4] {
    let (hp, wp) = (p.input.h + 2 * p.pad(), p.input.w + 2 * p.pad());
    let cout = p.output.c;
    [
        (hp * wp * p.input.c + SLACK).next_multiple_of(64),
        cout.next_multiple_of(CH) * p.window.kernel_h * quads(p) * 4,
        cout * core::mem::size_of::<Epi>(),
        cout * V,
    ]
}

/// Scratch bytes [`conv2d_narrow`] needs (the regions and up to 64 for alignment).
pub fn narrow_scratch(p: &ConvParams) -> usize {
    64 + regions(p).iter().sum::<usize>()
}

/// Whether the dispatch should take [`conv2d_narrow`]: covered, and fewer quads per output
/// than the pixels-in-lanes kernel's one per tap (a 3×3 kernel over 3 channels is 3 quads
/// per kernel row either way, and the lanes kernel batches images), a stride above 1 (the
/// lanes kernel splits the input by stride phase: MobileNet's 3-channel stride-2 stem, 96×96
/// → 48×48, ran in 13.3 µs against 33.0 µs, per-op profile on one Zen 4 core), or no lanes
/// kernel.
pub fn narrow_preferred(p: &ConvParams) -> bool {
    narrow_supported(p)
        && (quads(p) < p.window.kernel_w
            || p.stride() > 1
            || !crate::kernels::lanes_supported(&p.geometry()))
}

/// Same bytes as `scalar::conv2d`, or `false` (output untouched) when [`narrow_supported`]
/// fails or `scratch` cannot hold the padded input (`(h + 2·pad)·(w + 2·pad)·C_in + 128`
/// bytes), the weight quads, the constants and a tile: the caller then runs another kernel.
///
/// # Safety
/// The CPU must support AVX2, AVX-512 F, BW, VL, VBMI and VNNI.
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl,avx512vbmi,avx512vnni")]
pub unsafe fn conv2d_narrow(p: &ConvParams, im: ConvImage) -> bool {
    if !narrow_supported(p) {
        return false;
    }
    let (input, output, scratch) = (im.input, im.output, im.scratch);
    let (cin, s, kh) = (p.input.c, p.stride(), p.window.kernel_h);
    let (cout, ho, wo) = (p.output.c, p.output.h, p.output.w);
    let g = quads(p);
    let row = row_bytes(p);
    let taps = kh * g;
    let [img_len, wq_len, epi_len, _] = regions(p);
    let base = scratch.as_ptr().align_offset(64);
    if scratch.len() < narrow_scratch(p)
        || input.len() < p.input.len()
        || output.len() < ho * wo * cout
        || p.weights.len() < cout * p.k()
    {
        return false;
    }
    let img = scratch.as_mut_ptr().add(base);
    let wq = img.add(img_len) as *mut i32;
    let epi = img.add(img_len + wq_len) as *mut Epi;
    let tile = img.add(img_len + wq_len + epi_len);
    let hp = p.input.h + 2 * p.pad();
    pad_flipped(p, input, img, 0..hp);
    // Read only by lanes that are dropped.
    core::ptr::write_bytes(img.add(hp * row), 0, SLACK);

    weight_quads(p, wq);
    fill_epi(p, 0, cout, epi);
    let hi = epi_hi(p);
    let tiles = Tiles {
        wq,
        epi,
        tile,
        taps,
        cout,
        hi,
        double: p.out.rounding == crate::requant::Rounding::Double,
        out: OutputStage::new(p, hi),
    };

    // Byte 4l + j of quad q of pixel lane l: window byte l·s·C_in + 4q + j.
    let idx: [__m512i; MAX_G] = core::array::from_fn(|q| {
        let b: [u8; 64] = core::array::from_fn(|i| ((i / 4) * s * cin + 4 * q + i % 4) as u8);
        _mm512_loadu_si512(b.as_ptr() as *const _)
    });
    // Byte i of a 16-pixel HWC run (C_out ≤ 8) is channel i % C_out of pixel i / C_out:
    // tile byte (i % C_out)·16 + i / C_out (below 128).
    let hwc: [__m512i; 2] = core::array::from_fn(|h| {
        let c = cout.clamp(1, 8);
        let b: [u8; 64] = core::array::from_fn(|j| {
            let i = (64 * h + j).min(c * V - 1);
            ((i % c) * V + i / c) as u8
        });
        _mm512_loadu_si512(b.as_ptr() as *const _)
    });
    let out = [(
        core::ptr::null_mut(),
        core::ptr::null(),
        output.as_mut_ptr(),
    )];
    let mut xs = [_mm512_setzero_si512(); MAX_TAPS];
    for oy in 0..ho {
        for x0 in (0..wo).step_by(V) {
            for ky in 0..kh {
                let w0 = img.add((oy * s + ky) * row + x0 * s * cin);
                let a = _mm512_loadu_si512(w0 as *const _);
                let b = _mm512_loadu_si512(w0.add(64) as *const _);
                for q in 0..g {
                    xs[ky * g + q] = _mm512_permutex2var_epi8(a, idx[q], b);
                }
            }
            tiles.compute(&xs);
            let n = (wo - x0).min(V);
            if cout <= 8 {
                let dst = output.as_mut_ptr().add((oy * wo + x0) * cout);
                store_hwc(tile, &hwc, dst, cout, n);
            } else {
                store_tile(tile, cout, ho * wo, &out, oy * wo + x0, n);
            }
        }
    }
    true
}

/// Weight quads `[channel][ky][quad]`, zero past the kernel row and for the channels that pad
/// C_out to a multiple of CH.
// Inlined into `conv2d_narrow`, whose target features reach the intrinsics.
#[inline(always)]
unsafe fn weight_quads(p: &ConvParams, wq: *mut i32) {
    let (kh, g, cout) = (p.window.kernel_h, quads(p), p.output.c);
    let taps = kh * g;
    let run = p.window.kernel_w * p.input.c;
    // Masked loads and stores: `run` bytes in (never past the weights), 4·G out.
    let (min, mout) = ((1u64 << run) - 1, (1u64 << (4 * g)) - 1);
    for co in 0..cout.next_multiple_of(CH) {
        for ky in 0..kh {
            let v = if co < cout {
                let src = p.weights.as_ptr().add(co * p.k() + ky * run);
                _mm256_maskz_loadu_epi8(min as u32, src)
            } else {
                _mm256_setzero_si256()
            };
            let dst = wq.add(co * taps + ky * g) as *mut i8;
            _mm256_mask_storeu_epi8(dst, mout as u32, v);
        }
    }
}

/// What every 16 output pixels of one call share: the weight quads, the constants, the tile.
struct Tiles {
    wq: *const i32,
    epi: *const Epi,
    /// `[channel][16 pixels]`.
    tile: *mut u8,
    /// Quads per output pixel and channel: kh·G.
    taps: usize,
    cout: usize,
    /// The i32 epilogue applies (`epi_hi`).
    hi: bool,
    /// The double rounding.
    double: bool,
    out: OutputStage,
}

impl Tiles {
    /// Every output channel of 16 pixels whose quads are `xs`, requantized into the tile.
    // Inlined into `conv2d_narrow`, whose target features reach the intrinsics.
    #[inline(always)]
    unsafe fn compute(&self, xs: &[__m512i; MAX_TAPS]) {
        let (epi, taps, cout) = (self.epi, self.taps, self.cout);
        let mut co = 0;
        while co < cout {
            let ch = (cout - co).min(CH);
            let mut acc = [_mm512_setzero_si512(); CH];
            for (c, a) in acc.iter_mut().enumerate().take(ch) {
                *a = _mm512_set1_epi32((*epi.add(co + c)).bias);
            }
            let wc = self.wq.add(co * taps);
            for (t, &x) in xs.iter().enumerate().take(taps) {
                for (c, a) in acc.iter_mut().enumerate() {
                    // Channels past C_out (c ≥ ch) have zero quads: their sums are dropped.
                    let w = _mm512_set1_epi32(*wc.add(c * taps + t));
                    *a = _mm512_dpbusd_epi32(*a, x, w);
                }
            }
            for (c, &a) in acc.iter().enumerate().take(ch) {
                let e = &*epi.add(co + c);
                let v = match (self.hi, self.double) {
                    (true, false) => self.out.apply::<true, false>(a, e),
                    (false, false) => self.out.apply::<false, false>(a, e),
                    (true, true) => self.out.apply::<true, true>(a, e),
                    (false, true) => self.out.apply::<false, true>(a, e),
                };
                _mm_storeu_si128(self.tile.add((co + c) * V) as *mut __m128i, v);
            }
            co += CH;
        }
    }
}

/// Tile `[channel][16]` (C_out ≤ 8: at most 128 bytes) to `n` HWC pixels at `dst`: two-source
/// byte permutes by `hwc`.
// Inlined into `conv2d_narrow`, whose target features reach the intrinsics.
#[inline(always)]
unsafe fn store_hwc(tile: *const u8, hwc: &[__m512i; 2], dst: *mut i8, cout: usize, n: usize) {
    let len = cout * V;
    let mask = |n: usize| -> __mmask64 {
        if n >= 64 {
            !0
        } else {
            (1u64 << n) - 1
        }
    };
    let t0 = _mm512_maskz_loadu_epi8(mask(len), tile as *const i8);
    let t1 = _mm512_maskz_loadu_epi8(mask(len.saturating_sub(64)), tile.add(64) as *const i8);
    let bytes = n * cout;
    for (h, &ix) in hwc.iter().enumerate() {
        if bytes > 64 * h {
            let v = _mm512_permutex2var_epi8(t0, ix, t1);
            _mm512_mask_storeu_epi8(dst.add(64 * h), mask(bytes - 64 * h), v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::test_util::{as_single, check_conv, conv_suite, ConvCase};
    use crate::kernels::Kernels;

    /// Declines only what it declines in the single rounding.
    fn check(c: &ConvCase) {
        if Kernels::vnni_available() && vbmi() {
            // SAFETY: AVX-512 VNNI and VBMI checked above.
            check_conv(
                c,
                &mut |p, x, y, s| unsafe { conv2d_narrow(p, ConvImage::new(x, y, s)) },
                &|p, s| !narrow_supported(&as_single(p)) || s < narrow_scratch(p),
            );
        }
    }

    conv_suite!(check);
}
