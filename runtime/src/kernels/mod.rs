//! Integer kernels and their dispatch.
//!
//! `scalar` holds the reference loops, the definition every other kernel must match byte for
//! byte. Per target folder:
//! - `avx2`: the pixels-in-lanes conv (8 pixels per vector, exact `vpmaddubsw` with the sign
//!   moved onto the weight; its AVX-VNNI variant with 256-bit `vpdpbusd`; a mode for few input
//!   channels), the older packed-patch conv it falls back to, fully_connected, max_pool;
//! - `vnni` (AVX-512 VNNI): the pixels-in-lanes conv over one image or a group, the
//!   few-input-channel conv (kernel rows in quads), the packed-patch conv, fully_connected, the
//!   residual add;
//! - `neon` (aarch64): conv2d and fully_connected, with `SDOT` (dotprod) and without;
//! - `cortex_m` (Armv7E-M, the DSP extension: Cortex-M4/M7): conv2d, fully_connected and
//!   max_pool with `SMLAD` and `SXTB16` (`cfg(octet_arm_dsp)`, set by `build.rs`; compiled on
//!   every target for tests, with the DSP instructions emulated bit for bit).
//!
//! [`Kernels`] names a set; `resolve` checks it against the CPU once per run, and the
//! functions at the end of this file dispatch each op. Kernels that may decline a conv take a
//! [`ConvImage`] and return `false`, output untouched, for the dispatch to run another. Every
//! kernel instantiates the one test suite of `test_util` (against the scalar reference). Pools other than max_pool on AVX2 and
//! Cortex-M run scalar; `scalar::add` uses AVX-512 when the CPU has it.

pub mod scalar;

#[cfg(target_arch = "x86_64")]
pub mod avx2;

#[cfg(target_arch = "x86_64")]
pub mod vnni;

#[cfg(target_arch = "aarch64")]
pub mod neon;

#[cfg(any(octet_arm_dsp, test))]
pub mod cortex_m;

#[cfg(test)]
mod test_rng;
#[cfg(test)]
pub(crate) mod test_util;

use crate::format::{OP_CONV2D, OP_FULLY_CONNECTED};
pub use crate::requant::{AddRequant, OutputQuant};

/// Which kernels `Model::run_with` uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Kernels {
    /// The scalar reference kernels.
    Scalar,
    /// AVX2 kernels (error if the CPU lacks AVX2).
    Avx2,
    /// AVX-512 VNNI (512-bit vectors) for conv2d, AVX2 for fully_connected (error if the CPU
    /// lacks AVX2, AVX-512 VNNI, BW or VL).
    Avx512Vnni,
    /// AVX-VNNI (`vpdpbusd` on 256-bit vectors, Alder Lake and later) for conv2d, AVX2 for the
    /// rest (error if the CPU lacks AVX2 or AVX-VNNI).
    AvxVnni,
    /// aarch64 NEON kernels without `dotprod` (error if not on aarch64 or the CPU lacks NEON).
    Neon,
    /// aarch64 NEON kernels with `SDOT` (error if the CPU lacks NEON or `dotprod`).
    NeonDot,
    /// Cortex-M kernels with the DSP extension, `SMLAD` (error unless built for Armv7E-M,
    /// `thumbv7em-*`).
    CortexM,
    /// The fastest available (AVX-512 VNNI, then AVX-VNNI, then AVX2; on aarch64 NEON with dotprod, then
    /// NEON; on Armv7E-M the Cortex-M kernels; then scalar).
    #[default]
    Auto,
}

/// AVX2 detection without `std`: CPUID leaf 7 (AVX2), leaf 1 (OSXSAVE, AVX) and XCR0 (the OS
/// saves the YMM state). The answer is cached in an atomic.
#[cfg(all(
    target_arch = "x86_64",
    not(target_feature = "avx2"),
    not(feature = "std")
))]
mod cpuid {
    use core::arch::x86_64::{__cpuid, __cpuid_count, _xgetbv};
    use core::sync::atomic::{AtomicU8, Ordering};

    // Bit 0: known; bit 1: AVX2; bit 2: AVX-512 VNNI + BW + VL.
    static STATE: AtomicU8 = AtomicU8::new(0);

    fn state() -> u8 {
        let s = STATE.load(Ordering::Relaxed);
        if s & 1 != 0 {
            return s;
        }
        let avx2 = detect_avx2();
        let vnni = avx2 && detect_vnni();
        let s = 1 | (avx2 as u8) << 1 | (vnni as u8) << 2;
        STATE.store(s, Ordering::Relaxed);
        s
    }

    pub(super) fn avx2() -> bool {
        state() & 2 != 0
    }

    pub(super) fn vnni() -> bool {
        state() & 4 != 0
    }

    #[allow(unused_unsafe)]
    fn detect_vnni() -> bool {
        // SAFETY: called only after detect_avx2 saw OSXSAVE, so XGETBV is available.
        unsafe {
            // XCR0: SSE, AVX, opmask, ZMM_Hi256 and Hi16_ZMM state enabled by the OS.
            if _xgetbv(0) & 0xE6 != 0xE6 {
                return false;
            }
            let l7 = __cpuid_count(7, 0);
            let f = l7.ebx & (1 << 16) != 0;
            let bw = l7.ebx & (1 << 30) != 0;
            let vl = l7.ebx & (1 << 31) != 0;
            let vnni = l7.ecx & (1 << 11) != 0;
            f && bw && vl && vnni
        }
    }

    #[allow(unused_unsafe)]
    fn detect_avx2() -> bool {
        // SAFETY: CPUID exists on every x86-64 CPU; XGETBV is executed only when CPUID
        // reports OSXSAVE.
        unsafe {
            let max_leaf = __cpuid(0).eax;
            if max_leaf < 7 {
                return false;
            }
            let l1 = __cpuid(1);
            let osxsave = l1.ecx & (1 << 27) != 0;
            let avx = l1.ecx & (1 << 28) != 0;
            if !(osxsave && avx) {
                return false;
            }
            if _xgetbv(0) & 0b110 != 0b110 {
                return false;
            }
            __cpuid_count(7, 0).ebx & (1 << 5) != 0
        }
    }
}

/// Kernels resolved against the CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Resolved {
    Scalar,
    #[cfg(target_arch = "x86_64")]
    Avx2,
    #[cfg(target_arch = "x86_64")]
    Vnni,
    #[cfg(target_arch = "x86_64")]
    AvxVnni,
    #[cfg(target_arch = "aarch64")]
    Neon,
    #[cfg(target_arch = "aarch64")]
    NeonDot,
    #[cfg(octet_arm_dsp)]
    CortexM,
}

impl Resolved {
    /// The kernel set that names this resolution.
    const fn kernels(self) -> Kernels {
        match self {
            Resolved::Scalar => Kernels::Scalar,
            #[cfg(target_arch = "x86_64")]
            Resolved::Avx2 => Kernels::Avx2,
            #[cfg(target_arch = "x86_64")]
            Resolved::Vnni => Kernels::Avx512Vnni,
            #[cfg(target_arch = "x86_64")]
            Resolved::AvxVnni => Kernels::AvxVnni,
            #[cfg(target_arch = "aarch64")]
            Resolved::Neon => Kernels::Neon,
            #[cfg(target_arch = "aarch64")]
            Resolved::NeonDot => Kernels::NeonDot,
            #[cfg(octet_arm_dsp)]
            Resolved::CortexM => Kernels::CortexM,
        }
    }
}

impl Kernels {
    /// Whether AVX2 kernels can run here: detected at run time (with `std` through
    /// `is_x86_feature_detected!`, without it through CPUID and XGETBV, cached), or known at
    /// compile time (`-C target-feature=+avx2`).
    pub fn avx2_available() -> bool {
        #[cfg(all(target_arch = "x86_64", target_feature = "avx2"))]
        {
            true
        }
        #[cfg(all(target_arch = "x86_64", not(target_feature = "avx2"), feature = "std"))]
        {
            std::is_x86_feature_detected!("avx2")
        }
        #[cfg(all(
            target_arch = "x86_64",
            not(target_feature = "avx2"),
            not(feature = "std")
        ))]
        {
            cpuid::avx2()
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    }

    /// Whether the AVX-512 VNNI kernels can run here (AVX2, AVX-512 F, BW, VL and VNNI, and the
    /// OS saves the AVX-512 state); detected like [`Kernels::avx2_available`].
    pub fn vnni_available() -> bool {
        #[cfg(all(
            target_arch = "x86_64",
            target_feature = "avx2",
            target_feature = "avx512bw",
            target_feature = "avx512vl",
            target_feature = "avx512vnni"
        ))]
        {
            true
        }
        #[cfg(all(
            target_arch = "x86_64",
            not(all(
                target_feature = "avx2",
                target_feature = "avx512bw",
                target_feature = "avx512vl",
                target_feature = "avx512vnni"
            )),
            feature = "std"
        ))]
        {
            std::is_x86_feature_detected!("avx2")
                && std::is_x86_feature_detected!("avx512f")
                && std::is_x86_feature_detected!("avx512bw")
                && std::is_x86_feature_detected!("avx512vl")
                && std::is_x86_feature_detected!("avx512vnni")
        }
        #[cfg(all(
            target_arch = "x86_64",
            not(all(
                target_feature = "avx2",
                target_feature = "avx512bw",
                target_feature = "avx512vl",
                target_feature = "avx512vnni"
            )),
            not(feature = "std")
        ))]
        {
            cpuid::vnni()
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    }

    /// Whether the NEON kernels can run here: known at compile time (`target_feature = "neon"`,
    /// the default of aarch64 Linux targets), else detected with `std`.
    pub fn neon_available() -> bool {
        #[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
        {
            true
        }
        #[cfg(all(target_arch = "aarch64", not(target_feature = "neon"), feature = "std"))]
        {
            std::arch::is_aarch64_feature_detected!("neon")
        }
        #[cfg(not(all(target_arch = "aarch64", any(target_feature = "neon", feature = "std"))))]
        {
            false
        }
    }

    /// Whether the NEON kernels with `SDOT` can run here (NEON and `dotprod`): detected at run
    /// time with `std`, else known at compile time (`-C target-feature=+dotprod`).
    pub fn dotprod_available() -> bool {
        #[cfg(all(target_arch = "aarch64", target_feature = "dotprod"))]
        {
            Self::neon_available()
        }
        #[cfg(all(
            target_arch = "aarch64",
            not(target_feature = "dotprod"),
            feature = "std"
        ))]
        {
            Self::neon_available() && std::arch::is_aarch64_feature_detected!("dotprod")
        }
        #[cfg(not(all(
            target_arch = "aarch64",
            any(target_feature = "dotprod", feature = "std")
        )))]
        {
            false
        }
    }

    /// Whether the Cortex-M DSP kernels can run here: known at compile time (built for
    /// Armv7E-M, `cfg(octet_arm_dsp)`; Armv7-M cores such as the Cortex-M3 lack `SMLAD`).
    pub const fn cortex_m_available() -> bool {
        cfg!(octet_arm_dsp)
    }

    /// Every kernel set, the reference first (each may be unavailable here: see
    /// [`Kernels::resolved_name`]).
    pub const ALL: [Kernels; 8] = [
        Kernels::Scalar,
        Kernels::Avx2,
        Kernels::AvxVnni,
        Kernels::Avx512Vnni,
        Kernels::Neon,
        Kernels::NeonDot,
        Kernels::CortexM,
        Kernels::Auto,
    ];

    /// Lower-case name (`scalar`, `avx2`, `avx-vnni`, `avx512-vnni`, `neon`, `neon-dotprod`,
    /// `cortex-m-dsp`, `auto`), as command lines and benchmark files spell it.
    pub const fn name(self) -> &'static str {
        match self {
            Kernels::Scalar => "scalar",
            Kernels::Avx2 => "avx2",
            Kernels::AvxVnni => "avx-vnni",
            Kernels::Avx512Vnni => "avx512-vnni",
            Kernels::Neon => "neon",
            Kernels::NeonDot => "neon-dotprod",
            Kernels::CortexM => "cortex-m-dsp",
            Kernels::Auto => "auto",
        }
    }

    /// The kernel set of a [`Kernels::name`].
    pub fn from_name(name: &str) -> Option<Kernels> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }

    /// One line for `--help`.
    pub const fn help(self) -> &'static str {
        match self {
            Kernels::Scalar => "the scalar reference kernels",
            Kernels::Avx2 => "x86-64 AVX2",
            Kernels::AvxVnni => "x86-64 AVX-VNNI (256-bit vpdpbusd) for conv2d, AVX2 for the rest",
            Kernels::Avx512Vnni => "x86-64 AVX-512 VNNI for conv2d, AVX2 for the rest",
            Kernels::Neon => "aarch64 NEON without dotprod",
            Kernels::NeonDot => "aarch64 NEON with SDOT (dotprod)",
            Kernels::CortexM => "Cortex-M DSP extension, SMLAD (builds for Armv7E-M only)",
            Kernels::Auto => "the fastest this CPU has",
        }
    }

    /// The kernel sets this CPU can run (the reference first, `Auto` last).
    pub fn available() -> impl Iterator<Item = Kernels> {
        Self::ALL.into_iter().filter(|k| k.resolve().is_ok())
    }

    /// The kernel set this choice runs on this CPU (`scalar`, `avx2`, `avx512-vnni`, …), for
    /// benchmarks and reports; an error when it cannot run here.
    pub fn resolved_name(self) -> crate::Result<&'static str> {
        Ok(self.resolve()?.kernels().name())
    }

    /// Whether the AVX-VNNI kernels can run here: AVX2 and AVX-VNNI (CPUID leaf 7 subleaf 1,
    /// EAX bit 4; the YMM state saved by the OS, as for AVX2).
    pub fn avx_vnni_available() -> bool {
        #[cfg(all(target_arch = "x86_64", feature = "std"))]
        {
            std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("avxvnni")
        }
        #[cfg(all(target_arch = "x86_64", not(feature = "std")))]
        {
            // SAFETY: CPUID exists on every x86-64 CPU; leaf 7 on every one with AVX2.
            #[allow(unused_unsafe)]
            let eax = unsafe { core::arch::x86_64::__cpuid_count(7, 1).eax };
            Self::avx2_available() && eax & (1 << 4) != 0
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    }

    pub(crate) fn resolve(self) -> crate::Result<Resolved> {
        match self {
            Kernels::Scalar => Ok(Resolved::Scalar),
            #[cfg(target_arch = "x86_64")]
            Kernels::Avx2 if Self::avx2_available() => Ok(Resolved::Avx2),
            Kernels::Avx2 => Err(crate::RuntimeError::KernelsUnavailable),
            #[cfg(target_arch = "x86_64")]
            Kernels::Avx512Vnni if Self::vnni_available() => Ok(Resolved::Vnni),
            Kernels::Avx512Vnni => Err(crate::RuntimeError::KernelsUnavailable),
            #[cfg(target_arch = "x86_64")]
            Kernels::AvxVnni if Self::avx_vnni_available() => Ok(Resolved::AvxVnni),
            Kernels::AvxVnni => Err(crate::RuntimeError::KernelsUnavailable),
            #[cfg(target_arch = "aarch64")]
            Kernels::Neon if Self::neon_available() => Ok(Resolved::Neon),
            Kernels::Neon => Err(crate::RuntimeError::KernelsUnavailable),
            #[cfg(target_arch = "aarch64")]
            Kernels::NeonDot if Self::dotprod_available() => Ok(Resolved::NeonDot),
            Kernels::NeonDot => Err(crate::RuntimeError::KernelsUnavailable),
            #[cfg(octet_arm_dsp)]
            Kernels::CortexM => Ok(Resolved::CortexM),
            #[cfg(not(octet_arm_dsp))]
            Kernels::CortexM => Err(crate::RuntimeError::KernelsUnavailable),
            #[cfg(target_arch = "aarch64")]
            Kernels::Auto if Self::dotprod_available() => Ok(Resolved::NeonDot),
            #[cfg(target_arch = "aarch64")]
            Kernels::Auto if Self::neon_available() => Ok(Resolved::Neon),
            #[cfg(target_arch = "x86_64")]
            Kernels::Auto if Self::vnni_available() => Ok(Resolved::Vnni),
            #[cfg(target_arch = "x86_64")]
            Kernels::Auto if Self::avx_vnni_available() => Ok(Resolved::AvxVnni),
            #[cfg(target_arch = "x86_64")]
            Kernels::Auto if Self::avx2_available() => Ok(Resolved::Avx2),
            #[cfg(octet_arm_dsp)]
            Kernels::Auto => Ok(Resolved::CortexM),
            #[cfg(not(octet_arm_dsp))]
            Kernels::Auto => Ok(Resolved::Scalar),
        }
    }
}

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

/// What [`scratch_bytes`] needs to know about an op: its window and its input and output
/// shapes (zero where they do not apply).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpGeometry {
    /// Kernel height.
    pub kernel_h: u32,
    /// Kernel width.
    pub kernel_w: u32,
    /// Stride.
    pub stride: u32,
    /// Padding.
    pub pad: u32,
    /// Input channels.
    pub c_in: u32,
    /// Input height.
    pub h_in: u32,
    /// Input width.
    pub w_in: u32,
    /// Output channels.
    pub c_out: u32,
}

/// Images a batch runs together, op by op, each in its own working area (the VNNI conv covers
/// them in one call; see `Model::arena_bytes_for`).
pub const GROUP_IMAGES: usize = 8;

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

/// The scratch arena bytes an op needs; the exporter reserves exactly this at the op's
/// scratch offset (and writes offset 0 when it is 0).
///
/// conv2d: the larger of `CONV_PIXEL_BLOCK · align16(K) · 2` (AVX2: im2col rows widened to
/// i16), `VNNI_PIXEL_BLOCK · align64(K)` (VNNI: u8 im2col rows), K = kernel_h·kernel_w·c_in,
/// and, when [`lanes_supported`], `64 + t + panel + tile + epi` from [`lanes_regions`] (the
/// pixels-in-lanes VNNI conv); every other op: 0. (The Cortex-M conv fits itself into this,
/// whatever the geometry: see `cortex_m::conv2d`.)
pub const fn scratch_bytes(kind: u8, g: &OpGeometry) -> usize {
    match kind {
        OP_CONV2D => {
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
        OP_FULLY_CONNECTED => 0,
        _ => 0,
    }
}

/// Activation shape (HWC in memory).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    /// Channels.
    pub c: usize,
    /// Height.
    pub h: usize,
    /// Width.
    pub w: usize,
}

impl Shape {
    /// c·h·w.
    pub const fn len(&self) -> usize {
        self.c * self.h * self.w
    }
    /// Whether c·h·w = 0.
    pub const fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A little-endian i32 array inside the file (read in place; any alignment).
#[derive(Clone, Copy, Debug, Default)]
pub struct I32Array<'a> {
    bytes: &'a [u8],
}

impl<'a> I32Array<'a> {
    /// Values `start..end` (clamped to the array).
    pub fn slice(&self, start: usize, end: usize) -> Self {
        let n = self.len();
        let (a, b) = (start.min(n), end.clamp(start.min(n), n));
        I32Array {
            bytes: &self.bytes[4 * a..4 * b],
        }
    }

    /// View of `bytes` (its length should be a multiple of 4).
    pub const fn new(bytes: &'a [u8]) -> Self {
        I32Array { bytes }
    }
    /// Number of values.
    pub const fn len(&self) -> usize {
        self.bytes.len() / 4
    }
    /// Whether empty.
    pub const fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Value `i` (0 when out of range).
    #[inline(always)]
    pub fn get(&self, i: usize) -> i32 {
        crate::format::le_i32(self.bytes, i.wrapping_mul(4))
    }
    /// All values.
    pub fn iter(&self) -> impl Iterator<Item = i32> + 'a {
        let b = self.bytes;
        b.chunks_exact(4)
            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
    }
}

/// A piece of a conv patch ([`ConvParams::patch_pieces`]).
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy, Debug)]
pub(crate) enum PatchPiece {
    /// `n` values read from `input[start..start + n]` (whole taps; a whole kernel row where it
    /// lies inside the input).
    Input { start: usize, n: usize },
    /// One padded tap: C_in pad values.
    Pad,
}

/// conv2d parameters (weights OHWI, per-output-channel bias/multiplier/shift).
#[derive(Clone, Copy, Debug)]
pub struct ConvParams<'a> {
    /// Input shape.
    pub input: Shape,
    /// Output shape.
    pub output: Shape,
    /// Kernel height.
    pub kernel_h: usize,
    /// Kernel width.
    pub kernel_w: usize,
    /// Stride (both axes).
    pub stride: usize,
    /// Padding (all sides).
    pub pad: usize,
    /// `[C_out][kh][kw][C_in]`.
    pub weights: &'a [i8],
    /// Bias per output channel.
    pub bias: I32Array<'a>,
    /// M0 per output channel.
    pub multiplier: I32Array<'a>,
    /// Shift per output channel.
    pub shift: I32Array<'a>,
    /// Pad value per input channel; empty: the input zero point.
    pub pad_values: &'a [i8],
    /// Input zero point.
    pub input_zero_point: i32,
    /// Output zero point and clamp.
    pub out: OutputQuant,
}

impl<'a> ConvParams<'a> {
    /// The conv restricted to output channels `c0..c1` (written as an HWC tensor of `c1 − c0`
    /// channels): the same bytes for those channels, so threads can share one conv.
    pub fn channels(&self, c0: usize, c1: usize) -> ConvParams<'a> {
        let k = self.k();
        ConvParams {
            output: Shape {
                c: c1 - c0,
                ..self.output
            },
            weights: &self.weights[c0 * k..c1 * k],
            bias: self.bias.slice(c0, c1),
            multiplier: self.multiplier.slice(c0, c1),
            shift: self.shift.slice(c0, c1),
            ..*self
        }
    }

    /// The op's geometry, for [`scratch_bytes`].
    pub const fn geometry(&self) -> OpGeometry {
        OpGeometry {
            kernel_h: self.kernel_h as u32,
            kernel_w: self.kernel_w as u32,
            stride: self.stride as u32,
            pad: self.pad as u32,
            c_in: self.input.c as u32,
            h_in: self.input.h as u32,
            w_in: self.input.w as u32,
            c_out: self.output.c as u32,
        }
    }

    /// Output pixel `pi`'s patch (its K values in the weights' OHWI order), piece by piece at
    /// its patch offset: the walk the x86 patch-packing conv kernels share (NEON keeps its own,
    /// see `neon::conv2d`).
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    pub(crate) fn patch_pieces(&self, pi: usize, mut piece: impl FnMut(usize, PatchPiece)) {
        let (cin, h, w) = (self.input.c, self.input.h as isize, self.input.w as isize);
        let (kh, kw, s) = (self.kernel_h, self.kernel_w, self.stride);
        let (oy, ox) = (pi / self.output.w, pi % self.output.w);
        let row = kw * cin;
        let ix0 = (ox * s) as isize - self.pad as isize;
        for ky in 0..kh {
            let at = ky * row;
            let iy = (oy * s + ky) as isize - self.pad as isize;
            if iy < 0 || iy >= h {
                (0..kw).for_each(|kx| piece(at + kx * cin, PatchPiece::Pad));
                continue;
            }
            let base = iy as usize * w as usize;
            if ix0 >= 0 && ix0 + kw as isize <= w {
                let start = (base + ix0 as usize) * cin;
                piece(at, PatchPiece::Input { start, n: row });
                continue;
            }
            for kx in 0..kw {
                let ix = ix0 + kx as isize;
                if ix >= 0 && ix < w {
                    let start = (base + ix as usize) * cin;
                    piece(at + kx * cin, PatchPiece::Input { start, n: cin });
                } else {
                    piece(at + kx * cin, PatchPiece::Pad);
                }
            }
        }
    }

    /// kh·kw·C_in.
    pub const fn k(&self) -> usize {
        self.kernel_h * self.kernel_w * self.input.c
    }
    /// The value a padded tap of input channel `c` reads.
    #[inline(always)]
    pub fn pad_value(&self, c: usize) -> i8 {
        match self.pad_values.get(c) {
            Some(&v) => v,
            None => self.input_zero_point.clamp(-128, 127) as i8,
        }
    }
}

/// One image's buffers for a conv: what every kernel that may decline a conv takes.
pub struct ConvImage<'a> {
    /// The input tensor (HWC).
    pub input: &'a [i8],
    /// The output tensor (HWC; a band's rows for the band entry points).
    pub output: &'a mut [i8],
    /// The op's scratch in this image's working area.
    pub scratch: &'a mut [u8],
}

impl<'a> ConvImage<'a> {
    /// The buffers of one image.
    pub fn new(input: &'a [i8], output: &'a mut [i8], scratch: &'a mut [u8]) -> Self {
        ConvImage {
            input,
            output,
            scratch,
        }
    }
}

/// fully_connected parameters.
#[derive(Clone, Copy, Debug)]
pub struct FcParams<'a> {
    /// Inputs per output (K).
    pub k: usize,
    /// Outputs (N).
    pub n: usize,
    /// `[N][K]`.
    pub weights: &'a [i8],
    /// Bias per output.
    pub bias: I32Array<'a>,
    /// M0 per output.
    pub multiplier: I32Array<'a>,
    /// Shift per output.
    pub shift: I32Array<'a>,
    /// Output zero point and clamp.
    pub out: OutputQuant,
}

impl<'a> FcParams<'a> {
    /// Outputs `n0..n1` only (the same bytes for those outputs).
    pub fn outputs(&self, n0: usize, n1: usize) -> FcParams<'a> {
        FcParams {
            n: n1 - n0,
            weights: &self.weights[n0 * self.k..n1 * self.k],
            bias: self.bias.slice(n0, n1),
            multiplier: self.multiplier.slice(n0, n1),
            shift: self.shift.slice(n0, n1),
            ..*self
        }
    }
}

/// max_pool / avg_pool parameters.
#[derive(Clone, Copy, Debug)]
pub struct PoolParams {
    /// Input shape.
    pub input: Shape,
    /// Output shape.
    pub output: Shape,
    /// Window height.
    pub kernel_h: usize,
    /// Window width.
    pub kernel_w: usize,
    /// Stride.
    pub stride: usize,
    /// Input zero point (avg_pool).
    pub input_zero_point: i32,
    /// M0 (avg_pool).
    pub multiplier: i32,
    /// Shift (avg_pool).
    pub shift: i32,
    /// Output zero point and clamp (max_pool uses only the clamp).
    pub out: OutputQuant,
}

/// conv2d with the chosen kernels.
pub(crate) fn conv2d(
    k: Resolved,
    p: &ConvParams,
    input: &[i8],
    output: &mut [i8],
    scratch: &mut [u8],
) {
    #[cfg(target_arch = "x86_64")]
    let all = 0..p.output.h;
    match k {
        Resolved::Scalar => scalar::conv2d(p, input, output),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: Resolved::Avx2 is only produced when AVX2 is available.
        Resolved::Avx2 => unsafe {
            if !avx2::conv2d_lanes_avx2(p, ConvImage::new(input, output, scratch), all) {
                avx2::conv2d(p, input, output, scratch)
            }
        },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: Resolved::AvxVnni is only produced when AVX2 and AVX-VNNI are available.
        Resolved::AvxVnni => unsafe {
            if !avx2::conv2d_lanes_vnni(p, ConvImage::new(input, output, scratch), all) {
                avx2::conv2d(p, input, output, scratch)
            }
        },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: Resolved::Vnni is only produced when AVX2 and AVX-512 VNNI/VL are available.
        Resolved::Vnni => unsafe {
            if (vnni::narrow_preferred(p)
                && vnni::conv2d_narrow(p, ConvImage::new(input, output, scratch)))
                || vnni::conv2d_lanes(p, ConvImage::new(input, output, scratch), all)
            {
                // Covered by the few-channel or the pixels-in-lanes kernel.
            } else if p.k() >= VNNI_MIN_K && p.output.c >= VNNI_MIN_COUT {
                vnni::conv2d(p, input, output, scratch)
            } else {
                avx2::conv2d(p, input, output, scratch)
            }
        },
        #[cfg(target_arch = "aarch64")]
        // SAFETY: Resolved::Neon is only produced when NEON is available.
        Resolved::Neon => unsafe { neon::conv2d(p, input, output, scratch) },
        #[cfg(target_arch = "aarch64")]
        // SAFETY: Resolved::NeonDot is only produced when NEON and dotprod are available.
        Resolved::NeonDot => unsafe { neon::conv2d_dot(p, input, output, scratch) },
        #[cfg(octet_arm_dsp)]
        Resolved::CortexM => cortex_m::conv2d(p, input, output, scratch),
    }
    let _ = scratch;
}

/// Whether [`conv2d_rows`] covers conv `p` with the chosen kernels and `scratch` bytes: the
/// pixels-in-lanes convs (VNNI, AVX2, AVX-VNNI); elsewhere threads split a conv by output
/// channels instead.
#[cfg(feature = "std")]
pub(crate) fn conv2d_rows_covered(k: Resolved, p: &ConvParams, scratch: usize) -> bool {
    match k {
        #[cfg(target_arch = "x86_64")]
        Resolved::Vnni => {
            // The scratch rule sizes every op the lanes geometry covers for this kernel.
            !vnni::narrow_preferred(p)
                && vnni::lanes_covers(p)
                && scratch >= scratch_bytes(OP_CONV2D, &p.geometry())
        }
        #[cfg(target_arch = "x86_64")]
        Resolved::Avx2 | Resolved::AvxVnni => {
            avx2::lanes_covered(p) && scratch >= avx2::lanes_scratch(p)
        }
        _ => {
            let _ = (p, scratch);
            false
        }
    }
}

/// Output rows `rows` of conv `p` into `output` (those rows, HWC), for threads sharing an
/// image, where [`conv2d_rows_covered`] holds; `false` (nothing written) where the kernel
/// declines.
#[cfg(feature = "std")]
pub(crate) fn conv2d_rows(
    k: Resolved,
    p: &ConvParams,
    input: &[i8],
    output: &mut [i8],
    scratch: &mut [u8],
    rows: core::ops::Range<usize>,
) -> bool {
    match k {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: Resolved::Vnni is only produced when AVX2 and AVX-512 VNNI/VL are available.
        Resolved::Vnni => unsafe {
            vnni::conv2d_lanes(p, ConvImage::new(input, output, scratch), rows)
        },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: Resolved::Avx2 is only produced when AVX2 is available.
        Resolved::Avx2 => unsafe {
            avx2::conv2d_lanes_avx2(p, ConvImage::new(input, output, scratch), rows)
        },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: Resolved::AvxVnni is only produced when AVX2 and AVX-VNNI are available.
        Resolved::AvxVnni => unsafe {
            avx2::conv2d_lanes_vnni(p, ConvImage::new(input, output, scratch), rows)
        },
        _ => {
            let _ = (p, input, output, scratch, rows);
            false
        }
    }
}

/// max_pool with the chosen kernels.
pub(crate) fn max_pool(k: Resolved, p: &PoolParams, input: &[i8], output: &mut [i8]) {
    match k {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: Resolved::Avx2, Vnni and AvxVnni are only produced when AVX2 is available.
        Resolved::Avx2 | Resolved::Vnni | Resolved::AvxVnni => unsafe {
            avx2::max_pool(p, input, output)
        },
        #[cfg(octet_arm_dsp)]
        Resolved::CortexM => cortex_m::max_pool(p, input, output),
        _ => scalar::max_pool(p, input, output),
    }
}

/// fully_connected with the chosen kernels.
pub(crate) fn fully_connected(k: Resolved, p: &FcParams, input: &[i8], output: &mut [i8]) {
    match k {
        Resolved::Scalar => scalar::fully_connected(p, input, output),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: Resolved::Avx2, Vnni and AvxVnni are only produced when AVX2 is available.
        Resolved::Avx2 | Resolved::AvxVnni => unsafe { avx2::fully_connected(p, input, output) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: Resolved::Vnni is only produced when AVX-512 F, BW, VL and VNNI are available.
        Resolved::Vnni => unsafe { vnni::fully_connected(p, input, output) },
        #[cfg(target_arch = "aarch64")]
        // SAFETY: Resolved::Neon is only produced when NEON is available.
        Resolved::Neon => unsafe { neon::fully_connected(p, input, output) },
        #[cfg(target_arch = "aarch64")]
        // SAFETY: Resolved::NeonDot is only produced when NEON and dotprod are available.
        Resolved::NeonDot => unsafe { neon::fully_connected_dot(p, input, output) },
        #[cfg(octet_arm_dsp)]
        Resolved::CortexM => cortex_m::fully_connected(p, input, output),
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::Kernels;

    #[test]
    fn detection_agrees_with_std() {
        assert_eq!(
            Kernels::avx2_available(),
            std::is_x86_feature_detected!("avx2")
        );
        let vnni = std::is_x86_feature_detected!("avx2")
            && std::is_x86_feature_detected!("avx512f")
            && std::is_x86_feature_detected!("avx512bw")
            && std::is_x86_feature_detected!("avx512vl")
            && std::is_x86_feature_detected!("avx512vnni");
        assert_eq!(Kernels::vnni_available(), vnni);
        assert_eq!(
            Kernels::avx_vnni_available(),
            std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("avxvnni")
        );
        println!("avx2 {} vnni {vnni}", Kernels::avx2_available());
    }
}

#[cfg(all(test, target_arch = "aarch64"))]
mod neon_tests {
    use super::{Kernels, Resolved};
    use crate::RuntimeError;

    #[test]
    fn detection_agrees_with_std() {
        let neon = std::arch::is_aarch64_feature_detected!("neon");
        let dot = neon && std::arch::is_aarch64_feature_detected!("dotprod");
        assert_eq!(Kernels::neon_available(), neon);
        assert_eq!(Kernels::dotprod_available(), dot);
        println!("neon {neon} dotprod {dot}");
    }

    #[test]
    fn resolution() {
        assert!(!Kernels::avx2_available());
        assert_eq!(
            Kernels::Avx2.resolve(),
            Err(RuntimeError::KernelsUnavailable)
        );
        assert_eq!(Kernels::Neon.resolve(), Ok(Resolved::Neon));
        if Kernels::dotprod_available() {
            assert_eq!(Kernels::NeonDot.resolve(), Ok(Resolved::NeonDot));
            assert_eq!(Kernels::Auto.resolve(), Ok(Resolved::NeonDot));
        } else {
            assert_eq!(
                Kernels::NeonDot.resolve(),
                Err(RuntimeError::KernelsUnavailable)
            );
            assert_eq!(Kernels::Auto.resolve(), Ok(Resolved::Neon));
        }
    }
}

#[cfg(all(test, not(target_arch = "aarch64")))]
mod neon_elsewhere_tests {
    use super::Kernels;
    use crate::RuntimeError;

    #[test]
    fn neon_kernels_unavailable() {
        assert!(!Kernels::neon_available() && !Kernels::dotprod_available());
        assert_eq!(
            Kernels::Neon.resolve(),
            Err(RuntimeError::KernelsUnavailable)
        );
        assert_eq!(
            Kernels::NeonDot.resolve(),
            Err(RuntimeError::KernelsUnavailable)
        );
    }
}

#[cfg(all(test, not(octet_arm_dsp)))]
mod cortex_m_elsewhere_tests {
    use super::Kernels;
    use crate::RuntimeError;

    #[test]
    fn cortex_m_kernels_unavailable() {
        assert!(!Kernels::cortex_m_available());
        assert_eq!(
            Kernels::CortexM.resolve(),
            Err(RuntimeError::KernelsUnavailable)
        );
        assert!(Kernels::available().all(|k| k != Kernels::CortexM));
        assert_eq!(Kernels::from_name("cortex-m-dsp"), Some(Kernels::CortexM));
    }
}

/// `--kernels`: `--help` lists the kernel sets with their help; clap refuses other names. The
/// Cortex-M kernels are accepted but not listed: a program with a command line never runs on
/// the microcontrollers they are built for.
#[cfg(feature = "clap")]
impl clap::ValueEnum for Kernels {
    fn value_variants<'a>() -> &'a [Self] {
        &Self::ALL
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        let listed = !matches!(self, Kernels::CortexM);
        let value = clap::builder::PossibleValue::new(self.name());
        Some(value.help(self.help()).hide(!listed))
    }
}
