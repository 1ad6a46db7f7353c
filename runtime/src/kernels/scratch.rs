//! Scratch: the working memory each kernel set states for an op when the model is prepared
//! (TensorFlow Lite Micro's `RequestScratchBufferInArena`), and the layouts the convs carve it
//! into: each set's rule is the need of its own conv kernels' best plan (x86:
//! [`conv_scratch_bytes`]; NEON: [`neon_conv_scratch_bytes`]; Cortex-M:
//! [`cortex_m_conv_scratch_bytes`]). The rules are plain functions of the geometry, the same on
//! every host, so that the host sizes the arena of a firmware for another target.
//!
//! The file holds no scratch: [`Kernels::scratch_bytes`] states each set's need for an op, and
//! a working area is the activation arena the file plans followed by the largest scratch of
//! any op for the chosen set (`Model::working_bytes`), live only during its op.

use super::{Kernels, Placement, Shape};
use crate::format::{OP_CONV2D, OP_DEPTHWISE_CONV2D, OP_FULLY_CONNECTED, OP_TFLITE_ADD};

/// With VNNI kernels, convs with K = kh·kw·C_in below this (or fewer than
/// [`VNNI_MIN_COUT`] output channels) run the AVX2 kernel. The VNNI kernel's vectorized
/// requantization makes it the faster one even for small K (3×3 over 3 channels, 1×1).
pub const VNNI_MIN_K: usize = 1;

/// Output channels the VNNI conv needs (its micro-kernel's channel group).
pub const VNNI_MIN_COUT: usize = 6;

/// Output pixels a conv processes per pass (rows of the packed patch in scratch).
pub const CONV_PIXEL_BLOCK: usize = 4;

/// Output pixels whose u8 patches the VNNI conv packs at once (rows of `align64(K)` bytes).
pub const VNNI_PIXEL_BLOCK: usize = 64;

/// What the scratch rules need to know about an op: its kind, its window (`stride` and `pad`
/// are the vertical ones, a uniform window's only ones) and its input and output shapes (zero
/// where they do not apply).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpGeometry {
    /// Op kind code (`format::OP_*`).
    pub kind: u8,
    /// Whether the window is uniform (`Placement::is_uniform`).
    pub uniform: bool,
    /// Kernel height.
    pub kernel_h: u32,
    /// Kernel width.
    pub kernel_w: u32,
    /// Stride (vertical).
    pub stride: u32,
    /// Padding (rows above).
    pub pad: u32,
    /// Horizontal stride.
    pub stride_w: u32,
    /// Columns of padding on the left.
    pub pad_left: u32,
    /// Whether the window is dilated (a dilation other than 1).
    pub dilated: bool,
    /// Input channels.
    pub c_in: u32,
    /// Input height.
    pub h_in: u32,
    /// Input width.
    pub w_in: u32,
    /// Output channels.
    pub c_out: u32,
    /// Output height.
    pub h_out: u32,
    /// Output width.
    pub w_out: u32,
}

impl OpGeometry {
    /// An op of kind `kind` (`format::OP_*`) with window `w` over `input`, giving `output`.
    pub const fn new(kind: u8, w: &Placement, input: Shape, output: Shape) -> OpGeometry {
        OpGeometry {
            kind,
            uniform: w.is_uniform(input, output),
            kernel_h: w.kernel_h as u32,
            kernel_w: w.kernel_w as u32,
            stride: w.stride_h as u32,
            pad: w.pad_top as u32,
            stride_w: w.stride_w as u32,
            pad_left: w.pad_left as u32,
            dilated: w.dilation_h != 1 || w.dilation_w != 1,
            c_in: input.c as u32,
            h_in: input.h as u32,
            w_in: input.w as u32,
            c_out: output.c as u32,
            h_out: output.h as u32,
            w_out: output.w as u32,
        }
    }
}

/// Images a batch runs together, op by op, each in its own working area (the VNNI conv covers
/// them in one call; see `Model::arena_bytes_for`).
pub const GROUP_IMAGES: usize = 8;

/// Images a group runs together on the AMX set where [`AMX_GROUP_BYTES`] hold their working
/// areas (`Model::group_images`): two input tiles' rows, so a fully connected layer, an image
/// a row, fills the tiles.
pub const AMX_GROUP_IMAGES: usize = 32;

/// Working areas' bytes up to which a group of [`AMX_GROUP_IMAGES`] runs on the AMX set: a
/// small model (anomaly detection's 768 bytes a working area) keeps its group within L1 and L2;
/// a larger one runs groups of [`GROUP_IMAGES`], whose convs fill the tiles with their pixels.
pub const AMX_GROUP_BYTES: usize = 64 * 1024;

const _: () = assert!(AMX_GROUP_IMAGES >= GROUP_IMAGES);

/// Output pixels the scratch rule sizes a pass of the pixels-in-lanes VNNI conv
/// ([`vnni::conv2d_lanes`]) for: 4 vectors of 16 pixels. The kernel's passes take 3 vectors
/// (48 pixels); the rule keeps its room for 64 so that `scratch_bytes`, and with it the
/// exported files, stay as they are.
pub const LANES_PIXEL_BLOCK: usize = 64;

/// Bytes per output channel of the lanes conv's requantization table.
pub const LANES_EPI_BYTES: usize = 32;

/// Scratch regions of the pixels-in-lanes VNNI conv, in bytes from a 64-aligned base:
/// `(t, panel, tile, epi)` sizes. `t`: the input as u8 quads of channels, padded, one plane per
/// quad, columns split by stride phase; `panel`: one pass's patch quads, 16 pixels per vector;
/// `tile`: one pass's outputs, channel-major; `epi`: per-channel requantization constants.
pub const fn lanes_regions(g: &OpGeometry) -> (usize, usize, usize, usize) {
    let q = QuadPlanes::new(g);
    let (t, planes) = (align64(q.bytes()), q.planes);
    let (kh, kw) = (g.kernel_h as usize, g.kernel_w as usize);
    // A pass may take pixels of several images: room for a whole block whatever the size.
    let block = LANES_PIXEL_BLOCK;
    let kq = kh.saturating_mul(kw).saturating_mul(planes);
    let panel = block.saturating_mul(4).saturating_mul(kq);
    let cout = g.c_out as usize;
    let tile = cout.saturating_mul(LANES_PIXEL_BLOCK);
    let epi = cout.saturating_mul(LANES_EPI_BYTES);
    (t, panel, tile, epi)
}

/// The pixels-in-lanes convs' copy of the input (`T`, x86): one plane per quad of input
/// channels, each padded pixel a quad of 4 bytes, padded rows, and each row's columns split by
/// stride phase (all even columns, then all odd ones, for stride 2), so that the quads of
/// consecutive output pixels at any tap are consecutive.
#[derive(Clone, Copy, Debug)]
// Elsewhere than on x86 only its size (`lanes_regions`, the scratch rule) is used.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) struct QuadPlanes {
    /// Quads of input channels (planes).
    pub planes: usize,
    /// Columns per stride phase.
    pub wq: usize,
    /// Bytes per padded row (all phases).
    pub row: usize,
    /// Bytes per plane.
    pub plane: usize,
}

impl QuadPlanes {
    /// The layout of a conv's input (saturating: geometries come from files).
    pub const fn new(g: &OpGeometry) -> Self {
        let s = if g.stride == 0 { 1 } else { g.stride as usize };
        let hp = g.h_in as usize + 2 * g.pad as usize;
        let wp = g.w_in as usize + 2 * g.pad as usize;
        let wq = wp.div_ceil(s);
        let row = (s * wq).saturating_mul(4);
        QuadPlanes {
            planes: (g.c_in as usize).div_ceil(4),
            wq,
            row,
            plane: hp.saturating_mul(row),
        }
    }

    /// Bytes of all planes.
    pub const fn bytes(&self) -> usize {
        self.planes.saturating_mul(self.plane)
    }

    /// Byte offset of padded pixel (yp, xp) in plane 0, at stride `s`; for a tap (ky, kx) the
    /// offset from an output pixel's base.
    #[inline(always)]
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub fn at(&self, s: usize, yp: usize, xp: usize) -> usize {
        yp * self.row + (xp % s) * self.wq * 4 + (xp / s) * 4
    }
}

/// Whether the pixels-in-lanes VNNI conv covers a conv of this geometry (quads of input channels
/// that tile each tap, output channels in groups of 8).
pub const fn lanes_supported(g: &OpGeometry) -> bool {
    (g.c_in.is_multiple_of(4) || g.c_in < 4)
        && g.c_in > 0
        && g.c_out.is_multiple_of(8)
        && g.c_out > 0
}

const fn align64(n: usize) -> usize {
    n.saturating_add(63) & !63
}

/// The scratch of a uniform conv2d with the x86 kernel sets (their patch and lane layouts):
/// the larger of `CONV_PIXEL_BLOCK · align16(K) · 2` (AVX2: im2col rows widened to i16),
/// `VNNI_PIXEL_BLOCK · align64(K)` (VNNI: u8 im2col rows), K = kernel_h·kernel_w·c_in, and,
/// when [`lanes_supported`], `64 + t + panel + tile + epi` from [`lanes_regions`] (the
/// pixels-in-lanes VNNI conv).
pub const fn conv_scratch_bytes(g: &OpGeometry) -> usize {
    if let Some(v) = valid_conv(g) {
        return align64(v.image_bytes()).saturating_add(conv_scratch_bytes(&v.geometry));
    }
    match g.kind {
        OP_CONV2D if g.uniform => {
            let k = (g.kernel_h as usize)
                .saturating_mul(g.kernel_w as usize)
                .saturating_mul(g.c_in as usize);
            let avx2 = (CONV_PIXEL_BLOCK * 2).saturating_mul(k.saturating_add(15) & !15);
            let vnni = VNNI_PIXEL_BLOCK.saturating_mul(align64(k));
            let mut need = if avx2 > vnni { avx2 } else { vnni };
            if lanes_supported(g) {
                let (t, panel, tile, epi) = lanes_regions(g);
                let lanes = 64usize
                    .saturating_add(t)
                    .saturating_add(panel)
                    .saturating_add(tile)
                    .saturating_add(epi);
                if lanes > need {
                    need = lanes;
                }
            }
            need
        }
        _ => 0,
    }
}

/// A conv whose window is not uniform (TensorFlow's SAME padding, one side short; a pad
/// other than the stride's) as x86 runs it: a uniform conv with no padding over the input padded into
/// scratch, the `span` rows and columns the outputs read (`avx2::as_valid`). Convs with one
/// stride on both axes and no dilation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ValidConv {
    /// The uniform conv over the padded input.
    pub geometry: OpGeometry,
}

impl ValidConv {
    /// Bytes of the padded input.
    pub const fn image_bytes(&self) -> usize {
        let g = &self.geometry;
        (g.h_in as usize)
            .saturating_mul(g.w_in as usize)
            .saturating_mul(g.c_in as usize)
    }
}

/// The uniform form of conv `g` ([`ValidConv`]), where it has one and needs it.
pub const fn valid_conv(g: &OpGeometry) -> Option<ValidConv> {
    if g.kind != OP_CONV2D || g.uniform || g.dilated || g.stride == 0 || g.stride != g.stride_w {
        return None;
    }
    let (ho, wo) = (g.h_out as usize, g.w_out as usize);
    if ho == 0 || wo == 0 || g.c_in == 0 || g.c_out == 0 {
        return None;
    }
    let (hp, wp) = (
        span(ho, g.stride, g.kernel_h as usize),
        span(wo, g.stride_w, g.kernel_w as usize),
    );
    // Extents beyond u32 cannot be a real model's; the scalar reference runs them.
    if hp > u32::MAX as usize || wp > u32::MAX as usize {
        return None;
    }
    let geometry = OpGeometry {
        uniform: true,
        pad: 0,
        pad_left: 0,
        h_in: hp as u32,
        w_in: wp as u32,
        ..*g
    };
    Some(ValidConv { geometry })
}

/// Channels per block of the x86 and NEON depthwise convs.
pub const DW_BLOCK: usize = 16;

/// Taps a depthwise window may have for the x86 and NEON kernels (their tap offsets live on the
/// stack).
pub const DW_MAX_TAPS: usize = 64;

/// Bytes of the x86 depthwise conv's requantization constants per block of [`DW_BLOCK`]
/// channels: 2 vectors of 8 channels, each 8 i32 and 6 i64 vectors of 32 bytes.
pub const DW_EPI_BYTES: usize = 2 * 14 * 32;

/// The depthwise convs' scratch on x86 (`avx2::depthwise_conv2d`) and NEON
/// (`neon::depthwise_conv2d`), where [`depthwise_covered`], from a 32-byte aligned base: the
/// padded input the outputs read (`span` rows and columns) widened to i16 (x86: the zero point
/// taken off, padding 0; NEON: as is, padding the zero point), its channels rounded up to
/// [`DW_BLOCK`] (zeros past C); the weights as i16 (x86: pairs of taps, 32 bytes per block of
/// 8 channels and pair; NEON: per tap, within that room); the requantization constants
/// ([`DW_EPI_BYTES`] per block; x86's, NEON keeps them in registers).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SimdDepthwise {
    /// Rows of the padded input.
    pub rows: usize,
    /// Columns of the padded input.
    pub cols: usize,
    /// Blocks of [`DW_BLOCK`] channels.
    pub blocks: usize,
    /// Pairs of taps (the last one's second tap weighs 0 for an odd count).
    pub pairs: usize,
}

impl SimdDepthwise {
    /// The layout for a depthwise conv of geometry `g` (saturating: geometries come from files).
    pub const fn new(g: &OpGeometry) -> Self {
        let (kh, kw) = (g.kernel_h as usize, g.kernel_w as usize);
        let (ho, wo) = (g.h_out as usize, g.w_out as usize);
        SimdDepthwise {
            rows: span(ho, g.stride, kh),
            cols: span(wo, g.stride_w, kw),
            blocks: (g.c_out as usize).div_ceil(DW_BLOCK),
            pairs: kh.saturating_mul(kw).div_ceil(2),
        }
    }

    /// Bytes of the padded input.
    pub const fn image_bytes(&self) -> usize {
        self.rows
            .saturating_mul(self.cols)
            .saturating_mul(self.blocks)
            .saturating_mul(DW_BLOCK * 2)
    }

    /// Bytes of the packed weights.
    pub const fn weight_bytes(&self) -> usize {
        self.pairs.saturating_mul(self.blocks).saturating_mul(64)
    }

    /// The layout for a call of depthwise conv `p` on buffers of these lengths, where the
    /// kernels cover it ([`depthwise_covered`], at most [`DW_MAX_TAPS`] taps, a non-empty output)
    /// and the buffers hold what they must; `None`: the scalar reference runs it.
    pub fn for_call(
        p: &crate::kernels::DepthwiseParams,
        input: usize,
        output: usize,
        scratch: usize,
    ) -> Option<Self> {
        let g = p.geometry();
        let l = SimdDepthwise::new(&g);
        let taps = p.window.kernel_h * p.window.kernel_w;
        let ok = depthwise_covered(&g)
            && scratch >= l.bytes()
            && input >= p.input.len()
            && output >= p.output.len()
            && p.weights.len() >= taps * p.output.c
            && !p.output.is_empty()
            && taps <= DW_MAX_TAPS;
        ok.then_some(l)
    }

    /// All of it, with 32 bytes to align the base.
    pub const fn bytes(&self) -> usize {
        self.image_bytes()
            .saturating_add(self.weight_bytes())
            .saturating_add(self.blocks.saturating_mul(DW_EPI_BYTES))
            .saturating_add(32)
    }
}

/// The scratch of an op with an x86 set: a conv's ([`conv_scratch_bytes`]), a depthwise conv's
/// it covers ([`SimdDepthwise::bytes`]), 0 for the rest.
pub const fn x86_scratch_bytes(g: &OpGeometry) -> usize {
    if depthwise_covered(g) {
        return SimdDepthwise::new(g).bytes();
    }
    conv_scratch_bytes(g)
}

/// The scratch of an op with the NEON sets: a conv's ([`neon_conv_scratch_bytes`]), a
/// depthwise conv's it covers ([`SimdDepthwise::bytes`]), 0 for the rest.
pub const fn neon_scratch_bytes(g: &OpGeometry) -> usize {
    if depthwise_covered(g) {
        return SimdDepthwise::new(g).bytes();
    }
    neon_conv_scratch_bytes(g)
}

/// K = kernel_h·kernel_w·c_in (saturating: geometries come from files).
const fn patch_len(g: &OpGeometry) -> usize {
    (g.kernel_h as usize)
        .saturating_mul(g.kernel_w as usize)
        .saturating_mul(g.c_in as usize)
}

/// The output width of a uniform window over the padded input (0 where the kernel is wider).
const fn out_width(g: &OpGeometry) -> usize {
    let wp = (g.w_in as usize).saturating_add(2 * g.pad as usize);
    let (kw, s) = (g.kernel_w as usize, g.stride as usize);
    if wp < kw || s == 0 {
        0
    } else {
        (wp - kw) / s + 1
    }
}

/// Output pixels the NEON packed conv packs per pass, one row of `align16(K)` values each (16
/// rows keep a block's patches and a channel group's weights in L1).
pub const NEON_PIXEL_BLOCK: usize = 16;

/// The NEON few-channel conv (`neon::narrow`): output pixels per vector.
pub const NEON_NARROW_PIXELS: usize = 4;
/// … pixel vectors per register tile (a pass holds a multiple of them).
pub const NEON_NARROW_TILE: usize = 4;
/// … most pixel vectors per pass (panel rows).
pub const NEON_NARROW_MAX_PASS: usize = 32;
/// … most output channels for which tiles pick their quads from the image (no panel).
pub const NEON_NARROW_DIRECT_MAX_COUT: usize = 8;
/// … bytes after the padded image that its window loads may read.
pub const NEON_NARROW_SLACK: usize = 32;

/// Whether the NEON few-channel conv covers a conv of this geometry: uniform, 1 to 3 input
/// channels, the windows of 4 pixels' quads within 32 bytes (stride·C_in ≤ 9), a kernel within
/// the padded input.
pub const fn neon_narrow_supported(g: &OpGeometry) -> bool {
    let (cin, s) = (g.c_in as usize, g.stride as usize);
    let hp = (g.h_in as usize).saturating_add(2 * g.pad as usize);
    let wp = (g.w_in as usize).saturating_add(2 * g.pad as usize);
    g.kind == OP_CONV2D
        && g.uniform
        && cin >= 1
        && cin <= 3
        && s >= 1
        && s * cin <= 9
        && g.kernel_h >= 1
        && g.kernel_w >= 1
        && g.c_out >= 1
        && hp >= g.kernel_h as usize
        && wp >= g.kernel_w as usize
}

/// The NEON few-channel conv's scratch regions, from a 16-aligned base (sizes in bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NeonNarrow {
    /// The padded image and its [`NEON_NARROW_SLACK`], to a multiple of 16.
    pub img: usize,
    /// The weight quads, `[tap][channel]`, 4 bytes each.
    pub wq: usize,
    /// One panel row: a vector of 16 bytes per tap.
    pub per_vec: usize,
    /// Whether tiles pick their quads from the image (no panel).
    pub direct: bool,
    /// The panel rows of the best pass: every pixel vector of the conv, up to
    /// [`NEON_NARROW_MAX_PASS`], in whole tiles; 0 when `direct`.
    pub best_pass: usize,
}

impl NeonNarrow {
    /// The regions of a conv of geometry `g` (saturating: geometries come from files).
    pub const fn new(g: &OpGeometry) -> Self {
        let cin = g.c_in as usize;
        let hp = (g.h_in as usize).saturating_add(2 * g.pad as usize);
        let wp = (g.w_in as usize).saturating_add(2 * g.pad as usize);
        let taps = (g.kernel_h as usize).saturating_mul((g.kernel_w as usize * cin).div_ceil(4));
        let img = hp
            .saturating_mul(wp)
            .saturating_mul(cin)
            .saturating_add(NEON_NARROW_SLACK + 15)
            & !15;
        let direct = g.c_out as usize <= NEON_NARROW_DIRECT_MAX_COUT;
        let ho = if hp < g.kernel_h as usize || g.stride == 0 {
            0
        } else {
            (hp - g.kernel_h as usize) / g.stride as usize + 1
        };
        let nvec = ho.saturating_mul(out_width(g).div_ceil(NEON_NARROW_PIXELS));
        let all = nvec
            .div_ceil(NEON_NARROW_TILE)
            .saturating_mul(NEON_NARROW_TILE);
        NeonNarrow {
            img,
            wq: taps.saturating_mul(g.c_out as usize).saturating_mul(4),
            per_vec: taps.saturating_mul(16),
            direct,
            best_pass: if direct {
                0
            } else if all < NEON_NARROW_MAX_PASS {
                all
            } else {
                NEON_NARROW_MAX_PASS
            },
        }
    }

    /// Bytes for the image, the weight quads and a panel of `pass` rows, whatever the
    /// alignment of the scratch (15 bytes to reach a 16-aligned base).
    pub const fn bytes(&self, pass: usize) -> usize {
        15usize
            .saturating_add(self.img)
            .saturating_add(self.wq)
            .saturating_add(pass.saturating_mul(self.per_vec))
    }
}

/// The scratch of a conv2d with the NEON sets (with and without `dotprod`, the same
/// kernels): where the few-channel conv covers it ([`neon_narrow_supported`]), its image,
/// weight quads and best panel ([`NeonNarrow::bytes`] of [`NeonNarrow::best_pass`]); else the
/// packed conv's block of [`NEON_PIXEL_BLOCK`] patch rows of `align16(K)` bytes; a conv with
/// a [`ValidConv`] form, its padded input and the scratch of that form.
pub const fn neon_conv_scratch_bytes(g: &OpGeometry) -> usize {
    if let Some(v) = valid_conv(g) {
        return align64(v.image_bytes()).saturating_add(neon_conv_scratch_bytes(&v.geometry));
    }
    if g.kind != OP_CONV2D || !g.uniform {
        return 0;
    }
    if neon_narrow_supported(g) {
        let n = NeonNarrow::new(g);
        return n.bytes(n.best_pass);
    }
    NEON_PIXEL_BLOCK.saturating_mul(patch_len(g).saturating_add(15) & !15)
}

/// The most bytes of widened weights the Cortex-M conv keeps for a whole call: LeNet's convs
/// and the small layers of the MLPerf Tiny models widen every weight once; a larger conv widens
/// one output-channel pair per block, so that a microcontroller's arena stays near its
/// activations (widening every weight of ResNet-18's largest conv would take 4.7 MB; of
/// MLPerf Tiny's ResNet-8, 74 KB).
pub const CORTEX_M_WEIGHTS_BUDGET: usize = 8 << 10;

/// The Cortex-M conv's scratch (`cortex_m::conv2d`, after CMSIS-NN's `arm_convolve_s8`): a band
/// of input rows widened to 16 bits, then (8-aligned) the patches of a block of pixels and the
/// widened weights, both in pairs of `pair` bytes (a pixel pair's or a channel pair's kh kernel
/// rows of ⌈kw·C_in/2⌉ words each). Any undilated window: a band row holds the
/// (W_out − 1)·stride_w + kw padded columns the output reads (pad values left and right of the
/// input, wherever the window puts them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CortexMConv {
    /// Bytes of a pixel pair's patches or of a channel pair's weights.
    pub pair: usize,
    /// Bytes of a widened padded input row.
    pub row: usize,
    /// Bytes of the ring of whole rows: kh rows, held twice.
    pub ring: usize,
    /// Output pixels per row.
    pub wo: usize,
    /// Channel pairs, ⌈C_out/2⌉.
    pub pairs: usize,
    /// Whether the conv is pointwise ([`CortexMConv::is_pointwise`]): its pixels taken in
    /// blocks of [`CORTEX_M_FLAT_BLOCK`] straight from the input, no band.
    pub pointwise: bool,
    /// Output pixels, H_out·W_out.
    pub pixels: usize,
    /// Bytes of the whole padded input widened: the (H_out − 1)·stride + kh rows the output
    /// reads.
    pub image: usize,
}

/// Output pixels per block where the Cortex-M conv takes pixels in flat order, across rows
/// (the pointwise conv, the whole-image plan). 64: each block call of a channel pair costs
/// about 250 instructions besides its products; against 16, DS-CNN takes 0.31 M instructions
/// fewer (of 4.1 M) for 6 KB more scratch (its 64 pixels' patches: 8 KB).
pub const CORTEX_M_FLAT_BLOCK: usize = 64;

/// The most bytes of widened padded input the Cortex-M conv keeps for a whole call (the
/// whole-image plan: small inputs such as DS-CNN's 49×10 spectrogram or a 32×32×3 image,
/// their pixels then taken in flat order, no row's odd pixel wasted).
pub const CORTEX_M_IMAGE_BUDGET: usize = 8 << 10;

impl CortexMConv {
    /// The layout of a conv of geometry `g` (saturating: geometries come from files).
    pub const fn new(g: &OpGeometry) -> Self {
        let (kh, kw, cin) = (g.kernel_h as usize, g.kernel_w as usize, g.c_in as usize);
        let wo = g.w_out as usize;
        let row = span(wo, g.stride_w, kw)
            .saturating_mul(cin)
            .saturating_mul(2);
        CortexMConv {
            pair: kh
                .saturating_mul(kw.saturating_mul(cin).div_ceil(2))
                .saturating_mul(8),
            row,
            ring: kh.saturating_mul(2).saturating_mul(row),
            wo,
            pairs: (g.c_out as usize).div_ceil(2),
            pointwise: Self::is_pointwise(g),
            pixels: wo.saturating_mul(g.h_out as usize),
            image: span(g.h_out as usize, g.stride, kh).saturating_mul(row),
        }
    }

    /// Whether the stated plan widens the whole padded input once per call: a conv other than
    /// pointwise whose image fits [`CORTEX_M_IMAGE_BUDGET`] and whose rows leave a pixel
    /// unpaired or fall short of a block (rows of an even [`CORTEX_M_FLAT_BLOCK`] or more
    /// pixels run faster as the ring's whole-row blocks).
    pub const fn image_fits(&self) -> bool {
        !self.pointwise
            && self.image <= CORTEX_M_IMAGE_BUDGET
            && (self.wo % 2 == 1 || self.wo < CORTEX_M_FLAT_BLOCK)
    }

    /// Pixels per block in flat order: [`CORTEX_M_FLAT_BLOCK`], or all of them.
    pub const fn flat_block(&self) -> usize {
        if self.pixels < CORTEX_M_FLAT_BLOCK {
            self.pixels
        } else {
            CORTEX_M_FLAT_BLOCK
        }
    }

    /// Whether a conv is pointwise: a 1×1 kernel at stride 1, no padding, the output the
    /// input's size, C_in a multiple of 4 (its pixels' values widen a word at a time).
    pub const fn is_pointwise(g: &OpGeometry) -> bool {
        g.kernel_h == 1
            && g.kernel_w == 1
            && g.stride == 1
            && g.stride_w == 1
            && g.pad == 0
            && g.pad_left == 0
            && !g.dilated
            && g.h_out == g.h_in
            && g.w_out == g.w_in
            && g.c_in > 0
            && g.c_in.is_multiple_of(4)
    }

    /// Bytes for a band of `band` bytes (and the 2 bytes its last segment reads past it), up
    /// to 7 bytes of alignment, `px` pixels' patches and `wp` weight pairs.
    pub const fn bytes(&self, band: usize, px: usize, wp: usize) -> usize {
        band.saturating_add(9)
            .saturating_add(px.div_ceil(2).saturating_add(wp).saturating_mul(self.pair))
    }

    /// Whether the stated plan widens every channel pair's weights once per call: when they
    /// take at most [`CORTEX_M_WEIGHTS_BUDGET`].
    pub const fn all_weights(&self) -> bool {
        self.pairs.saturating_mul(self.pair) <= CORTEX_M_WEIGHTS_BUDGET
    }

    /// The stated plan's bytes: the ring of whole rows, blocks of a whole output row (a
    /// pointwise conv: no band, blocks of [`CORTEX_M_FLAT_BLOCK`] pixels; where
    /// [`CortexMConv::image_fits`], the whole image and such blocks), and every channel
    /// pair's weights widened once per call where [`CortexMConv::all_weights`], else one pair
    /// at a time.
    pub const fn best(&self) -> usize {
        let pairs = if self.all_weights() { self.pairs } else { 1 };
        if self.pointwise {
            return self.bytes(0, self.flat_block(), pairs);
        }
        if self.image_fits() {
            return self.bytes(self.image, self.flat_block(), pairs);
        }
        self.bytes(self.ring, self.wo, pairs)
    }
}

/// The scratch of an undilated conv2d with the Cortex-M set: its best plan,
/// [`CortexMConv::best`].
pub const fn cortex_m_conv_scratch_bytes(g: &OpGeometry) -> usize {
    if g.kind != OP_CONV2D || g.dilated || g.stride == 0 || g.stride_w == 0 {
        return 0;
    }
    CortexMConv::new(g).best()
}

/// The Cortex-M depthwise conv's scratch (`cortex_m::depthwise_conv2d`, depth multiplier 1,
/// no dilation): one channel's padded input as 16-bit values (a byte to align them), `rows`
/// rows of `cols`: the (H_out − 1)·stride_h + kh rows and (W_out − 1)·stride_w + kw columns
/// the output reads, one more column that an odd last tap's pair reads against its zero
/// weight, to an even count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CortexMDepthwise {
    /// Rows of the plane.
    pub rows: usize,
    /// 16-bit values per row (even).
    pub cols: usize,
}

impl CortexMDepthwise {
    /// The layout of a depthwise conv of geometry `g` (saturating: geometries come from files).
    pub const fn new(g: &OpGeometry) -> Self {
        let (kh, kw) = (g.kernel_h as usize, g.kernel_w as usize);
        let (ho, wo) = (g.h_out as usize, g.w_out as usize);
        if ho == 0 || wo == 0 {
            return CortexMDepthwise { rows: 0, cols: 0 };
        }
        CortexMDepthwise {
            rows: span(ho, g.stride, kh),
            cols: span(wo, g.stride_w, kw).saturating_add(2) & !1,
        }
    }

    /// Bytes of the plane and the byte aligning it.
    pub const fn bytes(&self) -> usize {
        self.rows
            .saturating_mul(self.cols)
            .saturating_mul(2)
            .saturating_add(1)
    }
}

/// The padded extent `o` outputs at stride `s` read with a kernel of `k` (0 for no output).
const fn span(o: usize, s: u32, k: usize) -> usize {
    if o == 0 {
        return 0;
    }
    (o - 1).saturating_mul(s as usize).saturating_add(k)
}

/// Whether the depthwise convs of the Cortex-M and x86 sets cover an op of geometry `g`: depth
/// multiplier 1, no dilation, strides of at least 1.
pub const fn depthwise_covered(g: &OpGeometry) -> bool {
    g.kind == OP_DEPTHWISE_CONV2D
        && g.c_in == g.c_out
        && !g.dilated
        && g.stride > 0
        && g.stride_w > 0
}

/// The Cortex-M fully_connected's scratch (`cortex_m::fully_connected`) for K inputs: the
/// input's whole groups of 4 widened to two words each, and up to 3 bytes to align them.
pub const fn cortex_m_fc_scratch_bytes(k: usize) -> usize {
    (k / 4).saturating_mul(8).saturating_add(3)
}

/// The Cortex-M tflite_add's scratch (`cortex_m::tflite_add`): its two input tables, 256 i32
/// each, and up to 3 bytes to align them.
pub const CORTEX_M_ADD_SCRATCH: usize = 2 * 256 * 4 + 3;

/// The scratch of an op with the Cortex-M set: a conv's ([`cortex_m_conv_scratch_bytes`]), a
/// depthwise conv's it covers ([`CortexMDepthwise::bytes`]), a tflite_add's
/// ([`CORTEX_M_ADD_SCRATCH`]), a fully_connected's ([`cortex_m_fc_scratch_bytes`]), 0 for the
/// rest.
pub const fn cortex_m_scratch_bytes(g: &OpGeometry) -> usize {
    if depthwise_covered(g) {
        return CortexMDepthwise::new(g).bytes();
    }
    if g.kind == OP_TFLITE_ADD {
        return CORTEX_M_ADD_SCRATCH;
    }
    if g.kind == OP_FULLY_CONNECTED {
        let k = (g.c_in as usize)
            .saturating_mul(g.h_in as usize)
            .saturating_mul(g.w_in as usize);
        return cortex_m_fc_scratch_bytes(k);
    }
    cortex_m_conv_scratch_bytes(g)
}

impl Kernels {
    /// The scratch bytes this kernel set needs for an op of geometry `g` (TensorFlow Lite
    /// Micro's `RequestScratchBufferInArena`, stated when the model is prepared): 0 for the
    /// scalar reference and for every op but a conv2d, which each other set runs in the best
    /// plan of its own conv kernels, and a depthwise conv (and a few
    /// other ops on Cortex-M): [`x86_scratch_bytes`], [`neon_scratch_bytes`],
    /// [`cortex_m_scratch_bytes`]. `Auto` states the need of
    /// the set it resolves to on this CPU; the other sets state theirs on any CPU (a
    /// firmware's arena is sized on the host).
    pub fn scratch_bytes(self, g: &OpGeometry) -> usize {
        let set = match self {
            Kernels::Auto => self.resolved_kernels(),
            k => k,
        };
        match set {
            Kernels::Scalar => 0,
            Kernels::Neon | Kernels::NeonDot => neon_scratch_bytes(g),
            Kernels::CortexM => cortex_m_scratch_bytes(g),
            Kernels::Avx2 | Kernels::AvxVnni | Kernels::Avx512Vnni | Kernels::Amx => {
                x86_scratch_bytes(g)
            }
            // `resolved_kernels` never gives `Auto`.
            Kernels::Auto => 0,
        }
    }
}
