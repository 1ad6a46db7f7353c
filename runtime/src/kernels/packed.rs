//! Packed weights: what a kernel set lays out once, when the model is prepared
//! ([`crate::Model::prepare_packed`]; TensorFlow Lite Micro's persistent buffers), so that its
//! loops read the weights in their own order instead of reordering them on every call. The
//! file does not change: the region is the caller's, sized by `Model::packed_bytes`, and a
//! model prepared without it runs the same bytes through the unpacked kernels.
//!
//! The layouts ([`Layout`]): the AVX-512 VNNI fully connected layer's ([`PackedFc`], also
//! what the VNNI convs it covers use: `ConvParams::as_fc`), output rows in blocks of
//! [`FC_BLOCK_ROWS`] (one vector of i32 sums), each block its requantization constants then
//! its weights as `vpdpbusd` reads them with the input broadcast: per step of 4 inputs, 16
//! rows × 4 bytes, stored as u8 (w + 128), so the input stays int8 and the sums are corrected
//! by −128·Σx per image (exact in wrapping i32); the implicit VNNI conv's, the same blocks with
//! int8 weights and the −128·Σw of a u8 input folded into the bias ([`PackedFc::pack_conv`]);
//! the AVX2 fully connected layer's and implicit conv's, the same blocks with int8 weights and
//! the layer's own bias (`vpmaddubsw` reads the input signed: [`PackedFc::pack_signed`],
//! [`PackedFc::pack_conv_signed`]);
//! the x86 depthwise conv's, what it would otherwise build in scratch on every call; the AMX
//! conv's ([`AmxFc`]); a tflite_add's tables; the Cortex-M fully connected layer's
//! ([`CortexMFc`]: two rows' weights interleaved so that one `SMLAD` serves both), which a
//! firmware's build script may also write ahead of time, for flash (`model::packed_image`).

use super::{ConvParams, DepthwiseParams, FcParams, Resolved, TfliteAddParams, TfliteAddTables};
#[cfg(test)]
use crate::requant::Rounding;
use crate::requant::{FusedRequant, HighRequant, UnsignedRequant, UNSIGNED_OFFSET};

/// One op's packed weights and their layout (only the kernels of that layout read them);
/// empty where none.
#[derive(Clone, Copy, Debug, Default)]
pub struct Packed<'a> {
    pub(crate) layout: Layout,
    pub(crate) bytes: &'a [u8],
}

/// The layouts of packed weights.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Layout {
    /// None packed.
    #[default]
    None,
    /// The AVX-512 VNNI fully connected layer's ([`PackedFc`]; only x86 sets pack it).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    VnniFc,
    /// The AVX-512 VNNI implicit conv's ([`PackedFc::pack_conv`]: the same blocks, int8
    /// weights, the bias folded for a u8 input).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    VnniConv,
    /// The AVX2 (and AVX-VNNI) fully connected layer's ([`PackedFc::pack_signed`]: the same
    /// blocks, int8 weights, the layer's own bias: the sign trick takes the input signed).
    #[cfg(target_arch = "x86_64")]
    Avx2Fc,
    /// The AVX2 (and AVX-VNNI) implicit conv's ([`PackedFc::pack_conv_signed`]: the implicit
    /// VNNI conv's blocks, its bias not folded: the input stays signed).
    #[cfg(target_arch = "x86_64")]
    Avx2Conv,
    /// The x86 depthwise conv's weights and requantization constants (every x86 set's
    /// kernel), as it lays them out in scratch when unpacked (`avx2::depthwise_conv2d`).
    #[cfg(target_arch = "x86_64")]
    X86Depthwise,
    /// The AMX conv's ([`AmxFc`]).
    #[cfg(target_arch = "x86_64")]
    AmxFc,
    /// A tflite_add's tables ([`TfliteAddTables`], with their lines and, where one gives every
    /// pair, the op's line in both input bytes, [`super::PairLine`], found only here), which
    /// the sets with a tflite_add of their own otherwise build on every call.
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    AddTables,
    /// The Cortex-M fully connected layer's ([`CortexMFc`]). Packed on any machine: firmware
    /// takes it from flash (`Model::write_packed_image`), as a microcontroller has no RAM to
    /// spare for a second copy of the weights.
    CortexMFc,
}

impl<'a> Packed<'a> {
    /// No packed weights.
    pub const NONE: Packed<'static> = Packed {
        layout: Layout::None,
        bytes: &[],
    };

    /// The bytes, where packed in `layout` (the x86 and Cortex-M kernels read packed weights).
    #[inline]
    #[cfg_attr(not(any(target_arch = "x86_64", octet_arm_dsp)), allow(dead_code))]
    pub(crate) fn of(&self, layout: Layout) -> Option<&'a [u8]> {
        (self.layout == layout).then_some(self.bytes)
    }

    /// The tables, where packed as [`Layout::AddTables`].
    #[inline]
    #[cfg_attr(
        not(any(target_arch = "x86_64", target_arch = "aarch64")),
        allow(dead_code)
    )]
    pub(crate) fn add_tables(&self) -> Option<&'a TfliteAddTables> {
        #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
        if self.layout == Layout::AddTables {
            let ptr = self.bytes.as_ptr().cast::<TfliteAddTables>();
            if self.bytes.len() >= size_of::<TfliteAddTables>() && ptr.is_aligned() {
                // SAFETY: only `pack` makes packed bytes of this layout, by writing a
                // `TfliteAddTables` at their (aligned) start; they are borrowed, unchanged,
                // for 'a.
                return Some(unsafe { &*ptr });
            }
        }
        None
    }

    /// The granularity at which threads may split these outputs (rows, channels) given the
    /// kernels' own `align`: packed rows are sliced only at their blocks' starts
    /// ([`fc_outputs`]).
    #[cfg(feature = "std")]
    pub(crate) fn split_align(&self, align: usize) -> usize {
        if self.is_fc() {
            align.max(FC_BLOCK_ROWS)
        } else {
            align
        }
    }

    /// Whether these are a layer's rows in blocks of [`FC_BLOCK_ROWS`] ([`PackedFc`] or
    /// [`AmxFc`]: the packed matrix products).
    #[inline]
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub(crate) fn is_fc(&self) -> bool {
        match self.layout {
            Layout::VnniFc | Layout::VnniConv => true,
            #[cfg(target_arch = "x86_64")]
            Layout::AmxFc | Layout::Avx2Fc | Layout::Avx2Conv => true,
            _ => false,
        }
    }
}

/// Where each op's packed weights start in the caller's region (so kernels may use aligned
/// loads); `Model::packed_bytes` adds this much per packed op.
pub const PACKED_ALIGN: usize = 64;

/// Output rows per block of [`PackedFc`] (one AVX-512 vector of i32 sums).
pub const FC_BLOCK_ROWS: usize = 16;

/// Inputs per step of [`PackedFc`] (`vpdpbusd`'s four bytes per lane).
pub const FC_STEP: usize = 4;

/// Bytes of one block's requantization constants ([`FcEpi`]).
pub const FC_EPI_BYTES: usize = 1024;

/// Where [`PackedFc`]'s constants lie in a block, in bytes: tables of [`FC_BLOCK_ROWS`]
/// little-endian i32 (one per row) or 16 i64 (the even rows', then the odd ones', as 64-bit
/// lanes pair them).
///
/// Two forms of the requantization: the short one where every row of the block has n in
/// [33, 53] ([`FusedRequant`]'s n; the usual shifts, from −2 down), |acc + bias| < 2^30 for
/// any input and the output's zero point in [−128, 128], from `BIAS`, `M0` and, in the single
/// rounding, `R_HI` (round >> 32) and `N_HI` (n − 32), in the double `ROUND` and `N_HI`, its
/// rounding terms holding the zero point too (z·2^n: the sums come out with it added) and, in
/// the double rounding, in its unsigned form (`BIAS` plus `UNSIGNED_OFFSET`, `M0` and `ROUND`
/// as [`UnsignedRequant`]'s `m2` and `round`); else
/// [`HighRequant`]'s, from `BIAS`, `M0`, `ACC_MIN`, `ACC_MAX`, `LS`, `N`, `PRE`, `ROUND` and
/// `CORR`, the zero point added after. `HI` (one i32) says which.
pub struct FcEpi;

impl FcEpi {
    /// Bias (i32).
    pub const BIAS: usize = 0;
    /// M0 (i32).
    pub const M0: usize = 64;
    /// round >> 32, the short form's (i32).
    pub const R_HI: usize = 128;
    /// n − 32, the short form's (i32).
    pub const N_HI: usize = 192;
    /// `HighRequant::acc_min` (i32).
    pub const ACC_MIN: usize = 256;
    /// `HighRequant::acc_max` (i32).
    pub const ACC_MAX: usize = 320;
    /// `HighRequant::ls` (i32).
    pub const LS: usize = 384;
    /// `HighRequant::n` (i32).
    pub const N: usize = 448;
    /// `HighRequant::pre` (i64, even rows then odd).
    pub const PRE: usize = 512;
    /// `HighRequant::round` (i64, even rows then odd).
    pub const ROUND: usize = 640;
    /// `HighRequant::corr` (i64, even rows then odd).
    pub const CORR: usize = 768;
    /// 1 where every row has the short form (one i32).
    pub const HI: usize = 896;
}

/// The VNNI fully connected layout of a K × N layer: ⌈N / 16⌉ blocks of
/// [`PackedFc::block_bytes`], each [`FC_EPI_BYTES`] of constants ([`FcEpi`]; rows past N:
/// M0 = 0) then ⌈K / 4⌉ steps of 64 bytes, byte `4·r + i` of step `s` being
/// `w[16·b + r][4·s + i] + 128` as u8 (0 past K or N: adds nothing whatever the input holds
/// there).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PackedFc {
    /// Inputs (K).
    pub k: usize,
    /// Outputs (N).
    pub n: usize,
}

impl PackedFc {
    /// Blocks of rows.
    pub const fn blocks(&self) -> usize {
        self.n.div_ceil(FC_BLOCK_ROWS)
    }

    /// Steps of [`FC_STEP`] inputs.
    pub const fn steps(&self) -> usize {
        self.k.div_ceil(FC_STEP)
    }

    /// Bytes of one block.
    pub const fn block_bytes(&self) -> usize {
        FC_EPI_BYTES + self.steps() * FC_STEP * FC_BLOCK_ROWS
    }

    /// Bytes of the whole layer.
    pub const fn bytes(&self) -> usize {
        self.blocks() * self.block_bytes()
    }

    /// Writes `p`'s layout into `dst` (at least [`PackedFc::bytes`] long).
    pub fn pack(p: &FcParams, dst: &mut [u8]) {
        let l = PackedFc { k: p.k, n: p.n };
        pack_blocks(p, &mut dst[..l.bytes()], l.block_bytes(), 0x80, None, false);
    }

    /// Writes `p`'s layout with the weights as they are (int8), the AVX2 layer's
    /// ([`Layout::Avx2Fc`]), into `dst` (at least [`PackedFc::bytes`] long).
    pub fn pack_signed(p: &FcParams, dst: &mut [u8]) {
        let l = PackedFc { k: p.k, n: p.n };
        pack_blocks(p, &mut dst[..l.bytes()], l.block_bytes(), 0, None, false);
    }

    /// The implicit conv's layout of conv `p` ([`Layout::VnniConv`]): these blocks over its
    /// patches, each kernel row's kw·C_in weights padded with zeros to whole steps
    /// ([`PackedFc::row_bytes`]).
    pub fn of_conv(p: &ConvParams) -> PackedFc {
        PackedFc {
            k: p.window.kernel_h * PackedFc::row_bytes(p),
            n: p.output.c,
        }
    }

    /// Bytes of a kernel row in [`PackedFc::of_conv`]: kw·C_in up to a multiple of
    /// [`FC_STEP`] (a step's four bytes are contiguous in an HWC input row whatever C_in).
    pub fn row_bytes(p: &ConvParams) -> usize {
        (p.window.kernel_w * p.input.c).next_multiple_of(FC_STEP)
    }

    /// Writes the implicit conv's layout of `p` ([`PackedFc::of_conv`]) into `dst` (at least
    /// its bytes long): the weights as they are (int8), zero past each kernel row, and each
    /// row's bias less 128·Σw, for an input read as u8 (x + 128) (wrapping, as the sums: exact
    /// modulo 2^32).
    pub fn pack_conv(p: &ConvParams, dst: &mut [u8]) {
        Self::pack_conv_as(p, dst, true);
    }

    /// [`PackedFc::pack_conv`] with each row's own bias, for an input read as it is (int8):
    /// the AVX2 implicit conv's ([`Layout::Avx2Conv`]).
    pub fn pack_conv_signed(p: &ConvParams, dst: &mut [u8]) {
        Self::pack_conv_as(p, dst, false);
    }

    /// The implicit conv's layout of `p`, the bias folded for a u8 input where `unsigned`.
    fn pack_conv_as(p: &ConvParams, dst: &mut [u8], unsigned: bool) {
        let l = PackedFc::of_conv(p);
        let f = p.as_fc();
        let rows = (p.window.kernel_w * p.input.c, PackedFc::row_bytes(p));
        pack_blocks(
            &f,
            &mut dst[..l.bytes()],
            l.block_bytes(),
            0,
            Some(rows),
            unsigned,
        );
    }
}

/// The Cortex-M fully connected layout of a K × N layer ([`Layout::CortexMFc`]): the first
/// 4·⌊N/4⌋ rows in quads, each quad's ⌊K/4⌋ groups of 4 inputs 16 bytes apiece, the words
/// `[pair 0 A, pair 0 B, pair 1 A, pair 1 B]`; pair 0 is rows 4q, 4q + 1, pair 1 rows 4q + 2,
/// 4q + 3. Word A of pair (r, r + 1) in group g holds the bytes `w[r][4g] + 128` (as u8),
/// `w[r+1][4g]`, `w[r][4g+2] + 128`, `w[r+1][4g+2]`; word B the same of inputs 4g + 1 and
/// 4g + 3 (the input's `SXTB16` order, `cortex_m::widen`). So each 16-bit half of a word is
/// `256·w[r+1] + (w[r] + 128)` exactly, and one `SMLAD` of it with two widened inputs adds
/// four multiply-adds of two rows into one sum, s = u + 256·v, where `UXTB16` of the word and
/// a second `SMLAD` give u = Σ x·(w[r] + 128) alone: three instructions per four multiply-adds
/// against four for weights widened by `SXTB16`. v = (s − u) / 256 is exact while
/// |v| < 2^23, so the sums are split every [`CortexMFc::CHUNK_GROUPS`] groups; Σ x·w[r] =
/// u − 128·Σx. Rows past the quads and inputs past the groups are read unpacked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CortexMFc {
    /// Inputs (K).
    pub k: usize,
    /// Outputs (N).
    pub n: usize,
}

impl CortexMFc {
    /// Groups per chunk: |Σ x·w| ≤ 4·112·2^14 < 2^23 over one (int8 by int8, −128
    /// included; up to 127 would do, a multiple of 16 keeps the kernel's passes whole).
    pub const CHUNK_GROUPS: usize = 112;

    /// The layout of layer `p`, where it has at least one quad and one group.
    pub const fn of(p: &FcParams) -> Option<CortexMFc> {
        match p.n >= 4 && p.k >= 4 {
            true => Some(CortexMFc { k: p.k, n: p.n }),
            false => None,
        }
    }

    /// Quads of rows.
    pub const fn quads(&self) -> usize {
        self.n / 4
    }

    /// Groups of 4 inputs.
    pub const fn groups(&self) -> usize {
        self.k / 4
    }

    /// Bytes of one quad.
    pub const fn quad_bytes(&self) -> usize {
        16 * self.groups()
    }

    /// Bytes of the whole layer.
    pub const fn bytes(&self) -> usize {
        self.quads() * self.quad_bytes()
    }

    /// Writes `p`'s layout into `dst` (at least [`CortexMFc::bytes`] long).
    pub fn pack(p: &FcParams, dst: &mut [u8]) {
        let l = CortexMFc { k: p.k, n: p.n };
        let w = |r: usize, i: usize| p.weights[r * p.k + i] as u8;
        let quads = dst[..l.bytes()].chunks_exact_mut(l.quad_bytes());
        for (q, quad) in quads.enumerate() {
            for (g, group) in quad.chunks_exact_mut(16).enumerate() {
                for (i, word) in group.chunks_exact_mut(4).enumerate() {
                    // Word i: pair i / 2, inputs of parity i % 2.
                    let (r, at) = (4 * q + 2 * (i / 2), 4 * g + i % 2);
                    word.copy_from_slice(&[
                        w(r, at) ^ 0x80,
                        w(r + 1, at),
                        w(r, at + 2) ^ 0x80,
                        w(r + 1, at + 2),
                    ]);
                }
            }
        }
    }
}

/// Inputs per step of [`AmxFc`] (a tile row: `tdpbssd`'s 64 bytes).
pub const AMX_K_STEP: usize = 64;

/// Patch length up to which the AMX set packs a conv (ResNet-18's 3×3×512; the kernel stages
/// 32 patches of up to this many bytes on the stack).
pub const AMX_MAX_K: usize = 4608;

/// The least patch length, output channels and output pixels of a conv the AMX set runs on
/// tiles (the others as the AVX-512 VNNI set does). Measured per op on one core of a Xeon with
/// AMX, batch 1: ResNet-18's 3×3 convs (K 576–4 608, 16 to 1 024 pixels) ran in 0.4–0.65×
/// the VNNI kernels' time, ResNet-8's of K = 288 and 576 in 0.5–0.75×; a shorter K leaves most of each 64-byte tile row to zeros
/// (stems of K = 27: 1.35–2.3×; ResNet-8's 3×3 16→16, K = 144, N = 16: 1.8×; MobileNet's
/// pointwise convs of K = 8 to 128: 1.4–2.3×), N = 16 runs a pair of weight tiles half
/// wasted, and a 3×3 image (9 rows of a pass's 32) runs MobileNet's last pointwise conv
/// (K = 256) in 2.3×. Short of those, VNNI's kernels stay, but for a conv whose input the
/// tiles read in place (`amx::reads_in_place`: C_in a multiple of 64, nothing staged, no
/// tile row short).
pub const AMX_MIN_K: usize = 256;
/// See [`AMX_MIN_K`].
pub const AMX_MIN_COUT: usize = 32;
/// See [`AMX_MIN_K`].
pub const AMX_MIN_PIXELS: usize = 16;

/// The AMX layout of a K × N layer: [`PackedFc`]'s blocks of [`FC_BLOCK_ROWS`] rows, each its
/// [`FcEpi`] constants then its weights in the same order (per 4 inputs, 16 rows × 4 bytes:
/// a weight tile's row), but as they are (int8: `tdpbssd` multiplies signed by signed, no
/// correction) and K padded with zeros to a multiple of [`AMX_K_STEP`] (whole weight tiles
/// of 16 such rows).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AmxFc {
    /// Inputs (K).
    pub k: usize,
    /// Outputs (N).
    pub n: usize,
}

impl AmxFc {
    /// Steps of [`AMX_K_STEP`] inputs (weight tiles per block).
    pub const fn k_steps(&self) -> usize {
        self.k.div_ceil(AMX_K_STEP)
    }

    /// The same blocks, sized as [`PackedFc`]'s of K padded to whole weight tiles.
    pub const fn padded(&self) -> PackedFc {
        PackedFc {
            k: self.k_steps() * AMX_K_STEP,
            n: self.n,
        }
    }

    /// Writes `p`'s layout into `dst` (at least `padded().bytes()` long).
    pub fn pack(p: &FcParams, dst: &mut [u8]) {
        let l = AmxFc { k: p.k, n: p.n }.padded();
        pack_blocks(p, &mut dst[..l.bytes()], l.block_bytes(), 0, None, false);
    }
}

/// The blocks of [`PackedFc`] or [`AmxFc`] (`block_bytes` each) of layer `p` into `dst`: each
/// its constants, then its steps of 16 rows × 4 weights, each weight `w ^ flip` as a byte
/// (0x80: u8 w + 128; 0: int8 w), 0 past K or N. With `conv` = (kw·C_in, R) for a conv's
/// layer: each kernel row's weights padded with zeros to R (its packed K is K / kw·C_in · R);
/// with `u8_input` each bias less 128·Σw (the input read as x + 128).
fn pack_blocks(
    p: &FcParams,
    dst: &mut [u8],
    block_bytes: usize,
    flip: u8,
    conv: Option<(usize, usize)>,
    u8_input: bool,
) {
    let (run, r) = conv.unwrap_or((1, 1));
    // Packed input `at` of row j: its weight, or none (padding, past K or N).
    let weight = |j: usize, at: usize| -> Option<i8> {
        let (ky, i) = (at / r, at % r);
        let k = ky * run + i;
        (i < run && k < p.k && j < p.n).then(|| p.weights[j * p.k + k])
    };
    let rows = FC_BLOCK_ROWS;
    // |Σ x·w| ≤ K·2^14 (int8 by int8): the sums' bound before the bias.
    let sums = (p.k as u64) << 14;
    for (b, block) in dst.chunks_exact_mut(block_bytes).enumerate() {
        let (epi, w) = block.split_at_mut(FC_EPI_BYTES);
        epi.fill(0);
        let mut put = |at: usize, v: &[u8]| epi[at..at + v.len()].copy_from_slice(v);
        let mut hi = true;
        let mut fused = [(FusedRequant::default(), 0i32); FC_BLOCK_ROWS];
        for (r, fused) in fused.iter_mut().enumerate() {
            let j = b * rows + r;
            // The layer's bias, and the one stored (less 128·Σw for a conv's u8 input).
            let (bias, stored, m0, sh) = if j < p.n {
                let bias = p.bias.get(j);
                let stored = match u8_input {
                    true => {
                        let w = &p.weights[j * p.k..(j + 1) * p.k];
                        let sw = w.iter().fold(0i32, |a, &v| a.wrapping_add(v as i32));
                        bias.wrapping_sub(sw.wrapping_mul(128))
                    }
                    false => bias,
                };
                (bias, stored, p.multiplier.get(j), p.shift.get(j))
            } else {
                (0, 0, 0, -2)
            };
            let f = FusedRequant::new(m0, sh, p.out.rounding);
            let h = HighRequant::new(m0, sh, p.out.rounding);
            // The short form: room for the zero point in its terms and, in the double
            // rounding, its unsigned form where |acc + bias| < 2^30 (`UnsignedRequant`).
            hi &= UnsignedRequant::new(&f, p.out.zero_point).is_some()
                && sums + (bias.unsigned_abs() as u64) < 1 << 30;
            *fused = (f, stored);
            put(FcEpi::BIAS + 4 * r, &stored.to_le_bytes());
            put(FcEpi::M0 + 4 * r, &f.m0.to_le_bytes());
            put(FcEpi::R_HI + 4 * r, &((f.round >> 32) as i32).to_le_bytes());
            put(FcEpi::N_HI + 4 * r, &(f.n as i32 - 32).to_le_bytes());
            put(FcEpi::ACC_MIN + 4 * r, &h.acc_min.to_le_bytes());
            put(FcEpi::ACC_MAX + 4 * r, &h.acc_max.to_le_bytes());
            put(FcEpi::LS + 4 * r, &(h.ls as i32).to_le_bytes());
            put(FcEpi::N + 4 * r, &(h.n as i32).to_le_bytes());
            // 64-bit lane r / 2 of the even (r even) or odd rows' vector.
            let lane = 8 * ((r % 2) * 8 + r / 2);
            put(FcEpi::PRE + lane, &(h.pre as i64).to_le_bytes());
            put(FcEpi::ROUND + lane, &h.round.to_le_bytes());
            put(FcEpi::CORR + lane, &h.corr.to_le_bytes());
        }
        put(FcEpi::HI, &(hi as i32).to_le_bytes());
        if hi {
            // The short form's terms with the zero point (z·2^n, a multiple of 2^33, leaves
            // the terms' low halves as they were), the double rounding's in its unsigned form.
            let z = p.out.zero_point;
            for (r, &(f, stored)) in fused.iter().enumerate() {
                let lane = 8 * ((r % 2) * 8 + r / 2);
                match UnsignedRequant::new(&f, z).filter(|u| u.sign) {
                    Some(u) => {
                        let offset = stored.wrapping_add(UNSIGNED_OFFSET);
                        put(FcEpi::BIAS + 4 * r, &offset.to_le_bytes());
                        put(FcEpi::M0 + 4 * r, &u.m2.to_le_bytes());
                        put(FcEpi::ROUND + lane, &u.round.to_le_bytes());
                    }
                    None => {
                        let round = f.round + ((z as i64) << f.n);
                        put(FcEpi::R_HI + 4 * r, &((round >> 32) as i32).to_le_bytes());
                        put(FcEpi::ROUND + lane, &round.to_le_bytes());
                    }
                }
            }
        }
        for (s, step) in w.chunks_exact_mut(FC_STEP * rows).enumerate() {
            for (r, lane) in step.chunks_exact_mut(FC_STEP).enumerate() {
                let j = b * rows + r;
                for (i, byte) in lane.iter_mut().enumerate() {
                    *byte = weight(j, s * FC_STEP + i).map_or(0, |w| (w as u8) ^ flip);
                }
            }
        }
    }
}

/// The layout and bytes kernel set `k` packs fully connected layer `p` in (`None`: it packs
/// none for it).
pub(crate) fn fc_packing(k: Resolved, p: &FcParams) -> Option<(Layout, usize)> {
    // The AMX set packs fully connected layers as VNNI does: one image runs there (a row is a
    // sixteenth of a tile) and a group on the tiles, which read the same blocks.
    match k.base() {
        #[cfg(target_arch = "x86_64")]
        Resolved::Vnni => Some((Layout::VnniFc, PackedFc { k: p.k, n: p.n }.bytes())),
        #[cfg(target_arch = "x86_64")]
        Resolved::Avx2 | Resolved::AvxVnni => {
            Some((Layout::Avx2Fc, PackedFc { k: p.k, n: p.n }.bytes()))
        }
        #[cfg(octet_arm_dsp)]
        Resolved::CortexM => cortex_m_fc_packing(p),
        _ => {
            let _ = (k, p);
            None
        }
    }
}

/// The layout and bytes the Cortex-M set packs fully connected layer `p` in (on any machine:
/// `Model::write_packed_image`).
pub(crate) fn cortex_m_fc_packing(p: &FcParams) -> Option<(Layout, usize)> {
    CortexMFc::of(p).map(|l| (Layout::CortexMFc, l.bytes()))
}

/// Patch length up to which the VNNI set packs a conv that is not pointwise (its kernel
/// gathers eight patches at a time on the stack).
pub const IM2COL_MAX_K: usize = 2048;

/// Output pixels up to which a conv with gathered patches beats the pixels-in-lanes kernel
/// (one vector of output channels per pixel, against 16 pixels per vector). DS-CNN's
/// pointwise convs (125 pixels, 64 → 64) run in 5.3 µs packed against 5.7 µs in lanes at
/// batch 1 (the same 4.7 µs per image in groups), on an AMD EPYC core with AVX-512 VNNI.
pub const IM2COL_MAX_PIXELS: usize = 128;

/// The layout and bytes kernel set `k` packs conv `p` in: for the implicit conv where it
/// covers `p` ([`implicit_preferred`]; the AMX set's convs off the tiles too), else its
/// weights as the fully connected layer it applies to each pixel's patch
/// (`ConvParams::as_fc`), read in place for a pointwise conv, else gathered (K up to
/// [`IM2COL_MAX_K`], undilated), where that beats the pixels-in-lanes kernel: at least 16 output channels (one vector), and at most
/// [`IM2COL_MAX_PIXELS`] output pixels or, gathered, a stride above 1 (the lanes kernel splits
/// the input by stride phase). Measured per op on the MLPerf Tiny models (AVX-512 VNNI, one
/// core, batch 1): ResNet-8's stride-2 convs and its 3×3 conv on 8×8 run in 0.68–0.84× the
/// lanes kernel's time, MobileNet's pointwise convs on 6×6 and 3×3 in 0.36–0.72×; its
/// pointwise convs on 48×48 to 24×24, DS-CNN's on 25×5 (125 pixels) and ResNet-8's 3×3
/// convs on 32×32 and 16×16 in 1.05–1.8×.
pub(crate) fn conv_packing(k: Resolved, p: &ConvParams) -> Option<(Layout, usize)> {
    let w = &p.window;
    let undilated = w.dilation_h == 1 && w.dilation_w == 1;
    #[cfg(target_arch = "x86_64")]
    if k == Resolved::Amx {
        let f = p.as_fc();
        let tiles = undilated
            && (p.k() >= AMX_MIN_K || super::amx::reads_in_place(p))
            && p.k() <= AMX_MAX_K
            && p.output.c >= AMX_MIN_COUT
            && p.output.h * p.output.w >= AMX_MIN_PIXELS;
        return match tiles {
            true => Some((Layout::AmxFc, AmxFc { k: f.k, n: f.n }.padded().bytes())),
            false => conv_packing(k.base(), p),
        };
    }
    #[cfg(target_arch = "x86_64")]
    if k.base() == Resolved::Vnni && implicit_preferred(p, FC_BLOCK_ROWS) {
        return Some((Layout::VnniConv, PackedFc::of_conv(p).bytes()));
    }
    // AVX2 (and AVX-VNNI) packs only for its implicit conv (its other convs read the weights
    // as they are), from 8 output channels (a block's half: MobileNet's 8-channel stem).
    #[cfg(target_arch = "x86_64")]
    if k == Resolved::Avx2 || k == Resolved::AvxVnni {
        let l = PackedFc::of_conv(p);
        return implicit_preferred(p, FC_BLOCK_ROWS / 2).then_some((Layout::Avx2Conv, l.bytes()));
    }
    let small = p.output.h * p.output.w <= IM2COL_MAX_PIXELS;
    let gathered =
        p.k() <= IM2COL_MAX_K && undilated && (w.stride_h > 1 || w.stride_w > 1 || small);
    let pointwise = p.pointwise_fc().is_some() && small;
    if p.output.c < FC_BLOCK_ROWS || !(pointwise || gathered) {
        return None;
    }
    fc_packing(k, &p.as_fc())
}

/// Whether the VNNI set packs conv `p` for its implicit conv (`vnni::conv2d_implicit`; the
/// AVX2 set for its own): kernel rows in whole steps (kw·C_in a multiple of 4) or 3 channels
/// (RGB stems: a 3×3 kernel row is 9 of 12 bytes), at least `min_out` output channels, no dilation, a uniform window or
/// its padded uniform form, and the lanes geometry (whose scratch holds the padded input). Measured per op on one Zen 4 core (AVX-512
/// VNNI), batch 1, against the kernels it replaces (the pixels-in-lanes conv, the packed conv
/// over gathered patches, the packed pointwise conv in place): ResNet-8's convs 0.72–0.96×
/// their time (its stem 0.72×), ResNet-18's 0.75–0.94× (the whole network at 212 G
/// multiply-adds/s, 91% of `vpdpbusd`'s peak there), DS-CNN's pointwise convs 0.92×,
/// MobileNet's 0.71–1.0×, DS-CNN's 1-channel 10×4 stem 0.68× (a kernel row one step). Other
/// few-channel kernel rows (1 channel, 3 or 5 wide) stay with the few-channel conv.
#[cfg(target_arch = "x86_64")]
fn implicit_preferred(p: &ConvParams, min_out: usize) -> bool {
    let w = &p.window;
    ((w.kernel_w * p.input.c).is_multiple_of(FC_STEP) || p.input.c == 3)
        && p.output.c >= min_out
        && w.dilation_h == 1
        && w.dilation_w == 1
        && super::lanes_supported(&p.geometry())
        && (p.is_uniform() || super::valid::valid_params(p).is_some())
}

/// The layout and bytes kernel set `k` packs depthwise conv `p` in (`None`: it packs none).
pub(crate) fn depthwise_packing(k: Resolved, p: &DepthwiseParams) -> Option<(Layout, usize)> {
    match k.base() {
        #[cfg(target_arch = "x86_64")]
        Resolved::Avx2 | Resolved::AvxVnni | Resolved::Vnni => {
            super::avx2::depthwise_packed_bytes(p).map(|n| (Layout::X86Depthwise, n))
        }
        _ => {
            let _ = (k, p);
            None
        }
    }
}

/// The layout and bytes kernel set `k` packs tflite_add `p` in: its tables, where the set has
/// a tflite_add of its own ([`super::tflite_add_tables`]) and they cover `p`.
pub(crate) fn add_packing(k: Resolved, p: &TfliteAddParams) -> Option<(Layout, usize)> {
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    if super::tflite_add_tables(k, p).is_some() {
        return Some((Layout::AddTables, size_of::<TfliteAddTables>()));
    }
    let _ = (k, p);
    None
}

/// Writes layout `layout` of an op's weights into `dst` (as long as its packing states).
pub(crate) fn pack<'a>(layout: Layout, op: PackOp, dst: &'a mut [u8]) -> Packed<'a> {
    match (layout, op) {
        (Layout::VnniFc, PackOp::Fc(p)) => PackedFc::pack(p, dst),
        (Layout::VnniFc, PackOp::Conv(p)) => PackedFc::pack(&p.as_fc(), dst),
        (Layout::VnniConv, PackOp::Conv(p)) => PackedFc::pack_conv(p, dst),
        #[cfg(target_arch = "x86_64")]
        (Layout::Avx2Fc, PackOp::Fc(p)) => PackedFc::pack_signed(p, dst),
        #[cfg(target_arch = "x86_64")]
        (Layout::Avx2Conv, PackOp::Conv(p)) => PackedFc::pack_conv_signed(p, dst),
        (Layout::CortexMFc, PackOp::Fc(p)) => CortexMFc::pack(p, dst),
        #[cfg(target_arch = "x86_64")]
        (Layout::AmxFc, PackOp::Conv(p)) => AmxFc::pack(&p.as_fc(), dst),
        #[cfg(target_arch = "x86_64")]
        (Layout::X86Depthwise, PackOp::Depthwise(p)) => super::avx2::depthwise_pack(p, dst),
        #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
        (Layout::AddTables, PackOp::Add(p)) => {
            // With the lines and the pair's line (found once, here): only the sets that use
            // them read them.
            let Some(t) = TfliteAddTables::new(p).map(|t| t.with_lines().with_pair_line(p)) else {
                return Packed::default();
            };
            let ptr = dst.as_mut_ptr().cast::<TfliteAddTables>();
            if dst.len() < size_of::<TfliteAddTables>() || !ptr.is_aligned() {
                return Packed::default();
            }
            // SAFETY: `dst` holds a `TfliteAddTables` at its aligned start (checked).
            unsafe { ptr.write(t) };
        }
        _ => return Packed::default(),
    }
    Packed { layout, bytes: dst }
}

/// An op to pack.
#[derive(Clone, Copy)]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) enum PackOp<'p, 'a> {
    Fc(&'p FcParams<'a>),
    Conv(&'p ConvParams<'a>),
    Depthwise(&'p DepthwiseParams<'a>),
    Add(&'p TfliteAddParams),
}

/// The packed weights of output channels `c0..c1` of conv `p` ([`fc_outputs`] of the layer
/// its layout packs).
pub(crate) fn conv_outputs<'a>(p: &ConvParams<'a>, c0: usize, c1: usize) -> Packed<'a> {
    let k = match p.packed.layout {
        Layout::VnniConv => PackedFc::of_conv(p).k,
        #[cfg(target_arch = "x86_64")]
        Layout::Avx2Conv => PackedFc::of_conv(p).k,
        _ => p.k(),
    };
    fc_outputs(&p.packed, k, c0, c1)
}

/// The packed weights of outputs `n0..n1` of a layer of `k` inputs, where they start a block
/// ([`crate::kernels::FcParams::outputs`]); else none (the unpacked kernel runs them).
pub(crate) fn fc_outputs<'a>(packed: &Packed<'a>, k: usize, n0: usize, n1: usize) -> Packed<'a> {
    let l = match packed.layout {
        Layout::VnniFc | Layout::VnniConv => PackedFc { k, n: n1 },
        #[cfg(target_arch = "x86_64")]
        Layout::Avx2Fc | Layout::Avx2Conv => PackedFc { k, n: n1 },
        #[cfg(target_arch = "x86_64")]
        Layout::AmxFc => AmxFc { k, n: n1 }.padded(),
        _ => return Packed::default(),
    };
    if !n0.is_multiple_of(FC_BLOCK_ROWS) || packed.bytes.len() < l.bytes() {
        return Packed::default();
    }
    Packed {
        layout: packed.layout,
        bytes: &packed.bytes[n0 / FC_BLOCK_ROWS * l.block_bytes()..l.bytes()],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::test_util::FcData;

    /// The layout: sizes, the u8 weights and the zero padding, row by row.
    #[test]
    fn layout() {
        let d = FcData::random(10, 19, 3);
        let p = d.params();
        let l = PackedFc { k: 10, n: 19 };
        assert_eq!(
            (l.blocks(), l.steps(), l.block_bytes()),
            (2, 3, FC_EPI_BYTES + 192)
        );
        let mut buf = vec![0xAAu8; l.bytes()];
        PackedFc::pack(&p, &mut buf);
        let w = |b: usize, s: usize, r: usize, i: usize| {
            buf[b * l.block_bytes() + FC_EPI_BYTES + s * 64 + 4 * r + i]
        };
        assert_eq!(w(1, 2, 2, 1), (p.weights[18 * 10 + 9] as u8) ^ 0x80);
        assert_eq!(w(1, 2, 2, 2), 0, "past K");
        assert_eq!(w(1, 0, 3, 0), 0, "past N");
        let word =
            |at: usize| i32::from_le_bytes(buf[l.block_bytes() + at..][..4].try_into().unwrap());
        // The double rounding's short form takes the sums offset to be positive.
        let offset = if word(FcEpi::HI) == 1 && p.out.rounding == Rounding::Double {
            UNSIGNED_OFFSET
        } else {
            0
        };
        assert_eq!(word(8), p.bias.get(18).wrapping_add(offset));
        // Outputs from a block's start keep the packed blocks from there; others none.
        let packed = Packed {
            layout: Layout::VnniFc,
            bytes: &buf,
        };
        assert_eq!(fc_outputs(&packed, 10, 16, 19).bytes.len(), l.block_bytes());
        assert_eq!(fc_outputs(&packed, 10, 4, 19).layout, Layout::None);
    }

    /// A tflite_add's tables packed by each set with a tflite_add of its own are the tables
    /// (with their lines) a call builds; the other sets pack none.
    #[test]
    fn add_tables() {
        use crate::kernels::test_util::{tflite_add_params, Rng};
        #[repr(align(64))]
        struct Region([u8; 4096]);
        for seed in 0..16 {
            let p = tflite_add_params(&mut Rng(seed * 2 + 1));
            for k in crate::kernels::Kernels::available() {
                let r = k.resolve().unwrap();
                let Some((layout, n)) = add_packing(r, &p) else {
                    assert!(crate::kernels::tflite_add_tables(r, &p).is_none(), "{k:?}");
                    continue;
                };
                let mut region = Region([0xA5; 4096]);
                let packed = pack(layout, PackOp::Add(&p), &mut region.0[..n]);
                let got = packed.add_tables().expect("packed");
                let want = TfliteAddTables::new(&p).unwrap().with_lines();
                assert_eq!(
                    (got.a, got.b, got.lo, got.hi),
                    (want.a, want.b, want.lo, want.hi)
                );
                assert_eq!(got.pair, want.clone().with_pair_line(&p).pair);
                let r = |t: &TfliteAddTables| t.lines.as_ref().map(|l| l.clone().map(|l| l.r));
                assert_eq!(r(got), r(&want));
                // Misaligned or short bytes are not read as tables.
                let bytes = &region.0[1..n];
                assert!(Packed { layout, bytes }.add_tables().is_none());
            }
        }
    }
}
