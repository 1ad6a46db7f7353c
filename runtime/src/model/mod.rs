//! The validated model: a `.o8` file's tables, borrowed, after every check of FORMAT.md.
//!
//! One concept per file: [`Model::parse`] here (the header and the tables' placement), the
//! per-record and whole-model checks in `validate`, decoding records for inspection
//! ([`TensorInfo`], [`OpInfo`]) in `inspect`, and the per-op kernel parameters built once
//! ([`PreparedOp`], TensorFlow Lite Micro's Prepare) in `prepare`. The interpreter that runs
//! a model (Eval) is `crate::interpreter`.

mod inspect;
mod packed_image;
mod prepare;
mod validate;

pub use inspect::{OpInfo, OpKind, TensorInfo};
pub use packed_image::{PackedImageInfo, PACKED_IMAGE_HEADER, PACKED_IMAGE_MAGIC};
pub(crate) use prepare::OpParams;
#[cfg(feature = "std")]
pub(crate) use prepare::Place;
pub use prepare::PreparedOp;
pub(crate) use validate::TFLITE_ADD_MAX_SHIFT;

use crate::format::{
    self, Header, InputEncoding, OpRecord, TensorRecord, CRC_START, DATA_ALIGN, HEADER_LEN, MAGIC,
    NO_TENSOR, OP_LEN, TENSOR_LEN, VERSION,
};
use crate::kernels::{Kernels, Shape};
use crate::requant::Rounding;
use crate::{align16, Result, RuntimeError};

/// The concrete kernel sets (every [`Kernels`] but `Auto`), in [`Kernels::ALL`] order: the
/// entries of [`Model`]'s scratch table.
const SETS: usize = Kernels::ALL.len() - 1;

/// A parsed and validated `.o8` model, borrowing the file's bytes (and, once
/// [`Model::prepare`]d, a table of its ops' kernel parameters). Small and `Copy`: a few words
/// plus two slices.
#[derive(Clone, Copy, Debug)]
pub struct Model<'a> {
    tensors: &'a [u8],
    ops: &'a [u8],
    data: &'a [u8],
    n_tensors: u32,
    n_ops: u32,
    /// The activation arena the file plans (header `arena_bytes`).
    arena_bytes: usize,
    /// Per concrete kernel set, the largest scratch any op needs ([`Kernels::scratch_bytes`]),
    /// computed once by `parse`.
    scratch: [u32; SETS],
    input: Shape,
    input_encoding: InputEncoding,
    rounding: Rounding,
    input_tensor: u16,
    output_tensor: u16,
    out_len: usize,
    output_scale: f32,
    output_zero_point: i32,
    /// Multiply-adds per image, counted once by `parse`.
    macs: u64,
    /// The file's CRC-32 (header `crc`): what a packed image names its model by.
    crc: u32,
    /// Every op's kernel parameters ([`Model::prepare`]), or empty: then each op is prepared
    /// just before it runs.
    prepared: &'a [PreparedOp<'a>],
}

impl<'a> Model<'a> {
    /// Parses and validates a model (every check listed in FORMAT.md, before any run).
    pub fn parse(bytes: &'a [u8]) -> Result<Model<'a>> {
        let len = bytes.len();
        let h = Header::new(bytes).ok_or(RuntimeError::Truncated {
            needed: HEADER_LEN as u64,
            len: len as u64,
        })?;
        let (input_encoding, rounding) = check_envelope(bytes, &h)?;

        // Tables and data section.
        let n_tensors = h.n_tensors();
        if n_tensors == 0 || n_tensors >= NO_TENSOR as u32 {
            return Err(RuntimeError::BadHeader { what: "n_tensors" });
        }
        if h.tensor_table() as usize != HEADER_LEN {
            return Err(RuntimeError::BadHeader {
                what: "tensor table offset",
            });
        }
        let t_end = HEADER_LEN as u64 + n_tensors as u64 * TENSOR_LEN as u64;
        if t_end > len as u64 {
            return Err(RuntimeError::Truncated {
                needed: t_end,
                len: len as u64,
            });
        }
        let n_ops = h.n_ops();
        // Each op writes a distinct tensor other than the input: n_ops < n_tensors.
        if n_ops == 0 || n_ops >= n_tensors {
            return Err(RuntimeError::BadHeader { what: "n_ops" });
        }
        let o_off = h.op_table() as u64;
        if o_off < t_end {
            return Err(RuntimeError::BadHeader {
                what: "op table offset",
            });
        }
        let o_end = o_off + n_ops as u64 * OP_LEN as u64;
        if o_end > len as u64 {
            return Err(RuntimeError::Truncated {
                needed: o_end,
                len: len as u64,
            });
        }
        let d_off = h.data_offset() as u64;
        if !d_off.is_multiple_of(DATA_ALIGN as u64) || d_off < o_end {
            return Err(RuntimeError::BadHeader {
                what: "data offset",
            });
        }
        let d_end = d_off + h.data_len() as u64;
        if d_end > len as u64 {
            return Err(RuntimeError::Truncated {
                needed: d_end,
                len: len as u64,
            });
        }

        let (c, hh, w) = h.input_chw();
        if c == 0 || hh == 0 || w == 0 {
            return Err(RuntimeError::BadHeader {
                what: "input shape",
            });
        }
        let model = Model {
            tensors: &bytes[HEADER_LEN..t_end as usize],
            ops: &bytes[o_off as usize..o_end as usize],
            data: &bytes[d_off as usize..d_end as usize],
            n_tensors,
            n_ops,
            arena_bytes: h.arena_bytes() as usize,
            scratch: [0; SETS],
            input_encoding,
            rounding,
            input: Shape {
                c: c as usize,
                h: hh as usize,
                w: w as usize,
            },
            input_tensor: h.input_tensor(),
            output_tensor: h.output_tensor(),
            out_len: 0,
            output_scale: h.output_scale(),
            output_zero_point: h.output_zero_point(),
            macs: 0,
            crc: h.crc(),
            prepared: &[],
        };
        model.validate(&h)
    }

    fn tensor_record(&self, id: u16) -> Option<TensorRecord<'a>> {
        if id as u32 >= self.n_tensors {
            return None;
        }
        let at = id as usize * TENSOR_LEN;
        TensorRecord::new(self.tensors.get(at..at + TENSOR_LEN)?)
    }

    fn op_record(&self, index: u32) -> Option<OpRecord<'a>> {
        if index >= self.n_ops {
            return None;
        }
        let at = index as usize * OP_LEN;
        OpRecord::new(self.ops.get(at..at + OP_LEN)?)
    }

    /// Multiply-adds per image (conv2d and fully_connected).
    pub fn macs_per_image(&self) -> u64 {
        self.macs
    }

    /// The activation arena the file plans for one input (header `arena_bytes`): every
    /// tensor, no scratch.
    pub fn activation_bytes(&self) -> usize {
        self.arena_bytes
    }

    /// Where the scratch starts in a working area: after the activations, 16-aligned.
    pub(crate) fn scratch_offset(&self) -> usize {
        align16(self.arena_bytes)
    }

    /// The largest scratch any op needs with `kernels` (`Auto`: the set it resolves to here).
    pub fn scratch_bytes(&self, kernels: Kernels) -> usize {
        let set = kernels.resolved_kernels();
        Kernels::ALL
            .iter()
            .position(|&k| k == set)
            .and_then(|i| self.scratch.get(i))
            .map_or(0, |&b| b as usize)
    }

    /// Working area for one input with `kernels`: the activations, then (16-aligned) the
    /// largest scratch of any op for that set, exact (FORMAT.md, "Arena").
    pub fn working_bytes(&self, kernels: Kernels) -> usize {
        match self.scratch_bytes(kernels) {
            0 => self.arena_bytes,
            s => self.scratch_offset() + s,
        }
    }

    /// Images one thread runs together, op by op, each in its own working area, with
    /// `kernels`: [`crate::kernels::GROUP_IMAGES`], or on the AMX set
    /// [`crate::kernels::AMX_GROUP_IMAGES`] where so many working areas fit in
    /// [`crate::kernels::AMX_GROUP_BYTES`] (the fully connected layers of a small model then
    /// fill the tiles' rows, an image a row).
    pub fn group_images(&self, kernels: Kernels) -> usize {
        #[cfg(target_arch = "x86_64")]
        {
            use crate::kernels::{Resolved, AMX_GROUP_BYTES, AMX_GROUP_IMAGES};
            if matches!(kernels.resolve(), Ok(Resolved::Amx))
                && AMX_GROUP_IMAGES.saturating_mul(self.working_bytes(kernels)) <= AMX_GROUP_BYTES
            {
                return AMX_GROUP_IMAGES;
            }
        }
        // Only the x86 AMX set groups more.
        let _ = kernels;
        crate::kernels::GROUP_IMAGES
    }

    /// Arena `run_with(kernels, …)` needs for one input: `align16(out_len)` for the output,
    /// then the working area; exact, so firmware can size a static arena at build time.
    pub fn arena_bytes(&self, kernels: Kernels) -> usize {
        self.arena_bytes_for(kernels, 1)
    }

    /// Arena `run_with(kernels, …)` needs for `batch` inputs: `align16(batch·out_len)` plus
    /// one working area (saturating).
    pub fn arena_bytes_for(&self, kernels: Kernels, batch: usize) -> usize {
        self.logits_bytes(batch)
            .saturating_add(self.working_bytes(kernels))
    }

    /// How the model's requantizations round.
    pub fn rounding(&self) -> Rounding {
        self.rounding
    }

    /// What a caller passes for one input.
    pub fn input_encoding(&self) -> InputEncoding {
        self.input_encoding
    }

    /// Bytes the logits of `batch` images take at the start of an arena:
    /// `align16(batch·out_len)` (saturating), for every run path's arena size.
    pub(crate) fn logits_bytes(&self, batch: usize) -> usize {
        align16(batch.saturating_mul(self.out_len).min(usize::MAX - 16))
    }

    /// Input (c, h, w): the raw pixels' planes, or the int8 (or u8) tensor's channels, height
    /// and width ([`Model::input_encoding`]).
    pub fn input_shape(&self) -> (usize, usize, usize) {
        (self.input.c, self.input.h, self.input.w)
    }

    /// Input scale (real = scale · (q − zero point) of the int8 input tensor).
    pub fn input_scale(&self) -> f32 {
        self.tensor(self.input_tensor).map_or(0.0, |t| t.scale)
    }

    /// Input zero point (of the int8 input tensor; −128 for u8 inputs).
    pub fn input_zero_point(&self) -> i32 {
        self.tensor(self.input_tensor).map_or(0, |t| t.zero_point)
    }

    /// Bytes per input: c·h·w.
    pub fn input_len(&self) -> usize {
        self.input.len()
    }

    /// Logits per image.
    pub fn output_len(&self) -> usize {
        self.out_len
    }

    /// Output scale (real = scale · (q − zero point)).
    pub fn output_scale(&self) -> f32 {
        self.output_scale
    }

    /// Output zero point.
    pub fn output_zero_point(&self) -> i32 {
        self.output_zero_point
    }

    /// Number of ops.
    pub fn num_ops(&self) -> usize {
        self.n_ops as usize
    }

    /// Number of tensors.
    pub fn num_tensors(&self) -> usize {
        self.n_tensors as usize
    }

    /// Input tensor id.
    pub fn input_tensor(&self) -> u16 {
        self.input_tensor
    }

    /// Output tensor id.
    pub fn output_tensor(&self) -> u16 {
        self.output_tensor
    }

    /// Images in `pixels`, or `InputLength`.
    pub fn batch_of(&self, pixels: usize) -> Result<usize> {
        let n = self.input_len();
        if pixels == 0 || !pixels.is_multiple_of(n) {
            return Err(RuntimeError::InputLength {
                expected: n,
                got: pixels,
            });
        }
        Ok(pixels / n)
    }
}

/// The header's input encoding and rounding, or the error naming the unknown one.
fn header_codes(h: &Header) -> Result<(InputEncoding, Rounding)> {
    let encoding = InputEncoding::from_code(h.input_encoding()).ok_or(RuntimeError::BadHeader {
        what: "input encoding",
    })?;
    let rounding =
        Rounding::from_code(h.rounding()).ok_or(RuntimeError::BadHeader { what: "rounding" })?;
    Ok((encoding, rounding))
}

/// The checks of the file as a whole, before its tables: magic, version, the header's codes,
/// header length, file length, CRC, reserved bytes. Returns the input encoding and rounding.
fn check_envelope(bytes: &[u8], h: &Header) -> Result<(InputEncoding, Rounding)> {
    if h.magic() != MAGIC {
        return Err(RuntimeError::BadMagic);
    }
    if h.version() != VERSION {
        return Err(RuntimeError::UnsupportedVersion(h.version()));
    }
    let codes = header_codes(h)?;
    if h.header_len() as usize != HEADER_LEN {
        return Err(RuntimeError::BadHeader {
            what: "header length",
        });
    }
    let len = bytes.len();
    let file_len = h.file_len() as usize;
    if file_len > len {
        return Err(RuntimeError::Truncated {
            needed: file_len as u64,
            len: len as u64,
        });
    }
    if file_len < len {
        return Err(RuntimeError::BadHeader { what: "file_len" });
    }
    let computed = format::crc32(&bytes[CRC_START..]);
    if computed != h.crc() {
        return Err(RuntimeError::CrcMismatch {
            stored: h.crc(),
            computed,
        });
    }
    if !h.reserved_zero() {
        return Err(RuntimeError::BadHeader { what: "reserved" });
    }
    Ok(codes)
}
