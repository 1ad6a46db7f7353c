//! The C API of octet: parse an `.o8` model from bytes, ask the sizes, run it.
//!
//! ```c
//! OctetModel model;                                   /* borrows `bytes`, allocates nothing */
//! OctetStatus s = octet_model_parse(&model, bytes, len);
//! size_t need = octet_model_arena_bytes(&model, 1);   /* arena for one input */
//! s = octet_model_run(&model, input, octet_model_input_len(&model),
//!                     arena, need, logits, octet_model_output_len(&model));
//! if (s != OCTET_STATUS_OK) puts(octet_status_message(s));
//! ```
//!
//! Optionally, once after parsing, `octet_model_prepare` builds every op's kernel parameters
//! and lays out the weights for this CPU's kernels in a buffer the caller gives
//! (`octet_model_prepared_bytes`): runs then only dispatch, and on x86 read weights packed once
//! (TensorFlow Lite Micro's Prepare and persistent buffers). The bytes out are the same. On a
//! Cortex-M, `octet_model_prepare_image` takes those weights from the model's packed image in
//! flash (`octet pack`) instead, only the table in RAM (`octet_model_prepared_table_bytes`).
//!
//! An input is the model's bytes as `octet_model_input_encoding` says: raw pixels (octet's
//! exports) or the int8 tensor itself (a TensorFlow Lite model's), quantized as
//! `octet_model_input_quant` gives.
//!
//! `include/octet.h` is generated from this file by cbindgen (`tests/header.rs` checks that it
//! is current). Every function checks its pointers and lengths and returns an [`OctetStatus`];
//! nothing allocates, and nothing panics for any input (a panic would abort: nothing unwinds
//! into C). On bare-metal targets the crate is `no_std`.
#![cfg_attr(target_os = "none", no_std)]
#![warn(missing_docs)]

use core::ffi::c_char;
use core::mem::{align_of, size_of};
use core::ptr;

use octet_runtime::format::InputEncoding;
use octet_runtime::kernels::PACKED_ALIGN;
use octet_runtime::{Kernels, Model, PreparedOp, RuntimeError};

/// Status of every call. `OCTET_STATUS_OK` is 0; `octet_status_message` says what went wrong
/// and what to do.
#[repr(i32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OctetStatus {
    /// Success.
    Ok = 0,
    /// A pointer argument is NULL while its length is not 0.
    NullPointer = 1,
    /// The model handle was not filled by a successful `octet_model_parse`.
    BadHandle = 2,
    /// The bytes are not an `.o8` model (bad magic).
    BadMagic = 3,
    /// The `.o8` format version is not supported.
    UnsupportedVersion = 4,
    /// A header field is invalid.
    BadHeader = 5,
    /// The model is shorter than its header declares.
    Truncated = 6,
    /// The stored CRC-32 does not match the bytes.
    CrcMismatch = 7,
    /// An offset, length or id in the model points outside the file or the arena.
    OutOfBounds = 8,
    /// A tensor record is invalid.
    BadTensor = 9,
    /// An op's shapes are inconsistent.
    BadShape = 10,
    /// An op parameter or constant array is invalid.
    BadParam = 11,
    /// An op could overflow its int32 accumulator.
    AccumulatorOverflow = 12,
    /// The model's memory plan or data flow is broken.
    Aliasing = 13,
    /// The arena is smaller than `octet_model_arena_bytes(model, batch)`.
    ArenaTooSmall = 14,
    /// The input length is not a positive multiple of `octet_model_input_len(model)`.
    InputLength = 15,
    /// The logits buffer is smaller than batch × `octet_model_output_len(model)`.
    OutputTooSmall = 16,
    /// Two of the buffers passed to `octet_model_run` overlap, or the arena or the logits
    /// overlap the buffer the model was prepared into.
    BuffersOverlap = 17,
    /// The runtime refused a request this API never makes (a bug of this library).
    Internal = 18,
    /// The buffer given to `octet_model_prepare` is smaller than
    /// `octet_model_prepared_bytes(model)` (or, to `octet_model_prepare_image`,
    /// `octet_model_prepared_table_bytes(model)`).
    PrepareTooSmall = 19,
    /// The packed image given to `octet_model_prepare_image` is not this model's, is damaged or
    /// truncated, or does not lie at a 64-byte aligned address.
    BadPackedImage = 20,
    /// The packed image is for the Cortex-M kernels, which this CPU cannot run.
    ImageKernelsUnavailable = 21,
}

impl From<RuntimeError> for OctetStatus {
    fn from(e: RuntimeError) -> Self {
        match e {
            RuntimeError::BadMagic => OctetStatus::BadMagic,
            RuntimeError::UnsupportedVersion(_) => OctetStatus::UnsupportedVersion,
            RuntimeError::BadHeader { .. } => OctetStatus::BadHeader,
            RuntimeError::Truncated { .. } => OctetStatus::Truncated,
            RuntimeError::CrcMismatch { .. } => OctetStatus::CrcMismatch,
            RuntimeError::OutOfBounds { .. } => OctetStatus::OutOfBounds,
            RuntimeError::BadTensor { .. } => OctetStatus::BadTensor,
            RuntimeError::BadShape { .. } => OctetStatus::BadShape,
            RuntimeError::BadParam { .. } => OctetStatus::BadParam,
            RuntimeError::AccumulatorOverflow { .. } => OctetStatus::AccumulatorOverflow,
            RuntimeError::Aliasing { .. } => OctetStatus::Aliasing,
            RuntimeError::ArenaTooSmall { .. } => OctetStatus::ArenaTooSmall,
            RuntimeError::InputLength { .. } => OctetStatus::InputLength,
            RuntimeError::BadPackedImage { .. } => OctetStatus::BadPackedImage,
            // `octet_model_run` asks for the automatic kernels and no threads
            // (`octet_model_prepare_image` reports an image's unavailable set itself).
            RuntimeError::KernelsUnavailable | RuntimeError::BadThreads => OctetStatus::Internal,
        }
    }
}

/// Messages by status code, NUL-terminated (C strings).
const MESSAGES: [&str; 22] = [
    "success\0",
    "a pointer argument is NULL while its length is not 0: pass a valid buffer\0",
    "the model handle was not filled by a successful octet_model_parse: parse the model first \
     and check its status\0",
    "not an .o8 model (bad magic): pass the bytes of a file written by `octet export`\0",
    "unsupported .o8 format version: export the model again with the octet this library comes \
     from\0",
    "invalid .o8 header field: the model is corrupt or was not written by `octet export`\0",
    "the model is shorter than its header declares: pass the whole file (check the copy or the \
     flash image)\0",
    "the model's CRC-32 does not match its bytes: the copy is corrupt, copy or flash it again\0",
    "an offset, length or id in the model points outside the file or the arena: the model is \
     corrupt, export it again\0",
    "invalid tensor record in the model: the model is corrupt, export it again\0",
    "an op's tensor shapes are inconsistent: the model is corrupt, export it again\0",
    "invalid op parameter or constant array in the model: the model is corrupt, export it again\0",
    "an op of the model could overflow its int32 accumulator: the model is corrupt, export it \
     again\0",
    "the model's memory plan or data flow is broken: the model is corrupt, export it again\0",
    "the arena is too small: give at least octet_model_arena_bytes(model, batch) bytes\0",
    "the input length is not a positive multiple of octet_model_input_len(model): pass whole \
     inputs, as octet_model_input_encoding(model) says\0",
    "the logits buffer is too small: give at least batch x octet_model_output_len(model) bytes\0",
    "buffers overlap: the pixels, the arena, the logits and the prepare buffer must be separate \
     buffers\0",
    "internal error of the octet C API: please report it\0",
    "the prepare buffer is too small: give at least octet_model_prepared_bytes(model) bytes \
     (octet_model_prepared_table_bytes(model) to octet_model_prepare_image)\0",
    "the packed image is not this model's, or is damaged, truncated or misaligned: write it \
     again from this model with `octet pack` and place it at a 64-byte aligned address\0",
    "the packed image is for the Cortex-M kernels, which this CPU lacks: prepare with \
     octet_model_prepare instead\0",
];

const _: () = assert!(MESSAGES.len() == OctetStatus::ImageKernelsUnavailable as usize + 1);

const UNKNOWN: &str = "unknown octet status code: pass a value returned by an octet_ function\0";

/// A static, NUL-terminated English message for `status`: what was wrong and what to do. Any
/// value is accepted (an unknown code gets a message saying so).
#[no_mangle]
pub extern "C" fn octet_status_message(status: i32) -> *const c_char {
    let s = usize::try_from(status)
        .ok()
        .and_then(|i| MESSAGES.get(i))
        .unwrap_or(&UNKNOWN);
    s.as_ptr().cast()
}

/// Size of `OctetModel` in 64-bit words.
pub const OCTET_MODEL_WORDS: usize = 32;

/// A parsed model: storage the caller provides (on the stack, static, anywhere), filled by
/// `octet_model_parse`. It borrows the model's bytes, which must stay valid and unchanged for
/// as long as the handle is used. Its contents are private.
#[repr(C)]
pub struct OctetModel {
    opaque: [u64; OCTET_MODEL_WORDS],
}

/// What the opaque storage holds: a tag (set only by a successful parse), the model, and the
/// buffer it runs from once prepared and the packed image it reads, if any (empty before: no
/// run may write over them).
#[repr(C)]
struct Parsed {
    tag: u64,
    model: Model<'static>,
    prepared: (*const u8, usize),
    image: (*const u8, usize),
}

/// "octet-m\0", little-endian.
const TAG: u64 = u64::from_le_bytes(*b"octet-m\0");

const _: () = assert!(
    size_of::<Parsed>() <= size_of::<OctetModel>(),
    "octet_runtime::Model outgrew OctetModel: raise OCTET_MODEL_WORDS (and regenerate octet.h)"
);
const _: () = assert!(align_of::<Parsed>() <= align_of::<OctetModel>());

/// The parsed model behind `handle`, if a successful parse filled it.
///
/// # Safety
/// `handle` is NULL or points to an `OctetModel` (any contents).
unsafe fn parsed<'h>(handle: *const OctetModel) -> Result<&'h Model<'static>, OctetStatus> {
    if handle.is_null() {
        return Err(OctetStatus::NullPointer);
    }
    let p = handle.cast::<Parsed>();
    // Volatile: the storage may hold anything a C caller left there.
    if ptr::read_volatile(ptr::addr_of!((*p).tag)) != TAG {
        return Err(OctetStatus::BadHandle);
    }
    Ok(&(*p).model)
}

/// The bytes of the buffer the model behind a parsed `handle` runs from and of the packed
/// image it reads (each empty where there is none).
///
/// # Safety
/// `handle` was accepted by [`parsed`].
unsafe fn prepared_buffers<'h>(handle: *const OctetModel) -> [&'h [u8]; 2] {
    let p = &*handle.cast::<Parsed>();
    [p.prepared, p.image].map(|(p, len)| slice(p, len).unwrap_or(&[]))
}

/// `len` bytes at `p` as a slice; NULL is accepted for `len == 0`.
///
/// # Safety
/// A non-NULL `p` is valid for reads of `len` bytes.
unsafe fn slice<'a>(p: *const u8, len: usize) -> Result<&'a [u8], OctetStatus> {
    match (p.is_null(), len) {
        (_, 0) => Ok(&[]),
        (true, _) => Err(OctetStatus::NullPointer),
        (false, _) => Ok(core::slice::from_raw_parts(p, len)),
    }
}

/// Parses and validates the `.o8` model in `data[0..len]` into `*model` (every check of the
/// format, once; nothing is copied or allocated). On success the handle borrows `data`: keep
/// them valid and unchanged while the handle is used. On failure the handle is marked invalid.
///
/// # Safety
/// `model` is NULL or valid for writes of an `OctetModel`; `data` is NULL or valid for reads
/// of `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn octet_model_parse(
    model: *mut OctetModel,
    data: *const u8,
    len: usize,
) -> OctetStatus {
    if model.is_null() {
        return OctetStatus::NullPointer;
    }
    let p = model.cast::<Parsed>();
    ptr::write_volatile(ptr::addr_of_mut!((*p).tag), 0);
    let b = match slice(data, len) {
        Ok(b) => b,
        Err(s) => return s,
    };
    match Model::parse(b) {
        Ok(m) => {
            ptr::addr_of_mut!((*p).model).write(m);
            ptr::addr_of_mut!((*p).prepared).write((ptr::null(), 0));
            ptr::addr_of_mut!((*p).image).write((ptr::null(), 0));
            ptr::write_volatile(ptr::addr_of_mut!((*p).tag), TAG);
            OctetStatus::Ok
        }
        Err(e) => e.into(),
    }
}

/// Arena bytes `octet_model_run` needs for `batch` inputs (at least 1 is assumed), exactly,
/// with the kernels it runs where this library runs (the fastest the CPU has: on a Cortex-M4 or
/// M7 the DSP kernels, on a Cortex-M3 the scalar ones; on the host the best of its SIMD sets);
/// 0 when the handle is not a parsed model. Size a static arena for a firmware with this
/// library's answer on that target (or the runtime's `Model::arena_bytes` for the target's
/// kernel set, on the host).
///
/// # Safety
/// `model` is NULL or points to an `OctetModel`.
#[no_mangle]
pub unsafe extern "C" fn octet_model_arena_bytes(model: *const OctetModel, batch: usize) -> usize {
    parsed(model).map_or(0, |m| m.arena_bytes_for(Kernels::Auto, batch.max(1)))
}

/// Where a prepare puts the table of prepared ops in a buffer at `base`: (table offset, its
/// end, the bytes needed at most). The worst case of the alignment is counted, so that the size
/// does not depend on where the buffer lies.
fn table_layout(m: &Model, base: usize) -> (usize, usize, usize) {
    let table_bytes = m.num_ops() * size_of::<PreparedOp>();
    let table_at = base.next_multiple_of(align_of::<PreparedOp>()) - base;
    (
        table_at,
        table_at + table_bytes,
        (align_of::<PreparedOp>() - 1) + table_bytes,
    )
}

/// Where `octet_model_prepare` puts the table and the packed weights in a buffer at `base`:
/// (table offset, packed offset, bytes needed). The worst case of both alignments is counted,
/// so that the size does not depend on where the buffer lies.
fn prepare_layout(m: &Model, base: usize) -> Result<(usize, usize, usize), OctetStatus> {
    let packed = m.packed_bytes(Kernels::Auto)?;
    let (table_at, table_end, table_worst) = table_layout(m, base);
    let worst = table_worst + (PACKED_ALIGN - 1) + packed;
    let packed_at = (base + table_end).next_multiple_of(PACKED_ALIGN) - base;
    Ok((table_at, packed_at, worst))
}

/// `n` placeholder entries written at `buffer + at` and returned as the table to prepare into.
///
/// # Safety
/// `buffer + at` is aligned for `PreparedOp` and valid for writes of `n` of them, and stays
/// so, unchanged but by the prepare, while the returned table is used.
unsafe fn table_in(buffer: *mut u8, at: usize, n: usize) -> &'static mut [PreparedOp<'static>] {
    let t = buffer.add(at).cast::<PreparedOp<'static>>();
    for i in 0..n {
        t.add(i).write(PreparedOp::EMPTY);
    }
    core::slice::from_raw_parts_mut(t, n)
}

/// Bytes of the buffer `octet_model_prepare` needs for this model on this CPU (any alignment);
/// 0 when the handle is not a parsed model.
///
/// # Safety
/// `model` is NULL or points to an `OctetModel`.
#[no_mangle]
pub unsafe extern "C" fn octet_model_prepared_bytes(model: *const OctetModel) -> usize {
    parsed(model)
        .and_then(|m| prepare_layout(m, 0))
        .map_or(0, |(_, _, need)| need)
}

/// Prepares a parsed model once for this CPU's kernels into `buffer[0..len]` (at least
/// `octet_model_prepared_bytes(model)` bytes, any alignment, any contents): every op's kernel
/// parameters, and the weights laid out for its kernels where they read them in their own
/// order (x86). Runs of the handle then use them; the output bytes are the same. On success
/// the handle also borrows `buffer`: keep it valid and unchanged, and give `octet_model_run`
/// an arena apart from it, while the handle is used. On failure the handle is unchanged.
///
/// # Safety
/// `model` is NULL or points to an `OctetModel`; `buffer` is NULL or valid for writes of `len`
/// bytes and overlaps neither the handle nor the model's bytes.
#[no_mangle]
pub unsafe extern "C" fn octet_model_prepare(
    model: *mut OctetModel,
    buffer: *mut u8,
    len: usize,
) -> OctetStatus {
    let prepare = || -> Result<(), OctetStatus> {
        let m: Model<'static> = *parsed(model)?;
        slice(buffer, len)?;
        let (table_at, packed_at, need) = prepare_layout(&m, buffer as usize)?;
        if len < need {
            return Err(OctetStatus::PrepareTooSmall);
        }
        // SAFETY: `buffer` is valid for writes of `len` ≥ `need` bytes (caller; non-NULL as
        // `need` > 0), which hold the aligned table of the model's ops at `table_at` and then
        // the packed weights' `packed_at..need` (their worst-case alignment counted in `need`);
        // the handle keeps both only while the caller keeps the buffer (the contract above), as
        // it does the model's bytes.
        let (table, packed) = unsafe {
            (
                table_in(buffer, table_at, m.num_ops()),
                core::slice::from_raw_parts_mut(buffer.add(packed_at), need - packed_at),
            )
        };
        let prepared = m.prepare_packed(table, packed, Kernels::Auto)?;
        let p = model.cast::<Parsed>();
        ptr::addr_of_mut!((*p).model).write(prepared);
        ptr::addr_of_mut!((*p).prepared).write((buffer.cast_const(), len));
        ptr::addr_of_mut!((*p).image).write((ptr::null(), 0));
        Ok(())
    };
    match prepare() {
        Ok(()) => OctetStatus::Ok,
        Err(s) => s,
    }
}

/// Bytes of the buffer `octet_model_prepare_image` needs for this model (any alignment): the
/// prepared table alone, the packed weights staying in the image; 0 when the handle is not a
/// parsed model.
///
/// # Safety
/// `model` is NULL or points to an `OctetModel`.
#[no_mangle]
pub unsafe extern "C" fn octet_model_prepared_table_bytes(model: *const OctetModel) -> usize {
    parsed(model).map_or(0, |m| table_layout(m, 0).2)
}

/// Prepares a parsed model as `octet_model_prepare` does for the Cortex-M kernels (the set
/// `octet_model_run` runs on a Cortex-M4/M7), the weights they read in their own order taken
/// in place from `image[0..image_len]`, the model's packed image (`octet pack MODEL`; at a
/// 64-byte aligned address, typically in flash), instead of laid out in RAM: `buffer[0..len]`
/// (at least `octet_model_prepared_table_bytes(model)` bytes) holds only the table. On success
/// the handle also borrows `buffer` and `image`: keep them valid and unchanged, and give
/// `octet_model_run` an arena apart from both, while the handle is used. On failure the handle
/// is unchanged: `OCTET_STATUS_BAD_PACKED_IMAGE` for an image that is not this model's, is
/// damaged or is misaligned, `OCTET_STATUS_IMAGE_KERNELS_UNAVAILABLE` on a CPU without the
/// Cortex-M kernels.
///
/// # Safety
/// `model` is NULL or points to an `OctetModel`; `buffer` is NULL or valid for writes of `len`
/// bytes and overlaps neither the handle, the model's bytes nor the image; `image` is NULL or
/// valid for reads of `image_len` bytes.
#[no_mangle]
pub unsafe extern "C" fn octet_model_prepare_image(
    model: *mut OctetModel,
    buffer: *mut u8,
    len: usize,
    image: *const u8,
    image_len: usize,
) -> OctetStatus {
    let prepare = || -> Result<(), OctetStatus> {
        let m: Model<'static> = *parsed(model)?;
        let img: &'static [u8] = slice(image, image_len)?;
        if overlap(slice(buffer, len)?, img) {
            return Err(OctetStatus::BuffersOverlap);
        }
        let (table_at, _, need) = table_layout(&m, buffer as usize);
        if len < need {
            return Err(OctetStatus::PrepareTooSmall);
        }
        // SAFETY: `buffer` is valid for writes of `len` ≥ `need` bytes (caller; non-NULL as
        // `need` > 0), which hold the aligned table of the model's ops at `table_at` (its
        // worst-case alignment counted in `need`); the handle keeps it and the image only while
        // the caller keeps them (the contract above).
        let table = unsafe { table_in(buffer, table_at, m.num_ops()) };
        let prepared = match m.prepare_packed_image(table, img, Kernels::CortexM) {
            Err(RuntimeError::KernelsUnavailable) => {
                return Err(OctetStatus::ImageKernelsUnavailable)
            }
            r => r?,
        };
        let p = model.cast::<Parsed>();
        ptr::addr_of_mut!((*p).model).write(prepared);
        ptr::addr_of_mut!((*p).prepared).write((buffer.cast_const(), len));
        ptr::addr_of_mut!((*p).image).write((image, image_len));
        Ok(())
    };
    match prepare() {
        Ok(()) => OctetStatus::Ok,
        Err(s) => s,
    }
}

/// Bytes of one input (c·h·w: raw pixels, planar, or the int8 tensor, as
/// `octet_model_input_encoding` says); 0 when the handle is not a parsed model.
///
/// # Safety
/// `model` is NULL or points to an `OctetModel`.
#[no_mangle]
pub unsafe extern "C" fn octet_model_input_len(model: *const OctetModel) -> usize {
    parsed(model).map_or(0, |m| m.input_len())
}

/// Logits per image (int8); 0 when the handle is not a parsed model.
///
/// # Safety
/// `model` is NULL or points to an `OctetModel`.
#[no_mangle]
pub unsafe extern "C" fn octet_model_output_len(model: *const OctetModel) -> usize {
    parsed(model).map_or(0, |m| m.output_len())
}

/// The input shape (channels, height, width) into `*c`, `*h`, `*w` (each may be NULL).
///
/// # Safety
/// `model` is NULL or points to an `OctetModel`; each of `c`, `h`, `w` is NULL or valid for a
/// write.
#[no_mangle]
pub unsafe extern "C" fn octet_model_input_shape(
    model: *const OctetModel,
    c: *mut usize,
    h: *mut usize,
    w: *mut usize,
) -> OctetStatus {
    let m = match parsed(model) {
        Ok(m) => m,
        Err(s) => return s,
    };
    let (mc, mh, mw) = m.input_shape();
    for (p, v) in [(c, mc), (h, mh), (w, mw)] {
        if !p.is_null() {
            p.write(v);
        }
    }
    OctetStatus::Ok
}

/// The logits' quantization: real = `*scale` · (q − `*zero_point`) (each pointer may be NULL).
///
/// # Safety
/// `model` is NULL or points to an `OctetModel`; `scale` and `zero_point` are NULL or valid
/// for a write.
#[no_mangle]
pub unsafe extern "C" fn octet_model_output_quant(
    model: *const OctetModel,
    scale: *mut f32,
    zero_point: *mut i32,
) -> OctetStatus {
    write_quant(model, scale, zero_point, |m| {
        (m.output_scale(), m.output_zero_point())
    })
}

/// Writes `quant(model)` through the pointers that are not NULL.
///
/// # Safety
/// As for the two callers: `model` NULL or an `OctetModel`, the pointers NULL or writable.
unsafe fn write_quant(
    model: *const OctetModel,
    scale: *mut f32,
    zero_point: *mut i32,
    quant: impl Fn(&Model<'static>) -> (f32, i32),
) -> OctetStatus {
    let (s, z) = match parsed(model) {
        Ok(m) => quant(m),
        Err(s) => return s,
    };
    if !scale.is_null() {
        scale.write(s);
    }
    if !zero_point.is_null() {
        zero_point.write(z);
    }
    OctetStatus::Ok
}

/// How `octet_model_run` reads each input: the model's input encoding (the `.o8` header's
/// code).
#[repr(i32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OctetInputEncoding {
    /// Raw `u8` pixels, planar C×H×W as data sets store them; the model takes q = pixel − 128
    /// (octet's exports; `octet_model_input_quant` gives zero point −128).
    U8ChwPixels = 1,
    /// The int8 input tensor itself, H×W×C, as bytes (a TensorFlow Lite int8 model's input):
    /// quantize real values with `octet_model_input_quant`.
    I8Hwc = 2,
    /// `u8` values, H×W×C; the model takes q = u − 128 (a TensorFlow Lite uint8 input).
    U8Hwc = 3,
}

impl From<InputEncoding> for OctetInputEncoding {
    fn from(e: InputEncoding) -> Self {
        match e {
            InputEncoding::PixelsU8Chw => OctetInputEncoding::U8ChwPixels,
            InputEncoding::I8Hwc => OctetInputEncoding::I8Hwc,
            InputEncoding::U8Hwc => OctetInputEncoding::U8Hwc,
        }
    }
}

/// The model's input encoding into `*encoding` (which may be NULL).
///
/// # Safety
/// `model` is NULL or points to an `OctetModel`; `encoding` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn octet_model_input_encoding(
    model: *const OctetModel,
    encoding: *mut OctetInputEncoding,
) -> OctetStatus {
    let m = match parsed(model) {
        Ok(m) => m,
        Err(s) => return s,
    };
    if !encoding.is_null() {
        encoding.write(m.input_encoding().into());
    }
    OctetStatus::Ok
}

/// The input tensor's quantization: real = `*scale` · (q − `*zero_point`), q the int8 value the
/// model computes with (for the u8 encodings q = u − 128, so the zero point is −128); each
/// pointer may be NULL.
///
/// # Safety
/// `model` is NULL or points to an `OctetModel`; `scale` and `zero_point` are NULL or valid
/// for a write.
#[no_mangle]
pub unsafe extern "C" fn octet_model_input_quant(
    model: *const OctetModel,
    scale: *mut f32,
    zero_point: *mut i32,
) -> OctetStatus {
    write_quant(model, scale, zero_point, |m| {
        (m.input_scale(), m.input_zero_point())
    })
}

fn overlap(a: &[u8], b: &[u8]) -> bool {
    let (a0, b0) = (a.as_ptr() as usize, b.as_ptr() as usize);
    !a.is_empty() && !b.is_empty() && a0 < b0 + b.len() && b0 < a0 + a.len()
}

/// Runs the model on `pixels_len / octet_model_input_len(model)` inputs (each in the model's
/// encoding, `octet_model_input_encoding`: u8 pixels planar C×H×W, or the int8 tensor H×W×C;
/// back to back) and writes their outputs, `octet_model_output_len(model)` int8 values per
/// input, to `logits`. `arena` is working memory of at least
/// `octet_model_arena_bytes(model, batch)` bytes (any alignment; its contents on return are
/// unspecified). Integer-only, no allocation; the same bytes on every CPU. Nothing is written
/// to `logits` unless the call succeeds.
///
/// # Safety
/// `model` is NULL or points to an `OctetModel`; each buffer is NULL or valid for its length
/// (reads for `pixels`, writes for `arena` and `logits`); the model's bytes are not modified
/// meanwhile.
#[no_mangle]
pub unsafe extern "C" fn octet_model_run(
    model: *const OctetModel,
    pixels: *const u8,
    pixels_len: usize,
    arena: *mut u8,
    arena_len: usize,
    logits: *mut i8,
    logits_len: usize,
) -> OctetStatus {
    // Every check returns its status through `?`; the buffers are touched only after all.
    let run = || -> Result<(), OctetStatus> {
        let m = parsed(model)?;
        let px = slice(pixels, pixels_len)?;
        let ar = slice(arena, arena_len)?;
        let lg = slice(logits.cast(), logits_len)?;
        // A prepared model's buffer and image are read by the run: no buffer written may lie
        // over them.
        let [pb, image] = prepared_buffers(model);
        if overlap(px, ar)
            || overlap(px, lg)
            || overlap(ar, lg)
            || overlap(ar, pb)
            || overlap(lg, pb)
            || overlap(ar, image)
            || overlap(lg, image)
        {
            return Err(OctetStatus::BuffersOverlap);
        }
        let batch = m.batch_of(pixels_len)?;
        let n_out = batch
            .checked_mul(m.output_len())
            .ok_or(OctetStatus::OutputTooSmall)?;
        if logits_len < n_out {
            return Err(OctetStatus::OutputTooSmall);
        }
        // Checked before any write, so that an error leaves the arena untouched too.
        let need = m.arena_bytes_for(Kernels::Auto, batch);
        if arena_len < need {
            return Err(OctetStatus::ArenaTooSmall);
        }
        // SAFETY: non-NULL (arena_len ≥ need > 0), valid for writes (caller), and overlapping
        // neither `px` nor `lg` (checked).
        let ar = core::slice::from_raw_parts_mut(arena, arena_len);
        let out = m.run(px, ar)?;
        ptr::copy_nonoverlapping(out.as_ptr(), logits, n_out);
        Ok(())
    };
    match run() {
        Ok(()) => OctetStatus::Ok,
        Err(s) => s,
    }
}

#[cfg(all(target_os = "none", feature = "panic-handler"))]
#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    // Nothing to print to on bare metal: trap, so that the firmware's fault handler reports it
    // (a panic means a bug of octet; the runtime validates everything it reads).
    loop {
        #[cfg(target_arch = "arm")]
        // SAFETY: `udf` only raises an exception.
        unsafe {
            core::arch::asm!("udf #0xfe")
        };
    }
}
