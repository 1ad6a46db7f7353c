//! Packed images: a kernel set's packed weights laid out ahead of time, on any machine, for a
//! target that reads them from read-only memory (firmware's flash) instead of packing them
//! into RAM when the model is prepared ([`Model::prepare_packed`]): a microcontroller has no
//! RAM to spare for a second copy of a model's weights. Only the Cortex-M set has such an
//! image (its fully connected layers, `kernels::CortexMFc`). The layout is in
//! `runtime/FORMAT.md` (§ Packed images): a header naming the model (its CRC-32) and the set,
//! with a CRC-32 of its own, then each packed op's bytes at an offset from the image's start
//! rounded up to [`PACKED_ALIGN`], in op order.

use super::prepare::OpParams;
use super::Model;
use crate::format::{crc32, le_u16, le_u32};
use crate::kernels::{self, Kernels, Layout, PackOp, Packed, PACKED_ALIGN};
use crate::{PreparedOp, Result, RuntimeError};

/// Bytes of a packed image's header; the first op's packed bytes follow it.
pub const PACKED_IMAGE_HEADER: usize = PACKED_ALIGN;

/// The first bytes of a packed image.
pub const PACKED_IMAGE_MAGIC: [u8; 4] = *b"O8PK";
const VERSION: u16 = 1;
/// The set code of [`Kernels::CortexM`].
const CORTEX_M: u16 = 1;

/// Where the header's fields lie: magic, version (u16), set (u16), the model's CRC-32, the
/// image's length, the CRC-32 of the image past the header; zeros to [`PACKED_IMAGE_HEADER`].
const AT_VERSION: usize = 4;
const AT_SET: usize = 6;
const AT_MODEL_CRC: usize = 8;
const AT_LEN: usize = 12;
const AT_CRC: usize = 16;

fn bad(what: &'static str) -> RuntimeError {
    RuntimeError::BadPackedImage { what }
}

/// What to do about an image that is not this model's (the messages end with it).
macro_rules! again {
    ($what:literal) => {
        concat!(
            $what,
            "; write it again from this model (Model::write_packed_image, `octet pack`)"
        )
    };
}

/// The code of a set with packed images.
fn set_code(kernels: Kernels) -> Result<u16> {
    match kernels {
        Kernels::CortexM => Ok(CORTEX_M),
        _ => Err(bad(
            "only the Cortex-M set (Kernels::CortexM) has packed images; others pack at prepare",
        )),
    }
}

/// The layout and bytes the image of set `code` packs op `params` in.
fn image_packing(code: u16, params: &OpParams) -> Option<(Layout, usize)> {
    match (code, params) {
        (CORTEX_M, OpParams::FullyConnected(f)) => kernels::cortex_m_fc_packing(f),
        _ => None,
    }
}

/// What a packed image's header says, its CRC checked ([`PackedImageInfo::read`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PackedImageInfo {
    /// The kernel set it is for.
    pub kernels: Kernels,
    /// The CRC-32 of the `.o8` file it was made from (its header `crc`; `Model::crc`).
    pub model_crc: u32,
    /// Its length in bytes, header included.
    pub len: usize,
}

impl PackedImageInfo {
    /// Reads and checks `image`'s header: magic, version, a known set, the stated length
    /// within `image`, the CRC of what follows the header. Not whether it is some model's
    /// ([`Model::prepare_packed_image`] checks that).
    pub fn read(image: &[u8]) -> Result<PackedImageInfo> {
        let head = image
            .get(..PACKED_IMAGE_HEADER)
            .ok_or(bad(again!("shorter than its header")))?;
        if head[..4] != PACKED_IMAGE_MAGIC {
            return Err(bad(again!("not a packed image (bad magic)")));
        }
        if le_u16(head, AT_VERSION) != VERSION {
            return Err(bad(again!("unsupported version")));
        }
        let kernels = match le_u16(head, AT_SET) {
            CORTEX_M => Kernels::CortexM,
            _ => {
                return Err(bad(again!(
                    "made for a kernel set this runtime does not know"
                )))
            }
        };
        let len = le_u32(head, AT_LEN) as usize;
        let body = image
            .get(PACKED_IMAGE_HEADER..len)
            .ok_or(bad(again!("truncated (shorter than its stated length)")))?;
        if crc32(body) != le_u32(head, AT_CRC) {
            return Err(bad(again!("damaged (CRC mismatch)")));
        }
        Ok(PackedImageInfo {
            kernels,
            model_crc: le_u32(head, AT_MODEL_CRC),
            len,
        })
    }
}

/// Where the image of set `code` places the ops it packs, given in op order: each at the next
/// multiple of [`PACKED_ALIGN`] after the header and the ops before it; `end` is the image's
/// length so far.
struct Placer {
    code: u16,
    end: usize,
}

impl Placer {
    fn new(code: u16) -> Placer {
        Placer {
            code,
            end: PACKED_IMAGE_HEADER,
        }
    }

    /// The layout and byte range of op `params`, where the set packs it.
    fn place(&mut self, params: &OpParams) -> Result<Option<(Layout, core::ops::Range<usize>)>> {
        let Some((layout, n)) = image_packing(self.code, params) else {
            return Ok(None);
        };
        let start = self.end.next_multiple_of(PACKED_ALIGN);
        self.end = start.checked_add(n).ok_or(bad("length overflows"))?;
        Ok(Some((layout, start..self.end)))
    }
}

impl<'a> Model<'a> {
    /// The CRC-32 of the `.o8` file (its header `crc`), by which a packed image names its
    /// model.
    pub fn crc(&self) -> u32 {
        self.crc
    }

    /// Bytes of this model's packed image for `kernels` ([`Kernels::CortexM`] only; on any
    /// machine): [`Model::write_packed_image`] writes that many.
    pub fn packed_image_bytes(&self, kernels: Kernels) -> Result<usize> {
        let mut placer = Placer::new(set_code(kernels)?);
        for j in 0..self.n_ops {
            placer.place(&self.prepare_op(j)?.params)?;
        }
        Ok(placer.end)
    }

    /// Writes this model's packed image for `kernels` ([`Kernels::CortexM`] only) into the
    /// start of `out` (at least [`Model::packed_image_bytes`] long), on any machine: a build
    /// script lays out a firmware's flash this way. Returns the bytes written.
    pub fn write_packed_image(&self, kernels: Kernels, out: &mut [u8]) -> Result<usize> {
        let code = set_code(kernels)?;
        let len = self.packed_image_bytes(kernels)?;
        if out.len() < len {
            return Err(RuntimeError::OutOfBounds {
                what: "packed image (buffer shorter than Model::packed_image_bytes)",
                index: out.len() as u32,
            });
        }
        let len32 = u32::try_from(len).map_err(|_| bad("longer than 4 GiB"))?;
        let out = &mut out[..len];
        out.fill(0);
        let mut placer = Placer::new(code);
        for j in 0..self.n_ops {
            let op = self.prepare_op(j)?;
            if let (Some((layout, range)), OpParams::FullyConnected(f)) =
                (placer.place(&op.params)?, &op.params)
            {
                kernels::pack(layout, PackOp::Fc(f), &mut out[range]);
            }
        }
        let crc = crc32(&out[PACKED_IMAGE_HEADER..]);
        out[..4].copy_from_slice(&PACKED_IMAGE_MAGIC);
        out[AT_VERSION..AT_VERSION + 2].copy_from_slice(&VERSION.to_le_bytes());
        out[AT_SET..AT_SET + 2].copy_from_slice(&code.to_le_bytes());
        out[AT_MODEL_CRC..AT_MODEL_CRC + 4].copy_from_slice(&self.crc.to_le_bytes());
        out[AT_LEN..AT_LEN + 4].copy_from_slice(&len32.to_le_bytes());
        out[AT_CRC..AT_CRC + 4].copy_from_slice(&crc.to_le_bytes());
        Ok(len)
    }

    /// [`Model::prepare`], the packed weights read in place from `image` (made by
    /// [`Model::write_packed_image`] from this model for the set `kernels` resolves to, and
    /// placed at an address aligned to [`PACKED_ALIGN`], e.g. a `static` in flash): the same
    /// runs as [`Model::prepare_packed`], with no RAM for the weights. Checks the image
    /// before anything else (header, model, set, length, CRC, alignment:
    /// [`RuntimeError::BadPackedImage`]), then resolves `kernels`.
    pub fn prepare_packed_image(
        mut self,
        table: &'a mut [PreparedOp<'a>],
        image: &'a [u8],
        kernels: Kernels,
    ) -> Result<Model<'a>> {
        let info = PackedImageInfo::read(image)?;
        if info.model_crc != self.crc {
            return Err(bad(again!("made from another model (model CRC differs)")));
        }
        let (code, len) = (set_code(info.kernels)?, info.len);
        if image.as_ptr().align_offset(PACKED_ALIGN) != 0 {
            return Err(bad(
                "not aligned to PACKED_ALIGN (64) bytes in memory: place it at an aligned address",
            ));
        }
        if self.packed_image_bytes(info.kernels)? != len {
            return Err(bad(again!("its length does not match this model's ops")));
        }
        let resolved = kernels.resolve()?;
        if set_code(resolved.kernels()).ok() != Some(code) {
            return Err(bad(again!("made for another kernel set")));
        }
        // The ops just prepared place the packed bytes (not preparing them again); the length
        // was checked, so every range lies in the image.
        let table = self.fill(table)?;
        let mut placer = Placer::new(code);
        for slot in table.iter_mut() {
            if let Some((layout, range)) = placer.place(&slot.params)? {
                let packed = Packed {
                    layout,
                    bytes: &image[range],
                };
                match &mut slot.params {
                    OpParams::FullyConnected(f) => f.packed = packed,
                    _ => return Err(bad("packs an op of no packed kind")),
                }
            }
        }
        self.prepared = table;
        Ok(self)
    }
}
