//! Each op with the chosen kernels: the one place that maps an op and a [`Resolved`] set to a
//! kernel (a kernel set without a kernel of its own for an op runs the scalar reference).
//!
//! Every kernel gives the reference's bytes for any op of its kind: what it does not cover
//! itself it declines or hands to a kernel that does.
//!
//! - x86: every conv covers both roundings (its vector epilogue computes
//!   `requant::FusedRequant`'s form; the unpacked AVX2 fully connected layer and the AVX2
//!   patch conv requantize through `OutputQuant`) and takes a uniform window (`Placement::is_uniform`); beyond that
//!   the AVX-512 VNNI few-channel conv (C_in ≤ 8, VBMI) and pixels-in-lanes conv (the lanes
//!   geometry) need shifts from −23 up, the AVX2 / AVX-VNNI pixels-in-lanes conv shifts in
//!   [−23, −2], and the packed-patch VNNI conv 6 output channels; the implicit VNNI and AVX2
//!   convs (`vnni::conv2d_implicit`, `avx2::conv2d_implicit_rows`) every uniform conv packed
//!   for them at prepare; the AVX2 patch conv covers every uniform conv, the scalar reference
//!   the rest. The AVX2 and AVX-VNNI sets' fully connected layers run from weights packed at
//!   prepare (`avx2::fully_connected_packed`, `_vnni`), unpacked ones through
//!   `avx2::fully_connected`.
//! - NEON: conv and fully connected in both roundings (an epilogue per rounding).
//! - x86 and NEON: a conv whose window is not uniform (SAME padding) but has one stride runs
//!   as the uniform conv over its input padded into scratch (`valid::as_valid`); the scalar
//!   reference runs the dilated ones.
//! - Cortex-M: conv (any undilated window), depthwise (depth multiplier 1), fully connected,
//!   max pool, tflite_add and tflite_avg_pool, in both roundings, their scratch stated at
//!   prepare (`kernels::cortex_m_scratch_bytes`); what a kernel does not cover it hands to the
//!   scalar reference itself.
//! - tflite_add: AVX-512, AVX2 (the avx2 and avx-vnni sets), NEON and Cortex-M cover every
//!   valid op in both roundings (the call's tables, [`TfliteAddTables`]; Cortex-M's in its
//!   scratch); the scalar reference runs what the format rejects and the scalar set's.

#[cfg(octet_arm_dsp)]
use super::cortex_m;
#[cfg(target_arch = "aarch64")]
use super::neon;
#[cfg(target_arch = "x86_64")]
use super::{amx, avx2, vnni, ConvImage, VNNI_MIN_COUT, VNNI_MIN_K};
use super::{
    scalar, AddRequant, ConvParams, DepthwiseParams, FcParams, Packed, PadParams, PoolParams,
    Resolved, SoftmaxParams, TfliteAddParams, TfliteAddTables,
};

/// `run` of conv `p`'s uniform form where its window is not uniform and the chosen kernels
/// are x86's or NEON's: the uniform conv over the input padded into the front of `scratch`
/// (`valid::as_valid`), with that input and the scratch after it; `None` (nothing run) for a
/// uniform window, the reference kernels, or where the form or its buffers are missing.
fn padded_form<R>(
    k: Resolved,
    p: &ConvParams,
    input: &[i8],
    scratch: &mut [u8],
    run: impl FnOnce(&ConvParams, &[i8], &mut [u8]) -> R,
) -> Option<R> {
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    if k != Resolved::Scalar && !p.is_uniform() {
        return super::valid::as_valid(p, input, scratch).map(|(q, x, s)| run(&q, x, s));
    }
    let _ = (k, p, input, scratch, run);
    None
}

/// conv2d with the chosen kernels.
pub(crate) fn conv2d(
    k: Resolved,
    p: &ConvParams,
    input: &[i8],
    output: &mut [i8],
    scratch: &mut [u8],
) {
    if let Some(()) = padded_form(k, p, input, scratch, |q, x, s| conv2d(k, q, x, output, s)) {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    let all = 0..p.output.h;
    match k {
        Resolved::Scalar => scalar::conv2d(p, input, output),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: Resolved::Avx2 is only produced when AVX2 is available.
        Resolved::Avx2 => unsafe {
            // Packed at prepare: the implicit conv; else the lanes or the patch kernel.
            if !avx2::conv2d_implicit_rows(p, ConvImage::new(input, output, scratch), all.clone())
                && !avx2::conv2d_lanes_avx2(p, ConvImage::new(input, output, scratch), all)
            {
                avx2::conv2d(p, input, output, scratch)
            }
        },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: Resolved::AvxVnni is only produced when AVX2 and AVX-VNNI are available.
        Resolved::AvxVnni => unsafe {
            if !avx2::conv2d_implicit_rows_vnni(
                p,
                ConvImage::new(input, output, scratch),
                all.clone(),
            ) && !avx2::conv2d_lanes_vnni(p, ConvImage::new(input, output, scratch), all)
            {
                avx2::conv2d(p, input, output, scratch)
            }
        },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: Resolved::Vnni (and Amx, which includes it) is only produced when AVX2 and
        // AVX-512 VNNI/VL are available, Resolved::Amx only where the tiles may run.
        Resolved::Vnni | Resolved::Amx => unsafe {
            let one = &mut [ConvImage::new(input, output, scratch)];
            if (k == Resolved::Amx && amx::conv2d(p, one))
                || vnni::conv2d_implicit(p, one)
                || vnni::conv2d_packed(p, one)
            {
                // Packed at prepare: on tiles, the implicit conv, or the packed fully
                // connected kernel over its patches.
            } else if (vnni::narrow_preferred(p)
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
/// pixels-in-lanes convs (VNNI, AVX2, AVX-VNNI), in either rounding; elsewhere threads split a
/// conv by output channels instead.
#[cfg(feature = "std")]
pub(crate) fn conv2d_rows_covered(k: Resolved, p: &ConvParams, scratch: usize) -> bool {
    // A conv whose window is not uniform by its uniform form, over the input padded into the
    // front of the scratch (each thread pads its own copy: [`conv2d_rows`]).
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    if k != Resolved::Scalar && !p.is_uniform() {
        return super::valid::valid_params(p).is_some_and(|(q, front)| {
            scratch >= front && conv2d_rows_covered(k, &q, scratch - front)
        });
    }
    // A conv on tiles splits by bands of its pixels, each thread staging its own.
    #[cfg(target_arch = "x86_64")]
    if k == Resolved::Amx && p.packed.of(super::Layout::AmxFc).is_some() {
        return amx::rows_covered(p);
    }
    match k.base() {
        // A packed conv by the packed product over the band's pixels.
        #[cfg(target_arch = "x86_64")]
        Resolved::Vnni if p.packed.of(super::Layout::VnniFc).is_some() => {
            vnni::packed_rows_covered(p)
        }
        #[cfg(target_arch = "x86_64")]
        Resolved::Vnni if p.packed.of(super::Layout::VnniConv).is_some() => {
            vnni::implicit_rows_covered(p, scratch)
        }
        #[cfg(target_arch = "x86_64")]
        Resolved::Vnni => {
            // The scratch rule sizes every op the lanes geometry covers for this kernel.
            !vnni::narrow_preferred(p)
                && vnni::lanes_covers(p)
                && scratch >= super::conv_scratch_bytes(&p.geometry())
        }
        #[cfg(target_arch = "x86_64")]
        Resolved::Avx2 | Resolved::AvxVnni if p.packed.of(super::Layout::Avx2Conv).is_some() => {
            avx2::implicit_rows_covered(p, scratch)
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
    if let Some(done) = padded_form(k, p, input, scratch, |q, x, s| {
        conv2d_rows(k, q, x, output, s, rows.clone())
    }) {
        return done;
    }
    #[cfg(target_arch = "x86_64")]
    if k == Resolved::Amx && p.packed.of(super::Layout::AmxFc).is_some() {
        // SAFETY: Resolved::Amx is only produced where the tiles may run.
        return unsafe { amx::conv2d_rows(p, input, output, scratch, rows) };
    }
    match k.base() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: Resolved::Vnni is only produced when AVX2 and AVX-512 VNNI/VL are available.
        Resolved::Vnni if p.packed.of(super::Layout::VnniFc).is_some() => unsafe {
            vnni::conv2d_packed_rows(p, input, output, rows)
        },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above.
        Resolved::Vnni if p.packed.of(super::Layout::VnniConv).is_some() => unsafe {
            vnni::conv2d_implicit_rows(p, ConvImage::new(input, output, scratch), rows)
        },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above.
        Resolved::Vnni => unsafe {
            vnni::conv2d_lanes(p, ConvImage::new(input, output, scratch), rows)
        },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: Resolved::Avx2 is only produced when AVX2 is available.
        Resolved::Avx2 if p.packed.of(super::Layout::Avx2Conv).is_some() => unsafe {
            avx2::conv2d_implicit_rows(p, ConvImage::new(input, output, scratch), rows)
        },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: Resolved::Avx2 is only produced when AVX2 is available.
        Resolved::Avx2 => unsafe {
            avx2::conv2d_lanes_avx2(p, ConvImage::new(input, output, scratch), rows)
        },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: Resolved::AvxVnni is only produced when AVX2 and AVX-VNNI are available.
        Resolved::AvxVnni if p.packed.of(super::Layout::Avx2Conv).is_some() => unsafe {
            avx2::conv2d_implicit_rows_vnni(p, ConvImage::new(input, output, scratch), rows)
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

/// Whether [`depthwise_conv2d_rows`] covers depthwise conv `p` (an input of `input` bytes)
/// with the chosen kernels and `scratch` bytes: the x86 sets' kernel, where it covers the
/// whole op; elsewhere threads leave the op to one of them.
#[cfg(feature = "std")]
pub(crate) fn depthwise_conv2d_rows_covered(
    k: Resolved,
    p: &DepthwiseParams,
    input: usize,
    scratch: usize,
) -> bool {
    match k.base() {
        #[cfg(target_arch = "x86_64")]
        Resolved::Avx2 | Resolved::AvxVnni | Resolved::Vnni => {
            super::SimdDepthwise::for_call(p, input, p.output.len(), scratch).is_some()
        }
        _ => {
            let _ = (p, input, scratch);
            false
        }
    }
}

/// Output rows `rows` of depthwise conv `p` into `output` (those rows, HWC), for threads
/// sharing an image, where [`depthwise_conv2d_rows_covered`] holds; `false` (nothing written)
/// where the kernel declines.
#[cfg(feature = "std")]
pub(crate) fn depthwise_conv2d_rows(
    k: Resolved,
    p: &DepthwiseParams,
    input: &[i8],
    output: &mut [i8],
    scratch: &mut [u8],
    rows: core::ops::Range<usize>,
) -> bool {
    match k.base() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: Resolved::Avx2 and AvxVnni are only produced when AVX2 is available.
        Resolved::Avx2 | Resolved::AvxVnni => unsafe {
            avx2::depthwise_conv2d_rows(p, input, output, scratch, rows)
        },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: Resolved::Vnni is only produced when AVX2 and AVX-512 F/BW/VL/VNNI are
        // available.
        Resolved::Vnni => unsafe {
            avx2::depthwise_conv2d_512_rows(p, input, output, scratch, rows)
        },
        _ => {
            let _ = (p, input, output, scratch, rows);
            false
        }
    }
}

/// max_pool with the chosen kernels.
pub(crate) fn max_pool(k: Resolved, p: &PoolParams, input: &[i8], output: &mut [i8]) {
    match k.base() {
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

/// fully_connected with the chosen kernels (`scratch`: Cortex-M's widened input).
pub(crate) fn fully_connected(
    k: Resolved,
    p: &FcParams,
    input: &[i8],
    output: &mut [i8],
    scratch: &mut [u8],
) {
    let _ = &scratch;
    match k.base() {
        Resolved::Scalar => scalar::fully_connected(p, input, output),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: Resolved::Avx2 is only produced when AVX2 is available.
        Resolved::Avx2 => unsafe {
            // Packed at prepare: rows in the lanes; else the unpacked kernel.
            if !avx2::fully_connected_packed(p, &mut [ConvImage::new(input, output, &mut [])]) {
                avx2::fully_connected(p, input, output)
            }
        },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: Resolved::AvxVnni is only produced when AVX2 and AVX-VNNI are available.
        Resolved::AvxVnni => unsafe {
            let one = &mut [ConvImage::new(input, output, &mut [])];
            if !avx2::fully_connected_packed_vnni(p, one) {
                avx2::fully_connected(p, input, output)
            }
        },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: Resolved::Vnni (and Amx, which includes it) is only produced when AVX-512 F,
        // BW, VL and VNNI are available.
        Resolved::Vnni | Resolved::Amx => unsafe { vnni::fully_connected(p, input, output) },
        #[cfg(target_arch = "aarch64")]
        // SAFETY: Resolved::Neon is only produced when NEON is available.
        Resolved::Neon => unsafe { neon::fully_connected(p, input, output) },
        #[cfg(target_arch = "aarch64")]
        // SAFETY: Resolved::NeonDot is only produced when NEON and dotprod are available.
        Resolved::NeonDot => unsafe { neon::fully_connected_dot(p, input, output) },
        #[cfg(octet_arm_dsp)]
        Resolved::CortexM => cortex_m::fully_connected(p, input, output, scratch),
    }
}

/// avg_pool (octet's requantizing mean) with the chosen kernels: the scalar reference in every
/// set.
pub(crate) fn avg_pool(k: Resolved, p: &PoolParams, input: &[i8], output: &mut [i8]) {
    let _ = k;
    scalar::avg_pool(p, input, output)
}

/// add (octet's residual add) with the chosen kernels: AVX-512 where the set is AVX-512 VNNI and
/// the parameters fit its lanes, else the scalar reference.
pub(crate) fn add(k: Resolved, p: &AddRequant, a: &[i8], b: &[i8], output: &mut [i8]) {
    #[cfg(target_arch = "x86_64")]
    if k.base() == Resolved::Vnni && vnni::add_supported(p) {
        // SAFETY: Resolved::Vnni is only produced when AVX-512 F, BW, VL and VNNI are available;
        // add_supported(p) holds.
        return unsafe { vnni::add(p, a, b, output) };
    }
    let _ = k;
    scalar::add(p, a, b, output)
}

/// depthwise_conv2d with the chosen kernels: Cortex-M's, x86's (AVX2, two pixels per AVX-512
/// vector in the VNNI set) and NEON's own, each running the scalar reference for what it does not cover (a depth
/// multiplier other than 1, dilation).
pub(crate) fn depthwise_conv2d(
    k: Resolved,
    p: &DepthwiseParams,
    input: &[i8],
    output: &mut [i8],
    scratch: &mut [u8],
) {
    match k.base() {
        #[cfg(octet_arm_dsp)]
        Resolved::CortexM => cortex_m::depthwise_conv2d(p, input, output, scratch),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: Resolved::Avx2, Vnni and AvxVnni are only produced when AVX2 is available.
        Resolved::Avx2 | Resolved::AvxVnni => unsafe {
            avx2::depthwise_conv2d(p, input, output, scratch)
        },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: Resolved::Vnni is only produced when AVX2 and AVX-512 F/BW/VL/VNNI are
        // available.
        Resolved::Vnni => unsafe { avx2::depthwise_conv2d_512(p, input, output, scratch) },
        #[cfg(target_arch = "aarch64")]
        // SAFETY: Resolved::Neon and NeonDot are only produced when NEON is available.
        Resolved::Neon | Resolved::NeonDot => unsafe {
            neon::depthwise_conv2d(p, input, output, scratch)
        },
        _ => {
            let _ = scratch;
            scalar::depthwise_conv2d(p, input, output)
        }
    }
}

/// tflite_avg_pool with the chosen kernels: Cortex-M's and x86's own (AVX2 for all three x86
/// sets), the scalar reference in every other set.
pub(crate) fn tflite_avg_pool(k: Resolved, p: &PoolParams, input: &[i8], output: &mut [i8]) {
    match k.base() {
        #[cfg(octet_arm_dsp)]
        Resolved::CortexM => cortex_m::tflite_avg_pool(p, input, output),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: Resolved::Avx2, Vnni and AvxVnni are only produced when AVX2 is available.
        Resolved::Avx2 | Resolved::Vnni | Resolved::AvxVnni => unsafe {
            avx2::tflite_avg_pool(p, input, output)
        },
        _ => scalar::tflite_avg_pool(p, input, output),
    }
}

/// softmax with the chosen kernels: the scalar reference in every set.
pub(crate) fn softmax(k: Resolved, p: &SoftmaxParams, input: &[i8], output: &mut [i8]) {
    let _ = k;
    scalar::softmax(p, input, output)
}

/// pad with the chosen kernels: the scalar reference in every set.
pub(crate) fn pad(k: Resolved, p: &PadParams, input: &[i8], output: &mut [i8]) {
    let _ = k;
    scalar::pad(p, input, output)
}

/// reshape (a copy of the bytes) with the chosen kernels.
pub(crate) fn reshape(k: Resolved, input: &[i8], output: &mut [i8]) {
    let _ = k;
    scalar::reshape(input, output)
}

/// tflite_add with the chosen kernels ([`tflite_add_with`] on the tables packed at prepare,
/// else on this call's; Cortex-M's tables in the op's scratch).
pub(crate) fn tflite_add(
    k: Resolved,
    p: &TfliteAddParams,
    packed: &Packed,
    a: &[i8],
    b: &[i8],
    output: &mut [i8],
    scratch: &mut [u8],
) {
    #[cfg(octet_arm_dsp)]
    if k == Resolved::CortexM {
        return cortex_m::tflite_add(p, a, b, output, scratch);
    }
    let _ = scratch;
    // Only where a set has tables: elsewhere (microcontrollers) no 2 KiB of them on the stack.
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    if with_add_tables(k, p, packed, |t| {
        t.map(|t| tflite_add_with(k, p, Some(t), a, b, output))
    })
    .is_some()
    {
        return;
    }
    let _ = (k, packed);
    scalar::tflite_add(p, a, b, output)
}

/// `f` of tflite_add `p`'s tables: those packed at prepare, else built now where the chosen
/// kernels have a tflite_add of their own ([`tflite_add_tables`]), else `None`.
#[cfg_attr(
    not(any(feature = "std", target_arch = "x86_64", target_arch = "aarch64")),
    allow(dead_code)
)]
pub(crate) fn with_add_tables<R>(
    k: Resolved,
    p: &TfliteAddParams,
    packed: &Packed,
    f: impl FnOnce(Option<&TfliteAddTables>) -> R,
) -> R {
    match packed.add_tables() {
        Some(t) => f(Some(t)),
        None => f(tflite_add_tables(k, p).as_ref()),
    }
}

/// The tables of tflite_add `p` where the chosen kernels have a tflite_add of their own
/// (AVX-512, AVX2, NEON), for [`tflite_add_with`]; `None` elsewhere, and for parameters the
/// format rejects.
#[cfg_attr(
    not(any(feature = "std", target_arch = "x86_64", target_arch = "aarch64")),
    allow(dead_code)
)]
pub(crate) fn tflite_add_tables(k: Resolved, p: &TfliteAddParams) -> Option<TfliteAddTables> {
    match k.base() {
        #[cfg(target_arch = "x86_64")]
        Resolved::Vnni => TfliteAddTables::new(p).map(TfliteAddTables::with_lines),
        #[cfg(target_arch = "x86_64")]
        Resolved::Avx2 | Resolved::AvxVnni => TfliteAddTables::new(p),
        #[cfg(target_arch = "aarch64")]
        Resolved::Neon | Resolved::NeonDot => TfliteAddTables::new(p),
        _ => {
            let _ = p;
            None
        }
    }
}

/// tflite_add `p` over one span of its elements with the tables [`tflite_add_tables`] gave
/// (built once for all the spans of a call): the set's kernel with tables, else the scalar
/// reference.
#[cfg_attr(
    not(any(feature = "std", target_arch = "x86_64", target_arch = "aarch64")),
    allow(dead_code)
)]
pub(crate) fn tflite_add_with(
    k: Resolved,
    p: &TfliteAddParams,
    tables: Option<&TfliteAddTables>,
    a: &[i8],
    b: &[i8],
    output: &mut [i8],
) {
    match (k.base(), tables) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: Resolved::Vnni is only produced when AVX-512 F, BW, VL and VNNI are available.
        (Resolved::Vnni, Some(t)) => unsafe { vnni::tflite_add(t, a, b, output) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: Resolved::Avx2 and AvxVnni are only produced when AVX2 is available.
        (Resolved::Avx2 | Resolved::AvxVnni, Some(t)) => unsafe {
            avx2::tflite_add(t, a, b, output)
        },
        #[cfg(target_arch = "aarch64")]
        // SAFETY: Resolved::Neon and NeonDot are only produced when NEON is available.
        (Resolved::Neon | Resolved::NeonDot, Some(t)) => unsafe {
            neon::tflite_add(p, t, a, b, output)
        },
        _ => {
            let _ = (k, tables);
            scalar::tflite_add(p, a, b, output)
        }
    }
}

#[cfg(all(test, feature = "std", target_arch = "x86_64"))]
mod tests {
    use super::*;
    use crate::kernels::test_util::{as_single, model_convs, ConvData};
    use crate::kernels::{conv_scratch_bytes, Kernels};

    /// Threads split a conv by rows in the double rounding wherever they do in the single (the
    /// pixels-in-lanes convs cover both), on the models' convs.
    #[test]
    fn rows_in_both_roundings() {
        for k in [Kernels::Avx512Vnni, Kernels::AvxVnni, Kernels::Avx2] {
            let Ok(r) = k.resolve() else {
                println!("SKIP {k:?}: not on this CPU");
                continue;
            };
            let mut covered = 0;
            for c in model_convs() {
                let Some(d) = ConvData::typical(&c) else {
                    continue;
                };
                let p = d.params();
                let s = conv_scratch_bytes(&p.geometry()).max(avx2::lanes_scratch(&p));
                let rows = conv2d_rows_covered(r, &p, s);
                assert_eq!(
                    rows,
                    conv2d_rows_covered(r, &as_single(&p), s),
                    "{k:?} {c:?}"
                );
                covered += rows as usize;
            }
            assert!(covered > 0, "{k:?}");
        }
    }
}
